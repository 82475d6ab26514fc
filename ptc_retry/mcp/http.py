"""Streamable HTTP with one kernel per MCP session (``ptc-retry mcp --http HOST:PORT``).

A request without a session id (a host's ``initialize``) starts a kernel (and upstream
servers of the session's own, ``--config`` / ``--upstream``), then opens the session on
it; every later request of the session reaches that kernel only. A session ends
when the host deletes it, or after ``idle_timeout`` seconds in which no call was made and
none ran (an open stream for server notifications does not count: hosts keep one open for
the session's life); its kernel and upstream servers are then stopped, and its programs
stay on disk. While ``max_sessions`` sessions are open, a new one is refused with HTTP 503
and a JSON-RPC error that says so.

Only the protocol versions with the ``initialize`` handshake are served: the 2026-07-28
era has no sessions, so it could not keep a kernel's state between calls. Its probe
(``server/discover``) is answered with the versions served, and such clients fall back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from mcp.server.runner import serve_loop
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..backend import KernelBackend
from .server import KernelTools, ServerOptions, start_kernel, stop_kernel
from .upstream import Upstreams

__all__ = ["MCP_PATH", "HttpOptions", "Session", "SessionKernels", "serve_http"]

log = logging.getLogger(__name__)

#: Where the MCP endpoint is: ``http://HOST:PORT/mcp``.
MCP_PATH = "/mcp"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class HttpOptions:
    """Where to listen, and the sessions' limits: ``idle_timeout`` seconds (None: none),
    at most ``max_sessions`` open at once."""

    host: str = "127.0.0.1"
    port: int = 8000
    idle_timeout: float | None = 1800.0
    max_sessions: int = 16


@dataclass
class Session:
    """One MCP session: its transport, its kernel, its own upstream servers (no two
    sessions share one), and when it was last busy."""

    transport: StreamableHTTPServerTransport
    backend: KernelBackend
    upstreams: Upstreams
    busy: int = 0  # requests in flight, the stream for server notifications aside
    last_busy: float = field(default_factory=time.monotonic)

    def idle_for(self) -> float:
        """Seconds since the last request ended; 0 while one is in flight."""
        return 0.0 if self.busy else time.monotonic() - self.last_busy

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request of this session; all but the notification stream count as busy."""
        counts = scope["method"] != "GET"
        self.busy += counts
        try:
            await self.transport.handle_request(scope, receive, send)
        finally:
            self.busy -= counts
            self.last_busy = time.monotonic()


class SessionKernels:
    """The ASGI app behind ``/mcp``: MCP sessions, each with a kernel of its own."""

    def __init__(self, options: ServerOptions, http: HttpOptions) -> None:
        self.options = options
        self.http = http
        self.security = _security(http.host)
        self._sessions: dict[str, Session] = {}
        self._opening = 0  # sessions whose kernel is starting: they count against the limit
        self._lock = anyio.Lock()
        self._task_group: anyio.abc.TaskGroup | None = None

    @property
    def open_sessions(self) -> int:
        """Sessions open now, those whose kernel is still starting included."""
        return len(self._sessions) + self._opening

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve sessions while inside; leaving ends them all and shuts their kernels down."""
        async with anyio.create_task_group() as group:
            self._task_group = group
            try:
                yield
            finally:
                for session in list(self._sessions.values()):
                    with anyio.CancelScope(shield=True):
                        await session.transport.terminate()
                self._task_group = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER.lower())
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _refuse_sessionless(scope, receive, send, version)
            return
        session_id = headers.get(MCP_SESSION_ID_HEADER.lower())
        if session_id is not None:
            session = self._sessions.get(session_id)
            if session is None:
                await _error("Session not found: it ended or timed out; initialize again", 404)(
                    scope, receive, send
                )
                return
            await session.handle(scope, receive, send)
            if session.transport.is_terminated:  # the host ended it (DELETE): forget it now
                await self._discard(session_id, session.transport)
            return
        if scope["method"] != "POST":
            await _error("Bad Request: a new session starts with an initialize POST", 400)(
                scope, receive, send
            )
            return
        await self._open_session(scope, receive, send)

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self._lock:
            full = self.open_sessions >= self.http.max_sessions
            if not full:
                self._opening += 1
        if full:
            log.warning("refused a new MCP session: %d are open", self.http.max_sessions)
            message = (
                f"Too many open sessions: this server allows {self.http.max_sessions} "
                "(--max-sessions); end one, or try again when one ends or times out"
            )
            await _error(message, 503, INTERNAL_ERROR)(scope, receive, send)
            return
        try:
            try:
                # Stopped again by start_kernel when it fails, or when the host went away.
                backend, upstreams = await start_kernel(self.options)
            except Exception as exc:
                log.error("a new MCP session's kernel did not start: %s", exc)
                await _error(f"The session's kernel did not start: {exc}", 500, INTERNAL_ERROR)(
                    scope, receive, send
                )
                return
            transport = StreamableHTTPServerTransport(
                mcp_session_id=uuid.uuid4().hex,
                is_json_response_enabled=False,
                event_store=None,
                security_settings=self.security,
            )
            session_id = str(transport.mcp_session_id)
            session = Session(transport, backend, upstreams)
            self._sessions[session_id] = session
        finally:
            self._opening -= 1
        assert self._task_group is not None
        await self._task_group.start(self._serve_session, session_id, session)
        answered = await _status_of(session.handle, scope, receive, send)
        if answered is None or answered >= 400:  # no session came of it
            await self._discard(session_id, transport)

    async def _serve_session(
        self,
        session_id: str,
        session: Session,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve one session on its kernel until it ends; then shut the kernel down."""
        transport, backend = session.transport, session.backend
        try:
            tools = KernelTools(backend, self.options.progress_every, session.upstreams)
            server = tools.server()
            async with transport.connect() as (read_stream, write_stream):
                task_status.started()
                async with anyio.create_task_group() as group:
                    group.start_soon(self._end_when_idle, session_id, session, group.cancel_scope)
                    await serve_loop(
                        server,
                        read_stream,
                        write_stream,
                        lifespan_state={},
                        session_id=session_id,
                        init_options=server.create_initialization_options(),
                    )
                    group.cancel_scope.cancel()  # the host ended it: no more idle watch
        except Exception:
            log.exception("MCP session %s failed", session_id)
        finally:
            await self._discard(session_id, transport)
            await stop_kernel(backend, session.upstreams)
            log.info(
                "MCP session %s ended; its programs stay in %s", session_id, backend.session_dir
            )

    async def _end_when_idle(
        self, session_id: str, session: Session, scope: anyio.CancelScope
    ) -> None:
        """Cancel ``scope`` (the session's serving) once it is idle for ``idle_timeout``."""
        limit = self.http.idle_timeout
        if limit is None:
            return
        while session.idle_for() < limit:
            await anyio.sleep(min(1.0, limit / 4))
        log.info("MCP session %s was idle for %g s: ending it", session_id, limit)
        scope.cancel()

    async def _discard(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        """Forget the session (its id answers 404 from now on) and close its transport."""
        self._sessions.pop(session_id, None)
        if not transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await transport.terminate()


def _security(host: str) -> TransportSecuritySettings | None:
    """On loopback, refuse other hosts and origins (DNS rebinding), as the SDK does."""
    if host not in LOOPBACK:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def _error(
    message: str, status: int, code: int = INVALID_REQUEST, request_id: Any = None
) -> Response:
    """A JSON-RPC error response with the HTTP ``status``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if code == UNSUPPORTED_PROTOCOL_VERSION:
        error["data"] = {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS)}
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return Response(json.dumps(body), status_code=status, media_type="application/json")


async def _refuse_sessionless(scope: Scope, receive: Receive, send: Send, version: str) -> None:
    """Answer a request of a protocol era without sessions: the versions served instead."""
    request_id = None
    with contextlib.suppress(Exception):
        body = await Request(scope, receive).json()
        request_id = body.get("id") if isinstance(body, dict) else None
    message = (
        f"protocol version {version} has no sessions, and this server keeps a kernel per "
        "session: connect with the initialize handshake"
    )
    response = _error(message, 400, UNSUPPORTED_PROTOCOL_VERSION, request_id)
    await response(scope, receive, send)


async def _status_of(app: Any, scope: Scope, receive: Receive, send: Send) -> int | None:
    """Run ``app`` for one request; the HTTP status it answered with (None: none)."""
    status: int | None = None

    async def watch(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watch)
    return status


def http_app(sessions: SessionKernels) -> Starlette:
    """The Starlette app serving ``sessions`` at ``MCP_PATH``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    return Starlette(routes=[Route(MCP_PATH, endpoint=sessions)], lifespan=lifespan)


async def serve_http(options: ServerOptions, http: HttpOptions) -> None:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted."""
    app = http_app(SessionKernels(options, http))
    config = uvicorn.Config(app, host=http.host, port=http.port, log_level="warning", lifespan="on")
    log.info("serving MCP at http://%s:%d%s", http.host, http.port, MCP_PATH)
    await uvicorn.Server(config).serve()
