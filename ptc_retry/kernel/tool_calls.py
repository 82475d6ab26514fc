"""A running program's tool calls: numbered in the order it makes them, reused from the
recording of the program a replay replays (:mod:`.recording`), sent to the agent's backend
in batches, and recorded in the session.

The transport: while a program runs, the kernel reads no further shell message, but it can
ask its client for input on the stdin channel (input_request / input_reply, as ``input()``
does), which works in the middle of an execution, through a gateway's websocket too, on
ipykernel 6.29 and 7. So a batch of calls is one ``kernel.raw_input(tool_request(calls))``
(:mod:`ptc_retry.core.protocol`), which blocks the kernel's thread until the backend answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core.errors import PtcRetryError, ToolError
from ..core.program import statement_spans
from ..core.protocol import parse_tool_reply, tool_request
from .catalog import NO_BACKEND
from .host import Host, current_host
from .recording import CallRecord, RecordedCalls, Reuses
from .tracebacks import cell_text

if TYPE_CHECKING:
    from .running import Running

#: True inside a live call of a recorded function: the calls it makes are part of it (its
#: recorded result stands for them), so they are neither numbered, recorded nor reused.
_INSIDE_RECORDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ptc_retry_inside_recorded", default=False
)


class ProgramCalls:
    """The tool calls of one running program (a thread's outermost program)."""

    def __init__(self, host: Host, running: Running) -> None:
        self._host = host
        self.running = running
        #: The replays running in this program, which its calls may take results from.
        self.reuses = Reuses()
        self.reused = 0
        self.live = 0
        self._count = 0
        self._batch: list[tuple[CallRecord, asyncio.Future[Any]]] = []
        self._scheduled = False
        self._closed = False
        self._spans: tuple[str, list[tuple[int, int]]] | None = None
        self._run_code = type(host.shell).run_code.__code__

    def summary(self) -> dict[str, int] | None:
        """``{"reused": n, "live": m}`` for the history line; None when it made no call."""
        return {"reused": self.reused, "live": self.live} if self.reused or self.live else None

    def close(self) -> None:
        """The program ended: the calls still waiting to be sent fail, none is sent later."""
        self._closed = True
        batch, self._batch = self._batch, []
        for record, future in batch:
            self._fail(record, future, "the program ended before the call was sent")

    # -- every call ----------------------------------------------------------------------------

    def begin(
        self,
        tool: str,
        arguments: Any,
        *,
        code: str | None = None,
        reads: str | None = None,
        reusable: bool = True,
    ) -> CallRecord:
        """Number the next call; it comes back with its result when a running replay reuses
        one (``reused_from`` set: the call id of the replayed program whose recording gave
        it), else the caller makes it and reports with ``finish``. ``code`` and ``reads``: a
        recorded function's digests; ``reusable=False``: this call is never given a recorded
        result, nor is its own ever reused."""
        if self._closed:
            raise ToolError(f"{tool}: the program that made this call has ended", tool=tool)
        if _INSIDE_RECORDED.get():
            return CallRecord(0, tool, arguments, None, code)  # k 0: not recorded
        self._count += 1
        record = CallRecord(self._count, tool, arguments, self._statement(), code, reads)
        record.reusable = reusable
        found = self.reuses.take(record)
        if found is None:
            self.live += 1
            return record
        self.reused += 1
        reuse, line = found
        record.ok, record.result, record.reused_from = True, line.get("result"), reuse.call_id
        self._write(record)
        return record

    def record_skipped(self, recorded: RecordedCalls, start: int, call_id: str) -> None:
        """A resume of ``call_id`` starts at top-level statement ``start``, before any call:
        the calls its skipped statements made (in ``recorded``, ``call_id``'s recording)
        come first in this program's recording, marked reused from ``call_id``, since their
        results are what the namespace holds. So a replay of this program, or of a fix of
        it, finds every call of its whole run. Where it is unsure which calls those are, a
        ``k`` without a line follows the sure ones: no later call can be matched by place.
        The counts of the history line stay those of the calls this run makes."""
        before, _, sure = recorded.split(start)
        call = self.running.call
        for line in before:
            self._count += 1
            if call is not None:
                carried = dict(line, k=self._count, reused=True, reused_from=call_id)
                self._host.checkpoints.record_tool_call(call, carried)
        if not sure:
            self._count += 1

    def finish(
        self,
        record: CallRecord,
        *,
        result: Any = None,
        error: str | None = None,
        reusable: bool = True,
    ) -> None:
        """Record how a live call ended: ``result``, or ``error`` (what its ToolError says)."""
        record.ok, record.result, record.error = error is None, result, error
        record.reusable = reusable and record.reusable and record.arguments is not None
        record.duration = time.time() - record.started
        self._write(record)

    def _write(self, record: CallRecord) -> None:
        call = self.running.call
        if call is not None and record.k:
            self._host.checkpoints.record_tool_call(call, record.line())

    @contextlib.contextmanager
    def inside(self, record: CallRecord) -> Iterator[None]:
        """While a recorded function's live call runs: what it calls is part of it."""
        token = _INSIDE_RECORDED.set(True) if record.k else None
        try:
            yield
        finally:
            if token is not None:
                _INSIDE_RECORDED.reset(token)

    # -- host tools ----------------------------------------------------------------------------

    async def call_host(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call the host's tool ``name``: its result, or ToolError with the host's message.

        Calls made in one turn of the event loop (``asyncio.gather``) travel as one batch.
        A call the program's own task awaits is sent at once, from the program's code, so an
        interrupt during the wait is a KeyboardInterrupt there, as in any cell.
        """
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        record = self.begin(name, arguments)
        if record.reused_from is not None:
            return record.result
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._batch.append((record, future))
        if current_task() is self.running.task:
            self._send(inline=True)
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._send_soon)
        return await future

    def _send_soon(self) -> None:
        self._scheduled = False
        self._send(inline=False)

    def _send(self, *, inline: bool) -> None:
        """Send the batch and settle its futures. Inline (the program's own code waits): an
        interrupt is raised; else (a loop callback) nothing may escape."""
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        batch, self._batch = self._batch, []
        if not batch:
            return
        program = self.running.call.id if self.running.call is not None else None
        # "program" and "k" name the recording line each call gets, so that a host that
        # completes a call whose result never arrives can say so with the next request.
        calls = [
            {
                "id": index,
                "tool": record.tool,
                "arguments": record.arguments,
                "program": program,
                "k": record.k,
            }
            for index, (record, _) in enumerate(batch)
        ]
        try:
            value = self._ask(tool_request(calls), inline=inline)
            replies = {reply.get("id"): reply for reply in parse_tool_reply(value)}
        except KeyboardInterrupt:
            for record, future in batch:
                self._fail(record, future, "interrupted while it ran", cancel=True)
            if inline:
                raise KeyboardInterrupt("interrupted while waiting for the agent's tools") from None
            return
        except Exception as exc:
            reason = str(exc) if isinstance(exc, ToolError) else f"a bad tool reply ({exc})"
            for record, future in batch:
                self._fail(record, future, reason)
            return
        for index, (record, future) in enumerate(batch):
            self._settle(record, future, replies.get(index))

    def _settle(
        self, record: CallRecord, future: asyncio.Future[Any], reply: dict[str, Any] | None
    ) -> None:
        if reply is not None and reply.get("ok") is True and "result" in reply:
            self.finish(record, result=reply["result"])
            if not future.done():
                future.set_result(reply["result"])
            return
        error = reply.get("error") if reply is not None else None
        if not isinstance(error, str):
            error = "the backend's reply holds no result for this call"
        self._fail(record, future, error)

    def _fail(
        self, record: CallRecord, future: asyncio.Future[Any], error: str, *, cancel: bool = False
    ) -> None:
        self.finish(record, error=error)
        if future.done():
            return
        if cancel:
            future.cancel()
        else:
            future.set_exception(ToolError(f"tools.{record.tool}: {error}", tool=record.tool))

    def _ask(self, prompt: str, *, inline: bool) -> str:
        kernel = getattr(self._host.shell, "kernel", None)
        if kernel is None or not hasattr(kernel, "raw_input"):
            raise ToolError("this is not a Jupyter kernel: no backend can answer tool calls")
        from IPython.core.error import StdinNotImplementedError

        try:
            if inline:
                return str(kernel.raw_input(prompt))
            with _interruptible(self.running.task):
                return str(kernel.raw_input(prompt))
        except StdinNotImplementedError:
            raise ToolError(
                "tool calls travel on the stdin channel, which this request does not allow: "
                "the backend must send allow_stdin=True with its tools"
            ) from None
        except EOFError:
            raise ToolError(
                "the client answered the tool request with end-of-input: it runs no tools"
            ) from None

    # -- which top-level statement makes a call ------------------------------------------------

    def _statement(self) -> int | None:
        """The program's top-level statement that is running (what a resume counts in)."""
        running = self.running
        frames = self._frames()
        if running.program is not None:  # a replay's program, not the cell that replays
            filename, text = running.program
            lines = [frame.f_lineno for frame in frames if frame.f_code.co_filename == filename]
        else:
            found = cell_text(self._host.shell, running.info)
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


@contextlib.contextmanager
def _interruptible(task: asyncio.Task[Any] | None) -> Iterator[None]:
    """Waiting from the event loop rather than from the program's code, an interrupt must
    still end the wait: it is raised here, then handed to the handler that was in place (the
    time limit's, or ipykernel's, which stop an awaiting program from the loop)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread gets signals
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupted = False
    try:
        yield
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        if interrupted:
            _pass_on(previous, task)


def _pass_on(previous: Any, task: asyncio.Task[Any] | None) -> None:
    if callable(previous):
        try:
            previous(signal.SIGINT, None)
            return
        except KeyboardInterrupt:
            pass  # a handler that raises: in a loop callback that would break the loop
    if task is not None:
        task.cancel()


# -- the calls programs make -------------------------------------------------------------------


def program_calls(host: Host) -> ProgramCalls | None:
    """The tool calls of this thread's running program; None outside a program."""
    running = host.programs.outermost()
    if running is None:
        return None
    calls = running.calls
    if not isinstance(calls, ProgramCalls):
        calls = running.calls = ProgramCalls(host, running)
    return calls


def current_calls() -> ProgramCalls | None:
    """The tool calls of the program running in this thread, if ptc-retry is loaded."""
    try:
        return program_calls(current_host())
    except PtcRetryError:
        return None


async def call_host_tool(name: str, arguments: dict[str, Any]) -> Any:
    """What ``await tools.<name>(...)`` does once its arguments are bound."""
    __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
    calls = current_calls()
    if calls is None:
        raise ToolError(
            f"tools.{name} can be called only by a running program, from its own thread",
            tool=name,
        )
    catalog = calls.running.catalog
    if catalog is None:
        raise ToolError(NO_BACKEND.format(name=name), tool=name)
    if name not in catalog.specs:
        raise ToolError(
            f"tools.{name} is not a tool of this program's request; its tools are: "
            f"{', '.join(catalog.names) or 'none'}",
            tool=name,
        )
    return await calls.call_host(name, arguments)
