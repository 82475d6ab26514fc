"""The statuses: how a program ended, in its history line (``HistoryStatus``) and in the
backend's ``RunResult`` (``ResultStatus``). This module is the one list of each, and of the
backend's modes (``Mode``), which are named the same way.

Each member is a ``str`` equal to its value (``HistoryStatus.OK == "ok"``), so it goes into
JSON, the wire and ``history.jsonl`` as the plain string, and a status read back from them
compares equal to its member. Adding a status is adding a member here (with its meaning,
which the CLI help and the docs show) plus the places that must behave differently.
"""

from __future__ import annotations

import enum
import textwrap
from typing import TypeVar

__all__ = [
    "FAILED",
    "STOPPED",
    "HistoryStatus",
    "Mode",
    "Refusal",
    "ResultStatus",
    "history_status",
    "status_table",
]


_S = TypeVar("_S", bound="_Status")


class _Status(str, enum.Enum):
    """A status: its value is what is written, ``meaning`` what a person reads about it."""

    _value_: str
    meaning: str

    def __new__(cls, value: str, meaning: str) -> _Status:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    @classmethod
    def of(cls: type[_S], value: object) -> _S:
        """The member whose value is ``value``; ValueError, naming every value, if none."""
        for member in cls:
            if member.value == value:
                return member
        known = ", ".join(sorted(member.value for member in cls))
        raise ValueError(f"status must be one of {known}, not {value!r}")

    # The value, on every Python version: 3.12 changed what format() gives a mixed-in enum.
    def __str__(self) -> str:
        return self._value_

    def __format__(self, spec: str) -> str:
        return format(self._value_, spec)


class HistoryStatus(_Status):
    """The ``status`` of a ``history.jsonl`` line (and of the reply's metadata)."""

    OK = "ok", "ran to its end"
    ERROR = "error", "failed: an exception or a syntax error"
    INTERRUPTED = "interrupted", "stopped by an interrupt or by its time limit"
    UNFINISHED = (
        "unfinished",
        "saved but never finished (still running, or its kernel died while it ran)",
    )
    REFUSED = "refused", "not run: the repeated-failure guard pauses programs"
    PARTIAL = "partial", "cut off mid-stream: what arrived is saved, nothing ran"
    PAUSED = (
        "paused",
        "stopped before a tool call that needs a person's approval (kb.approve, kb.deny)",
    )


class ResultStatus(_Status):
    """The ``status`` of a backend's ``RunResult``."""

    OK = "ok", "ran to its end"
    ERROR = "error", "failed, or was interrupted"
    TIMEOUT = "timeout", "stopped by its time limit"
    DIED = "died", "its kernel died while it ran and was restarted"
    REFUSED = "refused", "not run: the repeated-failure guard pauses programs"
    PARTIAL = "partial", "cut off mid-stream: what arrived is saved, nothing ran"
    PAUSED = (
        "paused",
        "stopped before a tool call that needs a person's approval (kb.approve, kb.deny)",
    )


class Refusal(_Status):
    """Why the backend refused a call of the model's: nothing of it ran (a refused call's
    span carries it as ``ptc_retry.refusal``, docs/operators.md)."""

    UNKNOWN_TOOL = "unknown_tool", "the call names a tool the backend does not offer"
    BAD_ARGUMENTS = (
        "bad_arguments",
        "its arguments are not what the tool takes: not UTF-8, not a JSON object, no code",
    )
    CUT_OFF = "cut_off", "cut off mid-stream where nothing could be saved or sent"
    GUARD = "guard", "the repeated-failure guard pauses programs"
    UNKNOWN_REFERENCE = "unknown_reference", "an edit that names no call it can fix"
    BAD_PATCH = "bad_patch", "an edit whose patch does not apply to the call it names"


class Mode(_Status):
    """What ``KernelBackend(mode=...)`` and ``prompt_section(mode)`` accept."""

    CODE = "code", "the model writes programs and fixes a failed one with ptc_retry.replay"
    NATIVE = (
        "native",
        "the model calls run_code as a plain tool and fixes a call with editPreviousToolCalling",
    )


#: The history statuses of a program that failed (a tuple: a status read from a damaged
#: line may be unhashable, and ``in`` must still say no).
FAILED = (HistoryStatus.ERROR, HistoryStatus.INTERRUPTED)
#: The history statuses of a program that stopped part-way, which a resume goes on from: a
#: failure, or a pause before a call that waits for approval (not a failure: the guard does
#: not count it).
STOPPED = (*FAILED, HistoryStatus.PAUSED)


def status_table(statuses: type[_Status], *, indent: int = 0, width: int = 88) -> str:
    """Every member of ``statuses``, in order, a row each: its value and its meaning,
    ``indent`` spaces in, wrapped at ``width`` (for a help text or the docs)."""
    pad = max(len(status.value) for status in statuses) + 2
    rows = []
    for status in statuses:
        head = " " * indent + status.value.ljust(pad)
        rows.append(
            textwrap.fill(
                status.meaning, width, initial_indent=head, subsequent_indent=" " * len(head)
            )
        )
    return "\n".join(rows)


def history_status(
    *,
    cut_off: bool = False,
    refused: bool = False,
    paused: bool = False,
    interrupted: bool = False,
    failed: bool = False,
    stopped_by_limit: bool = False,
) -> HistoryStatus:
    """The history status of a program that ended so: ``cut_off`` (saved, not run),
    ``refused`` by the guard, ``interrupted`` (by a person, a client or the time limit, or
    before it started), ``failed`` (an error that is no control-flow exit), and
    ``stopped_by_limit`` (its time limit fired, though it may have caught that and failed
    after); ``paused`` (a tool call waits for approval) comes right after ``refused``. The
    first that holds, in that order, decides."""
    if cut_off:
        return HistoryStatus.PARTIAL
    if refused:
        return HistoryStatus.REFUSED
    if paused:
        return HistoryStatus.PAUSED
    if interrupted:
        return HistoryStatus.INTERRUPTED
    if not failed:
        return HistoryStatus.OK
    if stopped_by_limit:
        return HistoryStatus.INTERRUPTED
    return HistoryStatus.ERROR
