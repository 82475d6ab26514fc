"""Code Mode over other MCP servers: each tool of an upstream MCP server becomes a host tool
that programs call as ``await tools.<server>_<tool>(...)``.

    async with Upstreams.from_config("mcp.json") as upstreams:  # {"mcpServers": {...}}
        async with KernelBackend(mode="code") as kb:  # or register before start()
            upstreams.register(kb)

A call is a host tool call like any other, so it is recorded with its program and a replay
reuses its result instead of calling the upstream again. What a program gets back is the
upstream's ``structuredContent`` when it sends one, else the text of its content (a str);
an upstream ``isError`` is a ``ToolError`` in the program. An upstream that does not start
is left out (``Upstreams.failures`` says why, with its stderr's last lines) and the rest go
on; one that stops mid-session makes its tools' calls fail naming it, and the next call
starts it again.

Needs the ``mcp`` package (the official SDK), imported only when a server is started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from ..backend import HostTool
from .upstream_config import UpstreamConfig, UpstreamConfigError, combined, parse_spec, read_config

if TYPE_CHECKING:
    import argparse

    from ..backend import KernelBackend

__all__ = [
    "Upstream",
    "UpstreamConfig",
    "UpstreamConfigError",
    "UpstreamError",
    "Upstreams",
    "add_upstream_arguments",
    "is_destructive",
    "tool_name",
    "upstream_configs",
]

log = logging.getLogger(__name__)

#: Seconds an upstream gets to start and list its tools (``npx`` may first download it).
STARTUP_TIMEOUT = 60.0
#: How many of its last stderr lines an upstream's start failure quotes.
STDERR_LINES = 5
#: The annotations a tool listing shows, as MCP names them and as the listing says them.
HINTS = (("read_only_hint", "read-only"), ("destructive_hint", "destructive"))
IDEMPOTENT = "idempotent"


class UpstreamError(RuntimeError):
    """An upstream server did not start, stopped, or answered a call with ``isError``; the
    message names it (a program reads it in its ``ToolError``)."""


def tool_name(server: str, tool: str) -> str:
    """``tools.<name>`` of ``server``'s ``tool``: ``<server>_<tool>``, each character that
    cannot be in a Python name (``-``, ``.``, spaces) made ``_``.

    The server's name comes first so that two servers' tools of one name (``search``) stay
    apart, and because it is the name the model knows the server by; ``mcp_`` goes in front
    of a name that would start with a digit or ``_``.
    """
    name = re.sub(r"\W", "_", f"{server}_{tool}", flags=re.ASCII)
    return name if name[0].isalpha() else f"mcp_{name}"


def describe(tool: Any) -> str:
    """A tool's description as the listing and ``help()`` show it: the upstream's whole
    description (its rules of use are often in a later sentence) on one line, after what its
    annotations say (``[read-only, idempotent]``)."""
    text = " ".join((tool.description or "").split())
    hints = _hints(tool.annotations)
    return f"[{', '.join(hints)}] {text}".strip() if hints else text


def is_destructive(tool: Any) -> bool:
    """Whether an MCP tool's annotations say it is destructive (``destructiveHint: true``;
    the spec's default for a tool without annotations is to assume so, but a host that puts
    every unannotated tool under approval would ask about read-only ones too)."""
    annotations = getattr(tool, "annotations", None)
    return annotations is not None and getattr(annotations, "destructive_hint", None) is True


def _hints(annotations: Any) -> list[str]:
    if annotations is None:
        return []
    said = [words for key, words in HINTS if getattr(annotations, key, None) is True]
    if annotations.read_only_hint is not True and annotations.destructive_hint is False:
        said.append("not destructive")
    if annotations.idempotent_hint is True:
        said.append(IDEMPOTENT)
    return said


def result_value(result: Any) -> Any:
    """What a program gets from a ``CallToolResult``: its structured content, else its text.

    Text is not parsed: a file that happens to hold JSON stays the text it is.
    """
    if result.structured_content is not None:
        return result.structured_content
    return content_text(result)


def content_text(result: Any) -> str:
    """A ``CallToolResult``'s content blocks as text, one after the other."""
    return "\n".join(_block_text(block) for block in result.content)


def _block_text(block: Any) -> str:
    if block.type == "text":
        return str(block.text)
    resource = getattr(block, "resource", None)
    if resource is not None and isinstance(getattr(resource, "text", None), str):
        return str(resource.text)
    detail = getattr(block, "mime_type", None) or getattr(block, "uri", None) or ""
    return f"[{block.type} {detail}]".replace(" ]", "]")


@dataclass
class _Connection:
    """One running session with an upstream: a task holds its transport open until closed
    (anyio's scopes must be left by the task that entered them)."""

    session: Any
    tools: list[Any]
    closing: asyncio.Event
    task: asyncio.Task[None]
    #: Set once a call found the server gone: the next call starts it again.
    broken: bool = False

    async def close(self) -> None:
        self.closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), 10)
        except Exception:  # a timeout too: it is stopped all the same
            self.task.cancel()
            log.debug("an upstream connection did not close cleanly", exc_info=True)


class Upstream:
    """One upstream server: started by ``start()``, called by ``call()``, started again by
    the call after one that found it gone."""

    def __init__(self, config: UpstreamConfig, startup_timeout: float = STARTUP_TIMEOUT) -> None:
        self.config = config
        self.startup_timeout = startup_timeout
        self._connection: _Connection | None = None
        self._lock = asyncio.Lock()
        self._stderr: TextIO | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def tools(self) -> list[Any]:
        """The upstream's tools (``mcp_types.Tool``) as it listed them when it started."""
        return self._connection.tools if self._connection is not None else []

    def host_tools(self, approve_destructive: bool = False) -> list[HostTool]:
        """Its tools as host tools: ``tools.<server>_<tool>`` calling ``call``; with
        ``approve_destructive``, each tool whose annotations say ``destructiveHint: true``
        needs a person's approval before a call runs."""
        return [
            HostTool(
                tool_name(self.name, tool.name),
                describe(tool),
                tool.input_schema,
                self._caller(tool.name),
                is_async=True,
                approval=approve_destructive and is_destructive(tool),
            )
            for tool in self.tools
        ]

    def _caller(self, tool: str) -> Any:
        async def call(**arguments: Any) -> Any:
            return await self.call(tool, arguments)

        return call

    async def start(self) -> None:
        """Start the server and list its tools; UpstreamError naming it, with the last lines
        of its stderr, when it does not come up within ``startup_timeout``. Once started,
        nothing more."""
        async with self._lock:
            if self._connection is None:
                await self._connect()

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The value of one call (see ``result_value``); UpstreamError when the upstream
        answers ``isError``, is gone (naming it; the next call starts it again) or does not
        start again."""
        connection = await self._connected()
        try:
            result = await connection.session.call_tool(tool, arguments)
        except Exception as exc:
            if not _connection_lost(exc):
                raise UpstreamError(f"upstream {self.name!r}: {_said(exc)}") from None
            connection.broken = True
            raise UpstreamError(
                f"upstream {self.name!r} stopped ({self._stopped()}); whether {tool} ran is "
                "unknown; its next call starts the server again"
            ) from None
        if result.is_error:
            # The program's ToolError names the tool already: the upstream's own words follow.
            raise UpstreamError(f"upstream {self.name!r}: {content_text(result)}")
        return result_value(result)

    async def close(self) -> None:
        async with self._lock:
            await self._disconnect()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    async def _connected(self) -> _Connection:
        async with self._lock:
            if self._connection is None or self._connection.broken:
                await self._disconnect()
                await self._connect()
            assert self._connection is not None
            return self._connection

    async def _connect(self) -> None:
        self._stderr = self._stderr or tempfile.TemporaryFile("w+", encoding="utf-8")
        self._stderr.seek(0, os.SEEK_END)
        started = self._stderr.tell()  # the lines a failure quotes are this start's own
        ready: asyncio.Future[tuple[Any, list[Any]]] = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()
        task = asyncio.create_task(self._serve(ready, closing), name=f"upstream {self.name}")
        try:
            session, tools = await asyncio.wait_for(asyncio.shield(ready), self.startup_timeout)
        except BaseException as exc:
            # Stuck in its start (no answer), or cancelled with its caller: never left running.
            task.cancel()
            await asyncio.wait({task}, timeout=10)
            if not isinstance(exc, Exception):
                raise
            why = (
                f"no answer within {self.startup_timeout:g} s"
                if isinstance(exc, asyncio.TimeoutError)
                else _reason(exc)
            )
            raise UpstreamError(self._failed(why, started)) from None
        self._connection = _Connection(session, tools, closing, task)
        log.info("upstream %r started with %d tools", self.name, len(tools))

    async def _serve(
        self, ready: asyncio.Future[tuple[Any, list[Any]]], closing: asyncio.Event
    ) -> None:
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                ready.set_result((session, await _list_tools(session)))
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.debug("upstream %r closed with an error", self.name, exc_info=True)

    def _transport(self) -> Any:
        config = self.config
        if config.url is not None:
            return _http_transport(config.url, config.headers)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert config.command is not None and self._stderr is not None
        parameters = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env), cwd=config.cwd
        )
        return stdio_client(parameters, errlog=self._stderr)

    async def _disconnect(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    def _failed(self, why: str, started: int) -> str:
        text = f"upstream {self.name!r} ({self.config.describe()}) did not start: {why}"
        lines = self._stderr_tail(started)
        if lines:
            text += "; its stderr ended with:\n" + "\n".join(f"    {line}" for line in lines)
        return text

    def _stopped(self) -> str:
        lines = self._stderr_tail(0)
        return f"its stderr ended with: {lines[-1]}" if lines else "the connection closed"

    def _stderr_tail(self, start: int) -> list[str]:
        if self._stderr is None:
            return []
        self._stderr.flush()
        self._stderr.seek(start)
        lines = [line.rstrip() for line in self._stderr.read().splitlines() if line.strip()]
        self._stderr.seek(0, os.SEEK_END)
        return lines[-STDERR_LINES:]


@asynccontextmanager
async def _http_transport(url: str, headers: Mapping[str, str]) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    async with create_mcp_http_client(headers=dict(headers)) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            yield streams


async def _list_tools(session: Any) -> list[Any]:
    """Every tool, through every page of the listing."""
    listed = await session.list_tools()
    tools = list(listed.tools)
    while listed.next_cursor:
        from mcp_types import PaginatedRequestParams

        listed = await session.list_tools(params=PaginatedRequestParams(cursor=listed.next_cursor))
        tools += listed.tools
    return tools


def _connection_lost(exc: Exception) -> bool:
    """Whether a call failed because the upstream is gone (rather than refused the call)."""
    from anyio import BrokenResourceError, ClosedResourceError, EndOfStream
    from mcp import MCPError

    if isinstance(exc, MCPError):
        return exc.error.code == _connection_closed()
    return isinstance(exc, (BrokenResourceError, ClosedResourceError, EndOfStream, OSError))


def _connection_closed() -> int:
    """The MCP error code of a call whose connection closed before its answer came."""
    from mcp_types import CONNECTION_CLOSED

    return int(CONNECTION_CLOSED)


def _reason(exc: BaseException) -> str:
    """One line for what stopped a start, looking inside the SDK's exception groups."""
    while getattr(exc, "exceptions", None):  # an exception group (anyio's task groups)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    if getattr(getattr(exc, "error", None), "code", None) == _connection_closed():
        return "it closed the connection (exited?) before it answered"
    said = _said(exc)
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def _said(exc: BaseException) -> str:
    """An exception's message; an MCP error's own, not the tuple of its arguments."""
    message = getattr(exc, "error", None)
    return str(getattr(message, "message", None) or exc)


class Upstreams:
    """The upstream servers of one backend: started together, their tools registered on it,
    closed together. ``async with`` starts and closes them."""

    def __init__(
        self, configs: Sequence[UpstreamConfig], *, startup_timeout: float = STARTUP_TIMEOUT
    ) -> None:
        self.upstreams = [Upstream(config, startup_timeout) for config in combined(configs)]
        #: Each upstream that did not start, by name: the error says why.
        self.failures: dict[str, UpstreamError] = {}

    @classmethod
    def from_config(
        cls, source: str | os.PathLike[str] | Mapping[str, Any], **options: Any
    ) -> Upstreams:
        """The servers of an ``{"mcpServers": {...}}`` file (a path) or mapping."""
        return cls(read_config(source), **options)

    @classmethod
    def from_specs(cls, specs: Sequence[str], **options: Any) -> Upstreams:
        """One server per ``NAME=COMMAND ARGS...`` (or ``NAME=URL``)."""
        return cls([parse_spec(spec) for spec in specs], **options)

    async def __aenter__(self) -> Upstreams:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start every server at once. One that fails is logged and kept in ``failures``;
        it raises nothing, so the rest (and ``run_code``) go on without it."""
        outcomes = await asyncio.gather(
            *(upstream.start() for upstream in self.upstreams), return_exceptions=True
        )
        for upstream, outcome in zip(self.upstreams, outcomes):
            if isinstance(outcome, UpstreamError):
                log.warning("%s", outcome)
                self.failures[upstream.name] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome

    def host_tools(self, approve_destructive: bool = False) -> list[HostTool]:
        """The started servers' tools as host tools, server by server (``approve_destructive``:
        see ``Upstream.host_tools``); UpstreamConfigError when two would get one name."""
        tools: dict[str, HostTool] = {}
        for upstream in self.upstreams:
            for tool in upstream.host_tools(approve_destructive):
                if tool.name in tools:
                    raise UpstreamConfigError(
                        f"two upstream tools would both be tools.{tool.name} (one of them "
                        f"{upstream.name!r}'s); rename one server in the configuration"
                    )
                tools[tool.name] = tool
        return list(tools.values())

    def register(self, backend: KernelBackend, approve_destructive: bool = False) -> None:
        """Let ``backend``'s programs call every started server's tools (``add_tool``); with
        ``approve_destructive``, a call of a tool marked ``destructiveHint`` waits for a
        person's approval (``kb.approve``, or the backend's ``approver``)."""
        for tool in self.host_tools(approve_destructive):
            backend.add_tool(tool)

    async def close(self) -> None:
        await asyncio.gather(*(upstream.close() for upstream in self.upstreams))


# -- the command line of ``ptc-retry mcp`` ----------------------------------------------------


def add_upstream_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` and ``--upstream NAME=COMMAND...`` (repeatable) to ``parser``."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="upstream MCP servers whose tools programs can call, in the hosts' "
        '{"mcpServers": {...}} format',
    )
    parser.add_argument(
        "--upstream",
        metavar="NAME=COMMAND",
        action="append",
        default=[],
        help="one upstream MCP server, started as COMMAND (split as a shell would), or "
        "reached at NAME=URL; may be repeated",
    )
    parser.add_argument(
        "--approve-destructive",
        action="store_true",
        help="ask the person, through the MCP host (elicitation), before a program's call of "
        "an upstream tool marked destructiveHint runs; a host that cannot ask denies it",
    )


def upstream_configs(arguments: argparse.Namespace) -> list[UpstreamConfig]:
    """The servers ``--config`` and ``--upstream`` name, in that order (none when neither is
    given), for an ``Upstreams`` per kernel; UpstreamConfigError, to print as it is, when
    they do not fit or give one name twice."""
    configs = read_config(arguments.config) if arguments.config else []
    return combined(configs + [parse_spec(spec) for spec in arguments.upstream])
