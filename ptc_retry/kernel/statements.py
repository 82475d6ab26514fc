"""Which top-level statement of a running program makes a tool call: what a resume counts
in, found from the frames of the call (the stack, or the program's chain of awaits)."""

from __future__ import annotations

import asyncio
import sys
import types
from typing import TYPE_CHECKING, Any

from ..core.program import statement_spans
from .tracebacks import cell_text

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .running import Running


class Statements:
    """The statements of one running program, and which one is running."""

    def __init__(self, shell: InteractiveShell, running: Running) -> None:
        self._shell = shell
        self.running = running
        self._spans: tuple[str, list[tuple[int, int]]] | None = None
        self._run_code = type(shell).run_code.__code__

    def current(self) -> int | None:
        """The program's top-level statement that is running (what a resume counts in)."""
        running = self.running
        frames = self._frames()
        if running.program is not None:  # a replay's program, not the cell that replays
            filename, text = running.program
            lines = [frame.f_lineno for frame in frames if frame.f_code.co_filename == filename]
        else:
            found = cell_text(self._shell, running.info)
            if found is None:
                return None
            text = found
            pairs = zip(frames, frames[1:])
            lines = [inner.f_lineno for outer, inner in pairs if outer.f_code is self._run_code]
        if not lines:
            return None
        if self._spans is None or self._spans[0] != text:
            try:
                self._spans = (text, statement_spans(text))
            except SyntaxError:
                return None
        for index, (first, last) in enumerate(self._spans[1]):
            if first <= lines[0] <= last:
                return index
        return None

    def program_frames(self) -> list[types.FrameType]:
        """The frames of the program's own code now, outermost first: those of its cell (or
        of the file a replay compiles it under) and of the functions defined there, and of
        the functions an earlier cell of the kernel defined (a helper an earlier program
        wrote, that the program calls)."""
        running = self.running
        frames = self._frames()
        if running.program is not None:
            filename = running.program[0]
        else:
            pairs = zip(frames, frames[1:])
            cells = [inner for outer, inner in pairs if outer.f_code is self._run_code]
            if not cells:
                return []
            filename = cells[0].f_code.co_filename
        compiler = self._shell.compile
        return [
            frame
            for frame in frames
            if frame.f_code.co_filename == filename
            or compiler.format_code_name(frame.f_code.co_filename) is not None
        ]

    def _frames(self) -> list[types.FrameType]:
        """The frames from the kernel down to the call, outermost first: the stack, when the
        program's own task makes the call; else the chain of awaits of the program, which
        waits meanwhile (the call is made by a task it started, e.g. with gather)."""
        task = self.running.task
        frames = []
        if task is None or current_task() is task:
            frame: types.FrameType | None = sys._getframe(1)
            while frame is not None:
                frames.append(frame)
                frame = frame.f_back
            return frames[::-1]
        awaited: Any = self.running.program_coroutine or task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                break
            frames.append(frame)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        return frames


def current_task() -> asyncio.Task[Any] | None:
    """The asyncio task running now; None without a running event loop."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None
