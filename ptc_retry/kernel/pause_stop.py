"""What keeps a paused program stopped when its own code catches the pause.

``ApprovalPending`` is a BaseException, so ``except Exception`` lets it through; but
``except BaseException:``, a bare ``except:``, or ``asyncio.gather(...,
return_exceptions=True)`` take it like any other error, and the program would go on as if
the call had failed. Once a program pauses, the next line of its own code that runs raises
the pause again, until it ends: the program's code never goes on past its pause. Only lines
of the program's own files are stopped (its cell, or the file a replay compiles it under,
and the functions defined there, and the earlier cells whose functions it was running);
library code, ``finally`` blocks and context managers of other files run as usual.

On Python 3.12 and later this watches line events with ``sys.monitoring``, whose callback
may raise again in each handler that catches the pause. Before 3.12 it is ``sys.settrace``,
which Python turns off once its function raised: a program that catches the pause twice
(two nested ``except BaseException``) goes on after the second; one catch is stopped.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable
from typing import Any

__all__ = ["PauseStop"]

#: The sys.monitoring tool ids this may take (0-2 are the debugger's, coverage's and the
#: profiler's, 5 the optimizer's).
_TOOL_IDS = (3, 4)
#: ``sys.monitoring`` (Python 3.12 and later), else None.
_MONITORING: Any = getattr(sys, "monitoring", None)


class PauseStop:
    """While installed, each line of ``files`` that runs raises ``pause()``."""

    def __init__(self, files: set[str], pause: Callable[[], BaseException]) -> None:
        self._files = files
        self._pause = pause
        self._thread = threading.get_ident()
        self._tool: int | None = None
        self._previous: Any = None
        self._traced = False
        self.stops = 0

    def install(self, frames: list[types.FrameType]) -> None:
        """Start stopping the program; ``frames``: its frames now (suspended or running)."""
        if not self._files:
            return
        monitoring = _MONITORING
        if monitoring is not None:
            for tool in _TOOL_IDS:
                if monitoring.get_tool(tool) is None:
                    monitoring.use_tool_id(tool, "ptc-retry pause")
                    monitoring.register_callback(tool, monitoring.events.LINE, self._on_line)
                    monitoring.set_events(tool, monitoring.events.LINE)
                    self._tool = tool
                    return
        if threading.get_ident() != self._thread:
            return
        self._previous = sys.gettrace()
        sys.settrace(self._on_call)
        self._traced = True
        for frame in frames:
            if frame.f_code.co_filename in self._files:
                frame.f_trace = self._on_trace_line
                frame.f_trace_lines = True

    def uninstall(self) -> None:
        """The program ended: its lines run as usual again."""
        self._files = set()
        if self._tool is not None:
            monitoring = _MONITORING
            monitoring.set_events(self._tool, 0)
            monitoring.register_callback(self._tool, monitoring.events.LINE, None)
            monitoring.free_tool_id(self._tool)
            monitoring.restart_events()
            self._tool = None
        if self._traced and threading.get_ident() == self._thread:
            # None: Python turned tracing off when a stop raised; the tracer the kernel had
            # before (coverage, a debugger) comes back all the same.
            if sys.gettrace() is None or sys.gettrace() == self._on_call:
                sys.settrace(self._previous)
            self._traced = False

    def _on_line(self, code: types.CodeType, line: int) -> Any:
        if code.co_filename not in self._files or threading.get_ident() != self._thread:
            return _MONITORING.DISABLE if code.co_filename not in self._files else None
        self.stops += 1
        raise self._pause()

    def _on_call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename in self._files:
            return self._on_trace_line
        return None

    def _on_trace_line(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_code.co_filename in self._files:
            self.stops += 1
            raise self._pause()
        return self._on_trace_line
