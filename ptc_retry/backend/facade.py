"""``KernelBackend``: one Jupyter kernel for an agent loop, and the text a model reads after
each tool call. The README's "In an agent loop" section is its manual; the kernel is reached
through a transport (``transport.py``), each program runs as one ``Execution``."""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from jupyter_core.utils import run_sync

from ..core.errors import BackendError, GatewayError, KernelStartError
from ..core.fs import default_root
from ..core.layout import sanitize
from ..core.notice import prompt_section
from ..core.time_limit import read_delay
from ..native import NativeTools, ToolResult
from .code_mode import CodeSession
from .execution import Execution, ExecutionSettings
from .host_tools import HostTool
from .input_requests import stdin_connected
from .kernels import kernel_transport
from .local import NATIVE_KERNEL_DIR, check_checkpoints
from .native_mode import KERNEL_OPTIONS, NativeSession, native_definitions
from .results import RUN_CODE, CallOptions, RunResult, check_timeout, require_utf8
from .transport import KernelSetup, Transport

__all__ = ["MODES", "KernelBackend"]

log = logging.getLogger(__name__)

#: What ``KernelBackend(mode=...)`` accepts: the model writes programs, or calls tools.
MODES = ("code", "native")
_NOT_RUNNING = "the kernel is not running; call start() or use `async with`"
_SEND_AGAIN = "Nothing was saved or run; send the whole call again."
F = TypeVar("F", bound=Callable[..., Any])


class KernelBackend:
    """One kernel that runs a model's programs, with checkpoints and replay.

    ``mode``: ``"code"`` (the model writes programs and replays a failed one with
    ``ptc_retry.replay``) or ``"native"`` (it calls ``run_code`` as a plain tool and fixes a
    failed call with ``editPreviousToolCalling``, through ``kb.native``). ``transport``: how
    the kernel is started and reached (``LocalKernel``, ``GatewayKernel``); without one, the
    kernel keywords ``kernel_name`` (default ``"ptc-retry"``), ``cwd``, ``env``,
    ``extra_arguments``, ``startup_timeout``, ``extension`` and ``gateway_url`` with
    ``token`` describe it (see those classes). ``root``: the checkpoint root (default
    ``$PTC_RETRY_ROOT``, else ``<tempdir>/ptc-retry-<uid>``; behind a gateway, a path on the
    kernel's host). ``session_id``: the session directory's name (default a fresh short
    id); ``shutdown()`` removes the session directory unless ``keep=True``.
    ``max_output_chars``: the size of the text the model reads (its head and tail are kept).
    ``default_timeout``: seconds a call may run without a ``timeout`` of its own (None: no
    limit); the kernel stops the program then, and the backend interrupts it
    ``time_limit_margin`` seconds later, restarting the kernel if it does not stop within
    ``interrupt_grace`` seconds. ``tools``: functions programs may call as
    ``await tools.<name>(...)`` (code mode; see ``register_tool``).

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
        kernel_name: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        extra_arguments: Sequence[str] | None = None,
        startup_timeout: float | None = None,
        extension: bool | None = None,
        gateway_url: str | None = None,
        token: str | None = None,
        tools: Iterable[Callable[..., Any]] = (),
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use mode='code' or mode='native'")
        transport = kernel_transport(
            transport,
            kernel_name=kernel_name,
            cwd=cwd,
            env=env,
            extra_arguments=extra_arguments,
            startup_timeout=startup_timeout,
            extension=extension,
            gateway_url=gateway_url,
            token=token,
        )
        if mode == "native" and transport.url is not None:
            raise ValueError(
                "mode='native' does not work through a gateway: its journal would live here "
                "and the kernel's checkpoints on the gateway's host, and the kernelspec there, "
                "not the backend, decides whether the kernel adds the code-mode notice; use "
                "mode='code' with a gateway (see the KernelBackend docstring)"
            )
        if max_output_chars < 100:
            raise ValueError(f"max_output_chars must be at least 100, not {max_output_chars}")
        self.mode = mode
        #: How the backend starts and reaches its kernel.
        self.transport = transport
        self.session_id = sanitize(session_id) if session_id else f"s{secrets.token_hex(4)}"
        self.root: Path | None
        #: This session's checkpoint directory, as the kernel sees it.
        self.session_dir: Path | None
        if transport.url is None:
            # Absolute, because the kernel resolves a relative root against its own cwd.
            self.root = Path(root if root is not None else default_root()).expanduser().absolute()
            self.session_dir = self.root / self.session_id
        else:
            self.root = Path(root) if root is not None else None  # on the kernel's host
            self.session_dir = None  # the kernel says where, in start()
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
        self._code = CodeSession(self.run_code)
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
        self._made_session_dir = transport.url is not None  # a remote kernel removes its own

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._running else "not started"
        where = f" via {self.gateway_url}" if self.gateway_url else ""
        return f"<KernelBackend {self.kernel_name}{where} {self.session_dir} ({state})>"

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
    def native(self) -> NativeTools | None:
        """Native mode: the tool registry and journal, made by ``start()`` (None before, and
        always None in code mode). Add the loop's own tools with ``kb.native.register``."""
        return self._native.tools if self._native is not None else None

    @property
    def kernel_session_dir(self) -> Path | None:
        """Where the kernel keeps its checkpoints: ``session_dir`` itself in code mode; in
        native mode ``<session_dir>/kernel/<session_id>``, apart from the tool-call journal."""
        if self.session_dir is None or self.mode != "native":
            return self.session_dir
        return self.session_dir / NATIVE_KERNEL_DIR / self.session_id

    # -- the model's side: prompt, tools, tool calls ------------------------------------------

    def system_prompt(self) -> str:
        """The static prompt section for this session; byte-identical for its whole life."""
        if self.session_dir is None:
            raise BackendError(
                "the session directory is on the kernel's host behind the gateway: call "
                "start() (or use `async with`) before system_prompt()"
            )
        return prompt_section(self.mode, self.session_dir, tools=self._code.host_tools.catalog())

    def register_tool(
        self, function: F, name: str | None = None, description: str | None = None
    ) -> F:
        """Let programs call ``function`` as ``await tools.<name>(...)``; returns it unchanged.

        Before or after ``start()``: every later program can call it. A sync function runs
        in a worker thread, an async one on the backend's loop; both take JSON keyword
        arguments and return JSON. ``name`` defaults to its ``__name__``, ``description``
        to its docstring's first paragraph; the schema comes from its type hints. The
        prompt section and ``run_code``'s description name the tools registered so far.
        TypeError or ValueError when it cannot be a tool (see ``HostTools.register``).
        """
        self._check_code_mode()
        self._code.register(function, name, description)
        return function

    def add_tool(self, tool: HostTool) -> None:
        """Let programs call ``tool`` as ``await tools.<tool.name>(...)``: a tool described by
        a JSON schema instead of a Python signature (``ptc_retry.mcp.upstream`` makes one
        for each tool of an upstream MCP server). Otherwise as ``register_tool``.
        """
        self._check_code_mode()
        self._code.add(tool)

    def _check_code_mode(self) -> None:
        if self.mode == "native":
            raise ValueError(
                "tools in programs need mode='code'; in native mode the model calls a "
                "function directly: register it on kb.native"
            )

    def tool_schemas(self, format: str = "openai") -> list[dict[str, Any]]:
        """Every tool's definition, to pass as the model's ``tools``.

        ``format``: ``"openai"`` (``{"type": "function", "function": {...}}``) or
        ``"anthropic"`` (``{"name", "description", "input_schema"}``). In native mode:
        ``run_code``, any tool registered on ``kb.native``, then ``editPreviousToolCalling``.
        """
        if self.native is not None:
            return self.native.definitions(format)
        if self.mode == "native":  # before start(): no journal yet, the same definitions
            return native_definitions(format)
        return self._code.schemas(format)

    def tool_schema(self, format: str = "openai", name: str = RUN_CODE) -> dict[str, Any]:
        """One tool's definition (default ``run_code``), in the given ``format``."""
        schemas = self.tool_schemas(format)
        names = [schema.get("name", schema.get("function", {}).get("name")) for schema in schemas]
        if name not in names:
            raise ValueError(f"no tool {name!r}; this backend offers {', '.join(names)}")
        return schemas[names.index(name)]

    async def handle_tool_call(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any],
        call_id: str | None = None,
        *,
        turn: int | None = None,
        step: int | None = None,
        timeout: float | None = None,
    ) -> str:
        """Run one tool call of the model and return the text the model reads next.

        ``raw_arguments`` is the arguments string exactly as the model sent it (it becomes
        the checkpoint byte for byte); an already decoded mapping (Anthropic's ``input``) is
        accepted and saved as its JSON. An unknown tool or malformed arguments give an error
        text that says what to send instead, and never reach the kernel. Raises BackendError
        only when the kernel is not running or cannot be restarted, or its gateway cannot be
        reached (GatewayError): nothing the model can fix.

        Native mode: every call, also a malformed one or one of an unknown tool, goes to
        ``kb.native`` and is journaled (its refusal text is the journal's); ``name`` may be
        ``editPreviousToolCalling``. Calls with the same ``step`` are one model message (see
        ``next_step``); ``turn``, ``step`` and ``timeout`` also apply to the program an edit
        re-runs.
        """
        self.last_result = None  # a call refused below ran nothing: no result of its own
        options = CallOptions(turn, step, timeout)
        if isinstance(raw_arguments, (bytes, bytearray)):
            try:
                raw_arguments = bytes(raw_arguments).decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"Error: the arguments of {name} are not UTF-8 ({exc}). Nothing ran."
        if self.mode == "native":
            if not isinstance(raw_arguments, (str, Mapping)):
                return (
                    f"Error: the arguments of {name} must be a JSON object, not "
                    f"{type(raw_arguments).__name__}. Nothing ran."
                )
            if self._native is None or not self._running:
                raise BackendError(_NOT_RUNNING)
            check_timeout(timeout)
            result, error = await self._native.invoke(
                name,
                raw_arguments,
                call_id,
                turn=self.turn if turn is None else turn,
                options=options,
            )
            self.last_tool_result = result
            if error is not None:  # the kernel is gone and cannot restart: raise it
                raise error
            return result.text
        return await self._code.invoke(name, raw_arguments, call_id, options)

    async def handle_partial_tool_call(
        self,
        name: str,
        partial_raw_arguments: str,
        call_id: str | None = None,
        *,
        turn: int | None = None,
        step: int | None = None,
    ) -> str:
        """Save a tool call whose arguments stopped part-way and return the text the model
        reads: where the saved part ends, and the call that sends only the rest.

        ``partial_raw_arguments`` is the arguments string exactly as far as it arrived (an
        output-token limit, a dropped stream); the cut may fall anywhere. Code mode saves
        the longest decodable start of its ``"code"`` (and the arguments as they arrived,
        beside it) and runs nothing; ``await ptc_retry.extend("#n", "<rest>")`` then runs
        the whole program. When ``"code"`` arrived whole (the cut fell in a later key, or
        before the final ``}``), the program runs as an ordinary call and the text starts
        with one line naming what was cut. When not even the start of ``"code"`` arrived,
        nothing is saved and the text says to send the call again. Native mode: see
        ``NativeTools.call_partial``.

        Bytes are taken as UTF-8 up to a character the cut split (it is left out, so the
        saved arguments are the bytes that arrived without it); bytes that are not UTF-8
        before that, or a str holding a lone surrogate, get a text asking for the whole call.
        """
        self.last_result = None
        if isinstance(partial_raw_arguments, (bytes, bytearray)):
            try:
                decoder = codecs.getincrementaldecoder("utf-8")()
                partial_raw_arguments = decoder.decode(bytes(partial_raw_arguments), final=False)
            except UnicodeDecodeError as exc:
                return f"Error: the arguments of {name} are not UTF-8 ({exc}). {_SEND_AGAIN}"
        if not isinstance(partial_raw_arguments, str):
            raise TypeError(
                "partial_raw_arguments must be the str that arrived, not "
                f"{type(partial_raw_arguments).__name__}"
            )
        try:
            require_utf8(partial_raw_arguments, f"the arguments of {name}")
        except ValueError as exc:
            return f"Error: {exc}. {_SEND_AGAIN}"
        options = CallOptions(self.turn if turn is None else turn, step, None)
        if self.mode == "native":
            if self._native is None or not self._running:
                raise BackendError(_NOT_RUNNING)
            result, error = await self._native.invoke_partial(
                name, partial_raw_arguments, call_id, options
            )
            self.last_tool_result = result
            if error is not None:  # the kernel is gone and cannot restart: raise it
                raise error
            return result.text
        return await self._code.invoke_partial(name, partial_raw_arguments, call_id, options)

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
        if self.mode == "native" and self._native is None:
            # The journal first: it makes the session directory (0700) the kernel's store
            # goes in, which would otherwise come out of makedirs with the umask's mode.
            assert self.root is not None and self.session_dir is not None
            self._native = NativeSession(
                self.root, self.session_id, self.session_dir, self.run_code
            )
        if kernel_dir is not None:
            check_checkpoints(kernel_dir, self.session_id)
        root = kernel_dir.parent if kernel_dir is not None else self.root
        options = KERNEL_OPTIONS if self.mode == "native" else ()
        session_dir = await self.transport.start(KernelSetup(self.session_id, root, options))
        try:
            await self._stdin_connected()
        except BaseException:
            await self.transport.shutdown(None)
            raise
        if self.session_dir is None:
            self.session_dir = session_dir  # as the remote kernel said
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
            raise BackendError(_NOT_RUNNING)
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
            if self._new_instruction:
                request["new_instruction"] = True
                self._new_instruction = False
            settings = ExecutionSettings(
                self.max_output_chars,
                self.time_limit_margin,
                self.interrupt_grace,
                checkpoints=self.kernel_session_dir,
                resume_hint=self.mode == "code",  # native mode: the journal's notice follows
                tools=self._code.host_tools,
                late_results=self._code.late_results,
            )
            restart, closing = self._restart, lambda: self._closing
            execution = Execution(
                self.transport, code, request, timeout, settings, restart=restart, closing=closing
            )
            self._execution = execution
            try:
                self.last_result = await execution.run()
            finally:
                self._execution = None
            return self.last_result

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
            raise BackendError(_NOT_RUNNING)
        async with self._lock:
            await self._restart()

    async def _restart(self) -> None:
        if not self._running:
            raise BackendError(_NOT_RUNNING)
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
    handle_tool_call_sync = run_sync(handle_tool_call)
    handle_partial_tool_call_sync = run_sync(handle_partial_tool_call)
    restart_sync = run_sync(restart)
    shutdown_sync = run_sync(shutdown)

    def __enter__(self) -> KernelBackend:
        self.start_sync()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown_sync()
