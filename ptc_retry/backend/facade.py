"""``KernelBackend``: one Jupyter kernel for an agent loop, and the text a model reads after
each tool call. docs/agent-loop.md is its manual; the kernel is reached
through a transport (``transport.py``), each program runs as one ``Execution``, and what
the model's tool calls go through (prompt, tool definitions, tool calls) is its
``ModelSide`` (``model_side.py``)."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import run_sync

from ..core.approvals import Approver, check_approver
from ..core.errors import BackendError, GatewayError, KernelStartError
from ..core.fs import default_root
from ..core.layout import sanitize
from ..core.status import Mode
from ..core.time_limit import read_delay
from ..native import ToolResult
from .approvals import ApprovalSide, Waiting
from .code_mode import CodeSession
from .execution import Execution, ExecutionSettings
from .input_requests import stdin_connected
from .kernels import KernelKeywords, check_kernel_keywords, kernel_transport
from .local import NATIVE_KERNEL_DIR, check_checkpoints
from .model_side import NOT_RUNNING, ModelSide
from .native_mode import KERNEL_OPTIONS, NativeSession
from .results import RUN_CODE, RunResult, check_timeout, require_utf8
from .tracing import Telemetry, Tracing
from .transport import KernelSetup, Transport

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["KernelBackend"]

log = logging.getLogger(__name__)


class KernelBackend(ModelSide, ApprovalSide):
    """One kernel that runs a model's programs, with checkpoints and replay.

    ``mode``: ``"code"`` (the model writes programs and replays a failed one with
    ``ptc_retry.replay``) or ``"native"`` (it calls ``run_code`` as a plain tool and fixes a
    failed call with ``editPreviousToolCalling``, through ``kb.native``). ``transport``: how
    the kernel is started and reached (``LocalKernel``, ``GatewayKernel``); without one, the
    kernel keywords (``KernelKeywords``: ``kernel_name``, default ``"ptc-retry"``, ``cwd``,
    ``env``, ``extra_arguments``, ``startup_timeout``, ``extension`` and ``gateway_url``
    with ``token``) describe it. ``root``: the checkpoint root (default
    ``$PTC_RETRY_ROOT``, else ``<tempdir>/ptc-retry-<uid>``; behind a gateway, a path on the
    kernel's host). ``session_id``: the session directory's name (default a fresh short
    id); ``shutdown()`` removes the session directory unless ``keep=True``.
    ``max_output_chars``: the size of the text the model reads (its head and tail are kept).
    ``default_timeout``: seconds a call may run without a ``timeout`` of its own (None: no
    limit); the kernel stops the program then, and the backend interrupts it
    ``time_limit_margin`` seconds later, restarting the kernel if it does not stop within
    ``interrupt_grace`` seconds. ``tools``: functions programs may call as
    ``await tools.<name>(...)`` (code mode; see ``register_tool``). ``telemetry``: where
    OpenTelemetry spans and metrics go (``Telemetry``; default: the application's global
    providers, if it configured any, else nothing is reported; docs/operators.md).
    ``await tools.<name>(...)`` (code mode; see ``register_tool``). ``approver``: an async
    callback, awaited with each ``PendingApproval`` while its program waits on the call:
    True approves it, a str denies it with that reason, None leaves it paused for
    ``approve`` / ``deny`` (see docs/agent-loop.md#approvals); one that gives no answer in
    ``approver_timeout`` seconds, raises, or answers anything else leaves it paused (logged).

    ``mode="native"`` behind a gateway is refused (ValueError): the kernelspec there, not
    the backend, decides whether the kernel adds the code-mode notice, and the journal
    would live here while the kernel's checkpoints live on its host. For direct tool calls
    to a remote kernel, register a ``run_code`` of your own on a ``NativeTools`` over a
    code-mode gateway backend whose kernelspec sets a high ``PtcRetry.notice_min_bytes``.
    """

    def __init__(
        self,
        mode: str = "code",
        *,
        transport: Transport | None = None,
        root: str | os.PathLike[str] | None = None,
        session_id: str | None = None,
        max_output_chars: int = 20_000,
        default_timeout: float | None = None,
        interrupt_grace: float = 5.0,
        time_limit_margin: float = 1.0,
        tools: Iterable[Callable[..., Any]] = (),
        telemetry: Telemetry | None = None,
        approver: Approver | None = None,
        approver_timeout: float = 300.0,
        **kernel: Unpack[KernelKeywords],
    ) -> None:
        if mode not in tuple(Mode):
            raise ValueError(f"unknown mode {mode!r}; use mode='code' or mode='native'")
        check_kernel_keywords(kernel, "KernelBackend.__init__()")
        transport = kernel_transport(transport, **kernel)
        if mode == Mode.NATIVE and not transport.checkpoints_here:
            raise ValueError(
                "mode='native' does not work through a gateway: its journal would live here "
                "and the kernel's checkpoints on the gateway's host, and the kernelspec there, "
                "not the backend, decides whether the kernel adds the code-mode notice; use "
                "mode='code' with a gateway (see the KernelBackend docstring)"
            )
        if max_output_chars < 100:
            raise ValueError(f"max_output_chars must be at least 100, not {max_output_chars}")
        self.mode = Mode.of(mode)
        #: How the backend starts and reaches its kernel.
        self.transport = transport
        self.session_id = sanitize(session_id) if session_id else f"s{secrets.token_hex(4)}"
        self.root: Path | None = _checkpoint_root(transport, root)
        #: This session's checkpoint directory, as the kernel sees it (behind a gateway, the
        #: kernel says where, in start()).
        self.session_dir: Path | None = None
        if transport.checkpoints_here and self.root is not None:
            self.session_dir = self.root / self.session_id
        self.max_output_chars = max_output_chars
        self.default_timeout = check_timeout(default_timeout)
        self.interrupt_grace = read_delay(interrupt_grace, "interrupt_grace")
        self.time_limit_margin = read_delay(time_limit_margin, "time_limit_margin")
        #: The turn the next calls belong to; ``new_turn()`` advances it.
        self.turn = 0
        #: The result of the latest ``run_code`` (also through ``handle_tool_call``), for a
        #: loop that wants its status, metadata or outputs besides the text.
        self.last_result: RunResult | None = None
        #: Native mode: the ``ToolResult`` of the latest ``handle_tool_call`` or
        #: ``handle_partial_tool_call`` (for an edit, its ``replay_of`` names the call it
        #: re-ran).
        self.last_tool_result: ToolResult | None = None
        self._tracing = Tracing(telemetry)
        self._code = CodeSession(self.run_code, self._tracing)
        self._code.host_tools.approver = check_approver(approver)
        self._code.host_tools.approver_timeout = read_delay(approver_timeout, "approver_timeout")
        #: The programs that wait for a person's decision (``pending_approvals``).
        self._waiting = Waiting()
        #: The call id of the latest program whose request may have reached the kernel.
        self._reached: str | None = None
        for function in tools:
            self.register_tool(function)
        self._native: NativeSession | None = None
        self._step = 0
        self._new_instruction = False
        self._sent_ids: set[str] = set()
        self._next_id = 1
        self._lock: asyncio.Lock | None = None
        self._execution: Execution | None = None  # the program running now, if any
        self._running = False
        self._closing = False
        self._closed = False
        # Whether start() made the session directory: shutdown() removes only what it made.
        self._made_session_dir = not transport.checkpoints_here  # the kernel removes its own

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._running else "not started"
        where = f" via {self.gateway_url}" if self.gateway_url else ""
        return f"<KernelBackend {self.kernel_name}{where} {self.session_dir} ({state})>"

    @property
    def approver(self) -> Approver | None:
        """The inline approver given as ``approver=`` (None: calls that need approval pause)."""
        return self._code.host_tools.approver

    @property
    def kernel_name(self) -> str:
        return self.transport.kernel_name

    @property
    def extension(self) -> bool:
        """False: the kernel runs without ptc-retry (nothing is saved, no notice)."""
        return self.transport.extension

    @property
    def gateway_url(self) -> str | None:
        """The gateway the kernel is reached through, or None for a kernel started here."""
        return self.transport.url

    @property
    def connection(self) -> Transport | None:
        """The transport while its kernel runs (between ``start()`` and ``shutdown()``)."""
        return self.transport if self._running else None

    @property
    def kernel_manager(self) -> Any:
        """The jupyter_client AsyncKernelManager of a local kernel (None otherwise)."""
        return getattr(self.connection, "manager", None)

    @property
    def kernel_client(self) -> Any:
        """The AsyncKernelClient of a local kernel (None otherwise)."""
        return getattr(self.connection, "client", None)

    @property
    def closed(self) -> bool:
        """Whether ``shutdown()`` was called: the backend cannot start again."""
        return self._closed

    @property
    def kernel_session_dir(self) -> Path | None:
        """Where the kernel keeps its checkpoints: ``session_dir`` itself in code mode; in
        native mode ``<session_dir>/kernel/<session_id>``, apart from the tool-call journal."""
        if self.session_dir is None or self.mode != Mode.NATIVE:
            return self.session_dir
        return self.session_dir / NATIVE_KERNEL_DIR / self.session_id

    # -- turns and steps ----------------------------------------------------------------------

    def new_turn(self) -> int:
        """A person gave a new instruction: later calls belong to the next turn.

        The next request also carries ``new_instruction``, which lifts a paused
        repeated-failure guard. Returns the new turn number.
        """
        self.turn += 1
        self._new_instruction = True
        return self.turn

    def next_step(self) -> int:
        """A fresh step number; pass it as ``step=`` to every call of one model message.

        In native mode those calls are one message of the journal: ``previous_ordinal``
        numbers them, in the order they were made, once the next message begins.
        """
        self._step += 1
        return self._step

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> KernelBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def start(self) -> None:
        """Start the kernel and wait until it answers; KernelStartError if it cannot.

        Through a gateway, GatewayError when the gateway cannot be reached or refuses the
        token.
        """
        if self._closed:
            raise BackendError("this backend was shut down; create a new KernelBackend")
        if self._running:
            return
        self._lock = self._lock or asyncio.Lock()
        kernel_dir = self.kernel_session_dir  # None behind a gateway, until it starts
        if self.session_dir is not None and kernel_dir is not None:
            self._made_session_dir = not os.path.lexists(self.session_dir)
        if self.mode == Mode.NATIVE and self._native is None:
            # The journal first: it makes the session directory (0700) the kernel's store
            # goes in, which would otherwise come out of makedirs with the umask's mode.
            assert self.root is not None and self.session_dir is not None
            self._native = NativeSession(self.root, self.session_id, self.run_code, self._tracing)
        if kernel_dir is not None:
            check_checkpoints(kernel_dir, self.session_id)
        root = kernel_dir.parent if kernel_dir is not None else self.root
        options = KERNEL_OPTIONS if self.mode == Mode.NATIVE else ()
        session_dir = await self.transport.start(KernelSetup(self.session_id, root, options))
        try:
            await self._stdin_connected()
        except BaseException:
            await self.transport.shutdown(None)
            raise
        if self.session_dir is None:
            self.session_dir = session_dir  # as the remote kernel said
        if self.transport.checkpoints_here:
            self._load_waiting(self.kernel_session_dir)
        else:
            await self._load_remote_waiting(self.transport, self.transport.startup_timeout)
        self._running = True
        where = f" via {self.gateway_url}" if self.gateway_url else ""
        log.info("started the %r kernel%s for %s", self.kernel_name, where, self.session_dir)

    async def shutdown(self, keep: bool = False) -> None:
        """Stop the kernel and remove this session's checkpoint directory unless ``keep``.

        Behind a gateway the kernel removes it, on its host, just before it is shut down.

        Idempotent: the first call decides ``keep``. A call that is running when shutdown
        begins ends with BackendError (within ``execution.POLL_INTERVAL``).
        """
        if self._closed:
            return
        self._closing = True
        # Only a directory this backend made: never one that was there before (a continued
        # session, or a folder of someone's that happens to have the session's name).
        owned = self._made_session_dir and self.session_dir is not None
        remove = str(self.session_dir) if owned and not keep else None
        try:
            if self._lock is not None:
                async with self._lock:
                    await self._stop_kernel(remove)
            else:
                await self._stop_kernel(remove)
        finally:
            self._closed = True

    async def _stop_kernel(self, remove: str | None) -> None:
        self._running = False
        try:
            if self.native is not None:
                self.native.journal.close()  # before its directory goes
        finally:
            await self.transport.shutdown(remove)  # also when the kernel never started
        log.info("shut down the %r kernel of %s", self.kernel_name, self.session_dir)

    # -- running programs ---------------------------------------------------------------------

    async def run_code(
        self,
        code: str,
        *,
        call_id: str | None = None,
        arguments: str | None = None,
        turn: int | None = None,
        step: int | None = None,
        timeout: float | None = None,
        partial: bool = False,
    ) -> RunResult:
        """Run ``code`` as one execute_request and return what it gave.

        ``call_id``: the model's tool-call id (default ``c<N>``, chosen by the backend).
        ``arguments``: the raw arguments string the model sent, saved byte for byte when its
        ``"code"`` is ``code``. ``turn``: default ``self.turn``. ``step``: default a step of
        its own (see ``next_step``). ``timeout``: seconds, default ``default_timeout``.
        ``partial``: ``arguments`` is what arrived of a call cut off mid-stream; the kernel
        saves it and the start of its program, and runs nothing (status ``partial``; see
        ``handle_partial_tool_call``).
        Calls on one backend run one at a time, in the order they were made.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        require_utf8(code, "code")
        if arguments is not None:
            require_utf8(arguments, "arguments")
        if self._lock is None or not self._running:
            raise BackendError(NOT_RUNNING)
        timeout = check_timeout(timeout if timeout is not None else self.default_timeout)
        sent_id = call_id if call_id is not None else self._fresh_id()
        self._sent_ids.add(sent_id)
        request: dict[str, Any] = {
            "call_id": sent_id,
            "tool": RUN_CODE,
            "turn": self.turn if turn is None else turn,
            "step": self.next_step() if step is None else step,
        }
        if arguments is not None:
            request["arguments"] = arguments
        if partial:
            request["partial"] = True
        if timeout is not None:
            request["time_limit"] = timeout
        async with self._lock:
            if self._closing:
                raise BackendError("the backend is shutting down; nothing ran")
            if not partial:
                waits = self._waiting.sent_again(code)
                if waits is not None:
                    self.last_result = waits
                    return waits
            if self._new_instruction:
                request["new_instruction"] = True
                self._new_instruction = False
            with self._tracing.call(request, code) as trace:
                request.update(trace.context())
                self.last_result = await self._execute(code, request, timeout)
                trace.ended(self.last_result)
            return self.last_result

    async def _execute(
        self, code: str, request: dict[str, Any], timeout: float | None
    ) -> RunResult:
        """Run one request as an ``Execution``, known as the running one meanwhile."""
        settings = ExecutionSettings(
            self.max_output_chars,
            self.time_limit_margin,
            self.interrupt_grace,
            checkpoints=self.kernel_session_dir,
            resume_hint=self.mode == Mode.CODE,  # native mode: the journal's notice follows
            tools=self._code.host_tools,
            late_results=self._code.late_results,
        )
        restart, closing = self._restart, lambda: self._closing
        execution = Execution(
            self.transport, code, request, timeout, settings, restart=restart, closing=closing
        )
        self._execution = execution
        paused = self._code.host_tools.paused
        paused.clear()
        try:
            result = await execution.run()
        finally:
            self._execution = None
            if execution.sent:
                self._reached = request["call_id"]
        self._waiting.took(result, list(paused), code)  # the calls that now wait for a decision
        paused.clear()
        return result

    def running_output(self) -> str | None:
        """What the program running now has printed so far, as its result's text will show
        it (bounded the same way), or None while no program runs."""
        execution = self._execution
        return None if execution is None else execution.capture.text()

    def _fresh_id(self) -> str:
        while f"c{self._next_id}" in self._sent_ids:
            self._next_id += 1
        return f"c{self._next_id}"

    async def restart(self) -> None:
        """Restart the kernel between calls: its variables are gone, its session goes on.

        Saved programs and their references (``"#7"``) stay valid, so a model can still
        replay a program that failed before the restart. Waits for a running call to end.
        """
        if self._lock is None or not self._running:
            raise BackendError(NOT_RUNNING)
        async with self._lock:
            await self._restart()

    async def _restart(self) -> None:
        if not self._running:
            raise BackendError(NOT_RUNNING)
        try:
            await self.transport.restart()
            await self._stdin_connected()
        except GatewayError:
            raise  # says itself what is wrong with the gateway
        except Exception as exc:
            log.warning("the %r kernel could not be restarted: %s", self.kernel_name, exc)
            raise BackendError(
                f"the {self.kernel_name!r} kernel could not be restarted ({exc}); "
                "shut this backend down and start a new one"
            ) from exc
        log.info("restarted the %r kernel of %s", self.kernel_name, self.session_dir)

    async def _stdin_connected(self) -> None:
        """With host tools, wait until the kernel's input_requests reach this backend: the
        first tool call of a program must not be lost to a stdin connection still opening."""
        if not len(self._code.host_tools):
            return
        try:
            await stdin_connected(self.transport, self.transport.startup_timeout)
        except asyncio.TimeoutError:
            raise KernelStartError(
                f"the {self.kernel_name!r} kernel answers, but its input requests (which carry "
                f"the programs' tool calls) did not reach the backend within "
                f"{self.transport.startup_timeout:g} s"
            ) from None

    # -- sync twins ---------------------------------------------------------------------------

    start_sync = run_sync(start)
    run_code_sync = run_sync(run_code)
    handle_tool_call_sync = run_sync(ModelSide.handle_tool_call)
    handle_partial_tool_call_sync = run_sync(ModelSide.handle_partial_tool_call)
    restart_sync = run_sync(restart)
    approve_sync = run_sync(ApprovalSide.approve)
    deny_sync = run_sync(ApprovalSide.deny)
    shutdown_sync = run_sync(shutdown)

    def __enter__(self) -> KernelBackend:
        self.start_sync()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown_sync()


def _checkpoint_root(transport: Transport, root: str | os.PathLike[str] | None) -> Path | None:
    """The checkpoint root as the kernel sees it: here, absolute (the kernel resolves a
    relative one against its own cwd); on another host, as given (None: its default)."""
    if transport.checkpoints_here:
        return Path(root if root is not None else default_root()).expanduser().absolute()
    return Path(root) if root is not None else None
