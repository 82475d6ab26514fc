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
``metadata`` is None and its ``call_id``, ``checkpoint``, ``reference`` and
``notice`` are derived from the id the backend sent and the notice of the traceback.
``extension=False`` starts such a kernel as it is, without ptc-retry (nothing is
saved, no notice): the stock baseline that ``ptc-retry eval`` compares against.

Remote kernels. ``KernelBackend(gateway_url="http://gateway:8888", token=...)`` does not
start a kernel: it asks a Jupyter Kernel Gateway (or Jupyter Server, or Enterprise
Gateway) for one (``ptc_retry.backend.gateway``) and returns the same ``RunResult``s. The kernel's
checkpoints stay on its host; ``session_dir`` is the path there, learned from the kernel
in ``start()``, and all the backend says about checkpoints comes from the replies.
Timeouts interrupt and deaths restart through the gateway's API; an unreachable gateway
or a wrong token raises GatewayError within seconds. What is transport lives behind
``KernelConnection`` (``LocalKernel`` here, ``GatewayKernel`` there); the rest is shared.

Native mode. ``KernelBackend(mode="native")`` is for a model that calls tools directly:
it offers ``run_code`` (the same kernel) plus ``editPreviousToolCalling``
(:mod:`ptc_retry.native`), and ``system_prompt()`` teaches that tool instead of the
helper. Every call, of either tool, goes through ``kb.native`` (a ``NativeTools``, made
by ``start()``): its journal saves the raw arguments byte for byte in ``session_dir``
before anything runs, a failed call of at least ``kb.native.notice_min_bytes`` (500) gets
the native notice, and an edit such as ``{"call_id": "call_7", "patch": [{"path": "code",
"old_string": "regoin", "new_string": "region"}]}`` runs the patched program in the same
kernel (earlier variables stay) under the edit call's own id, so a second fix patches the
patched program. The kernel keeps its own checkpoints in ``<session_dir>/kernel/<session>``
(``kernel_session_dir``), apart from the journal, so ``shutdown()`` removes both and
``keep=True`` keeps both. It is started with ``--PtcRetry.notice_min_bytes`` out of reach:
the model never reads the code-mode ``ptc_retry.replay`` notice, but still the kernel's
short sentences that do not depend on size (the time limit that stopped a program, the
repeated-failure guard's). Messages: calls with the same ``step=`` (take it from
``next_step()``) are one model message, so ``previous_ordinal`` numbers them; without
``step=`` every call is a message of its own and ``previous_ordinal`` 1 is the call just
before. Tools of the loop's own can be added with ``kb.native.register`` after ``start()``.
Not through a gateway: see ``KernelBackend``.

Sync code uses the ``*_sync`` twins (``start_sync``, ``run_code_sync``,
``handle_tool_call_sync``, ``shutdown_sync``) and ``with KernelBackend() as kb:``;
they run the coroutine the way jupyter_client does (``jupyter_core.utils.run_sync``).
Use one style per backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
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
from typing import Any, Callable, Protocol

from jupyter_core.utils import run_sync

from ..core.errors import BackendError, GatewayError, KernelStartError, PtcRetryError
from ..core.notice import parse_notice, prompt_section, resume_call
from ..core.protocol import METADATA_KEY, execute_request
from ..core.store import CheckpointStore, default_root, sanitize, session_in_use
from ..kernelspec import KERNEL_NAME
from ..native import (
    EDIT_TOOL,
    EDIT_TOOL_DESCRIPTION,
    EDIT_TOOL_PARAMETERS,
    NativeTools,
    ToolFailure,
    ToolResult,
    current_call,
)

__all__ = [
    "MODES",
    "STATUSES",
    "BackendError",
    "GatewayError",
    "KernelBackend",
    "KernelConnection",
    "KernelStartError",
    "LocalKernel",
    "RunResult",
    "Tool",
]

#: The statuses of a ``RunResult``.
STATUSES = ("ok", "error", "timeout", "died", "refused")
#: What ``KernelBackend(mode=...)`` accepts: the model writes programs, or calls tools.
MODES = ("code", "native")

PTC_KERNEL = KERNEL_NAME
RUN_CODE = "run_code"
#: How often a waiting call checks that the kernel process is still alive (seconds).
POLL_INTERVAL = 0.5
#: Raw outputs kept in ``RunResult.outputs``: characters of text and encoded data, and count.
MAX_RAW_OUTPUT_CHARS = 1_000_000
MAX_RAW_OUTPUTS = 1_000

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_BINARY_TYPES = ("image/", "audio/", "video/", "application/pdf", "application/octet-stream")


@dataclass
class RunResult:
    """What one ``run_code`` gave back. ``text`` is what the model should read."""

    status: str  # one of STATUSES
    text: str
    value: str | None = None  # text/plain of the execute_result
    call_id: str | None = None  # the checkpoint id the kernel used
    checkpoint: str | None = None  # path of by-id/<call_id>.json, as the kernel sees it
    reference: str | None = None  # the short reference ("#7") the notice names the program by
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
    "program is saved; its notice names it (#n) so a small fix can be sent as one line with "
    "ptc_retry.replay."
)
RUN_CODE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python program to run."}},
    "required": ["code"],
    "additionalProperties": False,
}
#: ``run_code`` in native mode: the fix goes through the edit tool, never ``ptc_retry.replay``.
NATIVE_RUN_CODE_DESCRIPTION = (
    "Run a Python program in a persistent Jupyter kernel: variables, imports and "
    "definitions stay for later calls, and top-level await works. Returns what the program "
    "printed, the value of its last expression, or the error with its traceback. A failed "
    f'call is saved: fix a small mistake with {EDIT_TOOL} (path "code") instead of '
    "re-sending the program."
)
#: ``--PtcRetry.notice_min_bytes`` of a native-mode kernel: no program reaches it, so the
#: kernel never adds the code-mode notice; its size-independent sentences (time limit,
#: guard) still come (``notice.short_failure_notice``).
NATIVE_KERNEL_NOTICE_MIN_BYTES = 2**62

# The per-call options (turn, step, timeout) of a native-mode call, on their way through
# NativeTools to ``_native_run_code``; it also keeps a BackendError to raise to the caller.
_native_options: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ptc_retry_backend_native_options", default=None
)


class KernelBackend:
    """One kernel that runs a model's programs, with checkpoints and replay.

    ``mode``: ``"code"`` (the model writes programs and replays a failed one with
    ``ptc_retry.replay``) or ``"native"`` (the model calls ``run_code`` as a plain tool and
    fixes a failed call with ``editPreviousToolCalling``; the calls are journaled in the
    session directory and the kernel keeps its own checkpoints in ``kernel_session_dir``,
    inside it; see the module docstring).
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
    backend interrupts. ``extension``: False starts ``kernel_name`` without ptc-retry (no
    ``--ext``): a stock kernel for comparisons; not allowed for the ``ptc-retry`` kernel.

    ``gateway_url``: reach the kernel through a Jupyter Kernel Gateway (or Jupyter Server,
    Enterprise Gateway) at this URL instead of starting it here; ``token`` is the gateway's
    auth token. Then ``kernel_name`` is the kernelspec the gateway starts (another IPython
    kernel gets ``%load_ext ptc_retry``), ``root`` is a path on the kernel's host (default:
    the kernel's own ``PTC_RETRY_ROOT`` or temp directory), ``session_dir`` is None until
    ``start()`` learns it from the kernel, ``env`` goes to the gateway's start request (it
    passes on only ``KERNEL_*`` names and its ``env_whitelist``), and ``cwd`` and
    ``extra_arguments`` are refused: the kernelspec on the gateway decides them.

    ``mode="native"`` with ``gateway_url`` is refused (ValueError). Native mode needs a
    kernel started with the code-mode notice switched off (``--PtcRetry.notice_min_bytes``
    on its command line), which behind a gateway its kernelspec decides, not the backend;
    and its journal lives in this process, on this machine, while the kernel's checkpoints
    live on the kernel's host, so one session would be two directories on two machines
    that ``root``, ``session_dir`` and ``shutdown(keep=...)`` cannot name as one. For
    direct tool calls to a remote kernel, register a ``run_code`` of your own on a
    ``ptc_retry.native.NativeTools`` and run it through a code-mode gateway backend whose
    kernelspec sets a high ``PtcRetry.notice_min_bytes``.
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
        extension: bool = True,
        gateway_url: str | None = None,
        token: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use mode='code' or mode='native'")
        if mode == "native" and gateway_url is not None:
            raise ValueError(
                "mode='native' does not work through a gateway: its journal would live here "
                "and the kernel's checkpoints on the gateway's host, and the kernelspec there, "
                "not the backend, decides whether the kernel adds the code-mode notice; use "
                "mode='code' with a gateway (see the KernelBackend docstring)"
            )
        if max_output_chars < 100:
            raise ValueError(f"max_output_chars must be at least 100, not {max_output_chars}")
        if not extension and kernel_name == PTC_KERNEL:
            raise ValueError(
                f"the {PTC_KERNEL!r} kernel always loads ptc-retry; for a stock kernel pass "
                "kernel_name='python3' with extension=False"
            )
        self.mode = mode
        #: False: the kernel runs without ptc-retry (see ``extension`` above).
        self.extension = extension
        self.kernel_name = kernel_name
        #: The gateway the kernel is reached through, or None for a kernel started here.
        self.gateway_url = gateway_url
        self.token = token
        self.session_id = sanitize(session_id) if session_id else f"s{secrets.token_hex(4)}"
        self.root: Path | None
        #: This session's checkpoint directory, as the kernel sees it.
        self.session_dir: Path | None
        if gateway_url is None:
            # Absolute, because the kernel resolves a relative root against its own cwd.
            self.root = Path(root if root is not None else default_root()).expanduser().absolute()
            self.session_dir = self.root / self.session_id
        else:
            from .gateway import gateway_base_url

            gateway_base_url(gateway_url)  # a ValueError now rather than at start()
            if cwd is not None or extra_arguments or not extension:
                raise ValueError(
                    "cwd, extra_arguments and extension=False do not apply to a kernel behind "
                    "a gateway: its kernelspec on the gateway decides how it starts"
                )
            self.root = Path(root) if root is not None else None  # on the kernel's host
            self.session_dir = None  # the kernel says where, in start()
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
        #: How the backend reaches its kernel, once started: a LocalKernel or a GatewayKernel.
        self.connection: KernelConnection | None = None
        #: The result of the latest ``run_code`` (also through ``handle_tool_call``), for a
        #: loop that wants its status, metadata or outputs besides the text.
        self.last_result: RunResult | None = None
        #: Native mode: the tool registry and journal, made by ``start()`` (None before, and
        #: always None in code mode).
        self.native: NativeTools | None = None
        #: Native mode: the ``ToolResult`` of the latest ``handle_tool_call`` (for an edit,
        #: its ``replay_of`` names the call it re-ran).
        self.last_tool_result: ToolResult | None = None
        self._tools = self._build_tools()
        self._message: tuple[int, int | None] | None = None  # (caller's step, journal's step)
        self._step = 0
        self._new_instruction = False
        self._sent_ids: set[str] = set()
        self._next_id = 1
        self._lock: asyncio.Lock | None = None
        self._closing = False
        self._closed = False
        # Whether start() made the session directory: shutdown() removes only what it made.
        self._made_session_dir = gateway_url is not None  # the gateway's kernel removes its own

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self.connection else "not started"
        where = f" via {self.gateway_url}" if self.gateway_url else ""
        return f"<KernelBackend {self.kernel_name}{where} {self.session_dir} ({state})>"

    @property
    def kernel_manager(self) -> Any:
        """The jupyter_client AsyncKernelManager of a local kernel (None otherwise)."""
        return getattr(self.connection, "manager", None)

    @property
    def kernel_client(self) -> Any:
        """The AsyncKernelClient of a local kernel (None otherwise)."""
        return getattr(self.connection, "client", None)

    @property
    def kernel_session_dir(self) -> Path | None:
        """Where the kernel keeps its checkpoints: ``session_dir`` itself in code mode; in
        native mode ``<session_dir>/kernel/<session_id>``, apart from the tool-call journal
        (two processes never share one session directory)."""
        if self.session_dir is None or self.mode != "native":
            return self.session_dir
        return self.session_dir / "kernel" / self.session_id

    # -- the model's side: prompt, tools, tool calls ------------------------------------------

    def system_prompt(self) -> str:
        """The static prompt section for this session; byte-identical for its whole life."""
        if self.session_dir is None:
            raise BackendError(
                "the session directory is on the kernel's host behind the gateway: call "
                "start() (or use `async with`) before system_prompt()"
            )
        return prompt_section(self.mode, session_dir=self.session_dir)

    def _build_tools(self) -> dict[str, Tool]:
        """The tools offered to the model, by name. Native mode adds its tool here."""
        if self.mode == "native":
            # What runs them is kb.native (see handle_tool_call); these are the definitions.
            return {
                RUN_CODE: Tool(
                    RUN_CODE,
                    NATIVE_RUN_CODE_DESCRIPTION,
                    RUN_CODE_PARAMETERS,
                    self._native_handler(RUN_CODE),
                ),
                EDIT_TOOL: Tool(
                    EDIT_TOOL,
                    EDIT_TOOL_DESCRIPTION,
                    EDIT_TOOL_PARAMETERS,
                    self._native_handler(EDIT_TOOL),
                ),
            }
        run_code = Tool(RUN_CODE, RUN_CODE_DESCRIPTION, RUN_CODE_PARAMETERS, self._run_code_tool)
        return {run_code.name: run_code}

    def tool_schemas(self, format: str = "openai") -> list[dict[str, Any]]:
        """Every tool's definition, to pass as the model's ``tools``.

        ``format``: ``"openai"`` (``{"type": "function", "function": {...}}``) or
        ``"anthropic"`` (``{"name", "description", "input_schema"}``). In native mode:
        ``run_code``, any tool registered on ``kb.native``, then ``editPreviousToolCalling``.
        """
        if self.native is not None:
            return self.native.definitions(format)
        return [tool.schema(format) for tool in self._tools.values()]

    def tool_schema(self, format: str = "openai", name: str = RUN_CODE) -> dict[str, Any]:
        """One tool's definition (default ``run_code``), in the given ``format``."""
        if self.native is not None:
            for schema in self.native.definitions(format):
                if schema.get("name", schema.get("function", {}).get("name")) == name:
                    return schema
            offered = ", ".join([*self.native.names, EDIT_TOOL])
            raise ValueError(f"no tool {name!r}; this backend offers {offered}")
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
        only when the kernel is not running or cannot be restarted, or its gateway cannot be
        reached (GatewayError): nothing the model can fix.

        Native mode: every call, also a malformed one or one of an unknown tool, goes to
        ``kb.native`` and is journaled (its refusal text is the journal's); ``name`` may be
        ``editPreviousToolCalling``. Calls with the same ``step`` are one model message (see
        ``next_step``); ``turn``, ``step`` and ``timeout`` also apply to the program an edit
        re-runs.
        """
        self.last_result = None  # a call refused below ran nothing: no result of its own
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
            return await self._native_call(
                name, raw_arguments, call_id, turn=turn, step=step, timeout=timeout
            )
        tool = self._tools.get(name)
        if tool is None:
            offered = ", ".join(self._tools)
            return f"Error: there is no tool named {name!r}; the tools are: {offered}. Nothing ran."
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
        ignored = sorted(set(arguments) - {"code"})
        if not ignored:
            return result.text
        # A stray key is no reason to re-send the program: it ran, and the model is told once.
        keys = ", ".join(json.dumps(key, ensure_ascii=False) for key in ignored)
        ignored_line = f'[ptc-retry] Ignored {keys}: run_code takes only "code".'
        return _join_notes([ignored_line, result.text])

    # -- native mode --------------------------------------------------------------------------

    def _native_handler(
        self, name: str
    ) -> Callable[[dict[str, Any], str, str | None, dict[str, Any]], Awaitable[str]]:
        """A ``Tool.handler`` that hands the raw call to ``kb.native``, as handle_tool_call does."""

        async def handler(
            arguments: dict[str, Any], raw: str, call_id: str | None, options: dict[str, Any]
        ) -> str:
            return await self._native_call(name, raw, call_id, **options)

        return handler

    async def _native_call(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any],
        call_id: str | None,
        *,
        turn: int | None = None,
        step: int | None = None,
        timeout: float | None = None,
    ) -> str:
        native = self.native
        if native is None or self.connection is None:
            raise BackendError("the kernel is not running; call start() or use `async with`")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        # The journal's turn and message for this call. NativeTools saves the call before its
        # first await, so concurrent calls (asyncio.gather) each begin with their own.
        journal = native.journal
        journal.turn = self.turn if turn is None else turn
        if step is None:
            journal.step = None  # a message of its own, as a run_code without step= is
        elif self._message is not None and self._message[0] == step:
            journal.step = self._message[1]
        else:
            self._message = (step, journal.new_message())
        options: dict[str, Any] = {"turn": turn, "step": step, "timeout": timeout}
        token = _native_options.set(options)
        try:
            result = await native.invoke(name, raw_arguments, call_id)
        finally:
            _native_options.reset(token)
        self.last_tool_result = result
        error = options.get("error")
        if error is not None:  # the kernel is gone or cannot restart: nothing the model can fix
            raise error
        return result.text

    async def _native_run_code(self, /, **arguments: Any) -> str:
        """``run_code`` as a native tool: a failed program raises ToolFailure with its text."""
        problem = _run_code_problem(arguments)
        if problem is not None:
            raise ToolFailure(f"Error: {problem} Nothing ran.", ename="ValueError")
        options = _native_options.get()
        per_call = {k: v for k, v in (options or {}).items() if k in ("turn", "step", "timeout")}
        call = current_call()  # for a replay: the edit call, whose checkpoint is the patch
        try:
            result = await self.run_code(
                arguments["code"], call_id=call.id if call is not None else None, **per_call
            )
        except BackendError as exc:
            if options is not None:
                options["error"] = exc
            raise ToolFailure(f"Error: {exc}. Nothing ran.", ename=type(exc).__name__) from exc
        if not result.ok:
            raise ToolFailure(result.text, ename=result.ename or result.status)
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
        if self.connection is not None:
            return
        self._lock = asyncio.Lock()
        connection: KernelConnection
        if self.gateway_url is None and self.session_dir is not None:
            self._made_session_dir = not os.path.lexists(self.session_dir)
            self._check_checkpoints()
        if self.mode == "native" and self.native is None:
            # The journal first: it makes the session directory the kernel's store goes in.
            self.native = NativeTools(root=self.root, session=self.session_id)
            if self.native.journal.session_dir != self.session_dir:
                held = self.native.journal.session_dir
                self.native.journal.close()
                self.native, self._lock = None, None
                raise BackendError(
                    f"the session {self.session_id!r} in {self.root} is in use by another "
                    f"process (this one would have used {held}); pass another session_id, "
                    "or none for a fresh one"
                )
            self.native.register(
                self._native_run_code,
                name=RUN_CODE,
                description=NATIVE_RUN_CODE_DESCRIPTION,
                parameters=RUN_CODE_PARAMETERS,
            )
        if self.gateway_url is None:
            launch: dict[str, Any] = {"env": self._kernel_env(), "extra_arguments": self._argv()}
            if self.cwd is not None:
                launch["cwd"] = os.fspath(self.cwd)
            connection = LocalKernel(
                self.kernel_name,
                launch=launch,
                startup_timeout=self.startup_timeout,
                failure=self._start_failure,
            )
            await connection.start()
        else:
            from .gateway import GatewayKernel

            gateway = GatewayKernel(
                self.gateway_url,
                token=self.token,
                kernel_name=self.kernel_name,
                session_id=self.session_id,
                root=None if self.root is None else str(self.root),
                env=self.env or None,
                startup_timeout=self.startup_timeout,
            )
            await gateway.start()
            self.session_dir = Path(gateway.session_dir or "")
            connection = gateway
        self.connection = connection

    def _check_checkpoints(self) -> None:
        """Open the kernel's session here first: a root it cannot use fails now, clearly.

        Otherwise the kernel would run every program unsaved while the notices and the
        prompt section named files that do not exist.
        """
        kernel_dir = self.kernel_session_dir
        assert kernel_dir is not None
        try:
            store = CheckpointStore(kernel_dir.parent, self.session_id)
        except (OSError, PtcRetryError) as exc:
            self._lock = None
            reason = str(exc).rstrip(".")
            raise BackendError(
                f"cannot keep checkpoints in {kernel_dir}: {reason}. Pass root= (or set "
                "PTC_RETRY_ROOT to) a directory you can write; nothing was started."
            ) from None
        try:
            if store.session_dir != kernel_dir:
                self._lock = None
                raise BackendError(
                    f"the session {self.session_id!r} in {kernel_dir.parent} is in use by "
                    "another kernel; pass another session_id, or none for a fresh one"
                )
        finally:
            store.close()

    def _kernel_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        kernel_dir = self.kernel_session_dir
        assert kernel_dir is not None  # a local kernel's is known from __init__ on
        env["PTC_RETRY_ROOT"] = str(kernel_dir.parent)
        env["PTC_RETRY_SESSION"] = self.session_id
        return env

    def _argv(self) -> list[str]:
        if not self.extension:
            return list(self.extra_arguments)
        argv = list(self.extra_arguments)
        if self.kernel_name != PTC_KERNEL:
            # Fail at startup, loudly, rather than run without checkpoints.
            ext = ["--ext=ptc_retry", "--IPKernelApp.reraise_ipython_extension_failures=True"]
            argv = ext + argv
        if self.mode == "native":
            # Last, so it wins: the model must never read the code-mode replay notice here.
            argv.append(f"--PtcRetry.notice_min_bytes={NATIVE_KERNEL_NOTICE_MIN_BYTES}")
        return argv

    def _start_failure(self, exc: BaseException) -> str:
        hint = ""
        if self.kernel_name != PTC_KERNEL and self.extension:
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

        Behind a gateway the kernel removes it, on its host, just before it is shut down.

        Idempotent: the first call decides ``keep``. A call that is running when shutdown
        begins ends within about half a second with BackendError.
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
            if remove is not None and self.gateway_url is None:
                _remove_session_dir(Path(remove))  # also when the kernel never started

    async def _stop_kernel(self, remove: str | None = None) -> None:
        if self.native is not None:
            self.native.journal.close()  # before its directory goes
        connection, self.connection = self.connection, None
        if connection is not None:
            await connection.shutdown(remove)

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
        if self._lock is None or self.connection is None:
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
        connection = self._connection()
        if not await connection.is_alive():
            how = await connection.exit_description()
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

    def _connection(self) -> KernelConnection:
        if self.connection is None:
            raise BackendError("the kernel is not running; call start() or use `async with`")
        return self.connection

    async def restart(self) -> None:
        """Restart the kernel between calls: its variables are gone, its session goes on.

        Saved programs and their references (``"#7"``) stay valid, so a model can still
        replay a program that failed before the restart. Waits for a running call to end.
        """
        if self._lock is None or self.connection is None:
            raise BackendError("the kernel is not running; call start() or use `async with`")
        async with self._lock:
            await self._restart()

    async def _restart(self) -> None:
        try:
            await self._connection().restart()
        except GatewayError:
            raise  # says itself what is wrong with the gateway
        except Exception as exc:
            raise BackendError(
                f"the {self.kernel_name!r} kernel could not be restarted ({exc}); "
                "shut this backend down and start a new one"
            ) from exc

    # -- sync twins ---------------------------------------------------------------------------

    start_sync = run_sync(start)
    run_code_sync = run_sync(run_code)
    handle_tool_call_sync = run_sync(handle_tool_call)
    restart_sync = run_sync(restart)
    shutdown_sync = run_sync(shutdown)

    def __enter__(self) -> KernelBackend:
        self.start_sync()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown_sync()


class KernelConnection(Protocol):
    """How the backend reaches its kernel: everything that is transport, and nothing else.

    ``LocalKernel`` starts a kernel here through jupyter_client; ``ptc_retry.backend.gateway.
    GatewayKernel`` reaches one through a gateway's REST API and websocket. What the
    backend does with the messages (capture, text, statuses, time limits) is shared.
    """

    kernel_name: str

    async def start(self) -> None:
        """Start the kernel and wait until it answers; KernelStartError if it cannot."""

    async def send_execute(self, content: dict[str, Any], metadata: dict[str, Any]) -> str:
        """Send an execute_request with this content and metadata; return its msg_id."""

    async def receive(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        """The next iopub or shell message whose parent is ``msg_id``, in the order that
        ends a request (outputs, then the idle status and the reply), or None when none
        came within ``timeout`` seconds; then ``is_alive()`` tells whether to wait on."""

    async def interrupt(self) -> None:
        """Interrupt the running program (SIGINT or an interrupt_request, as the kernel says)."""

    async def restart(self) -> None:
        """Restart the kernel and wait until it answers again, set up as after ``start``."""

    async def is_alive(self) -> bool:
        """Whether the kernel still runs; BackendError when that cannot be known."""

    async def exit_description(self) -> str:
        """How a kernel that is not alive ended, for the model: ``exit code 1``, ..."""

    async def shutdown(self, remove: str | None) -> None:
        """Stop the kernel and delete ``remove`` (this session's checkpoint directory, where
        the kernel keeps it) when given: a remote kernel is asked to delete it before it
        stops. Never raises for a kernel, or a gateway, that is already gone."""


class LocalKernel:
    """A kernel started here, in a subprocess, through jupyter_client's AsyncKernelManager.

    ``launch``: keyword arguments of ``start_kernel`` (env, extra_arguments, cwd).
    ``failure``: words for a kernel that started but did not answer, given the error.
    """

    def __init__(
        self,
        kernel_name: str,
        *,
        launch: dict[str, Any],
        startup_timeout: float,
        failure: Callable[[BaseException], str],
    ) -> None:
        self.kernel_name = kernel_name
        self.launch = launch
        self.startup_timeout = startup_timeout
        self.failure = failure
        self.manager: Any = None  # jupyter_client AsyncKernelManager, once started
        self.client: Any = None  # its AsyncKernelClient
        self._msg_id: str | None = None
        self._idle = False  # the current request's idle status came: read its reply next

    async def start(self) -> None:
        from jupyter_client.kernelspec import NoSuchKernel
        from jupyter_client.manager import AsyncKernelManager

        from ..kernelspec import kernel_spec_manager

        specs = kernel_spec_manager()
        manager = AsyncKernelManager(kernel_name=self.kernel_name, kernel_spec_manager=specs)
        try:
            await manager.start_kernel(**self.launch)
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
        self.manager, self.client = manager, client
        try:
            await client.wait_for_ready(timeout=self.startup_timeout)
        except Exception as exc:
            await self.shutdown(None)
            raise KernelStartError(self.failure(exc)) from exc

    async def send_execute(self, content: dict[str, Any], metadata: dict[str, Any]) -> str:
        msg = self.client.session.msg("execute_request", content, metadata=metadata)
        self.client.shell_channel.send(msg)
        self._msg_id, self._idle = msg["header"]["msg_id"], False
        return self._msg_id

    async def receive(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        # iopub until the request's idle status, then shell for its reply: its outputs
        # all come before the idle status.
        client = self.client
        idle = self._idle and msg_id == self._msg_id
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                if idle:
                    message = await client.get_shell_msg(timeout=left)
                else:
                    message = await client.get_iopub_msg(timeout=left)
            except queue.Empty:
                # A pause on iopub: the reply may be in although the idle status was lost
                # (zmq drops what overflows a subscriber's queue when a program floods it).
                return None if idle else await self._reply_waiting(msg_id)
            if message["parent_header"].get("msg_id") != msg_id:
                continue  # left over from an earlier request, or kernel_info traffic
            if message["msg_type"] == "status" and msg_id == self._msg_id:
                self._idle = message["content"].get("execution_state") == "idle"
            return message

    async def _reply_waiting(self, msg_id: str) -> dict[str, Any] | None:
        while True:
            try:
                message = await self.client.get_shell_msg(timeout=0)
            except queue.Empty:
                return None
            if message["parent_header"].get("msg_id") == msg_id:
                return message

    async def interrupt(self) -> None:
        await self.manager.interrupt_kernel()

    async def restart(self) -> None:
        await self.manager.restart_kernel(now=True)
        await self.client.wait_for_ready(timeout=self.startup_timeout)

    async def is_alive(self) -> bool:
        return bool(await self.manager.is_alive())

    async def exit_description(self) -> str:
        code = None
        with contextlib.suppress(Exception):
            code = await self.manager.provisioner.poll()
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

    async def shutdown(self, remove: str | None) -> None:
        client, manager = self.client, self.manager
        self.client = self.manager = None
        if client is not None:
            client.stop_channels()
        if manager is not None and manager.has_kernel:
            await manager.shutdown_kernel(now=False)
        if remove is not None:
            _remove_session_dir(Path(remove))


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
        connection = backend._connection()
        content = execute_request(self.code)
        started = time.monotonic()
        limit = None if self.timeout is None else self.timeout + backend.time_limit_margin
        stop_at = None if limit is None else started + limit
        give_up_at: float | None = None
        idle = False
        try:
            msg_id = await connection.send_execute(content, {METADATA_KEY: self.request})
            self.msg_id = msg_id
            while not (idle and self.reply is not None):
                if backend._closing:
                    raise BackendError("the backend was shut down while this program ran")
                now = time.monotonic()
                if stop_at is not None and now >= stop_at and not self.interrupted:
                    self.interrupted = True
                    give_up_at = now + backend.interrupt_grace
                    with contextlib.suppress(Exception):
                        await connection.interrupt()
                if give_up_at is not None and now >= give_up_at:
                    await self._restart_after_timeout()
                    break
                deadlines = [d for d in (stop_at, give_up_at) if d is not None and d > now]
                wait = min([POLL_INTERVAL, *(d - now for d in deadlines)])
                message = await connection.receive(msg_id, wait)
                if message is None:
                    if self.reply is not None:
                        break  # the reply is in and its idle status was lost: it is enough
                    if not await connection.is_alive():
                        await self._restart_after_death()
                        break
                    continue
                msg_type = message["msg_type"]
                if msg_type == "execute_reply":
                    self.reply = message
                elif msg_type == "status":
                    idle = idle or message["content"].get("execution_state") == "idle"
                elif msg_type != "execute_input":
                    self._output(msg_type, message["content"])
        except asyncio.CancelledError:
            # The caller gave up: stop the program too, so the kernel is free for the next call.
            with contextlib.suppress(Exception):
                await connection.interrupt()
            raise
        return self._result(time.monotonic() - started)

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
        how = await backend._connection().exit_description()
        await backend._restart()
        self.status, self.restarted = "died", True
        self.notes.append(
            f"[ptc-retry] The kernel died while running this program ({how}) and was "
            f"restarted: all variables, imports and definitions are lost.{self._saved()}"
        )

    async def _restart_after_timeout(self) -> None:
        backend = self.backend
        await self._drain()
        await backend._restart()
        self.status, self.restarted = "timeout", True
        self.notes.append(
            f"[ptc-retry] Stopped after {self.timeout:g} s (the time limit of this call). It "
            f"did not stop within {backend.interrupt_grace:g} s of the interrupt, so the kernel "
            f"was restarted: all variables, imports and definitions are lost.{self._saved()}"
        )

    def _saved(self) -> str:
        """`` Saved as ... resume(...)``: how to go on with a program no reply came for.

        The kernel that numbered the program is gone, so the call id names it. Empty in
        native mode: there the journal's own notice follows (``ptc_retry.resume`` is not
        the model's tool).
        """
        if self.backend.mode == "native":
            return ""
        call_id, _ = self._checkpoint()
        return f" Saved as {call_id}. To go on: {resume_call(call_id)}"

    async def _drain(self) -> None:
        """Outputs that arrived before the kernel died or was restarted: keep them."""
        connection = self.backend._connection()
        while self.msg_id is not None:
            message = await connection.receive(self.msg_id, 0.05)
            if message is None:
                return
            if message["msg_type"] == "execute_reply":
                self.reply = message
            elif message["msg_type"] not in ("status", "execute_input"):
                self._output(message["msg_type"], message["content"])

    def _checkpoint(self) -> tuple[str, str]:
        """The id and path the kernel saved this program under, as far as the backend knows."""
        call_id = sanitize(self.request["call_id"])
        session_dir = self.backend.kernel_session_dir
        if session_dir is None:  # not known: the kernel never said
            return call_id, f"by-id/{call_id}.json"
        return call_id, str(session_dir / "by-id" / f"{call_id}.json")

    def _result(self, duration: float) -> RunResult:
        reply_content = self.reply["content"] if self.reply is not None else {}
        metadata = None
        if self.reply is not None:
            found = self.reply.get("metadata", {}).get(METADATA_KEY)
            metadata = found if isinstance(found, dict) else None
        error = self.error
        if error is None and reply_content.get("status") == "error":
            error = reply_content
        notice, call_id, checkpoint, reference = self._facts(metadata, error)
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
            reference=reference,
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
    ) -> tuple[str | None, str, str, str | None]:
        """(notice, call id, checkpoint, reference): from the reply metadata, else derived."""
        call_id, checkpoint = self._checkpoint()
        if metadata is not None:
            notice = metadata.get("notice")
            reference = metadata.get("reference")
            return (
                notice if isinstance(notice, str) else None,
                metadata.get("call_id") or call_id,
                metadata.get("checkpoint") or checkpoint,
                reference if isinstance(reference, str) else None,
            )
        # A kernel without ptc-retry's reply metadata: the notice is the traceback's last item.
        lines = (error or {}).get("traceback") or []
        last = _ANSI.sub("", lines[-1]) if lines else ""
        reference = parse_notice(last)
        if reference is None:
            return None, call_id, checkpoint, None
        return last, call_id, checkpoint, reference

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
    # The session directory is ours (we made it); never follow a symlink out of it, and
    # never remove a session another live kernel has taken over since.
    kernels = path / "kernel"  # native mode: the kernel's own store lives under the journal
    if session_in_use(path) or (kernels.is_dir() and _kernels_in_use(kernels)):
        return
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _kernels_in_use(directory: Path) -> bool:
    """Whether a native-mode session's kernel store (``<session>/kernel/*``) is still held."""
    return any(session_in_use(child) for child in directory.iterdir() if child.is_dir())
