"""What the tests of ``ptc-retry mcp`` share: the command a host runs, a free port, an
official MCP client held open across a module's tests (``HeldClient``), and a host that
writes the protocol's lines itself (``RawStdioServer``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .helpers import OnLoop, free_port, stop_process

#: Seconds a server may take to start its kernel and answer, and a call to come back, on a
#: loaded two-core machine.
CONNECT_TIMEOUT = 90
CALL_TIMEOUT = 60


def ptc_retry_command() -> list[str]:
    """``ptc-retry`` as a host starts it: the console script beside this Python."""
    script = Path(sys.executable).with_name("ptc-retry")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from ptc_retry.cli import main; sys.exit(main())"]


def server_env(root: Path) -> dict[str, str]:
    """This process's environment (``JUPYTER_PATH`` holds the test kernelspec) with the
    checkpoints under ``root``."""
    return {**os.environ, "PTC_RETRY_ROOT": str(root)}


def sessions(root: Path) -> list[Path]:
    """The session directories the server's kernels made under ``root``."""
    return sorted(path for path in root.iterdir() if path.is_dir()) if root.exists() else []


class HeldClient:
    """An ``mcp`` ``Client`` entered by a task of its own, so it stays connected between the
    module's tests (each runs on the module's loop) and is closed by the task that opened it.
    """

    def __init__(self, on_loop: OnLoop[Any], transport: Any, **options: Any) -> None:
        from mcp.client.client import Client

        self._on_loop = on_loop
        self._connection = Client(transport, **options)
        self.client = on_loop(self._open())

    async def _open(self) -> Any:
        loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        self._ready: asyncio.Future[Any] = loop.create_future()
        self._task = loop.create_task(self._hold())
        return await asyncio.wait_for(asyncio.shield(self._ready), CONNECT_TIMEOUT)

    async def _hold(self) -> None:
        try:
            async with self._connection as connected:
                self._ready.set_result(connected)
                await self._closing.wait()
        except BaseException as exc:
            if self._ready.done():
                raise
            self._ready.set_exception(exc)  # the connection failed: _open raises it

    def close(self) -> None:
        self._closing.set()
        self._on_loop(asyncio.wait_for(self._task, CALL_TIMEOUT))


class StdioServer:
    """A ``ptc-retry mcp`` on stdio: its client, its stderr, and its one session directory."""

    def __init__(self, held: HeldClient, root: Path, errlog: Path) -> None:
        self.held = held
        self.client = held.client
        self.root = root
        self.errlog = errlog

    @property
    def session_dir(self) -> Path:
        (directory,) = sessions(self.root)
        return directory

    def call(self, on_loop: OnLoop[Any], code: Any, **options: Any) -> tuple[str, bool]:
        """``run_code`` with ``code`` (a dict: the arguments as they are); (text, isError)."""
        arguments = code if isinstance(code, dict) else {"code": code}
        result = on_loop(
            asyncio.wait_for(self.client.call_tool("run_code", arguments, **options), CALL_TIMEOUT)
        )
        (content,) = result.content
        return content.text, result.is_error


@contextlib.contextmanager
def stdio_server(
    on_loop: OnLoop[Any], root: Path, *options: str, **client: Any
) -> Iterator[StdioServer]:
    """``ptc-retry mcp *options`` on stdio, checkpoints under ``root``, its client connected
    (``client``: options of the ``mcp`` ``Client``, such as ``elicitation_callback``)."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    errlog = root.parent / f"{root.name}-stderr.log"
    command, *args = ptc_retry_command()
    parameters = StdioServerParameters(
        command=command, args=[*args, "mcp", *options], env=server_env(root)
    )
    with open(errlog, "w") as err:
        held = HeldClient(on_loop, stdio_client(parameters, errlog=err), **client)
        try:
            yield StdioServer(held, root, errlog)
        finally:
            held.close()


def call_until_printed(client: Any, code: str, text: str) -> tuple[asyncio.Future[Any], Any]:
    """Call ``run_code`` with ``code`` (progress asked for); the call, and a coroutine that
    ends once a progress notification shows that the program printed ``text`` (failing
    after ``CALL_TIMEOUT``). The server must send progress often (``--progress-every``)."""
    seen = asyncio.Event()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if text in (message or ""):
            seen.set()

    arguments = {"code": code}
    call = asyncio.ensure_future(
        client.call_tool("run_code", arguments, progress_callback=progress)
    )
    return call, asyncio.wait_for(seen.wait(), CALL_TIMEOUT)


async def cancel_once_printed(client: Any, code: str, text: str) -> None:
    """Call ``run_code`` with ``code`` and cancel the call once the program has printed
    ``text``, as a host does (the client sends ``notifications/cancelled``); the call ends
    cancelled."""
    call, printed = call_until_printed(client, code, text)
    await printed
    call.cancel()
    try:
        await call
    except asyncio.CancelledError:
        return
    raise AssertionError("the call ended before it was cancelled")


def start_http_server(root: Path, log: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """``ptc-retry mcp --http`` on a free loopback port, once it answers; (process, url)."""
    port = free_port()
    command = [*ptc_retry_command(), "mcp", "--http", f"127.0.0.1:{port}", *options]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=server_env(root), stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=2)
        except urllib.error.HTTPError:
            return process, url  # it answers (a GET without a session is refused)
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError(f"ptc-retry mcp --http did not answer: {log.read_text()}")


def npx() -> str | None:
    return shutil.which("npx")


class RawStdioServer:
    """``ptc-retry mcp`` on stdio driven line by line, as a host that writes its own JSON
    (a lone surrogate escape, say, which the official client cannot send), after the
    ``initialize`` handshake. Every read is bounded."""

    def __init__(self, root: Path, *options: str) -> None:
        self.root = root
        self.errlog = root.parent / f"{root.name}-raw-stderr.log"
        command = [*ptc_retry_command(), "mcp", *options]
        with open(self.errlog, "wb") as err:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=server_env(root),
            )
        self.send_line(json.dumps(_INITIALIZE).encode())
        self.answer(CONNECT_TIMEOUT)
        self.send_line(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def answer(self, timeout: float = CALL_TIMEOUT) -> dict[str, Any]:
        """The next message the server writes, within ``timeout`` seconds."""
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        assert ready, f"no answer within {timeout} s"
        message: dict[str, Any] = json.loads(stdout.readline())
        return message

    def send_call(self, request_id: int, arguments: str) -> None:
        """Send ``tools/call`` of ``run_code`` with ``arguments`` (JSON text, as written)."""
        request = (
            f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
            f'"params": {{"name": "run_code", "arguments": {arguments}}}}}'
        )
        self.send_line(request.encode())

    def call(self, request_id: int, arguments: str) -> dict[str, Any]:
        """``send_call``, then its answer."""
        self.send_call(request_id, arguments)
        return self.answer()

    @property
    def session_dir(self) -> Path:
        (directory,) = sessions(self.root)
        return directory

    def close(self) -> None:
        assert self.process.stdin is not None
        if not self.process.stdin.closed:
            self.process.stdin.close()
        stop_process(self.process)


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-host", "version": "0"},
    },
}
