"""The recording of a program's tool calls, and what a replay reuses from it.

Each call a program makes (a host tool's, or a ``@ptc_retry.recorded`` function's) is one
JSON line of ``tool-calls/<id>.jsonl`` in the session (the README's Storage section shows
the format). A replay walks the recording of the program it replays: its k-th call gets the
result of the k-th successful recorded call when the tool, the arguments (and a recorded
function's code) are the same and every call before it matched; from the first difference
on, every call goes live. Plain Python: no IPython here.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Iterable, Sequence
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


def code_digest(function: Any) -> str | None:
    """A short digest of a function's source text, so that a replay that edits a recorded
    function does not reuse its old results; None when its source cannot be had (a builtin).

    The source, not the bytecode: the same text compiles to other bytecode in a cell than in
    a replay (their compile flags differ).
    """
    try:
        text = inspect.getsource(function)
    except Exception:  # OSError, TypeError; tokenize's errors on odd sources
        return None
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]


@dataclass
class CallRecord:
    """One call of a running program, as its line in the recording says it."""

    k: int  # 1-based position among the program's calls
    tool: str
    arguments: Any  # canonical JSON value; None when the arguments are not JSON
    statement: int | None  # the program's top-level statement that made the call
    code: str | None = None  # a recorded function's code_digest
    started: float = field(default_factory=time.time)
    ok: bool | None = None  # None while the call runs
    result: Any = None
    error: str | None = None
    #: False when the result (or the arguments) would not come back the same from JSON.
    reusable: bool = True
    #: The call id whose recorded result this call was given, when it was reused.
    reused_from: str | None = None
    duration: float = 0.0

    def matches(self, line: dict[str, Any]) -> bool:
        """Whether ``line`` (a recorded call) is this call: same tool, arguments and code."""
        if self.arguments is None:  # not JSON: no telling whether it is the same
            return False
        return (
            line.get("tool") == self.tool
            and line.get("code") == self.code
            and canonical(line.get("arguments")) == canonical(self.arguments)
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
        if not self.reusable:
            line["reusable"] = False
        if self.reused_from is not None:
            line["reused_from"] = self.reused_from
        return line


class Reuse:
    """What one replay may take from the recording of the program it replays.

    ``records``: that recording's lines. ``start``: the top-level statement the replay starts
    at (a resume; the calls of the statements it skips are not made again and are left out).
    ``recorded_from``: the statement the replayed program itself started at (it was a
    resume), so its recording holds nothing before it.
    ``call_id`` and ``source`` name the replayed program (``source`` for the model).
    """

    def __init__(
        self,
        records: Sequence[dict[str, Any]],
        *,
        call_id: str,
        source: str,
        start: int = 0,
        recorded_from: int = 0,
    ) -> None:
        #: The replayed program's call id, and what the sentence names it (its reference).
        self.call_id = call_id
        self.source = source
        self.reused = 0
        self.live = 0
        self._expected = [] if start < recorded_from else _successes(records, start)
        self._position = 0
        self._diverged = not self._expected

    def take(self, record: CallRecord) -> dict[str, Any] | None:
        """The recorded line whose result ``record`` (the next call) reuses, or None: it goes
        live. A call that differs from its recorded counterpart sends every later one live."""
        found = None
        if not self._diverged and record.matches(self._expected[self._position]):
            candidate = self._expected[self._position]
            self._position += 1
            self._diverged = self._position == len(self._expected)
            # A result recorded as not reusable: this call goes live, the next may still match.
            found = candidate if candidate.get("reusable", True) is not False else None
        else:
            self._diverged = True
        if found is None:
            self.live += 1
        else:
            self.reused += 1
        return found

    def sentence(self) -> str | None:
        """The one line the model reads after the replay, when something was reused."""
        if not self.reused:
            return None
        results = "result" if self.reused == 1 else "results"
        calls = "call" if self.live == 1 else "calls"
        return (
            f"ptc-retry: {self.reused} tool {results} reused from {self.source}; "
            f"{self.live} {calls} made live."
        )


def _successes(records: Iterable[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """The successful calls of a recording, in order, from statement ``start`` on.

    A call's last line is its truth (the host's, when it completed a call the kernel had
    given up on). Only up to the first call that has no line (the kernel died while it ran
    and the host did not complete it, or its line is unreadable): whether it succeeded is
    unknown, so nothing after it can be matched by position. A resume that needs
    statements it cannot see in a line reuses nothing.
    """
    numbered = latest_calls(records)
    found = []
    for k, line in enumerate(numbered, 1):
        if line["k"] != k:
            break
        if line.get("ok") is True:
            found.append(line)
    if start > 0:
        if not all(isinstance(line.get("statement"), int) for line in found):
            return []
        found = [line for line in found if line["statement"] >= start]
    return found
