"""Native mode: a journal of direct tool calls and the ``editPreviousToolCalling`` tool.

An agent that calls tools directly (``write_file``, ``submit_config``, or ``run_code`` as a
plain tool) pays for a whole retry when one long argument holds one small mistake. With
this module the agent loop saves every call's raw argument string, and the model fixes a
failed call with a small patch instead of re-sending it::

    from ptc_retry.native import NativeTools

    tools = NativeTools(root="~/.ptc-retry", session="run-42")

    @tools.register
    def write_file(path: str, content: str) -> str:
        ...

    # give the model tools.definitions("openai") (or "anthropic") and
    # tools.prompt_section(); then for every model message:
    tools.journal.new_message()
    for tc in message.tool_calls:  # in the order the model sent them
        text = await tools.call(tc.function.name, tc.function.arguments, tc.id)

A call that fails with arguments of at least ``notice_min_bytes`` UTF-8 bytes gets a
one-line notice after its error text. The model then sends, for example::

    editPreviousToolCalling({"call_id": "call_3",
        "patch": [{"path": "content", "old_string": "TODO", "new_string": "done"}]})

which loads the saved arguments of ``call_3``, applies the patch (:mod:`ptc_retry.core.patch`),
saves the patched arguments as the edit call's own checkpoint (so a second fix edits the
patched arguments) and runs ``write_file`` again through the registry. Its result starts
with ``replayed call_3 (write_file) with 1 patch entry``.

Messages and ``previous_ordinal``: the calls recorded between two ``new_message()`` calls
are one step of the store, so once the next message starts, ``previous/<n>.json`` is the
n-th call of the message before, also when the edit is not the first call of its message.
A loop that never calls ``new_message()`` makes every call a message of its own (as the
kernel does with cells): ``previous_ordinal`` 1 is then the call just before.

The store and layout are the kernel's (:mod:`ptc_retry.core.store`). A store failure (disk
full, read-only) never stops a tool: the tool runs and its result says once that the
arguments were not saved. Plain Python: no IPython, no Jupyter.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import os
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar, Union

from ..core.errors import CheckpointError, PatchError, PtcRetryError, StoreError
from ..core.notice import NATIVE_NOTICE_MIN_BYTES, native_failure_notice, prompt_section
from ..core.patch import apply_patch, format_path, validate_patch
from ..core.store import Call, CheckpointStore

__all__ = [
    "EDIT_TOOL",
    "EDIT_TOOL_DESCRIPTION",
    "EDIT_TOOL_PARAMETERS",
    "NativeTools",
    "ToolFailure",
    "ToolJournal",
    "ToolResult",
    "current_call",
    "tool_definitions",
]

#: The name of the replay tool, as the model sees it.
EDIT_TOOL = "editPreviousToolCalling"

EDIT_TOOL_DESCRIPTION = """\
Re-run one of your earlier tool calls with a small fix instead of re-sending all its \
arguments. Name the call by call_id, or by previous_ordinal (n-th call of your previous \
message, from 1); not both. The patch entries apply in order to the call's JSON arguments:
- {path, old_string, new_string}: replace text inside the string at path; old_string must \
occur exactly once (replace_all: true replaces every occurrence)
- {path, value}: replace the whole value (any JSON type)
- {path}: delete the key (or array item)
A path names a value from the top-level keys: content, config.mode, items[0].name.
Only for a small correction; otherwise call the tool again with fresh arguments."""

#: JSON schema of the replay tool's arguments.
EDIT_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "previous_ordinal": {
            "type": "integer",
            "minimum": 1,
            "description": "Position of the call in your previous message, from 1.",
        },
        "call_id": {
            "type": "string",
            "minLength": 1,
            "description": "Id of the call to fix, e.g. call_3.",
        },
        "patch": {
            "type": "array",
            "minItems": 1,
            "description": "Entries applied in order to the call's arguments.",
            "items": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Value to change: content, config.mode, items[0].name.",
                    },
                    "value": {"description": "New whole value, any JSON type."},
                    "old_string": {
                        "type": "string",
                        "description": "Exact text to replace inside the string at path.",
                    },
                    "new_string": {"type": "string", "description": "Replacement text."},
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace every occurrence of old_string.",
                    },
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["patch"],
    "additionalProperties": False,
}

_FORMATS = ("openai", "anthropic")
_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}
_LOCATORS = ("previous_ordinal", "call_id")
_MAX_DEPTH = 32  # how deep the notice looks for the longest string; deeper is not worth it

ToolFunction = Callable[..., Any]
Arguments = Union[str, Mapping[str, Any]]  # raw JSON text, or an already decoded object
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


class ToolFailure(Exception):
    """Raise it from a tool to fail with exactly ``text`` as the result the model reads.

    Any other exception reads ``<ExceptionName>: <message>``. ``ename`` goes to the
    history line (default ``"ToolFailure"``).
    """

    def __init__(self, text: str, *, ename: str | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.ename = ename or type(self).__name__


@dataclass
class ToolResult:
    """What one direct call or replay produced; ``text`` is what the model reads."""

    text: str
    status: str  # "ok" or "error"
    tool: str  # the tool that ran or was asked for; for a replay, the original tool
    call_id: str | None  # the journal id; None when the arguments could not be saved
    checkpoint: Path | None  # by-id/<call_id>.json
    notice: str | None = None  # the native failure notice, already at the end of ``text``
    ename: str | None = None
    replay_of: str | None = None  # for a replay: the id of the call it re-ran


# -- the journal ------------------------------------------------------------------------------


class ToolJournal:
    """Every direct tool call of an agent loop, on a :class:`CheckpointStore`.

    ``begin`` saves a call's raw argument string byte for byte as ``by-id/<id>.json``
    before the tool runs; ``finish`` appends its history line. Give either an open
    ``store`` or the ``root``/``session`` to open one with (both optional, as for the
    store). Call :meth:`new_message` before the calls of each model message.
    """

    def __init__(
        self,
        store: CheckpointStore | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        session: str | None = None,
    ) -> None:
        if store is not None and (root is not None or session is not None):
            raise ValueError("ToolJournal: give an open store, or root/session, not both")
        self.store = store if store is not None else CheckpointStore(root, session)
        #: Turn and step recorded with each call; ``step`` None: each call is its own step.
        self.turn = 0
        self.step: int | None = None
        # Steps count up across the session, also across a reopen, so a new message never
        # joins the last message of an earlier process.
        steps = [line.get("step") for line in self.store.history()]
        self._last_step = max((s for s in steps if type(s) is int), default=0)
        self._tools: dict[str, str] = {}  # call id -> the tool its checkpoint is for

    @property
    def session_dir(self) -> Path:
        return self.store.session_dir

    def new_message(self, *, turn: int | None = None) -> int:
        """Start a model message; returns its step number.

        The calls recorded until the next ``new_message`` share one step, in the order
        they begin, and become ``previous/1.json``, ``previous/2.json``, ... when the next
        message's first call begins. ``turn`` (a user turn number) is recorded as is.
        """
        if turn is not None:
            self.turn = turn
        self._last_step += 1
        self.step = self._last_step
        return self.step

    def begin(self, raw_arguments: str, *, tool: str, call_id: str | None = None) -> Call:
        """Save ``raw_arguments`` byte for byte before ``tool`` runs; see ``CheckpointStore.begin``.

        Raises ``OSError`` or ``StoreError`` when the store cannot save.
        """
        call = self.store.begin(
            raw_arguments, call_id=call_id, tool=tool, turn=self.turn, step=self.step
        )
        self._tools[call.id] = tool
        return call

    def finish(self, call: Call, status: str, *, ename: str | None = None) -> dict[str, Any]:
        """Append the call's history line (``status`` ok / error / interrupted) and return it."""
        extra = {"ename": ename} if ename is not None else {}
        return self.store.finish(call, status, **extra)

    def save_replay(self, call: Call, arguments: str, *, tool: str, replay_of: str) -> None:
        """Make ``arguments`` (a patched copy of ``replay_of``'s) the checkpoint of ``call``.

        From then on ``call`` counts as a call of ``tool``: a later edit of it re-runs
        ``tool`` with these arguments, and its history line names ``tool`` and ``replay_of``.
        """
        self.store.replace_arguments(call, arguments, replay_of=replay_of)
        call.tool = tool
        self._tools[call.id] = tool

    def tool_of(self, call_id: str) -> str | None:
        """The tool whose arguments ``by-id/<call_id>.json`` holds, or None if unknown.

        Calls of this journal are known from ``begin`` on, even while they still run;
        older ones (another process, a reopened session) from their history line.
        """
        tool = self._tools.get(call_id)
        if tool is not None:
            return tool
        for line in reversed(self.store.history()):
            if line.get("id") == call_id and isinstance(line.get("tool"), str):
                return line["tool"]
        return None

    def load(self, target: str | int) -> tuple[str, str, dict[str, Any]]:
        """``(call_id, raw, decoded)`` of a call id or ``previous/<n>.json``; see ``store.load``."""
        return self.store.load(target)

    def previous_count(self) -> int:
        """How many calls ``previous/`` holds: those of the previous model message."""
        previous = self.store.session_dir / "previous"
        count = 0
        while os.path.lexists(previous / f"{count + 1}.json"):
            count += 1
        return count

    def latest_ids(self, n: int = 5, *, besides: str | None = None) -> list[str]:
        """The ``n`` most recent call ids, newest first, without ``besides``."""
        return [i for i in self.store.latest_ids(n + 1) if i != besides][:n]

    def close(self) -> None:
        """Close the store (its history file). Idempotent."""
        self.store.close()


# -- the registry -----------------------------------------------------------------------------


@dataclass
class _Tool:
    function: ToolFunction
    description: str | None
    parameters: dict[str, Any] | None


class NativeTools:
    """The loop's tool callables by name, each call journaled, plus ``editPreviousToolCalling``.

    ``await tools.call(name, raw_arguments, call_id)`` returns the text the model reads;
    ``invoke`` returns the whole :class:`ToolResult`. Tools may be sync or async; they are
    called with the decoded JSON arguments as keyword arguments. Calls begin (and are
    numbered within their message) in the order ``call``/``invoke`` is entered.
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
        self._reported: str | None = None  # the latest store problem the model was told of
        self._notes: list[str] = []  # store problems to tell the model in the next result
        for name, function in (tools or {}).items():
            self.register(function, name=name)

    # -- registering ---------------------------------------------------------------------------

    @typing.overload
    def register(self, function: F) -> F: ...

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

    def __contains__(self, name: object) -> bool:
        return name == EDIT_TOOL or name in self._tools

    # -- what the model is given ---------------------------------------------------------------

    def definitions(self, format: str = "openai") -> list[dict[str, Any]]:
        """The registered tools, then ``editPreviousToolCalling``, as ``tool_definitions`` gives."""
        specs = []
        for name, tool in self._tools.items():
            description = tool.description
            if description is None:
                description = _first_paragraph(tool.function)
            parameters = tool.parameters
            if parameters is None:
                parameters = _signature_schema(tool.function)
            specs.append({"name": name, "description": description, "parameters": parameters})
        return tool_definitions(format, specs)

    def prompt_section(self) -> str:
        """The native-mode system-prompt section for this journal's session directory."""
        return prompt_section("native", session_dir=self.journal.session_dir)

    # -- calling -------------------------------------------------------------------------------

    async def call(self, name: str, raw_arguments: Arguments, call_id: str | None = None) -> str:
        """Run one tool call of the model and return the text the model reads."""
        return (await self.invoke(name, raw_arguments, call_id)).text

    def call_sync(self, name: str, raw_arguments: Arguments, call_id: str | None = None) -> str:
        """``call`` for a synchronous loop; raises RuntimeError inside a running event loop."""
        return asyncio.run(self.call(name, raw_arguments, call_id))

    async def invoke(
        self, name: str, raw_arguments: Arguments, call_id: str | None = None
    ) -> ToolResult:
        """Journal and run one tool call (``name`` may be ``editPreviousToolCalling``).

        ``raw_arguments`` is the call's argument string exactly as the model sent it: it is
        saved byte for byte before anything runs. An already decoded object (Anthropic's
        ``input``) is saved as its JSON. Never raises for what the model sent or what the
        tool raised (``Exception``): both become an error result.
        """
        if isinstance(raw_arguments, Mapping):
            raw_arguments = json.dumps(dict(raw_arguments), ensure_ascii=False)
        call = self._begin(raw_arguments, name, call_id)
        if name == EDIT_TOOL:
            result = await self._edit(raw_arguments, call)
        else:
            result = await self._direct(name, raw_arguments, call)
        notes, self._notes = self._notes, []
        for note in notes:
            result.text = f"{result.text}\n[ptc-retry] {note}"
        return result

    async def _direct(self, name: str, raw: str, call: Call | None) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join([*self._tools, EDIT_TOOL])
            text = f"unknown tool {name!r}; the tools are: {known}"
            return self._refused(call, name, text, "UnknownTool")
        try:
            arguments = _decode_arguments(raw)
        except ValueError as exc:
            return self._refused(call, name, f"the arguments of {name} {exc}", "ValueError")
        return await self._run(name, tool.function, arguments, call)

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
            ename, text = _describe_failure(exc)
            notice = None
            if call is not None and call.bytes >= self.notice_min_bytes:
                notice = native_failure_notice(call.id, field=_likely_field(arguments))
                text = f"{text}\n{notice}"
            self._finish(call, "error", ename)
            return ToolResult(text, "error", name, *_where(call), notice, ename)
        except BaseException:  # cancelled or interrupted: record it, and let it go on
            self._finish(call, "interrupted", None)
            raise
        finally:
            _current.reset(token)
        self._finish(call, "ok", None)
        return ToolResult(_as_text(value), "ok", name, *_where(call))

    # -- editPreviousToolCalling ---------------------------------------------------------------

    async def _edit(self, raw: str, call: Call | None) -> ToolResult:
        try:
            target_id, tool_name, function, patched, entries = self._prepare_edit(raw, call)
        except PtcRetryError as exc:
            aim = self._aims.get(call.id) if call is not None else None
            aim_tool = self.journal.tool_of(aim) if aim is not None else None
            unchanged = ""
            if aim_tool is not None and aim_tool != EDIT_TOOL:
                unchanged = f", {aim} ({aim_tool}) is unchanged"
            text = f"{EDIT_TOOL} failed, nothing ran{unchanged}: {exc}"
            return self._refused(call, EDIT_TOOL, text, type(exc).__name__)
        if call is not None:
            try:
                self.journal.save_replay(
                    call,
                    json.dumps(patched, ensure_ascii=False),
                    tool=tool_name,
                    replay_of=target_id,
                )
            except (OSError, StoreError) as exc:  # the replay still runs; only a re-fix is lost
                call.tool, call.replay_of = tool_name, target_id
                self._warn(f"the patched arguments were not saved ({exc})")
        result = await self._run(tool_name, function, patched, call)
        result.replay_of = target_id
        noun = "entry" if entries == 1 else "entries"
        head = f"replayed {target_id} ({tool_name}) with {entries} patch {noun}"
        joiner = ": " if result.status == "ok" else "; it failed: "
        result.text = f"{head}{joiner}{result.text}"
        return result

    def _prepare_edit(
        self, raw: str, call: Call | None
    ) -> tuple[str, str, ToolFunction, dict[str, Any], int]:
        """Check an edit call and apply its patch; raise PatchError/CheckpointError if it can't."""
        try:
            arguments = _decode_arguments(raw)
        except ValueError as exc:
            raise PatchError(f"the arguments {exc}") from None
        unknown = sorted(key for key in arguments if key not in (*_LOCATORS, "patch"))
        if unknown:
            raise PatchError(
                f"unknown argument {', '.join(map(repr, unknown))}; {EDIT_TOOL} takes "
                "call_id or previous_ordinal, and patch"
            )
        # A null locator counts as absent: some clients send every optional field as null.
        given = [key for key in _LOCATORS if arguments.get(key) is not None]
        if len(given) != 1:
            which = "not both" if given else "one is missing"
            raise PatchError(
                'give exactly one of "call_id" (e.g. "call_3") and "previous_ordinal" '
                f"(1 = the first call of your previous message), {which}"
            )
        if "patch" not in arguments:
            raise PatchError(
                '"patch" is missing: give a list of entries, e.g. '
                '[{"path": "content", "old_string": "...", "new_string": "..."}]'
            )
        entries = validate_patch(arguments["patch"])
        own_id = call.id if call is not None else None
        target_id, decoded = self._load_target(given[0], arguments[given[0]], own_id)
        if own_id is not None:
            self._aims[own_id] = target_id
        tool_name = self.journal.tool_of(target_id)
        if tool_name == EDIT_TOOL:
            aim = self._aims.get(target_id)
            fix = f'fix the call it was aimed at (call_id "{aim}")' if aim else "fix its target"
            raise PatchError(
                f"{target_id} is an {EDIT_TOOL} call that did not apply, so nothing of it can "
                f"re-run; {fix} with a new patch"
            )
        if tool_name is None:
            raise CheckpointError(
                f"cannot tell which tool {target_id} called (no record names it); "
                "call the tool again with fresh arguments"
            )
        tool = self._tools.get(tool_name)
        if tool is None:
            raise PatchError(
                f"{target_id} was a call of {tool_name!r}, which is not a tool here "
                f"({', '.join(self._tools) or 'none'}); call a tool with fresh arguments"
            )
        patched = apply_patch(decoded, entries)
        return target_id, tool_name, tool.function, patched, len(entries)

    def _load_target(
        self, locator: str, where: object, own_id: str | None
    ) -> tuple[str, dict[str, Any]]:
        journal = self.journal
        if locator == "previous_ordinal":
            if type(where) is not int or where < 1:
                raise PatchError(
                    f"previous_ordinal must be an integer from 1 (1 = the first call of your "
                    f"previous message), got {json.dumps(where, default=str)}"
                )
            count = journal.previous_count()
            if where > count:
                made = f"made {count} tool calls (previous_ordinal 1 to {count})"
                if count < 2:
                    made = (
                        "made 1 tool call (previous_ordinal 1)" if count else "made no tool calls"
                    )
                recent = ", ".join(journal.latest_ids(besides=own_id)) or "none"
                raise PatchError(
                    f"previous_ordinal {where} is out of range: your previous message {made}; "
                    f"or give a call_id (latest: {recent})"
                )
            target: str | int = where
        else:
            if not isinstance(where, str) or not where:
                raise PatchError(
                    f'call_id must be a non-empty string like "call_3", '
                    f"got {json.dumps(where, default=str)}"
                )
            try:
                journal.store.path_for(where)
            except CheckpointError:
                recent = ", ".join(journal.latest_ids(besides=own_id)) or "none yet"
                raise CheckpointError(
                    f"no saved call has the id {where!r}; the latest ids are: {recent}"
                ) from None
            target = where
        target_id, _, decoded = journal.load(target)
        if target_id == own_id:
            raise PatchError(f"{target_id} is this {EDIT_TOOL} call itself; name an earlier call")
        return target_id, decoded

    # -- journal plumbing ----------------------------------------------------------------------

    def _begin(self, raw: str, tool: str, call_id: str | None) -> Call | None:
        try:
            call = self.journal.begin(raw, tool=tool, call_id=call_id)
        except (OSError, StoreError) as exc:  # the tool runs anyway, unsaved
            self._warn(f"the arguments were not saved ({exc})")
            return None
        self._reported = None
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
        self._finish(call, "error", ename)
        return ToolResult(text, "error", tool, *_where(call), None, ename)

    def _warn(self, message: str) -> None:
        # One warning per distinct problem: the model pays for every line it reads.
        if message != self._reported:
            self._reported = message
            self._notes.append(message)


# -- tool definitions -------------------------------------------------------------------------


def tool_definitions(
    format: str = "openai", tools: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Tool definitions to hand to a model: each of ``tools``, then ``editPreviousToolCalling``.

    ``tools`` are the loop's own tools as ``{"name", "description", "parameters"}`` (a
    JSON schema). ``format="openai"`` gives Chat Completions ``tools`` entries
    (``{"type": "function", "function": {...}}``), ``format="anthropic"`` Messages API
    entries (``{"name", "description", "input_schema"}``). Returns new dicts.
    """
    if format not in _FORMATS:
        raise ValueError(
            f"tool_definitions: unknown format {format!r}; use 'openai' or 'anthropic'"
        )
    edit = {"name": EDIT_TOOL, "description": EDIT_TOOL_DESCRIPTION}
    specs = [*tools, {**edit, "parameters": EDIT_TOOL_PARAMETERS}]
    result = []
    for spec in specs:
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            raise ValueError(f"tool_definitions: a tool needs a non-empty name, got {spec!r}")
        name, description = spec["name"], str(spec.get("description") or "")
        schema = json.loads(json.dumps(spec.get("parameters") or {"type": "object"}))
        if format == "openai":
            function = {"name": name, "description": description, "parameters": schema}
            result.append({"type": "function", "function": function})
        else:
            result.append({"name": name, "description": description, "input_schema": schema})
    return result


def _first_paragraph(function: ToolFunction) -> str:
    doc = inspect.getdoc(function) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _signature_schema(function: ToolFunction) -> dict[str, Any]:
    """A JSON schema of the keyword arguments ``function`` takes, typed where that is plain."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return {"type": "object"}
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable annotations (e.g. "str | None" on Python 3.9)
        hints = {}
    properties: dict[str, Any] = {}
    required = []
    extra = False
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            extra = True
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.POSITIONAL_ONLY):
            continue  # cannot be passed by keyword
        json_type = _JSON_TYPES.get(hints.get(parameter.name))  # type: ignore[arg-type]
        properties[parameter.name] = {"type": json_type} if json_type else {}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema


# -- small pieces -----------------------------------------------------------------------------


def _decode_arguments(raw: str) -> dict[str, Any]:
    """The JSON object ``raw`` holds; ``""`` is ``{}``. ValueError says what is wrong."""
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"are not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"are a JSON {type(decoded).__name__}, not an object; send an object")
    return decoded


def _describe_failure(exc: Exception) -> tuple[str, str]:
    """``(ename, text)``: the model reads ``ename: message``, or a ToolFailure's own text."""
    if isinstance(exc, ToolFailure):
        return exc.ename, exc.text
    ename = type(exc).__name__
    message = str(exc)
    return ename, f"{ename}: {message}" if message else ename


def _as_text(value: Any) -> str:
    """A tool's return value as the model reads it: a str as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a circular structure
        return str(value)


def _likely_field(arguments: dict[str, Any]) -> str:
    """The path of the longest string in ``arguments``: where a small fix most likely goes."""
    best: tuple[int, tuple[str | int, ...]] = (-1, ())
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(arguments, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if path and len(value) > best[0]:
                best = (len(value), path)
        elif len(path) < _MAX_DEPTH:
            if isinstance(value, dict):
                items: list[tuple[Any, tuple[str | int, ...]]] = [
                    (v, (*path, str(k))) for k, v in value.items()
                ]
            elif isinstance(value, list):
                items = [(v, (*path, i)) for i, v in enumerate(value)]
            else:
                continue
            stack.extend(reversed(items))  # so ties go to the first in document order
    return format_path(best[1]) if best[1] else "<field>"


def _where(call: Call | None) -> tuple[str | None, Path | None]:
    return (call.id, call.path) if call is not None else (None, None)
