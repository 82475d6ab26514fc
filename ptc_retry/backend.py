"""The agent backend: one Jupyter kernel, and the text a model reads after each ``run_code``.

An agent loop adopts ptc-retry in three lines::

    async with KernelBackend() as kb:                      # starts the ptc-retry kernel
        system = base_prompt + kb.system_prompt()          # where programs are saved, how to replay
        tools = kb.tool_schemas("openai")                  # or "anthropic"
        ...
        text = await kb.handle_tool_call(call.name, call.arguments, call.id)

``handle_tool_call`` parses the model's raw arguments, refuses malformed ones with a
clear text (they never reach the kernel), runs the program with
``metadata["ptc_retry"]`` (the model's call id and its raw arguments, so the
checkpoint is byte for byte what the model sent) and returns what the model
should read: the output, the value, the traceback with its replay notice, and a
sentence when the program timed out or killed the kernel.

What the model reads (``RunResult.text``): stdout and stderr as printed, each
``execute_result`` and ``display_data`` as its ``text/plain`` (images, audio, PDFs
as a placeholder such as ``[image/png output, 12.3 kB]``), the traceback without
ANSI codes (its last line is the kernel's notice), all cut to ``max_output_chars``
by keeping the head and the tail around ``[... 12,345 characters cut ...]``; then
the backend's own sentence when a call timed out or the kernel died. Capture is
bounded while it runs: a program that prints 50 MB leaves the backend holding the
head, a rolling tail and at most ``MAX_RAW_OUTPUT_CHARS`` of raw outputs.
``kb.last_result`` keeps the whole ``RunResult`` of the latest call.

Turns and steps. A turn is one instruction from a person: call ``kb.new_turn()``
when one arrives (it also lifts a paused repeated-failure guard). A step is one
model message: by default every call is a step of its own; when a model message
holds several tool calls (parallel calls), take one number with
``step = kb.next_step()`` and pass ``step=step`` to each of them, so
``previous/<n>.json`` numbers them in their order.

Timeouts and deaths. ``timeout`` (per call, else ``default_timeout``) is sent to
the kernel as ``time_limit`` so the kernel can stop its own program; the backend
keeps its own limit ``time_limit_margin`` seconds later as the last resort: it
interrupts the kernel, keeps what was printed, waits ``interrupt_grace`` seconds
and restarts the kernel if the interrupt did not free it. A kernel that dies
(``os._exit``, a segfault, an out-of-memory kill) is noticed within about half a
second, restarted in the same session directory, and the result says that state
was lost and that the program is saved and can be replayed.

Other kernels. ``kernel_name="python3"`` (any IPython kernel where ptc_retry is
importable) gets the extension through its argv (``--ext=ptc_retry``). Such a
kernel sends no ``metadata["ptc_retry"]`` in its replies, so the result's
``metadata`` is None and its ``call_id``, ``checkpoint`` and ``notice`` are
derived from the id the backend sent and the notice line of the traceback.

Sync code uses the ``*_sync`` twins (``start_sync``, ``run_code_sync``,
``handle_tool_call_sync``, ``shutdown_sync``) and ``with KernelBackend() as kb:``;
they run the coroutine the way jupyter_client does (``jupyter_core.utils.run_sync``).
Use one style per backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import queue
import re
import secrets
import shutil
import signal
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from jupyter_core.utils import run_sync

from kernel_ext import KERNEL_NAME

from .errors import PtcRetryError
from .notice import prompt_section
from .store import default_root, sanitize

__all__ = [
    "STATUSES",
    "BackendError",
    "KernelBackend",
    "KernelStartError",
    "RunResult",
    "Tool",
]

#: The statuses of a ``RunResult``.
STATUSES = ("ok", "error", "timeout", "died", "refused")

PTC_KERNEL = KERNEL_NAME
RUN_CODE = "run_code"
#: How often a waiting call checks that the kernel process is still alive (seconds).
POLL_INTERVAL = 0.5
#: Raw outputs kept in ``RunResult.outputs``: characters of text and encoded data, and count.
MAX_RAW_OUTPUT_CHARS = 1_000_000
MAX_RAW_OUTPUTS = 1_000

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_NOTICE = re.compile(
    r'\[ptc-retry\] (?:.*? )?Program saved as checkpoint "(?P<id>[^"]+)" \((?P<path>.+?)\)\.'
)
_BINARY_TYPES = ("image/", "audio/", "video/", "application/pdf", "application/octet-stream")


class BackendError(PtcRetryError):
    """The backend cannot do what was asked (not started, shut down, restart failed)."""


class KernelStartError(BackendError):
    """The kernel could not be started (unknown kernel name, crash at startup, no reply)."""


@dataclass
class RunResult:
    """What one ``run_code`` gave back. ``text`` is what the model should read."""

    status: str  # one of STATUSES
    text: str
    value: str | None = None  # text/plain of the execute_result
    call_id: str | None = None  # the checkpoint id the kernel used
    checkpoint: str | None = None  # path of by-id/<call_id>.json, as the kernel sees it
    notice: str | None = None  # the kernel's failure notice (also the traceback's last line)
    metadata: dict[str, Any] | None = None  # the reply's metadata["ptc_retry"]
    outputs: list[dict[str, Any]] = field(default_factory=list)  # nbformat v4 outputs, bounded
    ename: str | None = None
    evalue: str | None = None
    execution_count: int | None = None
    duration: float = 0.0  # seconds, from sending the request to the result
    output_chars: int = 0  # characters the outputs came to, before truncation
    truncated: bool = False  # text (or outputs) lost their middle to the size limits
    restarted: bool = False  # the kernel was restarted during this call: its state is gone

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Tool:
    """A tool the backend offers the model: its definition and what runs it."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    # (arguments decoded, raw arguments string, call id, options) -> text for the model
    handler: Callable[[dict[str, Any], str, str | None, dict[str, Any]], Awaitable[str]]

    def schema(self, format: str = "openai") -> dict[str, Any]:
        """The definition in a function-calling format: ``"openai"`` or ``"anthropic"``."""
        parameters = copy.deepcopy(self.parameters)  # callers may edit theirs freely
        if format == "openai":
            return {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": parameters,
                },
            }
        if format == "anthropic":
            return {
                "name": self.name,
                "description": self.description,
                "input_schema": parameters,
            }
        raise ValueError(f"unknown tool schema format {format!r}; use 'openai' or 'anthropic'")


RUN_CODE_DESCRIPTION = (
    "Run a Python program in a persistent Jupyter kernel: variables, imports and "
    "definitions stay for later calls, and top-level await works. Returns what the program "
    "printed, the value of its last expression, or the error with its traceback. A failed "
    "program is saved; the error names its checkpoint so a small fix can be sent as one line "
    "with ptc_retry.replay."
)
RUN_CODE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python program to run."}},
    "required": ["code"],
    "additionalProperties": False,
}


class KernelBackend:
    """One kernel that runs a model's programs, with checkpoints and replay.

    ``mode``: ``"code"`` (the model writes programs; the only mode available yet).
    ``kernel_name``: ``"ptc-retry"`` (works without an installed kernelspec) or another
    IPython kernel, which gets ``--ext=ptc_retry``. ``root``: the checkpoint root (default
    ``$PTC_RETRY_ROOT``, else ``<tempdir>/ptc-retry-<uid>``). ``session_id``: the session
    directory's name (default a fresh short id); the session directory is
    ``<root>/<session_id>`` and ``shutdown()`` removes it unless ``keep=True``. ``cwd``: the
    kernel's working directory. ``env``: variables added to this process's environment for
    the kernel (``root`` and ``session_id`` win over ``PTC_RETRY_ROOT``/``PTC_RETRY_SESSION``
    there). ``extra_arguments``: appended to the kernel's argv. ``max_output_chars``: the size
    of the text the model reads; longer output keeps its head and tail. ``default_timeout``:
    seconds a call may run when it gives no ``timeout`` (None: no limit).
    ``startup_timeout``: seconds to wait for the kernel to answer after (re)starting.
    ``interrupt_grace``: seconds an interrupted program gets to stop before the kernel is
    restarted. ``time_limit_margin``: how much later than the kernel's own time limit the
    backend interrupts.
    """

    def __init__(
        self,
        mode: str = "code",
        *,
        kernel_name: str = PTC_KERNEL,
        root: str | os.PathLike[str] | None = None,
        session_id: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        extra_arguments: Sequence[str] = (),
        max_output_chars: int = 20_000,
        default_timeout: float | None = None,
        startup_timeout: float = 60,
        interrupt_grace: float = 5.0,
        time_limit_margin: float = 1.0,
    ) -> None:
        if mode != "code":
            raise ValueError(
                f"mode {mode!r} is not available yet: native mode comes with the "
                "editPreviousToolCalling tool; use mode='code'"
            )
        if max_output_chars < 100:
            raise ValueError(f"max_output_chars must be at least 100, not {max_output_chars}")
        self.mode = mode
        self.kernel_name = kernel_name
        # Absolute, because the kernel resolves a relative root against its own cwd.
        self.root = Path(root if root is not None else default_root()).expanduser().absolute()
        self.session_id = sanitize(session_id) if session_id else f"s{secrets.token_hex(4)}"
        self.session_dir = self.root / self.session_id
        self.cwd = cwd
        self.env = dict(env or {})
        self.extra_arguments = list(extra_arguments)
        self.max_output_chars = max_output_chars
        self.default_timeout = default_timeout
        self.startup_timeout = startup_timeout
        self.interrupt_grace = interrupt_grace
        self.time_limit_margin = time_limit_margin
        #: The turn the next calls belong to; ``new_turn()`` advances it.
        self.turn = 0
        self.kernel_manager: Any = None  # jupyter_client AsyncKernelManager, once started
        self.kernel_client: Any = None  # its AsyncKernelClient
        #: The result of the latest ``run_code`` (also through ``handle_tool_call``), for a
        #: loop that wants its status, metadata or outputs besides the text.
        self.last_result: RunResult | None = None
        self._tools = self._build_tools()
        self._step = 0
        self._new_instruction = False
        self._sent_ids: set[str] = set()
        self._next_id = 1
        self._lock: asyncio.Lock | None = None
        self._closing = False
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self.kernel_client else "not started"
        return f"<KernelBackend {self.kernel_name} {self.session_dir} ({state})>"

    # -- the model's side: prompt, tools, tool calls ------------------------------------------

    def system_prompt(self) -> str:
        """The static prompt section for this session; byte-identical for its whole life."""
        return prompt_section(self.mode, session_dir=self.session_dir)

    def _build_tools(self) -> dict[str, Tool]:
        """The tools offered to the model, by name. Native mode adds its tool here."""
        run_code = Tool(RUN_CODE, RUN_CODE_DESCRIPTION, RUN_CODE_PARAMETERS, self._run_code_tool)
        return {run_code.name: run_code}

    def tool_schemas(self, format: str = "openai") -> list[dict[str, Any]]:
        """Every tool's definition, to pass as the model's ``tools``.

        ``format``: ``"openai"`` (``{"type": "function", "function": {...}}``) or
        ``"anthropic"`` (``{"name", "description", "input_schema"}``).
        """
        return [tool.schema(format) for tool in self._tools.values()]

    def tool_schema(self, format: str = "openai", name: str = RUN_CODE) -> dict[str, Any]:
        """One tool's definition (default ``run_code``), in the given ``format``."""
        if name not in self._tools:
            raise ValueError(f"no tool {name!r}; this backend offers {', '.join(self._tools)}")
        return self._tools[name].schema(format)

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
        only when the kernel is not running or cannot be restarted: nothing the model can fix.
        """
        tool = self._tools.get(name)
        if tool is None:
            offered = ", ".join(self._tools)
            return f"Error: there is no tool named {name!r}; the tools are: {offered}. Nothing ran."
        if isinstance(raw_arguments, (bytes, bytearray)):
            try:
                raw_arguments = bytes(raw_arguments).decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"Error: the arguments of {name} are not UTF-8 ({exc}). Nothing ran."
        if isinstance(raw_arguments, Mapping):
            arguments = dict(raw_arguments)
            raw = json.dumps(arguments, ensure_ascii=False)
        else:
            raw = raw_arguments
            try:
                arguments = json.loads(raw)
            except (TypeError, ValueError) as exc:
                return (
                    f"Error: the arguments of {name} are not valid JSON ({exc}). Send a JSON "
                    f'object such as {{"code": "print(1)"}}. Nothing ran.'
                )
            if not isinstance(arguments, dict):
                return (
                    f"Error: the arguments of {name} must be a JSON object such as "
                    f'{{"code": "print(1)"}}, not {_json_kind(arguments)}. Nothing ran.'
                )
        options = {"turn": turn, "step": step, "timeout": timeout}
        return await tool.handler(arguments, raw, call_id, options)

    async def _run_code_tool(
        self, arguments: dict[str, Any], raw: str, call_id: str | None, options: dict[str, Any]
    ) -> str:
        problem = _run_code_problem(arguments)
        if problem is not None:
            return f"Error: {problem} Nothing ran."
        result = await self.run_code(arguments["code"], call_id=call_id, arguments=raw, **options)
        return result.text

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
        """A fresh step number; pass it as ``step=`` to every call of one model message."""
        self._step += 1
        return self._step

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> KernelBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def start(self) -> None:
        """Start the kernel and wait until it answers; KernelStartError if it cannot."""
        if self._closed:
            raise BackendError("this backend was shut down; create a new KernelBackend")
        if self.kernel_manager is not None:
            return
        self._lock = asyncio.Lock()
        from jupyter_client.kernelspec import NoSuchKernel
        from jupyter_client.manager import AsyncKernelManager

        from kernel_ext.kernelspec import kernel_spec_manager

        specs = kernel_spec_manager()
        manager = AsyncKernelManager(kernel_name=self.kernel_name, kernel_spec_manager=specs)
        launch: dict[str, Any] = {"env": self._kernel_env(), "extra_arguments": self._argv()}
        if self.cwd is not None:
            launch["cwd"] = os.fspath(self.cwd)
        try:
            await manager.start_kernel(**launch)
        except NoSuchKernel:
            names = ", ".join(sorted({PTC_KERNEL, *specs.find_kernel_specs()}))
            raise KernelStartError(
                f"no kernel named {self.kernel_name!r}; the kernels here are: {names}"
            ) from None
        except Exception as exc:
            raise KernelStartError(
                f"could not start the {self.kernel_name!r} kernel: {exc}"
            ) from exc
        client = manager.client()
        client.start_channels()
        self.kernel_manager, self.kernel_client = manager, client
        try:
            await client.wait_for_ready(timeout=self.startup_timeout)
        except Exception as exc:
            await self._stop_kernel()
            raise KernelStartError(self._start_failure(exc)) from exc

    def _kernel_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env["PTC_RETRY_ROOT"] = str(self.root)
        env["PTC_RETRY_SESSION"] = self.session_id
        return env

    def _argv(self) -> list[str]:
        if self.kernel_name == PTC_KERNEL:
            return list(self.extra_arguments)
        # Fail at startup, loudly, rather than run without checkpoints.
        ext = ["--ext=ptc_retry", "--IPKernelApp.reraise_ipython_extension_failures=True"]
        return ext + self.extra_arguments

    def _start_failure(self, exc: BaseException) -> str:
        hint = ""
        if self.kernel_name != PTC_KERNEL:
            hint = (
                f" (the {self.kernel_name!r} kernel must be an IPython kernel whose Python can "
                "import ptc_retry)"
            )
        return (
            f"the {self.kernel_name!r} kernel did not answer within {self.startup_timeout:g} s "
            f"after starting: {exc}{hint}"
        )

    async def shutdown(self, keep: bool = False) -> None:
        """Stop the kernel and remove this session's checkpoint directory unless ``keep``.

        Idempotent: the first call decides ``keep``. A call that is running when shutdown
        begins ends within about half a second with BackendError.
        """
        if self._closed:
            return
        self._closing = True
        try:
            if self._lock is not None:
                async with self._lock:
                    await self._stop_kernel()
            else:
                await self._stop_kernel()
        finally:
            self._closed = True
            if not keep:
                _remove_session_dir(self.session_dir)

    async def _stop_kernel(self) -> None:
        client, manager = self.kernel_client, self.kernel_manager
        self.kernel_client = self.kernel_manager = None
        if client is not None:
            client.stop_channels()
        if manager is not None and manager.has_kernel:
            await manager.shutdown_kernel(now=False)

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
    ) -> RunResult:
        """Run ``code`` as one execute_request and return what it gave.

        ``call_id``: the model's tool-call id (default ``c<N>``, chosen by the backend).
        ``arguments``: the raw arguments string the model sent, saved byte for byte when its
        ``"code"`` is ``code``. ``turn``: default ``self.turn``. ``step``: default a step of
        its own (see ``next_step``). ``timeout``: seconds, default ``default_timeout``.
        Calls on one backend run one at a time, in the order they were made.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        _require_utf8(code, "code")
        if arguments is not None:
            _require_utf8(arguments, "arguments")
        if self._lock is None or self.kernel_client is None:
            raise BackendError("the kernel is not running; call start() or use `async with`")
        if timeout is None:
            timeout = self.default_timeout
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
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
        if timeout is not None:
            request["time_limit"] = timeout
        async with self._lock:
            if self._closing:
                raise BackendError("the backend is shutting down; nothing ran")
            if self._new_instruction:
                request["new_instruction"] = True
                self._new_instruction = False
            self.last_result = await self._run(code, request, timeout)
            return self.last_result

    def _fresh_id(self) -> str:
        while f"c{self._next_id}" in self._sent_ids:
            self._next_id += 1
        return f"c{self._next_id}"

    async def _run(self, code: str, request: dict[str, Any], timeout: float | None) -> RunResult:
        notes: list[str] = []
        restarted = False
        if not await self.kernel_manager.is_alive():
            how = await self._exit_description()
            await self._restart()
            notes.append(
                f"[ptc-retry] The kernel had died since the last call ({how}) and was restarted "
                "before this program ran: earlier variables, imports and definitions are lost."
            )
            restarted = True
        execution = _Execution(self, code, request, timeout)
        result = await execution.run()
        result.text = _join_notes(notes + [result.text]) if notes else result.text
        result.restarted = result.restarted or restarted
        return result

    async def _restart(self) -> None:
        try:
            await self.kernel_manager.restart_kernel(now=True)
            await self.kernel_client.wait_for_ready(timeout=self.startup_timeout)
        except Exception as exc:
            raise BackendError(
                f"the {self.kernel_name!r} kernel could not be restarted ({exc}); "
                "shut this backend down and start a new one"
            ) from exc

    async def _exit_description(self) -> str:
        code = None
        with contextlib.suppress(Exception):
            code = await self.kernel_manager.provisioner.poll()
        if isinstance(code, int) and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason = ", e.g. out of memory or killed from outside" if -code == 9 else ""
            return f"killed by {name}{reason}"
        if isinstance(code, int):
            return f"exit code {code}"
        return "it stopped responding"

    # -- sync twins ---------------------------------------------------------------------------

    start_sync = run_sync(start)
    run_code_sync = run_sync(run_code)
    handle_tool_call_sync = run_sync(handle_tool_call)
    shutdown_sync = run_sync(shutdown)

    def __enter__(self) -> KernelBackend:
        self.start_sync()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown_sync()


class _Execution:
    """One execute_request: send it, collect its outputs and reply, watch time and the kernel."""

    def __init__(
        self, backend: KernelBackend, code: str, request: dict[str, Any], timeout: float | None
    ) -> None:
        self.backend = backend
        self.code = code
        self.request = request
        self.timeout = timeout
        self.capture = _Capture(backend.max_output_chars, MAX_RAW_OUTPUT_CHARS)
        self.reply: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.value: str | None = None
        self.interrupted = False
        self.notes: list[str] = []
        self.status: str | None = None  # set when the backend decides it (timeout, died)
        self.restarted = False
        self.msg_id: str | None = None

    async def run(self) -> RunResult:
        backend = self.backend
        client, manager = backend.kernel_client, backend.kernel_manager
        content = {
            "code": self.code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = client.session.msg("execute_request", content, metadata={"ptc_retry": self.request})
        msg_id = self.msg_id = msg["header"]["msg_id"]
        started = time.monotonic()
        limit = None if self.timeout is None else self.timeout + backend.time_limit_margin
        stop_at = None if limit is None else started + limit
        give_up_at: float | None = None
        idle = False
        try:
            client.shell_channel.send(msg)
            while not (idle and self.reply is not None):
                if backend._closing:
                    raise BackendError("the backend was shut down while this program ran")
                now = time.monotonic()
                if stop_at is not None and now >= stop_at and not self.interrupted:
                    self.interrupted = True
                    give_up_at = now + backend.interrupt_grace
                    with contextlib.suppress(Exception):
                        await manager.interrupt_kernel()
                if give_up_at is not None and now >= give_up_at:
                    await self._restart_after_timeout()
                    break
                deadlines = [d for d in (stop_at, give_up_at) if d is not None and d > now]
                wait = min([POLL_INTERVAL, *(d - now for d in deadlines)])
                try:
                    if not idle:
                        message = await client.get_iopub_msg(timeout=wait)
                    else:
                        message = await client.get_shell_msg(timeout=wait)
                except queue.Empty:
                    if not await manager.is_alive():
                        await self._restart_after_death()
                        break
                    if not idle and await self._reply_waiting(msg_id):
                        break  # iopub dropped its idle status (a flood): the reply is enough
                    continue
                if message["parent_header"].get("msg_id") != msg_id:
                    continue  # left over from an earlier request, or kernel_info traffic
                if idle:
                    if message["msg_type"] == "execute_reply":
                        self.reply = message
                elif message["msg_type"] == "status":
                    idle = message["content"].get("execution_state") == "idle"
                else:
                    self._output(message["msg_type"], message["content"])
        except asyncio.CancelledError:
            # The caller gave up: stop the program too, so the kernel is free for the next call.
            with contextlib.suppress(Exception):
                await manager.interrupt_kernel()
            raise
        return self._result(time.monotonic() - started)

    async def _reply_waiting(self, msg_id: str) -> bool:
        """Whether the reply is in, read without waiting: after a pause on iopub, it ends
        the call even if the kernel's idle status was lost (zmq drops messages that overflow
        a subscriber's queue when a program floods its output)."""
        while True:
            try:
                message = await self.backend.kernel_client.get_shell_msg(timeout=0)
            except queue.Empty:
                return False
            if message["parent_header"].get("msg_id") == msg_id:
                self.reply = message
                return message["msg_type"] == "execute_reply"

    def _output(self, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type == "error":
            self.error = content
        elif msg_type == "execute_result":
            plain = content.get("data", {}).get("text/plain")
            self.value = plain if isinstance(plain, str) else None
        self.capture.add(msg_type, content)

    async def _restart_after_death(self) -> None:
        backend = self.backend
        await self._drain()
        how = await backend._exit_description()
        await backend._restart()
        call_id, path = self._checkpoint()
        self.status, self.restarted = "died", True
        self.notes.append(
            f"[ptc-retry] The kernel died while running this program ({how}) and was "
            "restarted: all variables, imports and definitions are lost. The program is saved "
            f'as checkpoint "{call_id}" ({path}); to run it again with a fix, send only: '
            f'await ptc_retry.replay("{call_id}", "<old text>", "<new text>")'
        )

    async def _restart_after_timeout(self) -> None:
        backend = self.backend
        await self._drain()
        await backend._restart()
        call_id, path = self._checkpoint()
        self.status, self.restarted = "timeout", True
        self.notes.append(
            f"[ptc-retry] Stopped after {self.timeout:g} s (the time limit of this call). It "
            f"did not stop within {backend.interrupt_grace:g} s of the interrupt, so the kernel "
            "was restarted: all variables, imports and definitions are lost. The program is "
            f'saved as checkpoint "{call_id}" ({path}).'
        )

    async def _drain(self) -> None:
        """Outputs that arrived before the kernel died or was restarted: keep them."""
        client = self.backend.kernel_client
        while True:
            try:
                message = await client.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                return
            if message["parent_header"].get("msg_id") != self.msg_id:
                continue
            if message["msg_type"] not in ("status", "execute_input"):
                self._output(message["msg_type"], message["content"])

    def _checkpoint(self) -> tuple[str, str]:
        """The id and path the kernel saved this program under, as far as the backend knows."""
        call_id = sanitize(self.request["call_id"])
        return call_id, str(self.backend.session_dir / "by-id" / f"{call_id}.json")

    def _result(self, duration: float) -> RunResult:
        reply_content = self.reply["content"] if self.reply is not None else {}
        metadata = None
        if self.reply is not None:
            found = self.reply.get("metadata", {}).get("ptc_retry")
            metadata = found if isinstance(found, dict) else None
        error = self.error
        if error is None and reply_content.get("status") == "error":
            error = reply_content
        notice, call_id, checkpoint = self._facts(metadata, error)
        status = self.status or self._status(reply_content, metadata, error, duration)
        said = notice is not None and "time limit" in notice  # the kernel stopped it and said so
        if status == "timeout" and not self.restarted and not said:
            self.notes.append(
                f"[ptc-retry] Stopped after {self.timeout:g} s (the time limit of this call). "
                "The output above is what it printed until then; the kernel kept its variables."
            )
        if reply_content.get("status") == "aborted":
            self.notes.append("[ptc-retry] The kernel aborted this program before it ran.")
        body = self.capture.text()
        return RunResult(
            status=status,
            text=_join_notes([body, *self.notes]) or "[no output]",
            value=self.value,
            call_id=call_id,
            checkpoint=checkpoint,
            notice=notice,
            metadata=metadata,
            outputs=self.capture.outputs,
            ename=error.get("ename") if error else None,
            evalue=error.get("evalue") if error else None,
            execution_count=reply_content.get("execution_count"),
            duration=duration,
            output_chars=self.capture.total,
            truncated=self.capture.truncated,
            restarted=self.restarted,
        )

    def _facts(
        self, metadata: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> tuple[str | None, str, str]:
        """(notice, call id, checkpoint): from the reply metadata, else derived."""
        call_id, checkpoint = self._checkpoint()
        if metadata is not None:
            notice = metadata.get("notice")
            return (
                notice if isinstance(notice, str) else None,
                metadata.get("call_id") or call_id,
                metadata.get("checkpoint") or checkpoint,
            )
        # A kernel without ptc-retry's reply metadata: the notice is the traceback's last line.
        lines = (error or {}).get("traceback") or []
        last = _ANSI.sub("", lines[-1]) if lines else ""
        match = _NOTICE.search(last)
        if match is None:
            return None, call_id, checkpoint
        return last, match.group("id"), match.group("path")

    def _status(
        self,
        reply: dict[str, Any],
        metadata: dict[str, Any] | None,
        error: dict[str, Any] | None,
        duration: float,
    ) -> str:
        kernel_status = (metadata or {}).get("status")
        ename = (error or {}).get("ename")
        if kernel_status == "refused" or ename == "RetryGuardPaused":
            return "refused"
        if reply.get("status") == "ok":
            return "ok"
        if self.interrupted:
            return "timeout"
        limit = self.request.get("time_limit")
        stopped_by = (metadata or {}).get("time_limit")
        # The kernel's own time limit ended it: the reply says so (time_limit: the seconds
        # that stopped it), or the program was interrupted after running for the limit.
        if limit is not None and (
            isinstance(stopped_by, (int, float))
            or (kernel_status == "interrupted" and duration >= limit)
        ):
            return "timeout"
        return "error"


class _Capture:
    """The outputs of one execution, bounded however much the program prints.

    The model's text keeps its first ``max_chars // 2`` characters and a rolling tail of
    the rest; the raw outputs (nbformat v4 dicts, consecutive streams merged) stop growing
    after ``max_raw`` characters or ``MAX_RAW_OUTPUTS`` outputs (an error is always kept).
    So the memory held does not grow with the output; only the one message being read is
    held whole while it is decoded, and its size is the kernel's choice.
    """

    def __init__(self, max_chars: int, max_raw: int) -> None:
        self.head_max = max_chars // 2
        self.tail_max = max_chars - self.head_max
        self.head: list[str] = []
        self.head_len = 0
        self.tail: list[str] = []
        self.tail_len = 0
        self.total = 0
        self.last = "\n"  # the last character added, so each rich output starts a line
        self.outputs: list[dict[str, Any]] = []
        self.max_raw = max_raw
        self.raw = 0
        self.raw_cut = False

    @property
    def truncated(self) -> bool:
        return self.raw_cut or self.total > self.head_max + self.tail_max

    def add(self, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type == "stream":
            text = content.get("text", "")
            self._text(text)
            self._raw_stream(content.get("name", "stdout"), text)
        elif msg_type in ("execute_result", "display_data"):
            data = content.get("data") or {}
            self._text(_bundle_text(data), line=True)
            output: dict[str, Any] = {
                "output_type": msg_type,
                "data": data,
                "metadata": content.get("metadata") or {},
            }
            if msg_type == "execute_result":
                output["execution_count"] = content.get("execution_count")
            self._raw(output, sum(_chars(value) for value in data.values()))
        elif msg_type == "error":
            traceback = content.get("traceback") or [
                f"{content.get('ename')}: {content.get('evalue')}"
            ]
            self._text("\n".join(traceback) + "\n", line=True)
            output = {
                "output_type": "error",
                "ename": content.get("ename", ""),
                "evalue": content.get("evalue", ""),
                "traceback": list(traceback),
            }
            self._raw(output, 0, always=True)  # what the program ended with

    def _text(self, text: str, *, line: bool = False) -> None:
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        if line and self.last != "\n":
            text = "\n" + text
        if not text:
            return
        self.total += len(text)
        self.last = text[-1]
        if self.head_len < self.head_max:
            part = text[: self.head_max - self.head_len]
            self.head.append(part)
            self.head_len += len(part)
            text = text[len(part) :]
            if not text:
                return
        if len(text) >= self.tail_max:  # one big piece: no need to copy it whole
            self.tail, self.tail_len = [text[-self.tail_max :]], self.tail_max
            return
        self.tail.append(text)
        self.tail_len += len(text)
        if self.tail_len > 2 * self.tail_max:  # compact now and then: amortised linear
            kept = "".join(self.tail)[-self.tail_max :]
            self.tail, self.tail_len = [kept], len(kept)

    def text(self) -> str:
        head = "".join(self.head)
        tail = "".join(self.tail)[-self.tail_max :] if self.tail else ""
        cut = self.total - len(head) - len(tail)
        if cut <= 0:
            return head + tail
        marker = f"\n[... {cut:,} characters cut ...]\n"
        return head + marker + tail

    def _raw_stream(self, name: str, text: str) -> None:
        room = self.max_raw - self.raw
        if room <= 0:
            self.raw_cut = self.raw_cut or bool(text)
            return
        part = text[:room]
        self.raw_cut = self.raw_cut or len(part) < len(text)
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += part
        elif len(self.outputs) < MAX_RAW_OUTPUTS:
            self.outputs.append({"output_type": "stream", "name": name, "text": part})
        else:
            self.raw_cut = True
            return
        self.raw += len(part)

    def _raw(self, output: dict[str, Any], size: int, *, always: bool = False) -> None:
        full = self.raw + size > self.max_raw or len(self.outputs) >= MAX_RAW_OUTPUTS
        if full and not always:
            self.raw_cut = True
            return
        self.raw += size
        self.outputs.append(output)


def _bundle_text(data: Mapping[str, Any]) -> str:
    """A display's text for the model: text/plain, and a placeholder for binary data."""
    parts = [_placeholder(mime, value) for mime, value in data.items() if _is_binary(mime)]
    plain = data.get("text/plain")
    if isinstance(plain, str):
        parts.append(plain)
    elif not parts and data:  # e.g. only text/html: say what there was
        mime = next(iter(data))
        parts.append(_placeholder(mime, data[mime]))
    return "\n".join(parts) + "\n" if parts else ""


def _is_binary(mime: str) -> bool:
    return mime.startswith(_BINARY_TYPES) and mime != "image/svg+xml"


def _placeholder(mime: str, value: Any) -> str:
    """``[image/png output, 12.3 kB]``: the size is that of the decoded data."""
    if _is_binary(mime) and isinstance(value, str):  # base64, possibly with line breaks
        chars = len(value) - value.count("\n")
        size = max(0, chars * 3 // 4 - value[-2:].count("="))
    elif isinstance(value, str):
        size = len(value.encode("utf-8", "surrogatepass"))
    else:
        size = _chars(value)
    return f"[{mime} output, {_human_size(size)}]"


def _chars(value: Any) -> int:
    """Characters a MIME value takes in memory (JSON values as their JSON text)."""
    return len(value) if isinstance(value, str) else len(json.dumps(value, default=str))


def _human_size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} kB"
    return f"{n / 1_000_000:.1f} MB"


def _join_notes(parts: list[str]) -> str:
    return "\n".join(part.rstrip("\n") for part in parts if part.strip())


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words."""
    kinds = {bool: "a boolean", dict: "an object", list: "an array", str: "a string"}
    for kind, word in kinds.items():
        if isinstance(value, kind):
            return word
    return "null" if value is None else "a number"


def _run_code_problem(arguments: dict[str, Any]) -> str | None:
    """What is wrong with run_code's decoded arguments, or None."""
    extra = sorted(set(arguments) - {"code"})
    if "code" not in arguments:
        got = f"; it got {', '.join(map(repr, extra))}" if extra else ""
        return f'run_code needs "code": a string holding the Python program{got}.'
    code = arguments["code"]
    if not isinstance(code, str):
        return f'"code" must be a string holding the Python program, not {_json_kind(code)}.'
    if extra:
        return f'run_code takes only "code"; remove {", ".join(map(repr, extra))}.'
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f'"code" holds a lone surrogate ({exc.reason} at index {exc.start}); fix the escape.'
    return None


def _require_utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} cannot be sent to the kernel: {exc.reason} at index {exc.start}"
        ) from None


def _remove_session_dir(path: Path) -> None:
    # The session directory is ours (we named it); never follow a symlink out of it.
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
