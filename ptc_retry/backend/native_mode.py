"""Native mode's glue between ``KernelBackend`` and ``NativeTools``: the journal a native-mode
backend opens in its session directory, and the backend's ``run_code`` as a native tool."""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core import sentences as said
from ..core.call import Call
from ..core.errors import BackendError, SessionInUseError
from ..core.status import HistoryStatus, Refusal
from ..core.store import CheckpointStore
from ..native import (
    EDIT_TOOL,
    NativeTools,
    Position,
    ToolFailure,
    ToolFunction,
    ToolJournal,
    ToolResult,
    current_call,
    tool_definitions,
)
from .results import (
    NATIVE_RUN_CODE_DESCRIPTION,
    RUN_CODE,
    RUN_CODE_PARAMETERS,
    CallOptions,
    RunCode,
    run_code_problem,
)
from .tracing import Operation, Tracing, described

__all__ = ["KERNEL_OPTIONS", "NativeRunCode", "NativeSession", "native_definitions"]

#: The kernel's command line in native mode: ``notice_min_bytes`` out of reach, so the model
#: never reads the code-mode ``ptc_retry.replay`` notice; the kernel's sentences that do not
#: depend on size (a time limit's stop, the repeated-failure guard) still come.
KERNEL_OPTIONS = (f"--PtcRetry.notice_min_bytes={2**62}",)


def native_definitions(format: str) -> list[dict[str, Any]]:
    """The tools a native-mode backend offers before it starts (``run_code``, the edit tool):
    what its ``NativeTools`` will give once made."""
    spec = {"name": RUN_CODE, "description": NATIVE_RUN_CODE_DESCRIPTION}
    return tool_definitions(format, [{**spec, "parameters": RUN_CODE_PARAMETERS}])


class NativeRunCode:
    """``run_code`` as a native tool, with one call's options (default: the backend's).

    A failed program raises ToolFailure with the text the model reads. A BackendError
    (the kernel is gone and cannot restart: nothing the model can fix) also fails the
    call, and is kept in ``error`` for the backend to raise to its caller. ``edit_bytes``:
    the size of the edit call this one runs for, when it does (its program is then traced
    as that edit's).
    """

    def __init__(
        self, run_code: RunCode, options: CallOptions | None = None, edit_bytes: int | None = None
    ) -> None:
        self.run_code = run_code
        self.options = options if options is not None else CallOptions()
        self.edit_bytes = edit_bytes
        self.error: BackendError | None = None
        self.ran = False  # whether a program was sent

    async def __call__(self, **arguments: Any) -> str:
        problem = run_code_problem(arguments)
        if problem is not None:
            raise ToolFailure(said.NOT_RUN.render(problem=problem), ename="ValueError")
        call = current_call()  # for a replay: the edit call, whose checkpoint is the patch
        options = self.options
        self.ran = True
        try:
            with self._traced_as(call):
                result = await self.run_code(
                    arguments["code"],
                    call_id=call.id if call is not None else None,
                    turn=options.turn,
                    step=options.step,
                    timeout=options.timeout,
                )
        except BackendError as exc:
            self.error = exc
            text = said.NOT_RUN.render(problem=f"{exc}.")
            raise ToolFailure(text, ename=type(exc).__name__) from exc
        if not result.ok:
            raise ToolFailure(result.text, ename=result.ename or result.status)
        return result.text

    def _traced_as(self, call: Call | None) -> contextlib.AbstractContextManager[None]:
        """An edit's program is traced as the edit (as a replay's is in code mode): an
        ``execute_tool editPreviousToolCalling`` span linked to the call it fixes."""
        edit = _edit_operation(call, self.edit_bytes)
        return contextlib.nullcontext() if edit is None else described(edit)


class TracedTool:
    """A tool registered on ``kb.native``, traced: each call is an ``execute_tool`` span
    (``Tracing.native_tool``), an edit's re-run of it the edit's span. ``edit_bytes`` as
    for :class:`NativeRunCode`; ``ran``: whether the tool was called."""

    def __init__(
        self, function: ToolFunction, tool: str, tracing: Tracing, edit_bytes: int | None
    ) -> None:
        self.function = function
        self.tool = tool
        self.tracing = tracing
        self.edit_bytes = edit_bytes
        self.ran = False

    async def __call__(self, **arguments: Any) -> Any:
        call = current_call()
        self.ran = True
        with self.tracing.native_tool(
            self.tool,
            call.id if call is not None else None,
            arguments,
            _edit_operation(call, self.edit_bytes),
        ):
            value = self.function(**arguments)
            if inspect.isawaitable(value):
                value = await value
            return value


def _edit_operation(call: Call | None, edit_bytes: int | None) -> Operation | None:
    """What an edit call (``edit_bytes`` its size; None: not an edit) runs for: the edit,
    linked to the call it fixes or completes; None for a call that is no edit."""
    fixed = None if call is None else call.replay_of or call.extend_of
    if edit_bytes is None or call is None or fixed is None:
        return None
    return Operation(
        "edit",
        f"execute_tool {EDIT_TOOL}",
        link="replay_of" if call.replay_of is not None else "extend_of",
        of=fixed,
        tool=EDIT_TOOL,
        sent_bytes=edit_bytes,
        whole_bytes=call.bytes,  # the patched arguments: what a re-sent call would be
    )


class NativeSession:
    """A native-mode backend's ``NativeTools`` (``tools``), in its session directory, with the
    backend's ``run_code`` registered.

    Calls made with one ``step=`` are one model message of the journal, so
    ``previous_ordinal`` numbers them; a call without ``step=`` is a message of its own.
    BackendError when another process holds the session, and nothing is made (the store is
    never moved on to another directory, apart from the kernel's).
    """

    def __init__(
        self, root: Path, session_id: str, run: RunCode, tracing: Tracing | None = None
    ) -> None:
        try:  # never moved to <session>.2: nothing is made for a session that is held
            store = CheckpointStore(root, session_id, moves=False)
        except SessionInUseError:
            raise BackendError(
                f"the session {session_id!r} in {root} is in use by another process; pass "
                "another session_id, or none for a fresh one"
            ) from None
        tools = NativeTools(ToolJournal(store))
        tools.register(
            NativeRunCode(run),
            name=RUN_CODE,
            description=NATIVE_RUN_CODE_DESCRIPTION,
            parameters=RUN_CODE_PARAMETERS,
        )
        self.tools = tools
        self.run = run
        self.tracing = tracing
        self._message: tuple[int, int] | None = None  # (caller's step, journal's step)

    async def invoke(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any],
        call_id: str | None,
        *,
        turn: int,
        options: CallOptions,
    ) -> tuple[ToolResult, BackendError | None]:
        """Journal and run one call; its result, and the BackendError that stopped its
        program (the kernel is gone and cannot restart), if one did."""
        position = Position(turn, self._journal_step(options.step))
        edit_bytes = _edit_bytes(name, raw_arguments)
        run_code = NativeRunCode(self.run, options, edit_bytes)
        functions = self._functions(run_code, edit_bytes)
        result = await self.tools.invoke(
            name, raw_arguments, call_id, position=position, functions=functions
        )
        if self.tracing is not None and self.tracing.active and not _ran(functions):
            refusal = _refusal(name, result)
            if refusal is not None:
                self.tracing.refused(name, call_id, refusal)
        return result, run_code.error

    async def invoke_partial(
        self, name: str, partial: str, call_id: str | None, options: CallOptions
    ) -> tuple[ToolResult, BackendError | None]:
        """Journal one call whose arguments were cut off mid-stream (``partial``, as they
        arrived); its result, and the BackendError that stopped its program, as for
        :meth:`invoke`. It runs only when nothing it takes was cut (see
        ``NativeTools.call_partial``), with ``options`` as :meth:`invoke` has them.
        ``options.turn`` is the call's turn as the backend resolved it (None records turn
        0); ``options.step`` makes it part of a model message as for :meth:`invoke`."""
        position = Position(options.turn or 0, self._journal_step(options.step))
        run_code = NativeRunCode(self.run, options)
        functions = self._functions(run_code, None)
        result = await self.tools.call_partial(
            name, partial, call_id, position=position, functions=functions
        )
        if self.tracing is not None and self.tracing.active and not _ran(functions):
            if result.status == HistoryStatus.PARTIAL and result.call_id is not None:
                self.tracing.cut_off(name, result.call_id)
            elif result.status == HistoryStatus.ERROR:  # nothing saved: send it again
                unknown = result.ename == "UnknownTool"
                refusal = Refusal.UNKNOWN_TOOL if unknown else Refusal.CUT_OFF
                self.tracing.refused(name, call_id, refusal)
        return result, run_code.error

    def _functions(
        self, run_code: NativeRunCode, edit_bytes: int | None
    ) -> dict[str, ToolFunction]:
        """What runs each registered tool for one call: ``run_code``, and (while traces are
        reported) every other tool of ``kb.native`` in its span."""
        functions: dict[str, ToolFunction] = {RUN_CODE: run_code}
        if self.tracing is None or not self.tracing.active:
            return functions
        for tool in self.tools.names:
            function = self.tools.function(tool)
            if tool != RUN_CODE and function is not None:
                functions[tool] = TracedTool(function, tool, self.tracing, edit_bytes)
        return functions

    def _journal_step(self, step: int | None) -> int | None:
        if step is None:
            return None
        if self._message is None or self._message[0] != step:
            self._message = (step, self.tools.journal.next_step())
        return self._message[1]


def _edit_bytes(name: str, raw_arguments: str | Mapping[str, Any]) -> int | None:
    """The size of an edit call's arguments as the journal saves them; None for another."""
    if name != EDIT_TOOL:
        return None
    if not isinstance(raw_arguments, str):  # decoded (Anthropic's input): saved as its JSON
        raw_arguments = json.dumps(dict(raw_arguments), ensure_ascii=False)
    return len(raw_arguments.encode("utf-8", "surrogatepass"))


#: The refusals of an edit, by the type of the error that refused it (``native/edit.py``).
_EDIT_REFUSALS = {
    "CheckpointError": Refusal.UNKNOWN_REFERENCE,
    "AmbiguousReferenceError": Refusal.UNKNOWN_REFERENCE,
    "ValueError": Refusal.BAD_ARGUMENTS,
}


def _ran(functions: Mapping[str, ToolFunction]) -> bool:
    """Whether a call ran a tool, by what ``NativeSession._functions`` gave it (while traces
    are reported, every tool is one that knows)."""
    return any(getattr(function, "ran", False) for function in functions.values())


def _refusal(name: str, result: ToolResult) -> Refusal | None:
    """Why the journal refused a call that ran no tool; None when it did not fail."""
    if result.status != HistoryStatus.ERROR:
        return None
    if result.ename == "UnknownTool":
        return Refusal.UNKNOWN_TOOL
    if name == EDIT_TOOL:  # it never reached the tool it edits
        return _EDIT_REFUSALS.get(result.ename or "", Refusal.BAD_PATCH)
    return Refusal.BAD_ARGUMENTS  # not JSON, not an object, or not run_code's
