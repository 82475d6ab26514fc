"""One tool call's line in a program's recording (``tool-calls/<id>.jsonl``), and a
recording as read back: what :mod:`.recording`'s reuse rule matches calls against.

A line holds the tool, its arguments (with the schema's ``defaults`` beside them), the
result or error, and where the call was made (docs/storage.md, "Tool calls", shows the
format). Plain Python: no IPython here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.session_files import latest_calls

#: The tool name of a ``@ptc_retry.recorded`` function: ``recorded:<module>.<qualname>``.
RECORDED = "recorded:"


def canonical(value: Any) -> str | None:
    """``value`` as canonical JSON (keys sorted, no spaces), or None when it is not JSON."""
    try:
        return json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError, RecursionError):
        return None


def json_copy(value: Any) -> tuple[bool, Any]:
    """``(True, copy)`` when ``value`` survives a JSON round trip unchanged (so a replay can
    be given the copy instead), else ``(False, None)``: a tuple, a set, an int key, NaN or an
    object would come back as something else."""
    text = canonical(value)
    if text is None:
        return False, None
    copy = json.loads(text)
    return (True, copy) if _same(copy, value) else (False, None)


def _same(copy: Any, value: Any) -> bool:
    # A tuple comes back a list, a subclass (an IntEnum, an OrderedDict) its plain JSON type:
    # equal by ==, yet not what the program had. Compare types too.
    if type(copy) is not type(value):
        return False
    if isinstance(value, dict):
        return copy.keys() == value.keys() and all(_same(copy[k], value[k]) for k in value)
    if isinstance(value, list):
        return len(copy) == len(value) and all(map(_same, copy, value))
    return bool(copy == value)


@dataclass
class CallRecord:
    """One call of a running program, as its line in the recording says it."""

    k: int  # 1-based position among the program's calls
    tool: str
    arguments: Any  # canonical JSON value; None when the arguments are not JSON
    statement: int | None  # the program's top-level statement that made the call
    code: str | None = None  # a recorded function's code_digest
    #: A recorded function's reads_digest (what it reads besides its arguments).
    reads: str | None = None
    started: float = field(default_factory=time.time)
    ok: bool | None = None  # None while the call runs
    result: Any = None
    error: str | None = None
    #: False when the result (or the arguments) would not come back the same from JSON, or
    #: what a recorded function reads could not be fingerprinted.
    reusable: bool = True
    #: The call id whose recorded result this call was given, when it was reused.
    reused_from: str | None = None
    duration: float = 0.0
    #: The ``k`` of the recorded function's call this call was made inside, if any: when
    #: that call's result is reused, this one is not made, and when it goes live (it failed,
    #: or its code changed), this one is matched on its own.
    within: int | None = None
    #: ``[call id, k]`` of the earlier call that this live call makes again, when a replay
    #: matched its failed line (or found this call past every recorded one: a kernel that
    #: died mid-call wrote none): the host may still be running that call, and then gives
    #: this one its outcome instead of calling again.
    retry_of: list[Any] | None = None
    #: The host answered it with a pause: it waits for a person's approval, and never ran.
    paused: bool = False
    #: A host tool's schema digest: what the tool took when the call was made.
    schema: str | None = None
    #: A host tool's schema defaults (``{property: default}``), filled into both sides'
    #: arguments when they are compared: ``tools.f(1)`` is ``tools.f(1, y=2)`` when y's
    #: default is 2. The recording keeps the arguments as they were sent.
    defaults: dict[str, Any] | None = None

    def matches(self, line: dict[str, Any]) -> bool:
        """Whether ``line`` (a recorded call) is this call: same tool and arguments, the
        tool's schema defaults filled in on both sides: the recorded call's own (its line's
        ``defaults``) on its side, when the schema gave them then, so a default the schema
        changed since is the one that call was made with."""
        if self.arguments is None:  # not JSON: no telling whether it is the same
            return False
        if line.get("tool") != self.tool:
            return False
        then = line.get("defaults")
        then = {**(self.defaults or {}), **then} if isinstance(then, dict) else self.defaults
        recorded = _filled(line.get("arguments"), then)
        return canonical(recorded) == canonical(_filled(self.arguments, self.defaults))

    def uncompared(self, line: dict[str, Any]) -> bool:
        """Whether ``line`` is a call of the same recorded function whose arguments, like
        this call's, are not JSON (a tuple, an int key): no telling whether it is the same
        call, so this one goes live, yet in its place (the calls after it may match)."""
        return (
            self.arguments is None
            and self.tool.startswith(RECORDED)
            and line.get("tool") == self.tool
            and line.get("arguments") is None
        )

    def may_take(self, line: dict[str, Any]) -> bool:
        """Whether this call may be given the result of ``line``, a recorded call it matches:
        that result was reusable and, for a recorded function, its code and what it reads
        are known and are what they were (a fix that edits the function, or changes a global
        it reads, makes this call live without making the calls after it differ); for a host
        tool, it takes what it took then (a line that does not say, as the host's own line of
        a call whose kernel died, is taken at its word)."""
        recorded_schema = line.get("schema")
        return (
            self.reusable
            and line.get("reusable", True) is not False
            and line.get("code") == self.code
            and line.get("reads") == self.reads
            and (recorded_schema is None or recorded_schema == self.schema)
        )

    def line(self) -> dict[str, Any]:
        """The recording's line for this call."""
        line: dict[str, Any] = {"k": self.k, "tool": self.tool, "arguments": self.arguments}
        if self.ok:
            line.update(ok=True, result=self.result)
        else:
            line.update(ok=False, error=self.error)
        line.update(duration=round(self.duration, 4), reused=self.reused_from is not None)
        line.update(statement=self.statement, time=round(self.started, 3))
        if self.code is not None:
            line["code"] = self.code
        if self.reads is not None:
            line["reads"] = self.reads
        if self.schema is not None:
            line["schema"] = self.schema
        if self.defaults:
            line["defaults"] = self.defaults
        if not self.reusable:
            line["reusable"] = False
        if self.reused_from is not None:
            line["reused_from"] = self.reused_from
        if self.within is not None:
            line["within"] = self.within
        if self.paused:
            line["paused"] = True
        return line


@dataclass(frozen=True)
class RecordedCalls:
    """The calls a program made, in the order it made them, as far as its lines tell."""

    lines: list[dict[str, Any]]
    #: False when the program made more calls than ``lines`` holds (a line is missing or
    #: unreadable): where the calls after ``lines`` stood is unknown.
    complete: bool = True

    def split(self, start: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        """``(before, after, sure)``: the calls of the top-level statements before ``start``,
        those of ``start`` on, and whether every call is known to be on its side.

        Top-level statements run in order, so the calls' statements never go back: a call
        that does not say its statement, or a missing one between the two sides, makes the
        split unsure (then ``after`` is empty and ``before`` holds what is sure).
        """
        before: list[dict[str, Any]] = []
        for index, line in enumerate(self.lines):
            statement = line.get("statement")
            if not isinstance(statement, int) or isinstance(statement, bool):
                return before, [], False
            if statement >= start:
                return before, self.lines[index:], True
            before.append(line)
        return before, [], self.complete

    def next_k(self, start: int) -> int | None:
        """The ``k`` of the program's first call that has no line, when the lines are known
        to be all there were up to it (and, for a run from ``start``, which side of it each
        is on); None otherwise."""
        if not self.complete or (start > 0 and not self.split(start)[2]):
            return None
        return len(self.lines) + 1

    def from_statement(self, start: int) -> list[dict[str, Any]]:
        """The calls a run that starts at top-level statement ``start`` may be matched
        against, in order; none when it is unsure which ones those are."""
        return list(self.lines) if start <= 0 else self.split(start)[1]


def in_order(lines: Iterable[dict[str, Any]], total: int | None = None) -> RecordedCalls:
    """One recording's calls by ``k``, up to the first ``k`` that has no line.

    When several lines carry the same ``k``, the last one wins (:func:`latest_calls`: the
    host's, when it completed a call the kernel saw fail). ``total`` is how many calls the
    program made, when its history line says so.
    """
    latest = [line for line in latest_calls(lines) if line["k"] > 0]
    ordered: list[dict[str, Any]] = []
    for line in latest:
        if line["k"] != len(ordered) + 1:
            break
        ordered.append(line)
    complete = len(ordered) == len(latest) and (total is None or len(ordered) >= total)
    return RecordedCalls(ordered, complete)


def calls_made(history: dict[str, Any] | None) -> int | None:
    """How many calls a program's run made, by its history line's ``tool_calls``; None when
    the line does not say (the program made none, or it never finished)."""
    counts = (history or {}).get("tool_calls")
    if not isinstance(counts, dict):
        return None
    reused, live = counts.get("reused"), counts.get("live")
    if type(reused) is not int or type(live) is not int:  # a bool is no count
        return None
    return reused + live


def _filled(arguments: Any, defaults: dict[str, Any] | None) -> Any:
    """``arguments`` (an object) with the ``defaults`` of the properties it leaves out."""
    if not defaults or not isinstance(arguments, dict):
        return arguments
    return {**defaults, **arguments}


def origin(line: dict[str, Any], call_id: str) -> list[Any]:
    """``[call id, k]`` of the call that ``line`` (of ``call_id``'s recording) records where
    it was made: a line a resume carried from another program says its origin there."""
    carried = line.get("origin")
    if isinstance(carried, list) and len(carried) == 2:
        return carried
    return [call_id, line.get("k")]
