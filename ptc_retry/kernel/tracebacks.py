"""Reading and trimming a failed program's traceback: which top-level statement was
running, and the traceback without ptc-retry's own frames where they would show."""

from __future__ import annotations

import asyncio
import builtins
import os
import sys
import traceback
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.guard import failure_key
from ..core.program import statement_spans
from ..core.time_limit import HANDLER_CODE
from .running import Failure, Running

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


def _group_types() -> tuple[type, ...]:
    """The exception-group base class: a builtin from Python 3.11, before that the backport
    IPython imports (``exceptiongroup``)."""
    group = getattr(builtins, "BaseExceptionGroup", None)
    if group is None:
        group = getattr(sys.modules.get("exceptiongroup"), "BaseExceptionGroup", None)
    return (group,) if isinstance(group, type) else ()


# The file name of the program a replay runs: what its frames and syntax errors show.
_REPLAY_PREFIX = "<ptc-retry "
# Where ptc-retry's own files are: frames there are not the program's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def replay_filename(name: str) -> str:
    """The file name a replayed program compiles under, which its frames show:
    ``<ptc-retry #11>`` for ``name`` ``"#11"`` (its reference, else its call id)."""
    return f"{_REPLAY_PREFIX}{name}>"


def cell_text(shell: InteractiveShell, info: Any) -> str | None:
    """The cell as IPython compiled it (magics turned into calls; same lines)."""
    transformed = getattr(info, "transformed_cell", None)  # IPython >= 9
    if isinstance(transformed, str):
        return transformed
    try:
        return shell.transform_cell(info.raw_cell)
    except Exception:
        return None


def failure_of(
    shell: InteractiveShell, running: Running, error: BaseException, run_code: types.CodeType
) -> Failure:
    """The failure of ``error`` in ``running``, computed once (the notice and the
    history both ask). ``run_code`` is the code of IPython's ``run_code``."""
    failure = running.failure
    if failure is None or failure.error is not error:
        key = failure_key(running.tool, running.arguments, error)
        statement = _failed_statement(shell, running, error, run_code)
        failure = running.failure = Failure(error, key, statement)
    return failure


def _failed_statement(
    shell: InteractiveShell, running: Running, error: BaseException, run_code: types.CodeType
) -> dict[str, Any] | None:
    """The top-level statement that was running when ``error`` ended the program.

    Read from the traceback: in a replay, the outermost frame of the replayed
    program's file; otherwise the frame that IPython's ``run_code`` called, the
    cell's own code. None when no statement ran (e.g. a syntax error).
    """
    tb = error.__traceback__
    line = None
    text: str | None = None
    if running.program is not None:
        filename, text = running.program
        while tb is not None and line is None:
            if tb.tb_frame.f_code.co_filename == filename:
                line = tb.tb_lineno
            tb = tb.tb_next
    else:
        while tb is not None and line is None:
            if tb.tb_frame.f_code is run_code and tb.tb_next is not None:
                line = tb.tb_next.tb_lineno
            tb = tb.tb_next
        if line is not None:
            text = cell_text(shell, running.info)
    if running.program is None and text is None:
        text = cell_text(shell, running.info)
    paused_at = getattr(error, "statement", None)  # ApprovalPending: its first paused call
    if text is None or (not isinstance(line, int) and not isinstance(paused_at, int)):
        return None
    try:
        spans = statement_spans(text)
    except SyntaxError:
        return None
    if isinstance(paused_at, int) and 0 <= paused_at < len(spans):
        first, last = spans[paused_at]
        return {"index": paused_at, "lines": [first, last]}
    for index, (first, last) in enumerate(spans):
        if isinstance(line, int) and first <= line <= last:
            return {"index": index, "lines": [first, last]}
    return None


def own_lines_only(
    shell: InteractiveShell, etype: type, evalue: BaseException, stb: list[str], *, rebuild: bool
) -> list[str]:
    """The traceback without ptc-retry's own frames where they would show; formatted
    again when ``rebuild`` (``evalue``'s message changed since IPython formatted ``stb``).

    A replayed program that does not compile is a syntax error in that program: shown
    as IPython shows one in a cell (the line and the caret), not through the frames of
    the replay that compiled it. An interrupt raised by our SIGINT handler, or while a
    tool call waited, would end in ptc-retry's frames (IPython shows the last frame even
    when hidden); the reader needs it to end in the program's line. The frames of
    ptc-retry's own code that IPython would hide are left out before it formats them.
    """
    filename = getattr(evalue, "filename", None)
    if isinstance(evalue, SyntaxError) and str(filename).startswith(_REPLAY_PREFIX):
        return list(shell.SyntaxTB.structured_traceback(etype, evalue, None))
    if callable(getattr(evalue, "_render_traceback_", None)):
        return stb  # IPython showed what the error renders itself, no frames
    entries = []
    tb = evalue.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    keep = len(entries)
    if entries and entries[-1].tb_frame.f_code is HANDLER_CODE:
        keep -= 1
    if isinstance(evalue, (KeyboardInterrupt, asyncio.CancelledError)):
        while keep > 1 and _own_hidden(entries[keep - 1].tb_frame):
            keep -= 1
    # IPython hides the frames of a replay's own steps but writes "[... skipping hidden N
    # frame]" in their place: left out here, they leave no trace (the last frame IPython
    # shows in any case).
    kept = [e for i, e in enumerate(entries[:keep]) if i == keep - 1 or not _own_hidden(e.tb_frame)]
    if len(kept) == len(entries) and not rebuild:
        return stb
    trimmed = None
    for entry in reversed(kept):
        trimmed = types.TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    evalue.__traceback__ = trimmed
    return list(shell.InteractiveTB.structured_traceback(etype, evalue, trimmed))


def _own_hidden(frame: types.FrameType) -> bool:
    """A frame of ptc-retry's own code that IPython would hide (``__tracebackhide__``)."""
    own = frame.f_code.co_filename.startswith(_PACKAGE)
    return own and bool(frame.f_locals.get("__tracebackhide__"))


def abandoned_cell(shell: InteractiveShell, error: BaseException) -> Any:
    """The coroutine of a cell that IPython's ``run_cell`` left suspended, if ``error`` is
    what its runner raised (IPython runs a cell with top-level ``await`` and ``return``
    without an event loop, which raises "needs a real async loop" at the first ``await``);
    None otherwise. Left alone, it is closed whenever it is collected, and IPython then
    shows a ``GeneratorExit`` traceback in whatever cell runs at that moment."""
    run_cell_async = getattr(type(shell).run_cell_async, "__code__", None)
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if str(frame.f_globals.get("__name__", "")).startswith("IPython."):
            for value in list(frame.f_locals.values()):
                code = getattr(value, "cr_code", None)
                if code is run_cell_async and getattr(value, "cr_frame", None) is not None:
                    return value
        tb = tb.tb_next
    return None


def sendable(text: str) -> str:
    """``text`` as the kernel's session can send it. A lone surrogate (``"\\ud83d"``, half
    of an emoji cut in two) is a valid ``str`` but not UTF-8, and a message holding one
    never leaves the kernel: the error output and the notice are lost. Such characters
    are written as their escape (``\\ud83d``); any other text is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def sendable_error(error: BaseException) -> BaseException:
    """``error`` itself, or, when its message cannot be sent (see ``sendable``), a stand-in
    of the same name whose message is the escaped one. ipykernel builds the error output
    and the execute_reply from ``type(error).__name__`` and ``str(error)``."""
    try:
        text = str(error)
    except Exception:  # its own __str__ fails: IPython and ipykernel deal with that
        return error
    escaped = sendable(text)
    if escaped is text:
        return error
    stand_in = type(type(error).__name__, (Exception,), {"__str__": lambda self: escaped})
    stand_in.__module__ = type(error).__module__
    stand_in.__qualname__ = type(error).__qualname__
    return stand_in(escaped)


def show_groups_as_errors(shell: InteractiveShell) -> Callable[[], None]:
    """Make ``shell`` show an exception group (``asyncio.TaskGroup``, ``ExceptionGroup``) as
    the error output, so that its notice follows; returns what undoes it.

    IPython's own formatter does not handle groups: its ``showtraceback`` prints them with
    the standard library to stderr instead, past ``_showtraceback``, so the client gets no
    error output and the model no notice. They are formatted the same way here (without
    IPython's own frames) and handed to ``_showtraceback`` as any traceback is.
    """
    had_own = "showtraceback" in shell.__dict__
    replaced = shell.showtraceback

    def showtraceback(
        exc_tuple: Any = None,
        filename: str | None = None,
        tb_offset: int | None = None,
        exception_only: bool = False,
        running_compiled_code: bool = False,
    ) -> None:
        group = None if exception_only else _group_of(shell, exc_tuple)
        if group is None:
            replaced(
                exc_tuple=exc_tuple,
                filename=filename,
                tb_offset=tb_offset,
                exception_only=exception_only,
                running_compiled_code=running_compiled_code,
            )
            return
        etype, value, tb = group
        _trim_members(value, set())
        text = "".join(traceback.format_exception(etype, value, _program_frames(tb)))
        try:
            shell._showtraceback(etype, value, text.rstrip("\n").split("\n"))
            if shell.call_pdb:
                shell.debugger(force=True)
        except KeyboardInterrupt:
            print("\n" + shell.get_exception_only(), file=sys.stderr)

    shell.showtraceback = showtraceback  # type: ignore[method-assign]

    def undo() -> None:
        if shell.__dict__.get("showtraceback") is showtraceback:
            if had_own:
                shell.showtraceback = replaced  # type: ignore[method-assign]
            else:
                del shell.showtraceback

    return undo


def _trim_members(error: BaseException, seen: set[int]) -> None:
    """Leave IPython's and ptc-retry's hidden frames out of the tracebacks of the exceptions
    ``error`` holds (a group's members, and theirs, however deep), as IPython does for one
    exception."""
    waiting = [error]
    while waiting:
        for member in getattr(waiting.pop(), "exceptions", ()):
            if isinstance(member, BaseException) and id(member) not in seen:
                seen.add(id(member))
                member.__traceback__ = _program_frames(member.__traceback__)
                waiting.append(member)


def _program_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without IPython's frames and the ptc-retry frames IPython would hide."""
    kept = []
    while tb is not None:
        frame = tb.tb_frame
        if not (str(frame.f_globals.get("__name__")).startswith("IPython.") or _own_hidden(frame)):
            kept.append(tb)
        tb = tb.tb_next
    trimmed = None
    for entry in reversed(kept):
        trimmed = types.TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def _group_of(shell: InteractiveShell, exc_tuple: Any) -> tuple[type, BaseException, Any] | None:
    """The exception IPython is about to show, when it is (or was raised while handling)
    an exception group; None otherwise, and when there is none to show."""
    groups = _group_types()
    if not groups:
        return None
    try:
        etype, value, tb = shell._get_exc_info(exc_tuple)
    except ValueError:
        return None
    seen: BaseException | None = value
    while seen is not None:
        if isinstance(seen, groups):
            return etype, value, tb
        seen = seen.__context__
    return None
