"""The MCP server on this process's stdin and stdout (``ptc-retry mcp``, the default
transport): the host's pipes kept for the protocol alone, read and written on the event
loop's own pipes, and a request the SDK would drop unanswered (a lone surrogate) answered
with an error that names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import mcp_types as types
from mcp.server.stdio import stdio_server

from ..backend import RUN_CODE
from .server import KernelTools, ServerOptions, start_kernel, stop_kernel

__all__ = ["lone_surrogate_answer", "protocol_pipes", "protocol_streams", "serve_stdio"]

log = logging.getLogger(__name__)

#: What a request holding a lone surrogate is answered: the escape, and where it is.
LONE_SURROGATE = (
    "the request holds a lone surrogate ({}) in {}, which is not Unicode text, so nothing "
    "ran; send it again with that character written whole (both halves of a surrogate "
    "pair) or left out"
)
#: A ``\\uD800``-``\\uDFFF`` escape, the only form in which a surrogate reaches the server.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


async def serve_stdio(options: ServerOptions) -> None:
    """Serve MCP on this process's stdin and stdout until the host closes them; BackendError
    (KernelStartError, GatewayError) at once when the kernel does not start.

    Nothing but the protocol reaches stdout: from before the kernel starts to the end,
    file descriptor 1 is stderr and 0 the null device, and the protocol goes through
    duplicates of the two; so the kernel (also a restarted one), its children and anything
    else here print to stderr and never read the host's messages. Every program is saved before
    it runs and the session directory is kept at the end, so ``ptc-retry history`` shows
    what ran even after the host disconnected mid-program.
    """
    with protocol_pipes() as (wire_in, wire_out):
        # Inside: the upstream servers, like the kernel, never see the host's pipes.
        backend, upstreams = await start_kernel(options)
        try:
            tools = KernelTools(backend, options.progress_every, upstreams)
            where = backend.session_dir
            log.info("serving %s on stdio; programs are saved in %s", RUN_CODE, where)
            server = tools.server()
            async with protocol_streams(wire_in, wire_out) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            await stop_kernel(backend, upstreams)


@contextlib.asynccontextmanager
async def protocol_streams(wire_in: int, wire_out: int) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's ``(read_stream, write_stream)`` of the protocol on the descriptors
    ``protocol_pipes`` gives, read and written on the event loop's own pipes: a line read
    or written costs no thread hop (the SDK's file wrappers take one per line and per
    flush)."""
    stdin, stdout = await _PipeLines.open(wire_in, wire_out)
    async with stdio_server(stdin, stdout) as streams:  # type: ignore[arg-type]
        yield streams


class _PipeLines:
    """The protocol's stdin and stdout on the event loop's own pipes, as ``stdio_server``
    reads and writes its own."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, wire_in: int, wire_out: int) -> tuple[_PipeLines, _PipeLines]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**31)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", 0)
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", 0)
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        pipes = cls(reader, writer)
        return pipes, pipes

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self.reader.readline()
            if not line:
                raise StopAsyncIteration
            text = line.decode("utf-8", "replace")
            answer = lone_surrogate_answer(text)
            if answer is None:
                return text
            log.warning("refused a request with a lone surrogate: %s", answer.strip())
            self.writer.write(answer.encode("utf-8"))

    async def write(self, text: str) -> None:
        if not self.writer.is_closing():  # the host closed its end: see flush
            self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        """Wait until the host can take more; when it closed its end of stdout, end the
        input too, so the server stops as when the host closes stdin."""
        try:
            await self.writer.drain()
        except ConnectionError:
            log.info("the host closed the protocol's stdout: ending the session")
            self.reader.feed_eof()


@contextlib.contextmanager
def protocol_pipes() -> Iterator[tuple[int, int]]:
    """The protocol's own descriptors (duplicates of stdin and stdout), with fd 0 on the
    null device and fd 1 on stderr while inside: nothing started here reads the host's
    messages or prints into the protocol."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)


def lone_surrogate_answer(line: str) -> str | None:
    """The JSON-RPC error line that answers ``line`` when it is a request holding a lone
    surrogate (a ``\\ud800`` escape without its other half), else None.

    The SDK's JSON parser refuses such a line and drops it without an answer, so the host
    would wait for ever; the error names where the surrogate is, and nothing runs.
    """
    if _SURROGATE_ESCAPE.search(line) is None:  # the only way one arrives: as an escape
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None  # not JSON: not a request to answer
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        return None  # a notification (or no valid id): there is nothing to answer
    found = _lone_surrogate(message)
    if found is None:
        return None
    where, escape = found
    error = {"code": types.INVALID_PARAMS, "message": LONE_SURROGATE.format(escape, where)}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}) + "\n"


def _lone_surrogate(message: dict[str, Any]) -> tuple[str, str] | None:
    """``(where, escape)`` of the first key or string in ``message`` that holds a lone
    surrogate (``params.arguments.code``, ``\\ud800``), else None."""
    pending: list[tuple[str, Any]] = [("", message)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                named = key.encode("utf-8", "backslashreplace").decode("utf-8")
                inner = f"{where}.{named}" if where else named
                pending.extend([(inner, item), (f"the key {inner}", key)])
        elif isinstance(value, list):
            pending.extend((f"{where}[{index}]", item) for index, item in enumerate(value))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return where, f"\\u{ord(value[exc.start]):04x}"
    return None
