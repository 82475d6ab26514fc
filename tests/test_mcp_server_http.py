"""``ptc-retry mcp --http``: one kernel per MCP session, driven by the official MCP client
over Streamable HTTP on loopback. Two sessions at once share nothing; an idle session's
kernel is shut down; a session beyond ``--max-sessions`` is refused; a host that goes away
mid-program loses nothing.

One server serves the module (``--max-sessions 2``, a short ``--idle-timeout``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.core.notice import parse_notice, prompt_section

from .helpers import ORDERS, ORDERS_FIX, OnLoop, history, process_runs, stop_process, wait_until
from .mcp_servers import (
    CALL_TIMEOUT,
    HeldClient,
    call_until_printed,
    cancel_once_printed,
    sessions,
    start_http_server,
)

if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK (the mcp extra) is not installed here", allow_module_level=True)

pytestmark = pytest.mark.kernel

MAX_SESSIONS = 2
IDLE_TIMEOUT = 4


class HttpServer:
    def __init__(self, process: subprocess.Popen[bytes], url: str, root: Path, log: Path) -> None:
        self.process, self.url, self.root, self.log = process, url, root, log

    def connect(self, on_loop: OnLoop[Any]) -> HeldClient:
        return HeldClient(on_loop, self.url)


@pytest.fixture(scope="module")
def server(jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("mcp-http-root")
    log = root.parent / f"{root.name}-server.log"
    options = ("--max-sessions", str(MAX_SESSIONS), "--idle-timeout", str(IDLE_TIMEOUT))
    options += ("--progress-every", "1")  # the tests wait for what a program printed
    process, url = start_http_server(root, log, *options)
    yield HttpServer(process, url, root, log)
    stop_process(process)


def call(on_loop: OnLoop[Any], client: Any, code: str) -> tuple[str, bool]:
    result = on_loop(asyncio.wait_for(client.call_tool("run_code", {"code": code}), CALL_TIMEOUT))
    (content,) = result.content
    return content.text, result.is_error


def session_of(client: Any) -> Path:
    """The session directory the session's instructions name (its kernel's own)."""
    directory = client.instructions.split("Programs are saved in ", 1)[1].split(" as JSON")[0]
    path = Path(directory)
    assert client.instructions == prompt_section("code", path)
    return path


def test_two_sessions_at_once_have_their_own_kernels_and_cross_nothing(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    first, second = server.connect(on_loop), server.connect(on_loop)
    try:
        a, b = first.client, second.client

        async def both(code_a: str, code_b: str) -> list[Any]:
            return list(
                await asyncio.gather(
                    a.call_tool("run_code", {"code": code_a}),
                    b.call_tool("run_code", {"code": code_b}),
                )
            )

        on_loop(
            asyncio.wait_for(
                both("import os, time\nmine = 'A'\ntime.sleep(1)", "import os\nmine = 'B'"), 30
            )
        )
        results = on_loop(asyncio.wait_for(both("mine, os.getpid()", "mine, os.getpid()"), 30))
        texts = [result.content[0].text for result in results]
        assert [text.split(",")[0] for text in texts] == ["('A'", "('B'"], texts
        pids = [int(text.rstrip(")").split(", ")[1]) for text in texts]
        assert pids[0] != pids[1]
        dirs = [session_of(a), session_of(b)]
        assert dirs[0] != dirs[1]
        for directory, letter in zip(dirs, "AB", strict=True):
            codes = [
                json.loads((directory / "by-id" / f"{h['id']}.json").read_text())["code"]
                for h in history(directory)
            ]
            assert f"mine = '{letter}'" in codes[0]
            assert all(
                f"'{other}'" not in code for code in codes for other in "AB" if other != letter
            )
    finally:
        first.close()
        second.close()


def test_a_failing_program_is_an_error_and_its_one_line_replay_fixes_it(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    held = server.connect(on_loop)
    try:
        text, error = call(on_loop, held.client, ORDERS)
        assert error is True
        reference = parse_notice("\n".join(text.splitlines()[-2:]))
        assert reference is not None
        old, new = (json.dumps(part) for part in ORDERS_FIX)
        fixed, error = call(
            on_loop, held.client, f"await ptc_retry.replay({json.dumps(reference)}, {old}, {new})"
        )
        assert error is False
        assert "mean order: 113.70" in fixed
    finally:
        held.close()


def test_a_session_beyond_max_sessions_is_refused_with_a_clear_error(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    from mcp.shared.exceptions import MCPError

    held = [server.connect(on_loop) for _ in range(MAX_SESSIONS)]
    try:
        with pytest.raises(BaseException) as refused:
            server.connect(on_loop)
        cause = refused.value
        while hasattr(cause, "exceptions"):  # the client's task groups wrap it
            cause = cause.exceptions[0]
        assert isinstance(cause, MCPError)
        assert "Too many open sessions: this server allows 2 (--max-sessions)" in str(cause)
        assert call(on_loop, held[0].client, "'the open ones go on'")[1] is False
    finally:
        for client in held:
            client.close()
    again = server.connect(on_loop)  # room again once they ended
    try:
        assert call(on_loop, again.client, "1 + 1") == ("2", False)
    finally:
        again.close()


def test_an_idle_session_ends_and_its_kernel_is_shut_down(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    held = server.connect(on_loop)
    try:
        text, _ = call(on_loop, held.client, "import os; os.getpid()")
        pid = int(text)
        assert process_runs(pid)
        wait_until(lambda: not process_runs(pid), IDLE_TIMEOUT + 30, "the idle session's end")
        with pytest.raises(Exception, match="Session not found|terminated"):
            call(on_loop, held.client, "1")
    finally:
        try:
            held.close()
        except BaseException:
            pass  # its session is gone already


def test_a_host_that_goes_away_mid_program_loses_nothing(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    held = server.connect(on_loop)
    directory = session_of(held.client)
    code = "import time\nprint('working')\ntime.sleep(120)\nprint('never')"

    async def leave_mid_program() -> None:
        _, printed = call_until_printed(held.client, code, "working")
        await printed

    on_loop(leave_mid_program())
    held.close()  # the host goes: its session ends, and the kernel is shut down
    saved = [json.loads(path.read_text())["code"] for path in (directory / "by-id").glob("*.json")]
    assert code in saved
    assert directory in sessions(server.root)


def test_a_cancelled_call_interrupts_its_program_in_its_own_session(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    held = server.connect(on_loop)
    try:
        directory = session_of(held.client)
        code = "import time\nprint('waiting')\ntime.sleep(120)"

        on_loop(cancel_once_printed(held.client, code, "waiting"))
        started = time.monotonic()
        assert call(on_loop, held.client, "'free again'") == ("'free again'", False)
        assert time.monotonic() - started < 20  # the interrupt stopped it: no 120 s wait
        assert [line["status"] for line in history(directory)] == ["interrupted", "ok"]
    finally:
        held.close()


def test_a_program_longer_than_the_idle_timeout_runs_to_its_end_in_a_live_session(
    on_loop: OnLoop[Any], server: HttpServer
) -> None:
    held = server.connect(on_loop)
    try:
        code = f"import time\ntime.sleep({IDLE_TIMEOUT + 2})\n'finished'"
        assert call(on_loop, held.client, code) == ("'finished'", False)
        assert call(on_loop, held.client, "'still open'") == ("'still open'", False)
    finally:
        held.close()
