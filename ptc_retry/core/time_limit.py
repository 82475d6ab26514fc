"""The in-kernel time limit: the kernel stops its own program when the limit passes, so
the program keeps its output and the kernel is free for the next call at once (a
client's own timeout loses both)."""

from __future__ import annotations

import _thread
import asyncio
import math
import signal
import threading
import time
import types
from typing import Any, TypeGuard

# After a stop was delivered, wait this long before stopping again (the program
# may be ending); after a signal found no safe place to stop, try again at the next poll.
_AFTER_DELIVERY = 1.0
_POLL = 0.05
# How long stop() waits for a signal that was sent but not handled yet.
_FLUSH_WAIT = 0.2


#: A limit this long or longer never passes (the longest wait ``threading`` allows, about
#: 292 years on Linux): it means no limit.
NEVER = threading.TIMEOUT_MAX
_SHOWN = 40  # characters of a refused value a message quotes


def read_limit(value: object, what: str = "the time limit") -> float | None:
    """``value`` as a limit in seconds; None for no limit.

    None means no limit, and so does a number too large ever to pass: ``inf``, ``10**400``,
    anything from ``NEVER`` seconds up. Anything else raises ValueError, one line that names
    ``what`` and says what to give: a value that is no number (a bool or a str too), nan,
    zero or less.
    """
    if value is None:
        return None
    if not _is_number(value) or not value > 0:
        raise ValueError(
            f"{what} must be a number of seconds > 0, or None (or inf) for no limit, "
            f"not {_shown(value)}"
        )
    # Compared before float(): an int such as 10**400 has no float.
    return None if value >= NEVER else float(value)


def read_delay(value: object, what: str) -> float:
    """``value`` as a short wait in seconds (a margin, a grace period): a number from 0 up to
    less than ``NEVER``; ValueError, one line naming ``what``, for anything else."""
    if not _is_number(value) or not 0 <= value < NEVER:
        raise ValueError(
            f"{what} must be a number of seconds >= 0 (and under about 292 years), "
            f"not {_shown(value)}"
        )
    return float(value)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: object) -> str:
    """``value`` as a message quotes it: its type and its repr, cut when long."""
    shown = repr(value)
    shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."
    return f"{type(value).__name__} {shown}"


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


class TimeLimit:
    """The time limit of one running program, and how interrupts reach it.

    ``seconds`` None: no limit, only the prompt stop of a person's interrupt.
    ``run_code`` is the code object of the function that runs a program's
    top-level code (IPython's ``InteractiveShell.run_code``): a frame called by it
    whose code is ``<module>`` is the program's own.

    A timer thread sends SIGINT to the main thread when the limit passes
    (``signal.pthread_kill``, which also wakes a blocking ``time.sleep`` or socket
    read), and again every second while the program catches it and goes on. Our
    handler, installed for the length of the program, stops the program the one way
    that is safe where the main thread stands: in the program's code it raises
    ``KeyboardInterrupt("time limit of N s reached")``; idle in the event loop while
    the program awaits, it cancels the program's task from the loop (raising in the
    loop itself would break the kernel); anywhere else (IPython's code between
    statements) it does nothing and the timer tries again a moment later.

    A person's interrupt (or a client's) stops the program the same way: in the program's
    own code it raises ``KeyboardInterrupt`` at once, as Python's default handler does in a
    plain cell; idle in the loop while the program awaits (a tool call, ``asyncio.sleep``),
    it cancels the program's task, which ipykernel 6.29 and 7.4 do not do for an awaiting
    cell; elsewhere it goes to the handler that was there before. ``interrupted`` then
    says so: the ``CancelledError`` that ends such a program is an interrupt, not a failure.
    Only the main thread handles signals: elsewhere (an ipykernel subshell) :meth:`start`
    returns False.
    """

    def __init__(self, seconds: float | None, run_code: types.CodeType) -> None:
        self.seconds = seconds
        limit = "no" if seconds is None else _format_seconds(seconds) + " s"
        self.message = f"time limit of {limit} reached"
        #: True once the program was stopped by this limit.
        self.stopped = False
        #: True once a person's (or a client's) interrupt reached the running program.
        self.interrupted = False
        self._run_code = run_code
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ending = False
        self._pending = False  # our signal was sent and not handled yet
        self._delivered_at = -math.inf
        self._previous: Any = None
        self._handler = self._on_sigint
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main = threading.main_thread().ident

    def start(self) -> bool:
        """Install the handler and start the timer; False (and nothing done) off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task(self._loop)
        except RuntimeError:  # no event loop: plain IPython running a sync cell
            self._loop = self._task = None
        self._previous = signal.signal(signal.SIGINT, self._handler)
        if self.seconds is not None:
            threading.Thread(target=self._watch, name="ptc-retry time limit", daemon=True).start()
        return True

    def stop(self) -> None:
        """End the limit: stop the timer, swallow a signal on its way, restore the handler."""
        self._ending = True  # from now on our handler swallows our signal
        with self._lock:  # a send in progress completes first
            self._done.set()
        deadline = time.monotonic() + _FLUSH_WAIT
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.001)  # a system call: the pending signal is handled here
        if self._pending:
            return  # keep our handler, which swallows it; the kernel restores its own later
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is self._handler:
                # None: the handler before was not set from Python; the default is closest.
                previous = signal.SIG_DFL if self._previous is None else self._previous
                signal.signal(signal.SIGINT, previous)

    # -- the timer thread ------------------------------------------------------

    def _watch(self) -> None:
        assert self.seconds is not None
        # A limit beyond what a wait can take (1e10 s, 317 years) waits as long as one can.
        if self._done.wait(min(self.seconds, threading.TIMEOUT_MAX)):
            return
        while True:
            with self._lock:
                if self._done.is_set():
                    return
                # One signal at a time; after a stop was delivered, give the program
                # time to end before stopping it again.
                quiet = time.monotonic() - self._delivered_at >= _AFTER_DELIVERY
                if not self._pending and quiet:
                    self._pending = True
                    self._send()
            if self._done.wait(_POLL):
                return

    def _send(self) -> None:
        kill = getattr(signal, "pthread_kill", None)
        if kill is not None and self._main is not None:
            kill(self._main, signal.SIGINT)
        else:
            _thread.interrupt_main()

    # -- the main thread -------------------------------------------------------

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> Any:
        if not self._pending:  # a person's interrupt
            if self._ending:
                return self._delegate(signum, frame)
            self.interrupted = True
            if self._in_program(frame):
                raise KeyboardInterrupt  # as in a plain cell: at once, where the program runs
            if self._idle_in_loop():
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._cancel_for_person)
                return None
            return self._delegate(signum, frame)
        self._pending = False
        if self._ending:
            return None  # the program already ended: swallow
        if self._in_program(frame):
            self.stopped = True
            self._delivered_at = time.monotonic()
            raise KeyboardInterrupt(self.message)
        if self._idle_in_loop():
            assert self._loop is not None
            self._delivered_at = time.monotonic()  # no new signal while the cancel is on its way
            self._loop.call_soon_threadsafe(self._cancel)
        return None

    def _cancel(self) -> None:
        """In the event loop: cancel the program's task if it still awaits in the program."""
        if self._ending or not self._awaiting_in_program():
            self._delivered_at = -math.inf  # it moved on: the timer tries again
            return
        assert self._task is not None
        self.stopped = True
        self._delivered_at = time.monotonic()
        self._task.cancel(self.message)

    def _cancel_for_person(self) -> None:
        """In the event loop: a person's interrupt cancels the program's task if it still
        awaits in the program (if it moved on, the next interrupt finds it computing)."""
        if not self._ending and self._awaiting_in_program():
            assert self._task is not None
            self._task.cancel()

    def _delegate(self, signum: int, frame: types.FrameType | None) -> Any:
        previous = self._previous
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_IGN:
            return None
        raise KeyboardInterrupt

    def _in_program(self, frame: types.FrameType | None) -> bool:
        child = None
        while frame is not None:
            if frame.f_code is self._run_code:
                return child is not None and child.f_code.co_name == "<module>"
            child, frame = frame, frame.f_back
        return False

    def _idle_in_loop(self) -> bool:
        """Whether the event loop waits while the program's task awaits inside the program."""
        if self._loop is None:
            return False
        try:
            if asyncio.current_task(self._loop) is not None:
                return False
        except RuntimeError:
            return False
        return self._awaiting_in_program()

    def _awaiting_in_program(self) -> bool:
        # Follow the chain of awaits down from the task: the program awaits if a
        # coroutine of run_code awaits a <module> coroutine (the program's own code).
        task = self._task
        if task is None or task.done():
            return False
        awaited: Any = task.get_coro()
        in_run_code = False
        while awaited is not None:
            code = getattr(awaited, "cr_code", None)
            if code is None:
                return False
            if in_run_code:
                return bool(code.co_name == "<module>")
            in_run_code = code is self._run_code
            awaited = awaited.cr_await
        return False


#: The code of the handler that raises the interrupt: tracebacks leave its frame out.
HANDLER_CODE = TimeLimit._on_sigint.__code__
