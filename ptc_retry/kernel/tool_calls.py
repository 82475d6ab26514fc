"""A running program's tool calls: numbered in the order it makes them, reused from the
recording of the program a replay replays (:mod:`.recording`), sent to the agent's backend
in batches, and recorded in the session.

The transport: while a program runs, the kernel reads no further shell message, but it can
ask its client for input on the stdin channel (input_request / input_reply, as ``input()``
does), which works in the middle of an execution, through a gateway's websocket too, on
ipykernel 6.29 and 7. A batch of calls is one input_request (``tool_request(calls)``, see
:mod:`ptc_retry.core.protocol`) sent on the kernel's shared stdin channel (:mod:`.stdin`),
whose reply settles the futures the calls await: the program's event loop runs on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import sentences as said
from ..core.approvals import WAITS
from ..core.errors import ApprovalPending, PtcRetryError, ToolDenied, ToolError
from ..core.protocol import ToolCancel, parse_tool_reply, tool_cancel, tool_request
from .catalog import NO_BACKEND
from .host import Host, current_host
from .interrupts import Interrupts
from .recording import CallRecord, RecordedCalls, Reuses, origin
from .running import STARTED_BY
from .statements import Statements, current_task
from .stdin import EOF, Answer, Request, Route, StdinChannel

if TYPE_CHECKING:
    from .running import Running

#: Inside a live call of a recorded function, that call's ``k``: the calls it makes are
#: numbered and recorded as made within it, so that a replay that reuses its result does not
#: make them, and one that runs it again (it failed, or its code changed) reuses theirs.
_WITHIN: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ptc_retry_within", default=None
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
        #: Calls made in this turn of the loop, sent as one batch at its end.
        self._batch: list[_Call] = []
        self._scheduled = False
        #: Requests sent on the stdin channel whose answer has not come.
        self._open: dict[Request, _Sent] = {}
        #: Sent calls whose task stopped waiting, to cancel on the host at the turn's end.
        self._cancels: list[_Call] = []
        #: Calls whose future is not done yet, and what notes interrupts meanwhile.
        self._pending = 0
        self._interrupts: Interrupts | None = None
        self._closed = False
        self._statements = Statements(host.shell, running)
        #: The calls the host answered with a pause: they wait for a person's approval.
        self.paused: list[CallRecord] = []
        #: Paused calls whose pause is held back while other calls of the program are in
        #: flight (see ``_release_pauses``).
        self._held: list[_Call] = []

    def running_programs(self) -> list[Running]:
        """The programs running in this program's thread, outermost first."""
        return list(self._host.programs.stack)

    def pending(self) -> list[dict[str, Any]]:
        """The calls that wait for approval, for the history line and the reply metadata:
        ``{"k", "tool", "arguments"}`` each (and ``policy_error``, what the tool's policy
        raised), in the order the program made them."""
        entries = []
        for record in self.paused:
            entry: dict[str, Any] = {"k": record.k, "tool": record.tool}
            entry["arguments"] = record.arguments
            if record.error and record.error != WAITS:
                entry["policy_error"] = record.error
            entries.append(entry)
        return entries

    def _pause(self) -> ApprovalPending:
        """The pause that stops the program at its calls that wait for approval."""
        names = sorted({f"tools.{record.tool}" for record in self.paused})
        call = self.running.call
        reference = call.reference if call is not None else "this program"
        return ApprovalPending(
            said.NOTICE_PAUSED.render(calls=", ".join(names), reference=reference)
        )

    def summary(self) -> dict[str, int] | None:
        """``{"reused": n, "live": m}`` for the history line; None when it made no call."""
        return {"reused": self.reused, "live": self.live} if self.reused or self.live else None

    def close(self) -> None:
        """The program ended: the calls still waiting fail (its backend cancels what it
        still runs), none is sent later, and a reply that comes late is dropped."""
        self._closed = True
        batch, self._batch = self._batch, []
        for call in batch:
            self._fail(call, "the program ended before the call was sent")
        opened, self._open = self._open, {}
        for request, sent in opened.items():
            sent.stdin.abandon(request)
            for call in sent.calls:
                self._fail(call, "the program ended before its result came")

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
        if self.paused:  # the program went on past its pause (a bare except): it stops here
            raise self._pause()
        self._count += 1
        record = CallRecord(self._count, tool, arguments, self._statements.current(), code, reads)
        record.within = _WITHIN.get()
        record.reusable = reusable
        found = self.reuses.take(record)
        trace = self.running.trace
        if found is None:
            self.live += 1
            if code is not None:
                self._write_unfinished(record)
            if trace is not None:
                trace.tool_call_started(record)
            return record
        self.reused += 1
        reuse, line = found
        record.ok, record.result, record.reused_from = True, line.get("result"), reuse.call_id
        self._write(record)
        if trace is not None:
            trace.tool_call_reused(record)
        # The calls made within it are not made; their lines go on, so that a fix of this
        # program that runs the function again still finds them.
        self._carry(reuse.inner, reuse.call_id, {line.get("k"): record.k})
        return record

    def _write_unfinished(self, record: CallRecord) -> None:
        """The line of a recorded function's live call as it starts, which its end replaces
        (a call's last line counts). The calls it makes are written before its own end:
        without this line, a kernel that died inside it would leave a gap in the recording,
        past which a resume could match nothing."""
        record.error = _UNFINISHED
        self._write(record)
        record.error = None

    def _carry(
        self, lines: list[dict[str, Any]], call_id: str, renumbered: dict[Any, int | None]
    ) -> None:
        """Write ``lines`` of ``call_id``'s recording into this program's, numbered on from
        its calls so far and marked reused from ``call_id``; ``renumbered`` maps a ``k`` there
        to its ``k`` here (for ``within``), and takes the new ones. Not counted as calls."""
        call = self.running.call
        for line in lines:
            self._count += 1
            renumbered[line.get("k")] = self._count
            if call is not None:
                carried = dict(line, k=self._count, reused=True, reused_from=call_id)
                carried["origin"] = origin(line, call_id)
                if "within" in line:
                    carried["within"] = renumbered.get(line["within"])
                self._host.checkpoints.record_tool_call(call, carried)

    def record_skipped(self, recorded: RecordedCalls, start: int, call_id: str) -> None:
        """A resume of ``call_id`` starts at top-level statement ``start``, before any call:
        the calls its skipped statements made (in ``recorded``, ``call_id``'s recording)
        come first in this program's recording, marked reused from ``call_id``, since their
        results are what the namespace holds. So a replay of this program, or of a fix of
        it, finds every call of its whole run. Where it is unsure which calls those are, a
        ``k`` without a line follows the sure ones: no later call can be matched by place.
        The counts of the history line stay those of the calls this run makes."""
        before, _, sure = recorded.split(start)
        self._carry(before, call_id, {})
        if not sure:
            self._count += 1

    def finish(
        self,
        record: CallRecord,
        *,
        result: Any = None,
        error: str | None = None,
        reusable: bool = True,
        ename: str | None = None,
    ) -> None:
        """Record how a live call ended: ``result``, or ``error`` (what its ToolError says;
        ``ename``: the type of what a recorded function raised)."""
        record.ok, record.result, record.error = error is None, result, error
        record.reusable = reusable and record.reusable and record.arguments is not None
        record.duration = time.time() - record.started
        self._write(record)
        if self.running.trace is not None:
            self.running.trace.tool_call_ended(record, ename)

    def _write(self, record: CallRecord) -> None:
        call = self.running.call
        if call is not None and record.k:
            self._host.checkpoints.record_tool_call(call, record.line())

    @contextlib.contextmanager
    def inside(self, record: CallRecord) -> Iterator[None]:
        """While a recorded function's live call runs: what it calls is made within it."""
        token = _WITHIN.set(record.k)
        try:
            yield
        finally:
            _WITHIN.reset(token)

    # -- host tools ----------------------------------------------------------------------------

    async def call_host(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call the host's tool ``name``: its result, or ToolError with the host's message.

        Calls made in one turn of the event loop (``asyncio.gather``) travel as one batch.
        The wait blocks nothing: the program's other tasks run meanwhile, and cancelling
        the awaiting task (``task.cancel()``, ``asyncio.wait_for``) cancels the call on the
        host too. An interrupt while the program's own code awaits a call (a person's, or
        the time limit's) is a KeyboardInterrupt there, as in any cell.
        """
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        record = self.begin(name, arguments)
        if record.reused_from is not None:
            return record.result
        loop = asyncio.get_running_loop()
        call = _Call(record, loop.create_future(), self._watch_interrupts())
        call.future.add_done_callback(lambda _: self._on_done(call))
        self._batch.append(call)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._send)
        try:
            return await call.future
        except asyncio.CancelledError:
            if call.interrupted and current_task() is self.running.task:
                # The program's own code awaits: it gets the interrupt, as in any cell.
                raise KeyboardInterrupt("interrupted while waiting for the agent's tools") from None
            raise

    def _watch_interrupts(self) -> tuple[Interrupts, int] | None:
        """While calls wait, interrupts are watched for (in the main thread): the handler
        and the count of interrupts so far, for a new call."""
        self._pending += 1
        if self._interrupts is None:
            self._interrupts = Interrupts.install(self.running.task)
        if self._interrupts is None:
            return None
        return self._interrupts, self._interrupts.count

    def _send(self) -> None:
        """In a loop callback: send the calls made since the last turn as one batch."""
        self._scheduled = False
        batch = [call for call in self._batch if not call.future.done()]
        self._batch = []
        if not batch:
            return
        try:
            stdin, route = self._route()
        except ToolError as exc:
            for call in batch:
                self._fail(call, str(exc))
            return
        program = self.running.call.id if self.running.call is not None else None
        calls = []
        for index, call in enumerate(batch):
            record = call.record
            call.index = index
            entry = {
                "id": index,
                "tool": record.tool,
                "arguments": record.arguments,
                "program": program,
                "k": record.k,
            }
            if record.retry_of is not None:
                entry["retry_of"] = record.retry_of
            if self.running.trace is not None:
                entry.update(self.running.trace.tool_call_context(record))
            calls.append(entry)
        sent = _Sent(stdin, route, batch)
        for call in batch:
            call.sent = sent
        self._submit(sent, tool_request(calls))

    def _route(self) -> tuple[StdinChannel, Route]:
        """The stdin channel and this request's route on it; ToolError when there is none."""
        stdin = self._host.stdin
        if stdin is None:
            raise ToolError("this is not a Jupyter kernel: no backend can answer tool calls")
        route = stdin.route()
        if not route.allows_stdin:
            raise ToolError(
                "tool calls travel on the stdin channel, which this request does not allow: "
                "the backend must send allow_stdin=True with its tools"
            )
        return stdin, route

    def _answered(self, sent: _Sent, answer: Answer) -> None:
        """In the loop: the reply to ``sent`` came; settle the calls that still wait for it."""
        if sent.request is None or self._open.pop(sent.request, None) is None:
            return  # abandoned meanwhile (the program ended)
        waiting = [call for call in sent.calls if not call.future.done()]
        if not waiting:
            return
        try:
            replies = _replies(answer)
        except ToolError as exc:
            for call in waiting:
                self._fail(call, str(exc))
            return
        # The calls of a batch that pause all stop the program together: each one's pause
        # names every call that waits.
        paused = [call for call in waiting if (replies.get(call.index) or {}).get("paused") is True]
        for call in paused:
            call.record.paused = True
            self.finish(call.record, error=_policy_error(replies.get(call.index)) or WAITS)
            self.paused.append(call.record)
            self._not_made()
        for call in waiting:
            if call in paused:
                self._held.append(call)
            else:
                self._settle(call, replies.get(call.index))
        self._release_pauses()

    def _release_pauses(self) -> None:
        """Stop the program at its paused calls once no other call of it is in flight.

        A call another task made before the pause still runs on the host: ending the
        program now would lose its result (a resume would make it again). So the pause
        waits for those calls to end and be recorded (within the program's time limit);
        a call made meanwhile is not made, it raises the pause."""
        held = [call for call in self._held if not call.future.done()]
        if self._pending > len(held):
            return
        self._held = []
        for call in held:
            call.future.set_exception(self._pause())

    def _settle(self, call: _Call, reply: dict[str, Any] | None) -> None:
        denied = reply.get("denied") if reply is not None else None
        if isinstance(denied, str):
            self._not_made()
            self.finish(call.record, error=f"denied: {denied}")
            tool = call.record.tool
            call.future.set_exception(ToolDenied(denied, tool=tool))
            return
        ok = reply is not None and reply.get("ok") is True and "result" in reply
        if reply is not None and reply.get("joined") is True:
            self._joined(call.record, result=ok)
        if ok:
            assert reply is not None
            self.finish(call.record, result=reply["result"])
            call.future.set_result(reply["result"])
            return
        error = reply.get("error") if reply is not None else None
        if not isinstance(error, str):
            error = "the backend's reply holds no result for this call"
        self._fail(call, error)

    def _not_made(self) -> None:
        """The host paused or denied a call counted live: the counts are of calls made, in
        this program's and in each running replay's sentence."""
        self.live -= 1
        self.reuses.not_made()

    def _joined(self, record: CallRecord, *, result: bool) -> None:
        """The host gave ``record`` (a call that a replay makes again) the outcome of the
        earlier call it names, instead of running the function again: it was not made live,
        and a result counts as reused from that call's program (its line says so)."""
        program = record.retry_of[0] if record.retry_of else None
        if not isinstance(program, str):
            return
        self.live -= 1
        if result:
            record.reused_from = program
            self.reused += 1
        store = self._host.checkpoints.store
        source = (store.reference_of(program) if store else None) or program
        self.reuses.joined(source, result=result)

    def _fail(self, call: _Call, error: str) -> None:
        self.finish(call.record, error=error)
        if not call.future.done():
            tool = call.record.tool
            call.future.set_exception(ToolError(f"tools.{tool}: {error}", tool=tool))

    def _on_done(self, call: _Call) -> None:
        """A call's future is done: when the program stopped waiting for it (its task was
        cancelled), the call is recorded so and, once sent, cancelled on the host."""
        self._pending -= 1
        if not self._pending and self._interrupts is not None:
            self._interrupts.uninstall()
            self._interrupts = None
        self._release_pauses()
        if not call.future.cancelled():
            return
        if call.record.ok is None:
            self.finish(call.record, error=_INTERRUPTED if call.interrupted else _CANCELLED)
        if call.sent is not None:
            self._cancels.append(call)
            if len(self._cancels) == 1:  # one cancel request for a turn's cancelled calls
                call.future.get_loop().call_soon(self._send_cancels)

    def _send_cancels(self) -> None:
        """In a loop callback: tell the host which sent calls nobody waits for any more."""
        cancels, self._cancels = self._cancels, []
        if self._closed:
            return  # the program ended: its backend cancels what it still runs
        batches: dict[int, tuple[_Sent, list[int]]] = {}
        for call in cancels:
            assert call.sent is not None
            batches.setdefault(id(call.sent), (call.sent, []))[1].append(call.index)
        for sent, indexes in batches.values():
            assert sent.request is not None
            if all(call.future.done() for call in sent.calls):  # nobody waits for its reply
                self._open.pop(sent.request, None)
                if not sent.stdin.abandon(sent.request):
                    continue  # it never went out: there is nothing to cancel
            # Sent even when the program ends meanwhile; nothing waits for its answer.
            cancel = ToolCancel(sent.request.msg_id, sorted(indexes))
            sent.stdin.submit(tool_cancel(cancel), sent.route)

    def _submit(self, sent: _Sent, prompt: str) -> None:
        """Send ``prompt`` for ``sent``; its answer comes back to the loop (``_answered``)."""
        loop = asyncio.get_running_loop()
        sent.request = sent.stdin.submit(
            prompt, sent.route, lambda answer: _soon(loop, self._answered, sent, answer)
        )
        self._open[sent.request] = sent


def _policy_error(reply: dict[str, Any] | None) -> str | None:
    error = (reply or {}).get("error")
    return error if isinstance(error, str) and error != WAITS else None


#: How a call the program stopped waiting for is recorded.
_CANCELLED = "cancelled while it ran: the program stopped waiting for it"
_UNFINISHED = "no end recorded: it was running, or its kernel died while it ran"
_INTERRUPTED = "interrupted while it ran"


@dataclass(eq=False)
class _Call:
    """A live call on its way to the host: its record, and the future its caller awaits."""

    record: CallRecord
    future: asyncio.Future[Any]
    #: What watched for interrupts when the call was made, and how many it had seen then.
    watched: tuple[Interrupts, int] | None
    #: The batch it went out in, once sent, and its ``id`` there.
    sent: _Sent | None = None
    index: int = 0

    @property
    def interrupted(self) -> bool:
        """Whether an interrupt came while it waited (and so, what cancelled it)."""
        if self.watched is None:
            return False
        interrupts, seen = self.watched
        return interrupts.count > seen


@dataclass(eq=False)
class _Sent:
    """A batch of calls sent on the stdin channel, as one request."""

    stdin: StdinChannel
    route: Route
    calls: list[_Call]
    request: Request | None = None


def _replies(answer: Answer) -> dict[Any, dict[str, Any]]:
    """The results of a tool reply by call id; ToolError saying why there are none."""
    if isinstance(answer, Exception):
        raise ToolError(f"the kernel's stdin channel failed ({answer})")
    if answer == EOF:
        raise ToolError("the client answered the tool request with end-of-input: it runs no tools")
    try:
        return {reply.get("id"): reply for reply in parse_tool_reply(answer)}
    except Exception as exc:
        raise ToolError(f"a bad tool reply ({exc})") from None


def _soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Run ``callback(*args)`` in ``loop``, from any thread; not at all once it is closed."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(callback, *args)


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
    started_by = STARTED_BY.get()
    if started_by is not None and started_by not in calls.running_programs():
        raise ToolError(
            f"tools.{name}: the program that started this task has ended, and a task that "
            "outlives its program cannot call tools: await the task before that program ends",
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
