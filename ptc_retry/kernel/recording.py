"""The recording of a program's tool calls, and what a replay reuses from it.

Each call a program makes (a host tool's, or a ``@ptc_retry.recorded`` function's) is one
JSON line of ``tool-calls/<id>.jsonl`` in the session (docs/storage.md, "Tool calls", shows
the format). A recording holds every call of its program's whole run, in order: a resume
starts its own with the lines of the calls made by the statements it skips. A replay
matches each call by its place in the recording of the program it replays (:class:`Reuse`):
a call that is the recorded one (same tool and arguments) gets its result; a recorded
failure goes live without ending the reuse; a call that differs from a recorded success
sends every later one live. A recorded function's call that matches but whose code or reads
differ (:mod:`.fingerprint`) goes live without ending the match. Plain Python: no IPython
here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import sentences as said
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
        tool's schema defaults filled in on both sides."""
        if self.arguments is None:  # not JSON: no telling whether it is the same
            return False
        if line.get("tool") != self.tool:
            return False
        recorded = _filled(line.get("arguments"), self.defaults)
        return canonical(recorded) == canonical(_filled(self.arguments, self.defaults))

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


class Reuse:
    """What one replay may take from the whole recording of the program it replays.

    ``calls``: that program's calls in order, from the statement the replay starts at
    (:meth:`RecordedCalls.from_statement`). ``call_id`` and ``source`` name the replayed
    program (``source`` for the model). ``fresh``: this replay makes every call live, and
    so do the replays it runs. ``then``: when that program was itself a fix that stopped
    early, the program it ran again, placed after the calls the fix made (:meth:`follow`):
    what the fix never reached, which the replay's calls take once ``calls`` run out.

    Calls are matched by their place in the whole sequence. The next call takes the result
    of the next recorded success when it is the same call (tool, arguments, a recorded
    function's code); the recorded failures before that success are passed over, since
    failed calls left no result to reuse and a retry loop may stop sooner this time. A call
    that is one of the failures passed over (by it or by an earlier call: the other half of
    a ``gather``) goes live, and matching goes on. When such a call succeeds, a retry loop
    may stop sooner than it did then: a later call that differs from the next recorded one
    is matched after the recorded success of the retried call (the attempts in between are
    the ones this run made needless). A call that differs from the next recorded success
    ends the reuse: every later call goes live.
    """

    def __init__(
        self,
        calls: Sequence[dict[str, Any]],
        *,
        call_id: str,
        source: str,
        fresh: bool = False,
        next_k: int | None = None,
        then: Reuse | None = None,
        failures: bool = False,
    ) -> None:
        #: A host tool call that failed is given its recorded failure (see ``take``).
        self.failures = failures
        self.call_id = call_id
        self.source = source
        self.fresh = fresh
        self._calls = [] if fresh else list(calls)
        self._next = 0
        self.then = None if fresh else then
        self._ended = not self._calls and self.then is None
        #: The places of recorded failures passed over and not matched since.
        self._passed: list[int] = []
        #: The ``k`` the replayed program's next call after its recorded ones had, when its
        #: recording is whole: a call past them may be one whose line was never written
        #: (its kernel died while it ran), which the host may still be running.
        self._unrecorded = None if fresh else next_k
        #: The lines of the calls made within the recorded call ``take`` last gave a result.
        self.inner: list[dict[str, Any]] = []
        #: The replay whose recording gave the result ``take`` last returned: this one, or
        #: one of ``then``.
        self.giver: Reuse = self
        #: The calls made while this replay ran, whichever replay's recording gave a result.
        self.reused = 0
        self.live = 0
        self._sources: list[str] = []
        #: The live calls that make a recorded failure again, with its place.
        self._retried: list[tuple[CallRecord, int]] = []
        #: Places past the recorded attempts that a live retry's success made needless.
        self._skips: list[int] = []

    @property
    def ended(self) -> bool:
        """Whether every later call goes live: a call differed from the recorded ones."""
        if self._ended:
            return True
        return self._next >= len(self._calls) and self.then is not None and self.then.ended

    def take(self, record: CallRecord) -> dict[str, Any] | None:
        """The recorded line whose result ``record`` (the replay's next call) reuses, or
        None: it goes live. Moves this replay's place in its recording either way."""
        self.inner, self.giver = [], self
        if self._ended:
            self._past_recording(record)
            return None
        calls, first = self._calls, self._next
        if self.failures and first < len(calls) and _given_failure(calls[first], record):
            self._next = first + 1
            return calls[first]
        success = first
        while success < len(calls) and calls[success].get("ok") is not True:
            success += 1
        if success < len(calls) and record.matches(calls[success]):
            self._passed += range(first, success)
            self._next = success + 1
            line = calls[success]
            # A result recorded as not reusable (or a damaged line that holds none), or that a
            # recorded function would not return now (its code or reads differ): this call
            # goes live, and the next may still match, the calls it makes inside first.
            if not (record.may_take(line) and "result" in line):
                return None
            self._next = _past_inner(calls, success)
            self.inner = calls[success + 1 : self._next]
            return line
        places = [*self._passed, *range(first, success)]
        failure = next((i for i in places if record.matches(calls[i])), None)
        if failure is None and self._skip_retries():
            return self.take(record)  # the attempts a live retry made needless are passed
        if failure is None and success == len(calls) and self.then is not None:
            # This recording ran out: the program it ran again goes on.
            self._passed += range(first, success)
            self._next = success
            given = self.then.take(record)
            self.inner, self.giver = self.then.inner, self.then.giver
            return given
        if failure is None:  # when in doubt, go live
            self._ended = True
            if success < len(calls):  # it differs from a recorded call: no place to follow
                self._unrecorded = None
            else:
                self._past_recording(record)
            return None
        if failure in self._passed:
            self._passed.remove(failure)
        else:
            self._passed += range(first, failure)
            self._next = failure + 1
        self._retried.append((record, failure))
        if record.retry_of is None:
            record.retry_of = origin(calls[failure], self.call_id)
        return None

    def succeeded(self, record: CallRecord) -> None:
        """``record``, a live call that made a recorded failure again, succeeded: a retry
        loop that stops sooner than it did then never makes the attempts that followed that
        failure up to the recorded success of the same call. The next call that differs from
        the recorded ones may be matched after that success instead (:meth:`take`). The
        programs of ``then`` see it too: the failure may be one of theirs."""
        if self.then is not None:
            self.then.succeeded(record)
        for retry, failure in self._retried:
            if retry is record:
                calls = self._calls
                later = range(failure + 1, len(calls))
                success = next(
                    (i for i in later if calls[i].get("ok") is True and record.matches(calls[i])),
                    None,
                )
                if success is not None:
                    self._skips.append(_past_inner(calls, success))
                self._retried.remove((retry, failure))
                return

    def _skip_retries(self) -> bool:
        """Move past the attempts a live retry's success made needless, when they lie ahead:
        True when there is such a place to match from."""
        while self._skips:
            place = self._skips.pop()
            if place > self._next:
                self._next = place
                return True
        return False

    def follow(self, lines: Sequence[dict[str, Any]]) -> bool:
        """Move this replay's place past ``lines``: the calls of a fix of its program that
        stopped early, from the statement the fix started at. True when each of them
        matched as it did when that fix ran (a reused line is one this recording gives),
        so that what follows is what the fix never reached; False when they parted."""
        index = 0
        while index < len(lines):
            line = lines[index]
            record = CallRecord(
                0, str(line.get("tool")), line.get("arguments"), None,
                line.get("code"), line.get("reads"),
            )  # fmt: skip
            record.reusable = line.get("reusable", True) is not False
            record.schema = line.get("schema")
            defaults = line.get("defaults")  # compared as the fix's call was
            record.defaults = defaults if isinstance(defaults, dict) else None
            taken = self.take(record)
            if self.ended or (taken is not None) != (line.get("reused") is True):
                return False  # they parted, or the fix made its calls afresh
            index = _past_inner(lines, index) if taken is not None else index + 1
        return True

    def _past_recording(self, record: CallRecord) -> None:
        """``record`` comes after every recorded call: it may be the call of the replayed
        program that was running, unrecorded, when its kernel died."""
        if self._unrecorded is None:
            return
        if record.retry_of is None:
            record.retry_of = [self.call_id, self._unrecorded]
        self._unrecorded += 1

    def count(self, source: str | None) -> None:
        """A call was made while this replay ran: reused from ``source``, or live (None)."""
        if source is None:
            self.live += 1
            return
        self.reused += 1
        if source not in self._sources:
            self._sources.append(source)

    def sentence(self) -> str | None:
        """The one line the model reads after the replay, when something was reused: the
        calls made while it ran, counted exactly, and the programs whose results they got."""
        if not self.reused:
            return None
        results = "result" if self.reused == 1 else "results"
        calls = "call" if self.live == 1 else "calls"
        sources = " and ".join(self._sources)
        return said.TOOL_RESULTS_REUSED.render(
            reused=self.reused, results=results, sources=sources, live=self.live, calls=calls
        )


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


def _past_inner(calls: Sequence[dict[str, Any]], index: int) -> int:
    """The place after ``calls[index]`` and the calls made inside it (those of a recorded
    function, whose reused result stands for them: they are not made again)."""
    outer = {calls[index].get("k")}
    end = index + 1
    while end < len(calls) and calls[end].get("within") in outer:
        outer.add(calls[end].get("k"))
        end += 1
    return end


class Reuses:
    """The replays running in one program, outermost first (a program may replay, and a
    replayed program may replay again), and what each call takes from them."""

    def __init__(self) -> None:
        self._running: list[Reuse] = []

    def enter(self, reuse: Reuse) -> bool:
        """A replay starts; True when it is the outermost, whose sentence the model reads."""
        self._running.append(reuse)
        return len(self._running) == 1

    def leave(self, reuse: Reuse) -> None:
        """A replay ended (it may end after one that started later, under gather)."""
        if reuse in self._running:
            self._running.remove(reuse)

    def take(self, record: CallRecord) -> tuple[Reuse, dict[str, Any]] | None:
        """The replay whose recording gives ``record`` its result, and that line; None: the
        call goes live.

        Every running replay sees the call, so each keeps its place in its own recording.
        The outermost one that has a result gives it: its recording holds what the replays
        nested in it took, and a nested one still serves when the outer recording lacks the
        call (an extend of a cut-off replay, whose own recording is empty).
        """
        found: tuple[Reuse, dict[str, Any]] | None = None
        for reuse in self._running:
            line = reuse.take(record)
            if found is None and line is not None:
                found = (reuse.giver, line)
        if any(reuse.fresh for reuse in self._running):
            found = None
        source = found[0].source if found is not None else None
        for reuse in self._running:
            reuse.count(source)
        return found

    def succeeded(self, record: CallRecord) -> None:
        """A live call ended with a result: each replay sees it (:meth:`Reuse.succeeded`)."""
        for reuse in self._running:
            reuse.succeeded(record)

    def not_made(self) -> None:
        """A call counted live was never made: the host paused or denied it."""
        for reuse in self._running:
            reuse.live -= 1

    def joined(self, source: str, *, result: bool) -> None:
        """A call counted live was given the outcome of an earlier call of ``source`` by the
        host instead: not made live, and reused from there when that outcome is a result."""
        for reuse in self._running:
            reuse.live -= 1
            if result:
                reuse.count(source)


def _given_failure(line: dict[str, Any], record: CallRecord) -> bool:
    """Whether ``record``, a host tool call, takes the recorded failure ``line``: the same
    call, which failed with an error of its own (not paused, cancelled or cut short)."""
    if record.code is not None or line.get("ok") is not False or line.get("paused"):
        return False
    error = line.get("error")
    if not isinstance(error, str) or error.startswith(_NOT_THE_TOOLS):
        return False
    return record.matches(line)


#: How the failures that are not the tool's own begin: the call was cut short, so it is made
#: again.
_NOT_THE_TOOLS = (
    "cancelled while it ran",
    "interrupted while it ran",
    "no end recorded",
    "the program ended before",
    "denied:",
)
