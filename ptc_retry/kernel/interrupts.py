"""Interrupts while a program's tool calls wait: :class:`Interrupts` counts each SIGINT
and hands it on, so that a call knows an interrupt (not its program) stopped it."""

from __future__ import annotations

import asyncio
import signal
import threading
import types
from typing import Any

__all__ = ["Interrupts"]


class Interrupts:
    """While a program's calls wait, in the main thread: each SIGINT is counted, then handed
    to the handler that was in place, which stops an awaiting program from the event loop
    (the time limit's cancels its task, ipykernel's the cell's); a call the program's own
    code awaits turns that cancel into a KeyboardInterrupt. Where a handler raises (Python's
    default, or the time limit's in the program's own code), the interrupt is raised where
    the program's code runs, and anywhere else (the loop itself) the task is cancelled."""

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.count = 0
        self._task = task
        self._previous: Any = None

    @classmethod
    def install(cls, task: asyncio.Task[Any] | None) -> Interrupts | None:
        """Watch from now on; None off the main thread (only it gets signals) or without a task."""
        if task is None or threading.current_thread() is not threading.main_thread():
            return None
        interrupts = cls(task)
        interrupts._previous = signal.signal(signal.SIGINT, interrupts._on_sigint)
        return interrupts

    def uninstall(self) -> None:
        """Give SIGINT back to the handler before, unless another replaced this one since."""
        if signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        previous = self._previous
        if previous == signal.SIG_IGN:
            return
        self.count += 1
        loop = self._task.get_loop()
        if callable(previous):
            try:
                previous(signum, frame)
            except KeyboardInterrupt:
                if asyncio.current_task(loop) is self._task:
                    raise  # in the program's own code, as in any cell
            else:
                # Wake the loop: ipykernel's handler schedules its cancel with tornado's
                # add_callback, which from a signal handler is a plain call_soon that waits
                # for the loop's next wake-up, none while the program only awaits calls.
                loop.call_soon_threadsafe(_nothing)
                return
        elif asyncio.current_task(loop) is self._task:
            raise KeyboardInterrupt
        loop.call_soon_threadsafe(self._task.cancel)


def _nothing() -> None:
    """A callback that only wakes the loop it is scheduled in."""
