"""The loops in ``examples/`` run as a user runs them (``python examples/<name>.py
--base-url ...``), against the scripted model of ``tests/model_server.py``: the model's
program fails, it reads the notice from the tool result it was sent and replays, and the
loop prints the answer; the host tool is called once per item, never again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai", reason="openai is an optional extra (ptc-retry[openai])")
pytest.importorskip("anthropic", reason="anthropic is an optional extra (ptc-retry[anthropic])")

from .helpers import follow, notices_in, raw  # noqa: E402
from .model_server import FIX, PROGRAM, Call, ModelServer, Reply, Request  # noqa: E402

EXAMPLES = Path(__file__).parent.parent / "examples"
#: Each example, the variable its key is read from, and the URL its client is given.
RUNS = {
    "openai_chat": "OPENAI_API_KEY",
    "openai_responses": "OPENAI_API_KEY",
    "anthropic_messages": "ANTHROPIC_API_KEY",
}
BOUND = 120  # seconds: the three start their kernels at once on a loaded machine


def _last_tool_result(body: dict[str, Any]) -> str:
    """The text of the tool result a request ends with, in any of the three shapes."""
    if "input" in body:
        return str(body["input"][-1]["output"])
    last = body["messages"][-1]
    content = last["content"]
    return str(content if isinstance(content, str) else content[0]["content"])


def _replay(request: Request) -> Reply:
    """The model reads the notice in the result it was sent and sends the replay line."""
    (notice,) = notices_in(_last_tool_result(request.body))
    return Reply(calls=[Call("run_code", raw(follow(notice, old=FIX[0], new=FIX[1])))])


def _base_url(server: ModelServer, name: str) -> str:
    return server.url if name.startswith("anthropic") else server.openai_url


def test_each_example_fixes_its_failed_program_with_the_replay(
    jupyter_path: Path, tmp_path: Path
) -> None:
    program = raw(PROGRAM.replace("tools.price(", "tools.lookup_price("))
    servers = {name: ModelServer() for name in RUNS}
    running = {}
    try:
        for name, key in RUNS.items():
            servers[name].script(
                Reply(text="One program.", calls=[Call("run_code", program)]),
                _replay,
                Reply(text="The orders cost 73.5 EUR."),
            )
            env = {**os.environ, key: "scripted", "PTC_RETRY_ROOT": str(tmp_path / name)}
            command = [sys.executable, str(EXAMPLES / f"{name}.py")]
            command += ["--base-url", _base_url(servers[name], name), "--model", "scripted"]
            running[name] = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        for name, process in running.items():
            out, err = process.communicate(timeout=BOUND)
            assert process.returncode == 0, f"{name}: {err}"
            assert "answer: The orders cost 73.5 EUR." in out, out
            assert out.count("host: lookup_price(") == 3, out  # the replay reused them
            assert "request: 120 in, 30 out" in out
            assert "[ok]" in out and "tool results reused" in out
            sent = json.dumps(servers[name].requests[1].body)
            assert "KeyError" in sent and servers[name].unplayed == 0
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
        for server in servers.values():
            server.close()
