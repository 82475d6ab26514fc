"""``NativeTools``: an agent loop's own tools by name, each call journaled before it runs,
plus ``editPreviousToolCalling``, which re-runs a failed call with a small patch or completes
a call that was cut off mid-stream.

Plain Python: no IPython, no Jupyter kernel. docs/agent-loop.md and
``notebooks/04-native-mode.ipynb`` show it in use.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from jupyter_core.utils import run_sync

from ..core import sentences as said
from ..core.errors import PtcRetryError, StoreError
from ..core.notice import (
    NATIVE_NOTICE_MIN_BYTES,
    PREFIX,
    cut_after_arguments,
    native_failure_notice,
    prompt_section,
)
from ..core.partial import CutArguments, CutPlace, cut_arguments
from ..core.schema import first_paragraph, signature_schema
from ..core.status import HistoryStatus, Mode
from ..core.store import Call
from ..core.warn import WarnOnce
from .definitions import EDIT_TOOL, tool_definitions
from .edit import decode_arguments, prepare_edit
from .journal import Position, ToolJournal, arguments_text
from .partial import (
    CUT_NO_TARGET,
    completion_lacking,
    cut_saved_notice,
    cut_unsaved_notice,
    missing_arguments,
    partial_notice,
    patch_paths,
)
from .results import ToolResult, as_text, describe_failure, likely_field

__all__ = ["NativeTools", "current_call"]

ToolFunction = Callable[..., Any]
Arguments = str | Mapping[str, Any]  # raw JSON text, or an already decoded object
F = TypeVar("F", bound=ToolFunction)

_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar(
    "ptc_retry_native_call", default=None
)


def current_call() -> Call | None:
    """The journal's Call of the tool invocation running in this context, if any.

    A tool that needs its own call id (e.g. to pass it on to a kernel) reads it here; for a
    replay it is the edit call, whose checkpoint holds the patched arguments.
    """
    return _current.get()


@dataclass
class _Tool:
    function: ToolFunction
    description: str | None
    parameters: dict[str, Any] | None


class NativeTools:
    """The loop's tool callables by name, each call journaled, plus ``editPreviousToolCalling``.

    ``await tools.call(name, raw_arguments, call_id)`` returns the text the model reads;
    ``invoke`` returns the whole :class:`ToolResult`; ``call_partial`` saves a call whose
    arguments were cut off mid-stream. Tools may be sync or async; they are
    called with the decoded JSON arguments as keyword arguments. Calls begin (and are
    numbered within their message) in the order ``call``/``invoke`` is entered. A failed
    call whose arguments are at least ``notice_min_bytes`` UTF-8 bytes gets the native
    notice. A store failure (disk full, read-only) never stops a tool: the tool runs and
    its result says once that the arguments were not saved.
    """

    def __init__(
        self,
        journal: ToolJournal | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        session: str | None = None,
        notice_min_bytes: int = NATIVE_NOTICE_MIN_BYTES,
        tools: Mapping[str, ToolFunction] | None = None,
    ) -> None:
        if journal is not None and (root is not None or session is not None):
            raise ValueError("NativeTools: give a journal, or root/session, not both")
        self.journal = journal if journal is not None else ToolJournal(root=root, session=session)
        #: A failure notice is added only when the saved arguments are at least this many
        #: UTF-8 bytes (the kernel's ``PtcRetry.notice_min_bytes``); 0 notices every failure.
        self.notice_min_bytes = notice_min_bytes
        self._tools: dict[str, _Tool] = {}
        self._aims: dict[str, str] = {}  # edit call id -> the call it tried to fix
        self._notes: list[str] = []  # store problems to tell the model in the next result
        self._warn = WarnOnce(self._notes.append)
        for name, function in (tools or {}).items():
            self.register(function, name=name)

    # -- registering ---------------------------------------------------------------------------

    @typing.overload
    def register(
        self,
        function: F,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> F: ...

    @typing.overload
    def register(
        self,
        function: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> Callable[[F], F]: ...

    def register(
        self,
        function: ToolFunction | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> Any:
        """Register a tool: ``@tools.register``, ``@tools.register(name=...)`` or
        ``tools.register(fn, name="run_code")``. Returns the function unchanged.

        ``name`` defaults to the function's ``__name__``; ``description`` and
        ``parameters`` (a JSON schema) feed :meth:`definitions` and default to the
        docstring's first paragraph and a schema read from the signature.
        """

        def add(fn: F) -> F:
            tool_name = name if name is not None else getattr(fn, "__name__", None)
            if not isinstance(tool_name, str) or not tool_name:
                raise ValueError(f"register: give the tool a name (name=...) for {fn!r}")
            if tool_name == EDIT_TOOL:
                raise ValueError(f"register: {EDIT_TOOL} is built in; choose another name")
            if tool_name in self._tools:
                raise ValueError(f"register: a tool named {tool_name!r} is already registered")
            if not callable(fn):
                raise TypeError(f"register: {tool_name!r} must be callable, got {fn!r}")
            self._tools[tool_name] = _Tool(fn, description, parameters)
            return fn

        return add if function is None else add(function)

    @property
    def names(self) -> list[str]:
        """The registered tool names, in registration order (without the edit tool)."""
        return list(self._tools)

    def function(self, name: str) -> ToolFunction | None:
        """What runs the registered tool ``name``; None for a name not registered."""
        tool = self._tools.get(name)
        return tool.function if tool is not None else None

    def __contains__(self, name: object) -> bool:
        return name == EDIT_TOOL or name in self._tools

    # -- what the model is given ---------------------------------------------------------------

    def definitions(self, format: str = "openai") -> list[dict[str, Any]]:
        """The registered tools, then ``editPreviousToolCalling``, as ``tool_definitions`` gives."""
        specs = []
        for name, tool in self._tools.items():
            description = tool.description
            if description is None:
                description = first_paragraph(tool.function)
            specs.append(
                {"name": name, "description": description, "parameters": self._parameters(name)}
            )
        return tool_definitions(format, specs)

    def _parameters(self, name: str) -> dict[str, Any]:
        """The JSON schema of a registered tool's arguments: as given, or read from its
        signature."""
        tool = self._tools[name]
        return tool.parameters if tool.parameters is not None else signature_schema(tool.function)

    def prompt_section(self) -> str:
        """The native-mode system-prompt section for this journal's session directory."""
        return prompt_section(Mode.NATIVE, session_dir=self.journal.session_dir)

    # -- calling -------------------------------------------------------------------------------

    async def call(self, name: str, raw_arguments: Arguments, call_id: str | None = None) -> str:
        """Run one tool call of the model and return the text the model reads."""
        return (await self.invoke(name, raw_arguments, call_id)).text

    def call_sync(self, name: str, raw_arguments: Arguments, call_id: str | None = None) -> str:
        """``call`` for a synchronous loop; also works inside a running event loop."""
        text: str = run_sync(self.call)(name, raw_arguments, call_id)
        return text

    async def invoke(
        self,
        name: str,
        raw_arguments: Arguments,
        call_id: str | None = None,
        *,
        position: Position | None = None,
        functions: Mapping[str, ToolFunction] | None = None,
    ) -> ToolResult:
        """Journal and run one tool call (``name`` may be ``editPreviousToolCalling``).

        ``raw_arguments`` is the call's argument string exactly as the model sent it: it is
        saved byte for byte before anything runs. An already decoded object (Anthropic's
        ``input``) is saved as its JSON. ``position``: the call's turn and message (default
        the journal's current message). ``functions``: what runs a registered tool for this
        call only, by name (its definition stays), also when an edit re-runs it. Never
        raises for what the model sent or what the tool raised (``Exception``): both
        become an error result.
        """
        if isinstance(raw_arguments, Mapping):
            raw_arguments = arguments_text(raw_arguments)
        call = self._begin(raw_arguments, name, call_id, position)
        if name == EDIT_TOOL:
            result = await self._edit(raw_arguments, call, functions or {})
        else:
            result = await self._direct(name, raw_arguments, call, functions or {})
        return self._with_notes(result)

    async def call_partial(
        self,
        name: str,
        partial_raw_arguments: str,
        call_id: str | None = None,
        *,
        position: Position | None = None,
        functions: Mapping[str, ToolFunction] | None = None,
    ) -> ToolResult:
        """Journal a call whose arguments stream stopped part-way (an output-token limit, a
        dropped connection). ``name`` may be ``editPreviousToolCalling``.

        Cut after every argument the tool's schema declares arrived whole (a schema that
        allows no other key; the cut fell in a key it does not take, or before the final
        ``}``): nothing the tool takes is missing, so the call runs as :meth:`invoke` runs
        it, with the values that arrived whole, and its text starts with one line naming
        the key that was cut, when its name arrived.

        Otherwise nothing runs. Cut inside a string value: the call is saved with status
        ``partial`` (``by-id/<id>.json`` holds what its arguments decode to so far,
        ``by-id/<id>.partial`` the text exactly as it arrived) and the text tells the model
        where it stopped and how to send only the rest: ``editPreviousToolCalling`` with
        ``append``, which completes and runs it. Cut elsewhere after some arguments arrived
        whole: saved the same way, and the text names the arguments that did not arrive
        and shows the ``editPreviousToolCalling`` patch of ``value`` entries that adds them
        and runs the call. Before any argument arrived whole (or an edit call outside a
        string), or for an unknown tool, nothing is saved and the text says where the cut
        fell and asks for the whole call again. Arguments that arrived whole, closing brace
        and all, run as :meth:`invoke` runs them. ``position`` and ``functions`` as for
        :meth:`invoke`. Never raises for what the model sent.
        """
        if name not in self:
            text = self._unknown_tool(name)
            return self._with_notes(
                ToolResult(text, HistoryStatus.ERROR, name, None, None, None, "UnknownTool")
            )
        try:
            cut = cut_arguments(partial_raw_arguments)
        except ValueError:  # not an object: nothing to go on from
            cut = CutArguments()
        if cut.place is CutPlace.WHOLE:  # nothing was cut after all
            return await self.invoke(
                name, partial_raw_arguments, call_id, position=position, functions=functions
            )
        declared, closed = self._declared(name)
        if closed and declared and all(key in cut.values for key in declared):
            # Every value that arrived whole goes in, as in the whole call; only the one the
            # cut fell in, which the tool does not take, is left out.
            arguments = arguments_text(cut.values)
            result = await self.invoke(
                name, arguments, call_id, position=position, functions=functions
            )
            line = cut_after_arguments(name, declared, cut_key=cut.cut_key)
            result.text = f"{line}\n{result.text}"
            return result
        return self._keep_cut(name, partial_raw_arguments, cut, call_id, position, declared, closed)

    def _keep_cut(
        self,
        name: str,
        raw: str,
        cut: CutArguments,
        call_id: str | None,
        position: Position | None,
        declared: list[str],
        closed: bool,
    ) -> ToolResult:
        """A cut-off call that cannot run: saved as ``partial`` with the notice that says
        how to go on, or refused unsaved when nothing can go on from it. ``declared`` and
        ``closed``: what :meth:`_declared` says of its tool."""
        if closed and cut.open_key not in (None, *declared):
            # Cut in a string the tool does not take: going on with it would not help.
            cut = dataclasses.replace(cut, open_key=None, open_prefix="")
        if cut.open_key is None:
            if name == EDIT_TOOL or not cut.values:
                notice = cut_unsaved_notice(cut)
                return self._with_notes(ToolResult(notice, HistoryStatus.ERROR, name, None, None))
            missing = missing_arguments(cut, declared, closed)
            return self._save_cut(name, raw, cut, call_id, position, missing)
        if name == EDIT_TOOL and not {"call_id", "previous_ordinal"} & set(cut.values):
            # The edit's target did not arrive whole: a completion could not say which call.
            refused = ToolResult(CUT_NO_TARGET, HistoryStatus.ERROR, name, None, None)
            return self._with_notes(refused)
        # The arguments after the one the cut fell in never came: the completion adds them.
        later = [key for key in missing_arguments(cut, declared, closed) if key != cut.open_key]
        return self._save_cut(name, raw, cut, call_id, position, later)

    def _declared(self, name: str) -> tuple[list[str], bool]:
        """The arguments a registered tool's schema declares, and whether it allows no
        others (``additionalProperties: false``); none, and False, for the edit tool."""
        if name not in self._tools:
            return [], False
        parameters = self._parameters(name)
        properties = parameters.get("properties")
        declared = list(properties) if isinstance(properties, dict) else []
        return declared, bool(declared) and parameters.get("additionalProperties") is False

    def _save_cut(
        self,
        name: str,
        raw: str,
        cut: CutArguments,
        call_id: str | None,
        position: Position | None,
        missing: list[str] | None = None,
    ) -> ToolResult:
        """Journal a cut-off call with status ``partial``; the notice says how to go on:
        ``append`` the rest of its open string, or add the ``missing`` arguments."""
        try:
            call = self.journal.begin_partial(
                raw, cut, tool=name, call_id=call_id, position=position
            )
        except (OSError, StoreError) as exc:
            text = said.NATIVE_CUT_NOT_SAVED.render(problem=exc)
            return self._with_notes(ToolResult(text, HistoryStatus.ERROR, name, None, None))
        self._warn.reset()  # the store works again: a new problem is news
        self._finish(call, HistoryStatus.PARTIAL, None)
        if cut.open_key is not None:
            notice = partial_notice(call.id, cut.open_key, cut.open_prefix, missing or [])
        else:
            notice = cut_saved_notice(call.id, cut, missing or [])
        saved = ToolResult(notice, HistoryStatus.PARTIAL, name, call.id, call.path, notice)
        return self._with_notes(saved)

    def call_partial_sync(
        self, name: str, partial_raw_arguments: str, call_id: str | None = None
    ) -> ToolResult:
        """``call_partial`` for a synchronous loop; also works inside a running event loop."""
        result: ToolResult = run_sync(self.call_partial)(name, partial_raw_arguments, call_id)
        return result

    def _with_notes(self, result: ToolResult) -> ToolResult:
        """``result`` with the store problems not yet told, a line each, at the end of its text."""
        notes = list(self._notes)
        self._notes.clear()
        for note in notes:
            result.text = f"{result.text}\n{PREFIX}{note}"
        return result

    def _unknown_tool(self, name: str) -> str:
        return said.NATIVE_NO_SUCH_TOOL.render(
            name=name, offered=", ".join([*self._tools, EDIT_TOOL])
        )

    def _function(self, name: str, functions: Mapping[str, ToolFunction]) -> ToolFunction | None:
        function = self.function(name)
        if function is None:
            return None
        return functions.get(name, function)

    async def _direct(
        self, name: str, raw: str, call: Call | None, functions: Mapping[str, ToolFunction]
    ) -> ToolResult:
        function = self._function(name, functions)
        if function is None:
            return self._refused(call, name, self._unknown_tool(name), "UnknownTool")
        try:
            arguments = decode_arguments(raw)
        except ValueError as exc:
            return self._refused(call, name, f"the arguments of {name} {exc}", "ValueError")
        return await self._run(name, function, arguments, call)

    async def _run(
        self, name: str, function: ToolFunction, arguments: dict[str, Any], call: Call | None
    ) -> ToolResult:
        """Call the tool; journal and describe the outcome, with a notice on failure."""
        token = _current.set(call)
        try:
            value = function(**arguments)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            ename, text = describe_failure(exc)
            notice = None
            if call is not None and call.bytes >= self.notice_min_bytes:
                notice = native_failure_notice(call.id, field=likely_field(arguments))
                text = f"{text}\n{notice}"
            self._finish(call, HistoryStatus.ERROR, ename)
            return ToolResult(text, HistoryStatus.ERROR, name, *_where(call), notice, ename)
        except BaseException:  # cancelled or interrupted: record it, and let it go on
            self._finish(call, HistoryStatus.INTERRUPTED, None)
            raise
        finally:
            _current.reset(token)
        self._finish(call, HistoryStatus.OK, None)
        return ToolResult(as_text(value), HistoryStatus.OK, name, *_where(call))

    async def _edit(
        self, raw: str, call: Call | None, functions: Mapping[str, ToolFunction]
    ) -> ToolResult:
        own_id = call.id if call is not None else None
        try:
            edit = prepare_edit(raw, self.journal, self._tools, self._aims, own_id)
        except PtcRetryError as exc:
            aim = self._aims.get(own_id) if own_id is not None else None
            aim_tool = self.journal.tool_of(aim) if aim is not None else None
            unchanged = ""
            if aim_tool is not None and aim_tool != EDIT_TOOL:
                unchanged = f", {aim} ({aim_tool}) is unchanged"
            text = f"{EDIT_TOOL} failed, nothing ran{unchanged}: {exc}"
            return self._refused(call, EDIT_TOOL, text, type(exc).__name__)
        if edit.completes and edit.tool != EDIT_TOOL:
            declared, closed = self._declared(edit.tool)
            lacking = [key for key in declared if closed and key not in edit.arguments]
            if lacking:  # a tool never runs without an argument it takes
                appended = json.loads(raw).get("append") is not None  # prepare_edit read it
                sent = patch_paths(raw)
                text = completion_lacking(edit.target, edit.tool, lacking, appended, sent)
                return self._refused(call, EDIT_TOOL, text, "ReplayError")
        # A completion names the cut-off call it completed (extend_of), a replay the call it
        # re-ran (replay_of), as the kernel's ptc_retry.extend and ptc_retry.replay do.
        replay_of, extend_of = (None, edit.target) if edit.completes else (edit.target, None)
        if call is not None:
            try:
                patched = arguments_text(edit.arguments)
                self.journal.save_replay(
                    call, patched, tool=edit.tool, replay_of=replay_of, extend_of=extend_of
                )
            except (OSError, StoreError) as exc:  # the replay still runs; only a re-fix is lost
                call.tool, call.replay_of, call.extend_of = edit.tool, replay_of, extend_of
                self._warn(f"the patched arguments were not saved ({exc})")
        function = self._function(edit.tool, functions)
        assert function is not None  # prepare_edit checked that the tool is registered
        result = await self._run(edit.tool, function, edit.arguments, call)
        result.replay_of, result.extend_of = replay_of, extend_of
        head = f"{'completed' if edit.completes else 'replayed'} {edit.target} ({edit.tool})"
        if edit.entries:
            noun = "entry" if edit.entries == 1 else "entries"
            head = f"{head} with {edit.entries} patch {noun}"
        joiner = ": " if result.status == HistoryStatus.OK else "; it failed: "
        result.text = f"{head}{joiner}{result.text}"
        return result

    # -- journal plumbing ----------------------------------------------------------------------

    def _begin(
        self, raw: str, tool: str, call_id: str | None, position: Position | None
    ) -> Call | None:
        try:
            call = self.journal.begin(raw, tool=tool, call_id=call_id, position=position)
        except (OSError, StoreError) as exc:  # the tool runs anyway, unsaved
            self._warn(f"the arguments were not saved ({exc})")
            return None
        self._warn.reset()  # the store works again: a new problem is news
        return call

    def _finish(self, call: Call | None, status: str, ename: str | None) -> None:
        if call is None:
            return
        try:
            self.journal.finish(call, status, ename=ename)
        except (OSError, StoreError) as exc:
            self._warn(f"the history was not written ({exc})")

    def _refused(self, call: Call | None, tool: str, text: str, ename: str) -> ToolResult:
        """A call that could not run at all: journaled as an error, no notice."""
        self._finish(call, HistoryStatus.ERROR, ename)
        return ToolResult(text, HistoryStatus.ERROR, tool, *_where(call), None, ename)


def _where(call: Call | None) -> tuple[str | None, Path | None]:
    return (call.id, call.path) if call is not None else (None, None)
