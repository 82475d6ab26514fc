"""The repeated-failure guard: notice when an agent sends the same failing program again and
again. The rules live here, in ``failure_key`` and ``RepeatedFailureGuard``.

Plain Python: this module knows nothing of IPython or Jupyter; the extension
feeds it every finished call and asks it whether to refuse the next one.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .sentences import GUARD_REFUSAL

#: The values of ``PtcRetry.guard_mode``.
GUARD_MODES = ("off", "observe", "pause")

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def canonical_arguments(arguments: str) -> str:
    """``arguments`` as canonical JSON, or unchanged when it is not JSON."""
    try:
        decoded = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments
    try:
        return json.dumps(decoded, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments


def error_summary(error: BaseException) -> str:
    """The first line of ``error``'s message, object addresses masked.

    A SyntaxError gives its message and line, not its file name: a replay's file
    name holds its own call id, which differs on every try.
    """
    if isinstance(error, SyntaxError):
        message = f"{error.msg} (line {error.lineno})"
    else:
        try:
            message = str(error)
        except Exception:  # a broken __str__ must not break the guard
            message = ""
    first = message.split("\n", 1)[0]
    return _ADDRESS.sub("0x...", first)


def failure_key(tool: str, arguments: str, error: BaseException) -> str:
    """The key that makes two failures the same (a digest, so no program text is kept).

    Two failures are *the same* when their keys are equal. A key is made of the tool
    name, the call's arguments as canonical JSON (keys sorted at every level, arrays
    kept in order, no whitespace between tokens; whitespace inside the program text
    counts), the exception's class name, and the first line of its message with
    object addresses (``0x7f3a...``) masked.
    """
    digest = hashlib.sha256()
    for part in (tool, canonical_arguments(arguments), type(error).__name__, error_summary(error)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass
class Streak:
    """Consecutive identical failures within one turn."""

    key: str
    tool: str
    ename: str
    turn: int
    count: int
    first_id: str | None
    first_time: float
    last_id: str | None
    last_time: float


class RepeatedFailureGuard:
    """Counts identical failures in a row and, in ``pause`` mode, pauses after ``limit``.

    The guard counts consecutive failures with one key (``failure_key``) within one turn:
    a success, a failure with another key, a call of an excluded tool, or a call of
    another turn ends the streak. What a program prints to stderr is not a failure.

    When a streak reaches the limit, the caller is told once (``record`` returns the
    report with ``reached=True``); in ``pause`` mode the guard then stays paused, and
    the caller refuses every program, until :meth:`reset`.

    Reports hold only metadata (tool, exception name, counts, ids, times), never
    program text, error text or values, so they are safe to log and to show. State
    lives in memory only: one guard per kernel session, fresh after a restart.
    """

    def __init__(
        self, *, mode: str = "observe", limit: int = 3, exclude: Iterable[str] = ()
    ) -> None:
        if mode not in GUARD_MODES:
            raise ValueError(f"guard mode must be one of {', '.join(GUARD_MODES)}, not {mode!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 2:
            raise ValueError(f"the failure limit must be an integer >= 2, not {limit!r}")
        self.mode = mode
        self.limit = limit
        self.exclude = frozenset(exclude)
        self.streak: Streak | None = None
        #: The streak that paused the guard; None when programs run.
        self.paused: Streak | None = None
        #: Programs refused since the pause began.
        self.refused = 0

    def reset(self) -> None:
        """Forget the streak and lift the pause."""
        self.streak = None
        self.paused = None
        self.refused = 0

    @property
    def refusing(self) -> bool:
        """Whether the next program must be refused."""
        return self.paused is not None and self.mode == "pause"

    def counts(self, tool: str) -> bool:
        return self.mode != "off" and tool not in self.exclude

    def count_if_failed(self, key: str, tool: str, turn: int) -> int:
        """The streak's length if a failure with ``key`` were recorded now; 0 if not counted."""
        if not self.counts(tool):
            return 0
        streak = self.streak
        if streak is not None and streak.key == key and streak.turn == turn:
            return streak.count + 1
        return 1

    def record(
        self,
        key: str | None,
        *,
        tool: str,
        turn: int,
        ename: str | None = None,
        call_id: str | None = None,
        when: float | None = None,
    ) -> dict[str, Any] | None:
        """Record a finished call: ``key`` of its failure, or None for a success.

        Returns the report when the call's failure makes the streak reach or pass the
        limit (``reached`` is true exactly once per streak), else None.
        """
        if key is None or not self.counts(tool):
            self.streak = None
            return None
        when = time.time() if when is None else when
        streak = self.streak
        if streak is not None and streak.key == key and streak.turn == turn:
            streak.count += 1
            streak.last_id, streak.last_time = call_id, when
        else:
            streak = self.streak = Streak(
                key, tool, ename or "", turn, 1, call_id, when, call_id, when
            )
        if streak.count < self.limit:
            return None
        if self.mode == "pause" and self.paused is None:
            self.paused = streak
        return self.report(streak, reached=streak.count == self.limit)

    def refuse(self) -> dict[str, Any]:
        """Count one refused program and return the report of the pause."""
        assert self.paused is not None
        self.refused += 1
        return self.report(self.paused)

    def report(self, streak: Streak, *, reached: bool = False) -> dict[str, Any]:
        """The metadata-only report of ``streak``."""
        return {
            "mode": self.mode,
            "limit": self.limit,
            "paused": self.paused is not None,
            "reached": reached,
            "tool": streak.tool,
            "ename": streak.ename,
            "turn": streak.turn,
            "count": streak.count,
            "first_id": streak.first_id,
            "first_time": round(streak.first_time, 3),
            "last_id": streak.last_id,
            "last_time": round(streak.last_time, 3),
            "refused": self.refused,
        }

    def status(self, name: Callable[[str], str] = str) -> str:
        """One line for a person (``%ptc_guard``); ``name`` gives the name a person knows a
        program by (its ``#n``) for a call id."""
        head = f"ptc-retry guard: mode {self.mode}, limit {self.limit}"
        if self.exclude:
            head += f", not counting {', '.join(sorted(self.exclude))}"
        if self.paused is not None:
            return (
                f"{head}. PAUSED: {describe(self.paused, name)}; {self.refused} program(s) "
                f"refused since. A person lifts it with %ptc_guard reset alone in a cell."
            )
        if self.streak is not None:
            return f"{head}. Current streak: {describe(self.streak, name)}."
        return f"{head}. No failures in a row."


#: The tool every program a person runs in a notebook counts as: not named to them.
_PROGRAM_TOOL = "run_code"


def describe(streak: Streak, name: Callable[[str], str] = str) -> str:
    """``3 identical failures (KeyError), #1 at 12:00:01 to #3 at 12:00:09``: the programs by
    ``name`` of their call ids; the tool is named when it is another than ``run_code``."""
    first = f"{name(streak.first_id or '?')} at {_clock(streak.first_time)}"
    last = f"{name(streak.last_id or '?')} at {_clock(streak.last_time)}"
    span = first if streak.count == 1 else f"{first} to {last}"
    tool = "" if streak.tool == _PROGRAM_TOOL else f" of {streak.tool}"
    return f"{streak.count} identical failure(s){tool} ({streak.ename}), {span}"


def refusal_message(report: dict[str, Any], name: Callable[[str], str] = str) -> str:
    """What a refused program shows instead of running (the ``evalue`` of RetryGuardPaused);
    ``name`` gives the name a person and the model know a program by (its ``#n``) for a
    call id."""
    return GUARD_REFUSAL.render(
        tool=report["tool"],
        count=report["count"],
        ename=report["ename"],
        first=name(report["first_id"] or "?"),
        first_time=_clock(report["first_time"]),
        last=name(report["last_id"] or "?"),
        last_time=_clock(report["last_time"]),
    )


def _clock(stamp: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(stamp))
