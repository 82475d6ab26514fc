"""The recording of a program's tool calls, and what a replay reuses from it.

Each call a program makes (a host tool's, or a ``@ptc_retry.recorded`` function's) is one
JSON line of ``tool-calls/<id>.jsonl`` in the session (docs/storage.md, "Tool calls", shows
the format; :mod:`.call_lines` reads and writes one line). A recording holds every call of
its program's whole run, in order: a resume starts its own with the lines of the calls made
by the statements it skips. A replay matches each call by its place in the recording of the
program it replays (:class:`Reuse`): a call that is the recorded one (same tool and
arguments) gets its result; a recorded failure goes live without ending the reuse; a call
that differs from a recorded success sends every later one live. A recorded function's call
that matches but whose code or reads differ (:mod:`.fingerprint`) goes live without ending
the match. Plain Python: no IPython here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import sentences as said
from .call_lines import CallRecord, canonical, origin


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
    is matched after the recorded success of the retried call, or after its last recorded
    failure when every attempt failed then (the attempts in between are the ones this run
    made needless). A call that differs from the next recorded success
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
        if success < len(calls) and (
            record.matches(calls[success]) or record.uncompared(calls[success])
        ):
            self._passed += range(first, success)
            self._next = success + 1
            line = calls[success]
            # A result recorded as not reusable (or a damaged line that holds none), or that a
            # recorded function would not return now (its code or reads differ, or arguments
            # that are not JSON left no telling): this call goes live, and the next may
            # still match, the calls it makes inside first.
            if record.arguments is None or not (record.may_take(line) and "result" in line):
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
        failure up to the recorded success of the same call (up to its last recorded failure,
        when the loop gave up then). The next call that differs from the recorded ones may be
        matched after that place instead (:meth:`take`), and after the recorded calls that
        follow it and make again the calls this run made after the failure (the other half
        of a ``gather``). The programs of ``then`` see it too: the failure may be one of
        theirs."""
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
                if success is None:  # every attempt failed then: the loop gave up after
                    tried = [i for i in later if calls[i].get("ok") is False]
                    success = next((i for i in reversed(tried) if record.matches(calls[i])), None)
                if success is not None:
                    place = _past_inner(calls, success)
                    # The calls this run made after the failure, in its attempt (the other
                    # half of a gather), are made again after that success in the recorded
                    # attempt: past them too.
                    for taken in calls[failure + 1 : self._next]:
                        if place >= len(calls) or not _same_call(calls[place], taken):
                            break
                        place = _past_inner(calls, place)
                    self._skips.append(place)
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


def _same_call(line: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two recorded lines are calls of the same tool with the same arguments."""
    return line.get("tool") == other.get("tool") and canonical(line.get("arguments")) == (
        canonical(other.get("arguments"))
    )


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
