"""The programs running in a kernel: what the hooks know of each, from pre_run_cell to
post_run_cell, kept per thread (ipykernel subshells run cells in threads of their own)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..core.store import Call
from ..core.time_limit import TimeLimit

if TYPE_CHECKING:
    from .catalog import Catalog
    from .refusal import CallCutOff, RetryGuardPaused


class PendingReplay(Protocol):
    """A replay made by a program; one it never awaited is reported when it ends."""

    awaited: bool

    def not_awaited_message(self) -> str: ...


class ToolCalls(Protocol):
    """A program's tool calls (:class:`.tool_calls.ProgramCalls`), from its first on."""

    def summary(self) -> dict[str, int] | None: ...

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
        """The program that ``result`` (post_run_cell's) ends; None for a cell that never
        started (IPython fires post_run_cell without pre_run_cell for an empty cell)."""
        stack = self.stack
        if not stack:
            return None
        if result is None or stack[-1].info is getattr(result, "info", None):
            return stack.pop()
        return None
