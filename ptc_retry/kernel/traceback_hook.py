"""The failed program's traceback as the model reads it: ptc-retry's own lines left out,
the notice appended, and a refused or cut-off program's own error shown instead.

IPython formats every traceback (runtime, syntax, interrupt) and hands the lines to the
shell's ``_showtraceback``, which ipykernel turns into the error output and the reply: the
one place where appending a line reaches every client. IPython offers no hook for the
formatted traceback, so :class:`TracebackHook` replaces that method on the shell instance.
"""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.errors import ApprovalPending
from ..core.notice import failure_notice, short_failure_notice
from . import tracebacks
from .checkpoints import Checkpoints
from .config import PtcRetry
from .endings import says_time_limit, was_interrupted
from .guarding import KernelGuard
from .refusal import refusal_output
from .running import Failure, Programs, Running
from .tracebacks import abandoned_cell, failure_of, own_lines_only

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["TracebackHook"]

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class TracebackHook:
    """Wraps the shell's ``_showtraceback`` (``install``/``remove``): IPython formats, the
    hook appends the notice of the program that is running."""

    shell: InteractiveShell
    programs: Programs
    checkpoints: Checkpoints
    guards: KernelGuard
    config: PtcRetry
    is_control_flow: Callable[[BaseException], bool]
    #: A frame called by this code and named <module> runs a cell's own code.
    _run_code: types.CodeType
    _replaced_showtraceback: Any = field(default=None, init=False)
    _had_own_showtraceback: bool = field(default=False, init=False)
    _undo_groups: Callable[[], None] = field(default=lambda: None, init=False)
    _closing_abandoned: bool = field(default=False, init=False)

    def install(self) -> None:
        shell = self.shell
        self._had_own_showtraceback = "_showtraceback" in shell.__dict__
        self._replaced_showtraceback = shell._showtraceback
        # IPython offers no hook for the formatted traceback: this instance's method is it.
        shell._showtraceback = self.show_traceback  # type: ignore[method-assign]
        self._undo_groups = tracebacks.show_groups_as_errors(shell)

    def remove(self) -> None:
        shell = self.shell
        self._undo_groups()
        if shell.__dict__.get("_showtraceback") == self.show_traceback:
            if self._had_own_showtraceback:
                shell._showtraceback = self._replaced_showtraceback  # type: ignore[method-assign]
            else:
                del shell._showtraceback

    def close_abandoned_cell(self, error: BaseException) -> None:
        """End now, inside its own request, the cell IPython's runner left suspended when
        it raised ``error``: its rest runs, and the GeneratorExit it shows is not output."""
        cell = abandoned_cell(self.shell, error)
        if cell is None:
            return
        self._closing_abandoned = True
        try:
            cell.close()
        except Exception as exc:  # it ignored GeneratorExit: IPython's to report, not ours
            logger.info("could not close the cell IPython left running: %s", exc)
        finally:
            self._closing_abandoned = False

    def show_traceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
        """Wraps the shell's ``_showtraceback``: IPython formats, we append the notice.

        A refused program shows the guard's report and its RetryGuardPaused error
        instead, whatever IPython was about to show (e.g. a syntax error).
        """
        if self._closing_abandoned and issubclass(etype, GeneratorExit):
            return  # the end of a cell IPython abandoned, not an error of the running one
        try:
            running = self.programs.current()
            if running is not None and running.cut_off is not None:
                cut_off = running.cut_off
                etype, evalue, stb = type(cut_off), cut_off, cut_off._render_traceback_()
            elif running is not None and running.refusal is not None:
                first = not running.refusal_shown
                running.refusal_shown = True
                etype, evalue, stb = refusal_output(running.refusal, show_report=first)
            else:
                said = running is not None and says_time_limit(running, evalue)
                stb = own_lines_only(self.shell, etype, evalue, stb, rebuild=said)
                stb = self._with_notice(evalue, stb)
        except Exception as exc:  # never lose the user's traceback to our own bug
            self.checkpoints.warn(f"could not add the notice ({type(exc).__name__}: {exc})")
        finally:
            # A lone surrogate in the message would stop the whole error output at the
            # session, the notice with it: escaped, it goes out.
            stb = [tracebacks.sendable(line) for line in stb]
            evalue = tracebacks.sendable_error(evalue)
            self._replaced_showtraceback(etype, evalue, stb)

    def _with_notice(self, evalue: BaseException, stb: list[str]) -> list[str]:
        running = self.programs.current()
        if running is None or running.notice is not None or running.stopped_before_start:
            return stb
        if self.is_control_flow(evalue):
            return stb
        if isinstance(evalue, ApprovalPending):  # its own line is the notice
            running.notice = str(evalue)
            if running.call is not None:
                self.checkpoints.link_number(running.call)
            return stb
        notice = self._notice(running, failure_of(self.shell, running, evalue, self._run_code))
        if notice is None:
            return stb
        running.notice = notice
        return [*stb, notice]

    def _notice(self, running: Running, failure: Failure) -> str | None:
        """The notice line for ``failure``: the full one when the program is long enough
        to be worth a replay, else only what the guard or the time limit has to say."""
        outermost = running is self.programs.outermost()
        repeated, paused = self.guards.repeated(running, failure) if outermost else (0, False)
        stopped = running.stopped_by_limit
        call = running.call
        if call is None or call.bytes < self.config.notice_min_bytes:
            return short_failure_notice(time_limit=stopped, repeated=repeated, paused=paused)
        saves_work = time.time() - call.started >= self.config.resume_min_seconds
        notice = failure_notice(
            call.reference,
            interrupted=was_interrupted(running, failure.error),
            completed=failure.completed if saves_work else 0,
            time_limit=stopped,
            repeated=repeated,
            paused=paused,
        )
        self.checkpoints.link_number(call)
        return notice
