"""jupyter-mcp-server on the ptc-retry kernel, driven by the official MCP client (``mcp``) over
Streamable HTTP on loopback, as an assistant drives it.

A real Jupyter Server runs the server's extension (``/mcp``) with
``--MappingKernelManager.default_kernel_name=ptc-retry``; a real ``jupyter-mcp-server start``
runs standalone against that server on a ptc-retry kernel it is given. Nothing of ptc-retry is
configured in either but the kernel: the notice reaches the model inside the tool result's
text, and the replay line the model sends through the same tool fixes the program.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.core.notice import parse_notice

from .helpers import ORDERS, ORDERS_FIX, OnLoop, free_port

# Looked up, not imported: importing jupyter_mcp_server takes seconds, and every run of the
# suite collects this module.
if not all(importlib.util.find_spec(name) for name in ("jupyter_mcp_server", "mcp")):
    pytest.skip(
        "jupyter-mcp-server and mcp (its official client) are test extras of the newest"
        " releases only: jupyter-mcp-server needs jupyter_client >= 8.6.3 (through"
        " jupyter-kernel-client), so the oldest-versions environment (jupyter_client 8.0)"
        " cannot install it",
        allow_module_level=True,
    )

pytestmark = pytest.mark.kernel

TOKEN = "test-token-" + uuid.uuid4().hex[:8]
MCP_TOKEN = "test-mcp-token-" + uuid.uuid4().hex[:8]
#: Seconds a server may take to answer after it starts, and a tool call to come back,
#: on a loaded two-core machine.
START_TIMEOUT = 60
CALL_TIMEOUT = 60
#: The corrected program's last line prints this (``ORDERS`` fixed).
FIXED_OUTPUT = "mean order: 113.70"


class Server:
    """A server subprocess on a free loopback port, stopped by ``stop()``."""

    def __init__(self, command: list[str], workdir: Path, log: str, env: dict[str, str]) -> None:
        self.log = workdir / log
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                command, env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_until_it_answers(self, url: str, headers: dict[str, str]) -> None:
        """Wait until ``url`` answers 200: the server is up, with what it serves there."""
        request = urllib.request.Request(url, headers=headers)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(request, timeout=2):
                    return
            except urllib.error.HTTPError as error:  # up, but it does not serve ``url``
                self.stop()
                pytest.fail(f"{url} answered {error.code}:\n{self.log.read_text()[-3000:]}")
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"{url} did not answer:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _environment(workdir: Path, root: Path) -> dict[str, str]:
    environ = dict(os.environ)  # JUPYTER_PATH and JUPYTER_DATA_DIR from jupyter_path
    environ.update(
        PTC_RETRY_ROOT=str(root),
        JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
        JUPYTER_CONFIG_DIR=str(workdir / "config"),
        IPYTHONDIR=str(workdir / "ipython"),
    )
    environ.pop("PTC_RETRY_SESSION", None)
    return environ


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the kernels keep their checkpoints (``PTC_RETRY_ROOT``)."""
    return tmp_path_factory.mktemp("mcp-checkpoints")


@pytest.fixture(scope="module")
def jupyter(
    jupyter_path: Path, root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A Jupyter Server with jupyter-mcp-server's extension; its URL."""
    workdir = tmp_path_factory.mktemp("jupyter-server")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={TOKEN}",
        "--ServerApp.open_browser=False",
        "--ServerApp.allow_root=True",  # CI runs as root
        f"--ServerApp.root_dir={workdir}",
        "--ServerApp.jpserver_extensions=jupyter_mcp_server=True",
        "--MappingKernelManager.default_kernel_name=ptc-retry",
    ]
    server = Server(command, workdir, "jupyter-server.log", _environment(workdir, root))
    url = f"http://127.0.0.1:{port}"
    server.wait_until_it_answers(f"{url}/mcp/healthz", {"Authorization": f"Bearer {TOKEN}"})
    yield url
    server.stop()  # it shuts its kernels down first, the standalone server's too


@pytest.fixture(scope="module")
def standalone(jupyter: str, root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``jupyter-mcp-server start`` on its own port, on a ptc-retry kernel of ``jupyter``
    that it is given by id; its MCP endpoint."""
    workdir = tmp_path_factory.mktemp("mcp-standalone")
    request = urllib.request.Request(
        f"{jupyter}/api/kernels",
        data=json.dumps({"name": "ptc-retry"}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as answer:
        kernel_id = json.load(answer)["id"]
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "jupyter_mcp_server",
        "start",
        "--transport=streamable-http",
        f"--port={port}",
        f"--jupyter-url={jupyter}",
        f"--jupyter-token={TOKEN}",
        f"--mcp-token={MCP_TOKEN}",
        f"--code-sandbox-id={kernel_id}",
    ]
    server = Server(command, workdir, "jupyter-mcp-server.log", _environment(workdir, root))
    url = f"http://127.0.0.1:{port}"
    server.wait_until_it_answers(f"{url}/api/healthz", {"Authorization": f"Bearer {MCP_TOKEN}"})
    yield f"{url}/mcp"
    server.stop()


@contextlib.asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Any]:
    """The official MCP client on ``url`` (Streamable HTTP), with a bearer token."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=CALL_TIMEOUT)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def text(result: Any) -> str:
    """What the model reads of a tool result: its text content."""
    return "\n".join(block.text for block in result.content if block.type == "text")


def replay_line(failed: Any) -> str:
    """The model's next call after reading the notice: the one-line fix."""
    reference = parse_notice(text(failed))
    assert reference is not None, f"no notice in the tool result:\n{text(failed)}"
    old, new = ORDERS_FIX
    return f"await ptc_retry.replay({json.dumps(reference)}, {old!r}, {new!r})"


def checkpoints(root: Path, reference: str) -> list[Any]:
    """What the kernels saved as program ``#n`` (each kernel numbers its own programs)."""
    paths = root.glob(f"*/calls/{reference.lstrip('#')}.json")
    return [json.loads(path.read_text("utf-8")) for path in paths]


def test_as_an_extension_the_notice_reaches_the_model_and_its_replay_line_fixes_the_program(
    jupyter: str, root: Path, on_loop: OnLoop[Any]
) -> None:
    async def calls() -> tuple[Any, Any]:
        async with connect(f"{jupyter}/mcp", TOKEN) as client:
            arguments = {"code": ORDERS, "timeout": CALL_TIMEOUT}
            failed = await client.call_tool("execute_code", arguments)
            arguments = {"code": replay_line(failed), "timeout": CALL_TIMEOUT}
            return failed, await client.call_tool("execute_code", arguments)

    failed, fixed = on_loop(calls())

    lines = text(failed).splitlines()
    assert "KeyError: 'regoin'" in lines and "\x1b" not in text(failed)
    notice = "\n".join(lines[-2:])  # its sentence, then the call to send
    reference = str(parse_notice(notice))
    assert notice == (
        f"[ptc-retry] Saved as {reference}. Small fix? Send only:\n"
        f'await ptc_retry.replay("{reference}", "<old>", "<new>")'
    )
    assert {"code": ORDERS} in checkpoints(root, reference)  # as the client sent it
    assert FIXED_OUTPUT in text(fixed) and "Traceback" not in text(fixed), text(fixed)


def test_as_an_extension_a_failed_program_is_reported_with_is_error_false(
    jupyter: str, on_loop: OnLoop[Any]
) -> None:
    async def call() -> Any:
        async with connect(f"{jupyter}/mcp", TOKEN) as client:
            return await client.call_tool("execute_code", {"code": "{}['missing']"})

    failed = on_loop(call())

    # jupyter-mcp-server returns a failed program's traceback as an ordinary result: the
    # model learns of the failure only from the text (docs/integrations.md).
    assert failed.is_error is False and "KeyError: 'missing'" in text(failed)


def test_as_an_extension_a_notebook_cell_gets_the_notice_and_the_replay_too(
    jupyter: str, on_loop: OnLoop[Any]
) -> None:
    async def calls() -> tuple[Any, Any]:
        async with connect(f"{jupyter}/mcp", TOKEN) as client:
            await client.call_tool(
                "use_notebook",
                {"notebook_name": "orders", "notebook_path": "orders.ipynb", "mode": "create"},
            )
            cell = {"cell_index": -1, "cell_source": ORDERS, "timeout": CALL_TIMEOUT}
            failed = await client.call_tool("insert_execute_code_cell", cell)
            cell = {"cell_index": -1, "cell_source": replay_line(failed), "timeout": CALL_TIMEOUT}
            return failed, await client.call_tool("insert_execute_code_cell", cell)

    failed, fixed = on_loop(calls())

    said, call = text(failed).splitlines()[-2:]
    assert said.startswith("[ptc-retry] Saved as #") and call.startswith("await ptc_retry.")
    assert FIXED_OUTPUT in text(fixed) and "Traceback" not in text(fixed), text(fixed)


def test_standalone_on_a_ptc_retry_kernel_given_by_id_the_notice_and_the_replay_pass_through(
    standalone: str, on_loop: OnLoop[Any]
) -> None:
    async def calls() -> tuple[Any, Any]:
        async with connect(standalone, MCP_TOKEN) as client:
            arguments = {"code": ORDERS, "timeout": CALL_TIMEOUT}
            failed = await client.call_tool("execute_code", arguments)
            arguments = {"code": replay_line(failed), "timeout": CALL_TIMEOUT}
            return failed, await client.call_tool("execute_code", arguments)

    failed, fixed = on_loop(calls())

    assert failed.is_error is False
    said, call = text(failed).splitlines()[-2:]
    assert said.startswith("[ptc-retry] Saved as #") and call.startswith("await ptc_retry.")
    assert FIXED_OUTPUT in text(fixed) and "Traceback" not in text(fixed), text(fixed)
