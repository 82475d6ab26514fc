"""What a store knows of its session's calls, in memory: the ids in use, which are most
recent, the session numbers, and the calls of the current step. No I/O; the store guards it
with its lock."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

from .layout import SessionNumbers, auto_id, auto_number, numbered


class CallIndex:
    """The ids, numbers and steps of one session's calls."""

    def __init__(self, numbers: SessionNumbers | None = None) -> None:
        self.numbers = numbers if numbers is not None else SessionNumbers()
        self._used: set[str] = set()  # every id this session has, case-folded: none is reused
        self._recent: dict[str, None] = {}  # ids, least recent first (dicts keep order)
        self._next_auto = 1  # next N to try for an automatic id c<N>
        self._step_key: object = None  # (turn, step) of the current step
        #: The current step's ids, in ordinal order.
        self.step_ids: list[str] = []

    def restore(self, records: Sequence[dict[str, Any]]) -> None:
        """Take in a reopened session's history: its ids, and its last step, which goes on
        (its calls become ``previous/`` at the next step)."""
        for record in records:
            self.note_id(record["id"])
        if not records:
            return
        last = records[-1]
        if last.get("step") is None:
            self._step_key, self.step_ids = object(), [last["id"]]
            return
        self._step_key = (last.get("turn"), last["step"])
        run = []
        for record in reversed(records):
            if (record.get("turn"), record.get("step")) != self._step_key:
                break
            run.append(record)
        run.sort(key=lambda r: r.get("ordinal") if isinstance(r.get("ordinal"), int) else 0)
        self.step_ids = [r["id"] for r in run]

    def note_id(self, call_id: str) -> None:
        """Record ``call_id`` as in use and the most recent."""
        # Case-folded: on a case-insensitive filesystem "Call_A" and "call_a" are one file.
        self._used.add(call_id.lower())
        self._recent.pop(call_id, None)
        self._recent[call_id] = None
        n = auto_number(call_id)
        if n is not None:
            self._next_auto = max(self._next_auto, n + 1)

    def new_id(self, sanitized: str | None) -> str:
        """The id for a new call: ``sanitized`` (a sent id, sanitized), de-duplicated as
        ``<id>.2``, ``<id>.3``...; without one, the next unused ``c<N>``."""
        if sanitized is None:
            while auto_id(self._next_auto) in self._used:
                self._next_auto += 1
            return auto_id(self._next_auto)
        # A linear probe is fine: callers send unique ids, duplicates are the rare exception.
        cid, n = sanitized, 1
        while cid.lower() in self._used:
            n += 1
            cid = numbered(sanitized, n)
        return cid

    def add(
        self, call_id: str, sent_id: str | None, step_key: object
    ) -> tuple[int, list[str] | None]:
        """Record a new call: ``(its session number, the ids of the step it ended or None)``.

        A call whose ``step_key`` differs from the current step's starts a new step.
        """
        self.note_id(call_id)
        n = self.numbers.next
        self.numbers.note(n, call_id)
        self.numbers.note_sent(call_id, sent_id)
        ended = None
        if step_key != self._step_key:
            ended, self._step_key, self.step_ids = self.step_ids, step_key, []
        self.step_ids.append(call_id)
        return n, ended

    def latest_ids(self, n: int | None = 5) -> list[str]:
        """The ``n`` most recent ids (None: all), newest first."""
        return list(islice(reversed(self._recent), n))

    def recent_text(self) -> str:
        """The five most recent ids with their references, for an error message."""
        return self.numbers.described(self.latest_ids())
