"""A kernel behind a Jupyter Kernel Gateway (or Jupyter Server, or Enterprise Gateway, which
serve the same API): the backend's transport over REST and the JSON websocket protocol.

The kernel and its checkpoints live on the gateway's host. After every (re)start one silent
request calls the kernel's versioned entry point, ``ptc_retry.kernel.remote.connect``, which
loads ptc-retry, sets the session and answers with the session directory. The gateway
notices a dead kernel process itself and restarts it, telling clients with an iopub status
``restarting`` (``dead`` when it gives up). The HTTP and websocket client is tornado's,
already a dependency of jupyter_client and ipykernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from ..core.errors import BackendError, GatewayError, KernelStartError
from ..core.protocol import execute_request
from ..kernelspec import KERNEL_NAME
from .gateway_errors import http_error, logged, start_error, start_failure, too_large
from .gateway_rest import REQUEST_TIMEOUT, GatewayRest
from .gateway_wire import CLOSED, acknowledge_now, encode_message, frame_bytes, read_frame
from .remote import connect_expression, remote_session_dir
from .transport import KernelSetup

__all__ = ["GatewayKernel", "gateway_base_url"]

#: How often, at most, a waiting call asks the gateway whether the kernel still exists.
ALIVE_CHECK_INTERVAL = 3.0
#: How often a (re)start that waits for the kernel's websocket asks whether the kernel is gone.
HANDSHAKE_CHECK_INTERVAL = 1.0
#: The largest websocket message accepted: one output message of the kernel.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
#: The largest websocket message a gateway takes from a client: tornado's default
#: ``websocket_max_message_size`` (10 MiB), which Kernel Gateway 3 and Enterprise Gateway 3
#: keep, with no option to change it. A larger message makes the gateway close the websocket.
GATEWAY_MAX_MESSAGE_BYTES = 10 * 1024 * 1024


def gateway_base_url(url: str) -> str:
    """``url`` without its trailing slash; ValueError unless it is an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"gateway_url must be an http:// or https:// URL, not {url!r}")
    return url.rstrip("/")


class GatewayKernel:
    """One kernel reached through a gateway's REST API and websocket.

    ``url``: the gateway's base URL (``http://host:8888``, with a base path if it has one);
    ValueError unless it is an http(s) URL. ``token``: its auth token (``KG_AUTH_TOKEN``,
    ``EG_AUTH_TOKEN``), sent as ``Authorization: token ...``. ``kernel_name``: the kernelspec
    to start; another IPython kernel gets ptc-retry loaded by the entry point. ``env``: sent
    as the start request's ``env``; the gateway passes on only ``KERNEL_*`` names and its
    ``env_whitelist`` (Enterprise Gateway: ``client_envs``). ``startup_timeout``: seconds a
    (re)start may take. The kernelspec on the gateway decides the kernel's command line and
    working directory.
    """

    #: A kernel behind a gateway always runs ptc-retry: the entry point loads it.
    extension = True
    #: Its checkpoints are on the gateway's host: the kernel says where, and removes them.
    checkpoints_here = False

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        kernel_name: str = KERNEL_NAME,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 60,
        max_send_bytes: int = GATEWAY_MAX_MESSAGE_BYTES,
    ) -> None:
        self.url: str = gateway_base_url(url)
        self.token = token
        self.kernel_name = kernel_name
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.max_send_bytes = max_send_bytes
        self.kernel_id: str | None = None
        #: The kernel's session directory, as the kernel sees it; known after ``start()``.
        self.session_dir: str | None = None
        self._setup: KernelSetup | None = None
        self._client_session = uuid.uuid4().hex  # the websocket's session, for its buffer
        self._api: GatewayRest | None = None
        self._ws: Any = None
        self._queue: asyncio.Queue[Any] | None = None  # made on the loop, by _connect
        self._lifecycle: str | None = None  # "restarting" or "dead", as the gateway said
        self._checked = 0.0
        self._running: str | None = None  # the execute_request whose reply has not come

    def __repr__(self) -> str:
        return f"<GatewayKernel {self.kernel_name} {self.kernel_id} at {self.url}>"

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, setup: KernelSetup) -> Path:
        if setup.options:
            raise ValueError(
                "a kernel behind a gateway takes its command line from the kernelspec there; "
                f"set {' '.join(setup.options)} in that kernelspec instead"
            )
        self._setup = setup
        self._api = GatewayRest(self.url, self.token)
        try:
            await self._new_kernel()
            if not await self._connect():
                raise self._exited()
            await self._ready()
        except BaseException:
            await self.shutdown(None)
            raise
        return Path(self.session_dir or "")

    async def _new_kernel(self) -> None:
        from tornado.httpclient import HTTPClientError

        body: dict[str, Any] = {"name": self.kernel_name}
        if self.env:
            body["env"] = dict(self.env)
        try:
            model = await self._rest(
                "POST", "/api/kernels", body, timeout=self.startup_timeout, translate=False
            )
        except HTTPClientError as exc:
            raise logged(await self._start_error(exc)) from None
        self.kernel_id = model["id"]

    async def _start_error(self, exc: Any) -> BackendError:
        """The error to raise when the gateway answers a kernel start request with ``exc``."""
        refused = start_error(self.url, self.token, self.env, exc)
        if refused is not None:
            return refused
        names: list[str] = []
        with contextlib.suppress(BackendError):
            specs = await self._rest("GET", "/api/kernelspecs", timeout=REQUEST_TIMEOUT)
            names = sorted((specs or {}).get("kernelspecs") or {})
        return start_failure(self.url, self.kernel_name, exc, names)

    async def restart(self) -> None:
        """Restart the kernel (or wait for the gateway's own restart) and set it up again."""
        said, self._lifecycle = self._lifecycle, None
        self._running = None  # whatever ran is gone with the kernel
        if said == "restarting":
            # The gateway restarts a dead kernel itself; restarting it again would race.
            with contextlib.suppress(BackendError):
                await self._ready()
                return
        if await self._model() is None:  # the gateway gave up on it, or it was culled
            self._close_ws()
            await self._new_kernel()
        else:
            await self._rest("POST", self._path("/restart"), {}, timeout=self.startup_timeout)
        if self._ws is None and not await self._connect():
            raise self._exited()
        await self._ready()

    async def shutdown(self, remove: str | None) -> None:
        """Delete the kernel; first ask it to delete the directory ``remove`` if given."""
        if remove and self._ws is not None and self._lifecycle is None:
            # rmtree refuses a symlink (and ignore_errors keeps quiet): nothing outside it goes.
            code = f"__import__('shutil').rmtree({remove!r}, ignore_errors=True)"
            with contextlib.suppress(BackendError, asyncio.TimeoutError):
                await self._silent(code, timeout=5)
        self._close_ws()
        if self.kernel_id is not None and self._api is not None:
            with contextlib.suppress(BackendError):
                await self._rest("DELETE", self._path(""), timeout=REQUEST_TIMEOUT, missing=None)
        self.kernel_id = None
        if self._api is not None:
            self._api.close()
            self._api = None

    async def interrupt(self) -> None:
        await self._rest("POST", self._path("/interrupt"), {}, timeout=REQUEST_TIMEOUT)

    async def is_alive(self) -> bool:
        """False when the kernel died; GatewayError when the gateway cannot be reached."""
        if self._lifecycle is not None:
            return False
        now = time.monotonic()
        # While a program runs, ask the gateway now and then; between calls, every time.
        recently = now - self._checked < ALIVE_CHECK_INTERVAL
        if self._ws is not None and self._running is not None and recently:
            return True
        self._checked = now
        model = await self._model()
        if model is None or model.get("execution_state") == "dead":
            return False
        if self._ws is None:  # the gateway is there but dropped the websocket: reconnect
            return await self._connect()
        return True

    async def exit_description(self) -> str:
        if self._lifecycle == "restarting":
            return "the gateway found its process ended"
        if self._lifecycle == "dead":
            return "the gateway found its process ended and could not restart it"
        return "the gateway no longer has it"

    # -- messages ------------------------------------------------------------------------------

    async def send_execute(self, content: dict[str, Any], metadata: dict[str, Any]) -> str:
        self._running = await self._send("execute_request", content, metadata)
        return self._running

    async def send_input_reply(self, value: str, request: dict[str, Any]) -> None:
        # The websocket carries the stdin channel too: a gateway forwards the reply to the
        # kernel while its program runs.
        await self._send("input_reply", {"value": value}, parent=request)

    async def receive(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        """The next message (iopub or shell) that answers ``msg_id``, or None after ``timeout``.

        Returns None at once when the websocket closed or the gateway reports the kernel
        restarting or dead; ``is_alive()`` then tells which.
        """
        deadline = time.monotonic() + timeout
        queue = self._queue
        if queue is None:
            return None
        while True:
            left = deadline - time.monotonic()
            if not queue.empty():
                message = queue.get_nowait()
            elif left <= 0:
                return None
            else:
                try:
                    message = await asyncio.wait_for(queue.get(), left)
                except asyncio.TimeoutError:
                    return None
            if message is CLOSED:
                self._ws = None
                return None
            parent = message.get("parent_header") or {}
            if parent.get("msg_id") == msg_id:
                if msg_id == self._running and message.get("msg_type") == "execute_reply":
                    self._running = None
                return message
            state = (message.get("content") or {}).get("execution_state")
            if message.get("msg_type") == "status" and state in ("restarting", "dead"):
                if not parent:  # the gateway's own word about the kernel process
                    self._lifecycle = state
                    return None

    # -- internals -----------------------------------------------------------------------------

    def _path(self, suffix: str) -> str:
        return f"/api/kernels/{quote(self.kernel_id or '', safe='')}{suffix}"

    async def _rest(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        """``GatewayRest.call`` while the kernel is started; BackendError after ``shutdown``."""
        if self._api is None:
            raise BackendError("the gateway connection is closed")
        return await self._api.call(method, path, body, **options)

    def _lost(self) -> GatewayError:
        return logged(GatewayError(f"lost the websocket to the kernel at {self.url}"))

    async def _model(self) -> dict[str, Any] | None:
        """The gateway's model of the kernel, or None when it no longer has it."""
        return await self._rest("GET", self._path(""), timeout=REQUEST_TIMEOUT, missing=None)

    async def _connect(self) -> bool:
        """Open the kernel's websocket; False when the gateway dropped the kernel meanwhile."""
        from tornado.httpclient import HTTPClientError, HTTPRequest
        from tornado.simple_httpclient import HTTPTimeoutError
        from tornado.websocket import websocket_connect

        if self._api is None:
            raise BackendError("the gateway connection is closed")
        scheme = "wss" if self.url.startswith("https") else "ws"
        url = (
            f"{scheme}{self.url[self.url.index(':') :]}{self._path('/channels')}"
            f"?session_id={self._client_session}"
        )
        # The gateway answers the handshake once the kernel answers it: allow a (re)start.
        request = HTTPRequest(
            url,
            headers=self._api.headers(),
            connect_timeout=min(self.startup_timeout, REQUEST_TIMEOUT),
            request_timeout=self.startup_timeout,
        )
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queue = queue

        def on_message(raw: str | bytes | None) -> None:
            if raw is None and self._queue is queue:
                self._ws = None  # the gateway closed it: is_alive() asks the gateway why
            message = read_frame(raw)
            if message is not None:
                queue.put_nowait(message)
            if self._queue is queue:
                acknowledge_now(self._ws)

        connecting = websocket_connect(
            request,
            on_message_callback=on_message,
            max_message_size=MAX_MESSAGE_BYTES,
            ping_interval=15,
        )
        try:
            self._ws = await self._handshake(connecting)
            return self._ws is not None
        except HTTPClientError as exc:
            if isinstance(exc, HTTPTimeoutError):  # the gateway answered all along: the kernel
                raise logged(
                    KernelStartError(
                        f"the {self.kernel_name!r} kernel behind the gateway at {self.url} did "
                        f"not answer within {self.startup_timeout:g} s ({exc.message})"
                    )
                ) from None
            raise logged(
                http_error(self.url, self.token, "GET", self._path("/channels"), exc)
            ) from None
        except OSError as exc:
            raise logged(GatewayError(f"cannot reach the gateway at {self.url} ({exc})")) from None
        except Exception as exc:  # e.g. tornado's WebSocketError: not a websocket answer
            raise logged(
                GatewayError(f"could not open the kernel's websocket at {self.url} ({exc})")
            ) from None

    async def _handshake(self, connecting: Any) -> Any:
        """The websocket ``connecting`` opens, or None when the gateway drops the kernel first.

        The gateway completes the handshake once the kernel answers; a kernel that exits
        before that leaves it waiting until the gateway gives up restarting the kernel and
        forgets it. So ask the gateway about the kernel meanwhile.
        """
        try:
            while True:
                done, _ = await asyncio.wait({connecting}, timeout=HANDSHAKE_CHECK_INTERVAL)
                if done:
                    return connecting.result()
                model = await self._model()
                if model is None or model.get("execution_state") == "dead":
                    return None
        finally:
            if not connecting.done():
                connecting.cancel()

    def _exited(self) -> KernelStartError:
        return logged(
            KernelStartError(
                f"the {self.kernel_name!r} kernel behind the gateway at {self.url} exited "
                "before it answered, and the gateway gave up restarting it; run the command of "
                "its kernelspec on the gateway's host to see why (its output is in the "
                "gateway's log)"
            )
        )

    def _close_ws(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    async def _send(
        self,
        msg_type: str,
        content: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        *,
        parent: dict[str, Any] | None = None,
    ) -> str:
        """Send a shell request in the JSON protocol, or with ``parent`` (an input_request)
        the stdin reply to it; return its msg_id. MessageTooLarge, and nothing sent, when it
        is larger than the gateway takes."""
        from tornado.websocket import WebSocketClosedError

        if self._ws is None:
            raise self._lost()
        msg_id, frame = encode_message(msg_type, self._client_session, content, metadata, parent)
        size = frame_bytes(frame)
        if size > self.max_send_bytes:
            raise too_large(self.url, self.max_send_bytes, msg_type, size)
        try:
            await self._ws.write_message(frame)
        except WebSocketClosedError:
            self._ws = None
            raise self._lost() from None
        return msg_id

    async def _reply(self, msg_id: str, timeout: float) -> tuple[dict[str, Any], str]:
        """The shell reply to ``msg_id`` and the stream text printed before it."""
        deadline = time.monotonic() + timeout
        printed = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            message = await self.receive(msg_id, min(left, 0.5))
            if message is None:
                if self._ws is None:
                    raise self._lost()
                continue
            if message["msg_type"] == "stream":
                printed.append(message["content"].get("text", ""))
            elif message["msg_type"].endswith("_reply"):
                return message, "".join(printed)

    async def _answered(self, msg_id: str, timeout: float) -> bool:
        """Whether the reply to ``msg_id`` and an iopub message about it both came.

        The iopub one matters after a restart: until the gateway's subscription to the new
        kernel is through, its outputs are lost (the same check as Jupyter Server's nudge).
        """
        deadline = time.monotonic() + timeout
        shell = iopub = False
        while not (shell and iopub):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            message = await self.receive(msg_id, min(left, 0.5))
            if message is None:
                if self._ws is None:
                    raise self._lost()
            elif message.get("channel") == "iopub":
                iopub = True
            elif message["msg_type"].endswith("_reply"):
                shell = True
        return True

    async def _silent(
        self, code: str, timeout: float, **content: Any
    ) -> tuple[dict[str, Any], str]:
        """Run ``code`` silently (no checkpoint, no history): its reply and what it printed."""
        request = execute_request(code, silent=True, **content)
        msg_id = await self._send("execute_request", request)
        return await self._reply(msg_id, timeout)

    async def _ready(self) -> None:
        """Wait until the kernel answers, then make it this backend's session."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            msg_id = await self._send("kernel_info_request", {})
            if await self._answered(msg_id, min(1.0, max(0.1, deadline - time.monotonic()))):
                break
            if self._lifecycle == "dead":
                raise self._exited()
            if time.monotonic() >= deadline:
                raise KernelStartError(
                    f"the {self.kernel_name!r} kernel behind the gateway at {self.url} did "
                    f"not answer within {self.startup_timeout:g} s"
                )
        self._lifecycle = None
        assert self._setup is not None  # start() keeps it
        root = None if self._setup.root is None else str(self._setup.root)
        expression = connect_expression(self._setup.session_id, root)
        try:
            reply, printed = await self._silent(
                "", max(1.0, deadline - time.monotonic()), user_expressions={"remote": expression}
            )
        except asyncio.TimeoutError:
            raise KernelStartError(
                f"the {self.kernel_name!r} kernel behind the gateway at {self.url} did not "
                "finish setting up its checkpoints in time"
            ) from None
        self.session_dir = remote_session_dir(reply["content"], printed, self.kernel_name)
