"""How a program ended, read from what the hooks saw of it (``Running``): its error and
history status, its history line's facts and the reply metadata its request carries back.
The rules that turn those facts into a status live with the statuses (``core/status.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..core.status import HistoryStatus, history_status
from .resume import KERNEL_TOKEN, Namespace
from .running import Failure, Running

__all__ = [
    "history_extra",
    "is_paused",
    "outcome",
    "reply_metadata",
    "says_time_limit",
    "was_interrupted",
]


def was_interrupted(running: Running, error: BaseException | None) -> bool:
    """Whether an interrupt ended the program: a KeyboardInterrupt, or the CancelledError of
    a program that a person, a client or the time limit stopped while it awaited (a tool
    call, ``asyncio.sleep``)."""
    if isinstance(error, KeyboardInterrupt):
        return True
    limit = running.time_limit
    stopped = limit is not None and (limit.stopped or limit.interrupted)
    return stopped and isinstance(error, asyncio.CancelledError)


def is_paused(running: Running) -> bool:
    """Whether the program stopped at tool calls that wait for a person's approval."""
    return running.calls is not None and bool(running.calls.pending())


def outcome(
    running: Running, result: Any, is_control_flow: Callable[[BaseException], bool]
) -> tuple[BaseException | None, HistoryStatus]:
    """The error that ended the program (``result``: IPython's ExecutionResult, None when the
    cell's task was cancelled), if any, and its history status. A refused program's result
    is made to say the refusal, whatever else failed first."""
    error = None
    if result is not None:
        error = result.error_before_exec or result.error_in_exec
    refusal = running.refusal or running.cut_off
    if refusal is not None and result is not None and error is not refusal:
        # Input that fails before the transformer (a syntax error: a cut-off program often
        # is one) is refused too: the reply must say what the output did.
        result.error_before_exec = error = refusal
    status = history_status(
        cut_off=running.cut_off is not None,
        refused=running.refusal is not None,
        paused=is_paused(running),
        interrupted=running.stopped_before_start
        or result is None
        or was_interrupted(running, error),
        failed=error is not None and not is_control_flow(error),
        stopped_by_limit=running.stopped_by_limit is not None,
    )
    return error, status


def history_extra(
    running: Running, error: BaseException | None, failure: Failure | None
) -> dict[str, Any]:
    """The keys of the program's history line beyond the store's own: the kernel that ran
    it (and how many times its namespace was reset before), how it failed and where, the
    time limit that stopped it, the resume it was, and the counts of its tool calls."""
    extra: dict[str, Any] = {"kernel": KERNEL_TOKEN}
    if Namespace.resets:
        extra["namespace"] = Namespace.resets
    if error is not None:
        extra["ename"] = type(error).__name__
    if failure is not None and failure.statement is not None:
        extra["failed_statement"] = failure.statement
        extra["completed"] = failure.completed
    if running.stopped_by_limit is not None:
        extra["time_limit"] = running.stopped_by_limit
    if running.resumed_from is not None:
        extra["resumed_from"] = running.resumed_from
    tool_calls = running.calls.summary() if running.calls is not None else None
    if tool_calls is not None:
        extra["tool_calls"] = tool_calls
    if running.calls is not None and is_paused(running):
        extra["pending"] = running.calls.pending()
    return extra


def reply_metadata(
    running: Running, status: HistoryStatus, guard: dict[str, Any] | None
) -> dict[str, Any]:
    """What the execute_reply of the program's request carries as ``metadata["ptc_retry"]``
    (the status as its plain string)."""
    call = running.call
    metadata: dict[str, Any] = {
        "call_id": call.id if call else None,
        "reference": call.reference if call else None,
        "checkpoint": str(call.path) if call else None,
        "ordinal": call.ordinal if call else None,
        "status": status.value,
        "notice": running.notice,
        "guard": guard,
    }
    if running.stopped_by_limit is not None:
        # Only then: the seconds of the kernel's own time limit that stopped the program.
        metadata["time_limit"] = running.stopped_by_limit
    tool_calls = running.calls.summary() if running.calls is not None else None
    if tool_calls is not None:  # only a program that called tools: {"reused", "live"}
        metadata["tool_calls"] = tool_calls
    if call is not None and (call.replay_of is not None or call.extend_of is not None):
        # Only a replay, resume or extend: what it ran again, and the size of the corrected
        # program's checkpoint (what re-sending the whole call would have cost).
        metadata["replay_of" if call.replay_of is not None else "extend_of"] = (
            call.replay_of or call.extend_of
        )
        metadata["bytes"] = call.bytes
        if running.resumed_from is not None:
            metadata["resumed_from"] = running.resumed_from
    if running.calls is not None and is_paused(running):  # the calls that wait for approval
        metadata["pending"] = running.calls.pending()
    return metadata


def says_time_limit(running: Running, error: BaseException) -> bool:
    """Make the interrupt or cancellation that ends a program the time limit stopped say
    so (``time limit of 55 s reached``), whichever wait it broke: a tool call or a
    ``gather`` ends in an error of their own. True when its message changed."""
    limit = running.time_limit
    if limit is None or not limit.stopped:
        return False
    if not isinstance(error, (KeyboardInterrupt, asyncio.CancelledError)):
        return False
    if error.args == (limit.message,):
        return False
    error.args = (limit.message,)
    return True
