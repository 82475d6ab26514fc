"""A running program's live calls of the host's tools: sent to the agent's backend in
batches, awaited without blocking the program's event loop, cancelled on the host when the
program stops waiting for them, and settled by the backend's reply.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..core.approvals import WAITS
from ..core.errors import ApprovalPending, ToolDenied, ToolError
from ..core.protocol import ToolCancel, parse_tool_reply, tool_cancel, tool_request
from .call_lines import CallRecord
from .interrupts import Interrupts
from .statements import current_task
from .stdin import EOF, Answer, Request, Route, StdinChannel

if TYPE_CHECKING:
    from .host import Host
    from .running import Running


class ProgramLedger(Protocol):
    """What the host's calls need of their program's calls (:class:`.tool_calls.ProgramCalls`):
    each call is numbered and recorded there, and counted as made or not."""

    running: Running
    #: The calls the host answered with a pause: they wait for a person's approval.
    paused: list[CallRecord]

    def begin(
        self,
        tool: str,
        arguments: Any,
        *,
        schema: str | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> CallRecord: ...

    def finish(
        self, record: CallRecord, *, result: Any = None, error: str | None = None
    ) -> None: ...

    def approval_pending(self) -> ApprovalPending: ...

    def stop_on_every_line(self) -> None: ...

    def not_made(self) -> None: ...

    def joined(self, record: CallRecord, *, result: bool) -> None: ...


class HostCalls:
    """The live calls of the host's tools one running program makes."""

    def __init__(self, host: Host, calls: ProgramLedger) -> None:
        self._host = host
        self._calls = calls
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
        #: Paused calls whose pause is held back while other calls of the program are in
        #: flight (see ``_release_pauses``).
        self._held: list[_Call] = []

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

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        schema: str | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> Any:
        """Call the host's tool ``name``: its result, or ToolError with the host's message.
        ``schema``: the digest of what the tool takes now (``ToolSpec.schema_digest``);
        ``defaults``: its schema's defaults (``ToolSpec.defaults``).

        Calls made in one turn of the event loop (``asyncio.gather``) travel as one batch.
        The wait blocks nothing: the program's other tasks run meanwhile, and cancelling
        the awaiting task (``task.cancel()``, ``asyncio.wait_for``) cancels the call on the
        host too. An interrupt while the program's own code awaits a call (a person's, or
        the time limit's) is a KeyboardInterrupt there, as in any cell.
        """
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        record = self._calls.begin(name, arguments, schema=schema, defaults=defaults)
        if record.reused_from is not None:
            if record.ok is False:  # its recorded failure, given again
                raise ToolError(f"tools.{name}: {record.error}", tool=name)
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
            if call.interrupted and current_task() is self._calls.running.task:
                # The program's own code awaits: it gets the interrupt, as in any cell.
                raise KeyboardInterrupt("interrupted while waiting for the agent's tools") from None
            raise

    def _watch_interrupts(self) -> tuple[Interrupts, int] | None:
        """While calls wait, interrupts are watched for (in the main thread): the handler
        and the count of interrupts so far, for a new call."""
        self._pending += 1
        if self._interrupts is None:
            self._interrupts = Interrupts.install(self._calls.running.task)
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
        program = self._calls.running.call.id if self._calls.running.call is not None else None
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
            if self._calls.running.trace is not None:
                entry.update(self._calls.running.trace.tool_call_context(record))
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
            self._calls.finish(call.record, error=_policy_error(replies.get(call.index)) or WAITS)
            self._calls.paused.append(call.record)
            self._calls.not_made()
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
            call.future.set_exception(self._calls.approval_pending())
        if held:
            self._calls.stop_on_every_line()

    def _settle(self, call: _Call, reply: dict[str, Any] | None) -> None:
        denied = reply.get("denied") if reply is not None else None
        if isinstance(denied, str):
            self._calls.not_made()
            self._calls.finish(call.record, error=f"denied: {denied}")
            tool = call.record.tool
            call.future.set_exception(ToolDenied(denied, tool=tool))
            return
        ok = reply is not None and reply.get("ok") is True and "result" in reply
        if reply is not None and reply.get("joined") is True:
            self._calls.joined(call.record, result=ok)
        if ok:
            assert reply is not None
            self._calls.finish(call.record, result=reply["result"])
            call.future.set_result(reply["result"])
            return
        error = reply.get("error") if reply is not None else None
        if not isinstance(error, str):
            error = "the backend's reply holds no result for this call"
        self._fail(call, error)

    def _fail(self, call: _Call, error: str) -> None:
        self._calls.finish(call.record, error=error)
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
            self._calls.finish(call.record, error=_INTERRUPTED if call.interrupted else _CANCELLED)
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
