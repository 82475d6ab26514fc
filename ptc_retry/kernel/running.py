"""The programs running in a kernel: what the hooks know of each, from pre_run_cell to
post_run_cell, kept per thread (ipykernel subshells run cells in threads of their own)."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..core.store import Call
from ..core.time_limit import TimeLimit

if TYPE_CHECKING:
    from .catalog import Catalog
    from .refusal import CallCutOff, RetryGuardPaused
    from .tracing import ProgramTrace


class PendingReplay(Protocol):
    """A replay made by a program; one it never awaited is reported when it ends."""

    awaited: bool

    def not_awaited_message(self) -> str: ...


class ToolCalls(Protocol):
    """A program's tool calls (:class:`.tool_calls.ProgramCalls`), from its first on."""

    def summary(self) -> dict[str, int] | None: ...

    def pending(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


@dataclass
class Failure:
    """What the guard and a resume need to know of a failure."""

    error: BaseException
    key: str
    #: ``{"index": i, "lines": [first, last]}`` of the top-level statement that was running.
    statement: dict[str, Any] | None

    @property
    def completed(self) -> int:
        return self.statement["index"] if self.statement else 0


#: The outermost program that was running when this context began: a task a program starts
#: copies it, so a tool call from a task that outlived its program can be told apart.
STARTED_BY: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "ptc_retry_started_by", default=None
)


@dataclass
class Running:
    """A program between pre_run_cell and post_run_cell."""

    info: Any
    call: Call | None
    notice: str | None = None
    replays: list[PendingReplay] = field(default_factory=list)
    tool: str = "run_code"
    turn: int = 0
    #: The checkpointed arguments, for the guard's key.
    arguments: str = ""
    #: The guard's report when this program is refused, and the error it shows.
    refused: dict[str, Any] | None = None
    refusal: RetryGuardPaused | None = None
    refusal_shown: bool = False
    #: The start of a call cut off mid-stream: saved, not run; the error it shows.
    cut_off: CallCutOff | None = None
    #: A person's ``%ptc_guard reset`` (see :func:`.magics.is_person_reset`).
    person_reset: bool = False
    #: A cell that only runs ptc-retry's magics: not a call, the guard does not see it.
    own_magics: bool = False
    #: The msg_id of the execute_request that runs it (None outside a kernel).
    msg_id: str | None = None
    #: An interrupt arrived while it was being saved: it did not run.
    stopped_before_start: bool = False
    time_limit: TimeLimit | None = None
    #: ``(filename, transformed text)`` of the program a replay runs in this call.
    program: tuple[str, str] | None = None
    resumed_from: int | None = None
    failure: Failure | None = None
    #: The tools its request offers; None when the request brought no catalog (no backend).
    catalog: Catalog | None = None
    #: The task that runs it (None without a running event loop) and, while a replay runs,
    #: the coroutine of the replayed program: where its frames are while it awaits.
    task: asyncio.Task[Any] | None = None
    program_coroutine: Any = None
    calls: ToolCalls | None = None
    #: Its spans, when its request brought a trace context and the kernel traces.
    trace: ProgramTrace | None = None

    @property
    def stopped_by_limit(self) -> float | None:
        """The seconds of the time limit that stopped this program, if one did."""
        limit = self.time_limit
        return limit.seconds if limit is not None and limit.stopped else None


class Programs:
    """The programs running in each thread, outermost first: a cell never sees another
    thread's program as its own."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def stack(self) -> list[Running]:
        """This thread's running programs, outermost first."""
        stack: list[Running] | None = getattr(self._local, "running", None)
        if stack is None:
            stack = self._local.running = []
        return stack

    def current(self) -> Running | None:
        """The innermost program running in this thread, if any."""
        stack = self.stack
        return stack[-1] if stack else None

    def outermost(self) -> Running | None:
        """The program this thread's request runs (a cell a program runs is part of it)."""
        stack = self.stack
        return stack[0] if stack else None

    def pop(self, result: Any) -> Running | None:
        """The program that ``result`` (post_run_cell's) ends, taken off the stack with the
        cells it ran that never reached post_run_cell (a program may await
        ``run_cell_async`` itself, which fires only pre_run_cell). None for a cell that
        never started (IPython fires post_run_cell without pre_run_cell for an empty cell)."""
        stack = self.stack
        if not stack:
            return None
        if result is None:  # no result: the cell's task was cancelled or raised
            return stack.pop()
        info = getattr(result, "info", None)
        found = next((i for i in reversed(range(len(stack))) if stack[i].info is info), None)
        if found is None:
            found = next(
                (i for i in reversed(range(len(stack))) if _rebuilt(result, stack[i])), None
            )
        if found is None:
            return None
        running = stack[found]
        del stack[found:]
        return running

    def of_other_requests(self, msg_id: str | None, run_code: types.CodeType) -> list[Running]:
        """Take off this thread's stack, outermost first, the programs of requests other than
        ``msg_id``, when no cell's code runs (see :func:`code_running`): a request's cells
        run one at a time in a thread, so such a request ended without their post_run_cell
        (an exception escaped IPython's machinery or a hook)."""
        if msg_id is None or not self.stack or code_running(run_code):
            return []
        return self._take(lambda running: running.msg_id not in (None, msg_id))

    def of_request(self, msg_id: str | None) -> list[Running]:
        """Take off this thread's stack, outermost first, the programs of the request
        ``msg_id``, once it ended: those are the ones its post_run_cell never reached."""
        if msg_id is None:
            return []
        return self._take(lambda running: running.msg_id == msg_id)

    def _take(self, which: Callable[[Running], bool]) -> list[Running]:
        stack = self.stack
        taken = [running for running in stack if which(running)]
        if taken:
            stack[:] = [running for running in stack if not which(running)]
        return taken


def code_running(run_code: types.CodeType) -> bool:
    """Whether a cell's own code runs in this thread: a frame of IPython's ``run_code``
    (whose code object is ``run_code``) is on the stack. A cell that starts meanwhile is
    started by that code (``run_cell``, or a request it serves, as ``jupyter_ui_poll``
    does), whatever request it belongs to."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is run_code:
            return True
        frame = frame.f_back
    return False


# The fields that name a cell in IPython's ExecutionInfo (8.17 on).
_CELL_FIELDS = ("raw_cell", "store_history", "silent", "cell_id")


def _rebuilt(result: Any, running: Running) -> bool:
    """Whether ``result`` is the one IPython's ``run_cell`` makes afresh, with an info of its
    own, for the cell ``running`` runs when that cell's ``run_cell_async`` raised (e.g.
    "'run_cell_async' needs a real async loop" for top-level ``await`` and ``return``)."""
    info = getattr(result, "info", None)
    if info is None or getattr(result, "error_in_exec", None) is None:
        return False
    return all(
        getattr(info, name, None) == getattr(running.info, name, None) for name in _CELL_FIELDS
    )
