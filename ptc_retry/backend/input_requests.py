"""The stdin channel of one running program: a batch of tool calls is answered by the
host's tools, a cancel request cancels calls of a batch, and any other input_request (the
program called ``input()``) gets end-of-file. Each reply names the request it answers.

Why stdin: while a program runs, the kernel reads no further shell messages (a comm message
waits behind the running execute_request), but it can send input_requests and read their
replies, on ipykernel 6.29 and 7.x alike; a gateway's websocket carries the stdin channel
as well, so the same calls work locally and remotely.

One catch: the kernel's stdin socket drops what it sends to a client whose stdin connection
is not through yet (a zmq ROUTER socket), and after a restart each of the client's sockets
reconnects on its own timer, so a kernel can answer on shell and iopub while its
input_requests still go nowhere. ``stdin_connected`` waits until one gets through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from ..core.errors import MessageTooLarge
from ..core.protocol import (
    ToolCancel,
    execute_request,
    host_result,
    parse_tool_request,
    tool_reply,
)
from .host_tools import HostTools
from .late_results import Key, LateResults
from .transport import Transport

__all__ = ["EOF", "InputRequests", "stdin_connected"]

log = logging.getLogger(__name__)

#: The reply to a person's ``input()``: end-of-file, so the program gets EOFError, not a hang.
EOF = "\x04"
#: Seconds ``cancel`` waits for a cancelled batch's functions to let go.
_CANCEL_WAIT = 1.0
#: What a batch's reply holds for a call the program cancelled (the program never reads it).
_CANCELLED = "cancelled: the program no longer waited for it"
#: Seconds a stdin probe waits for its input_request before it interrupts and tries again.
_PROBE_WAIT = 1.0


async def stdin_connected(kernel: Transport, timeout: float) -> int:
    """Return once an input_request of ``kernel`` reaches this client; the number of tries.

    Each try runs ``input()`` silently (no history, no checkpoint) and answers its request;
    a request that does not come within a second was dropped, so the try is interrupted
    and made again. asyncio.TimeoutError when none got through within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    tries = 0
    while time.monotonic() < deadline:
        tries += 1
        request = execute_request("input()", silent=True, allow_stdin=True)
        if await _probe(kernel, await kernel.send_execute(request, {}), deadline):
            return tries
        log.info("the kernel's input_request did not come through: trying again")
    raise asyncio.TimeoutError


async def _probe(kernel: Transport, msg_id: str, deadline: float) -> bool:
    """Whether the probe ``msg_id`` asked for input; False once it ended without asking."""
    interrupt_at = time.monotonic() + _PROBE_WAIT
    asked = interrupted = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise asyncio.TimeoutError
        message = await kernel.receive(msg_id, min(left, 0.1))
        if message is None:
            if not (asked or interrupted) and time.monotonic() >= interrupt_at:
                await kernel.interrupt()  # input() waits for a request that was dropped
                interrupted = True
        elif message["msg_type"] == "input_request":
            asked = True
            await kernel.send_input_reply("", message)
        elif message["msg_type"] == "execute_reply":
            return asked


class InputRequests:
    """Answers the input_requests of one execution on ``kernel``, with ``tools``.

    Each batch of calls runs in tasks of its own and gets its reply when its calls are done;
    several may run at once (a program waits for a call in a background task while it makes
    another). A cancel request names calls of a batch the program no longer waits for: they
    are cancelled (a function in a worker thread runs to its end) and the batch's reply says
    so in their place. ``cancel`` abandons every batch: its calls are cancelled and no reply
    is sent. What the host completed and the kernel may not have taken goes to ``late``
    when the execution ends (see ``end``).
    """

    def __init__(
        self, kernel: Transport, tools: HostTools, late: LateResults | None = None
    ) -> None:
        self.kernel = kernel
        self.tools = tools
        self.late = late
        #: The calls of each batch being answered, by the msg_id of its input_request.
        self._batches: dict[str, list[tuple[dict[str, Any], asyncio.Task[dict[str, Any]]]]] = {}
        self._answering: set[asyncio.Task[None]] = set()
        #: The results the host completed for this execution, and those whose reply went out.
        self._completed: dict[Key, dict[str, Any]] = {}
        self._sent: set[Key] = set()
        self._ended = False

    async def handle(self, request: dict[str, Any]) -> None:
        """Answer ``request``, an input_request of the running program: EOF or a cancel at
        once, tool calls in tasks of their own (the caller goes on watching the kernel)."""
        prompt = (request.get("content") or {}).get("prompt")
        try:
            asked = parse_tool_request(prompt if isinstance(prompt, str) else "")
        except ValueError as exc:
            log.warning("a malformed tool request from the kernel (%s): answering no calls", exc)
            asked = []
        if asked is None:
            await self._reply(EOF, request)
        elif isinstance(asked, ToolCancel):
            self._cancel_calls(asked)
            await self._reply(tool_reply([]), request)
        else:
            self._start(asked, request)

    async def cancel(self) -> None:
        """Abandon every batch: cancel its calls; its reply is never sent."""
        calls = [task for batch in self._batches.values() for _, task in batch]
        tasks = [*calls, *self._answering]
        self._batches, self._answering = {}, set()
        for task in tasks:
            task.cancel()
        running = [task for task in tasks if not task.done()]
        if running:  # let async functions see their CancelledError through
            await asyncio.wait(running, timeout=_CANCEL_WAIT)

    def end(self, *, stopped: bool) -> None:
        """The execution is over: keep in ``late`` each result the kernel may not have
        taken. That is each one whose reply never went out (its batch was abandoned or its
        call cancelled, or its function returned after the execution ended) and, when the
        program was ``stopped`` (an interrupt, a time limit, a death: the kernel may have
        given up on a reply as it went out), each one it completed."""
        self._ended = True
        if self.late is not None:
            for key, entry in self._completed.items():
                if stopped or key not in self._sent:
                    self.late.keep(entry)
        self._completed.clear()

    def _start(self, calls: list[dict[str, Any]], request: dict[str, Any]) -> None:
        msg_id = str(request["header"]["msg_id"])
        batch = [(call, asyncio.ensure_future(self._call(call))) for call in calls]
        self._batches[msg_id] = batch
        answering = asyncio.ensure_future(self._answer(msg_id, batch, request))
        self._answering.add(answering)
        answering.add_done_callback(self._answering.discard)

    async def _call(self, call: dict[str, Any]) -> dict[str, Any]:
        (result,) = await self.tools.answer([call], self._host_completed)
        return result

    async def _answer(
        self,
        msg_id: str,
        batch: list[tuple[dict[str, Any], asyncio.Task[dict[str, Any]]]],
        request: dict[str, Any],
    ) -> None:
        if batch:
            await asyncio.wait([task for _, task in batch])
        if self._batches.pop(msg_id, None) is None:
            return  # abandoned meanwhile
        results = [
            {"id": call.get("id"), "ok": False, "error": _CANCELLED}
            if task.cancelled()
            else task.result()
            for call, task in batch
        ]
        sent = await self._reply_results(results, request)
        # The results the kernel was given: a call cancelled, or refused for its size, was not.
        given = {result.get("id") for result in sent or () if result.get("ok") is True}
        keys = (_key(call) for call, _ in batch if call.get("id") in given)
        self._sent.update(key for key in keys if key is not None)

    def _cancel_calls(self, cancel: ToolCancel) -> None:
        """Cancel the calls ``cancel`` names, of a batch still being answered."""
        for call, task in self._batches.get(cancel.request, []):
            if call.get("id") in cancel.calls:
                task.cancel()

    def _host_completed(self, call: dict[str, Any], result: Any) -> None:
        entry = host_result(call, result)
        if entry is None or self.late is None:
            return
        if self._ended:  # a sync function that returned after its execution ended
            self.late.keep(entry)
        else:
            self._completed[(entry["program"], entry["k"])] = entry

    async def _reply_results(
        self, results: list[dict[str, Any]], request: dict[str, Any]
    ) -> list[dict[str, Any]] | None:
        """Send ``results``: the results sent, or None when no reply could be sent. When
        the transport cannot carry them in one message, the largest become errors that say
        so, until the rest fit: the kernel always gets its reply."""
        while True:
            try:
                return results if await self._reply(tool_reply(results), request) else None
            except MessageTooLarge as too_large:
                fewer = _largest_refused(results, too_large)
                if fewer is None:  # only errors left, and still too large: nothing fits
                    log.warning("could not answer the kernel's tool request: %s", too_large)
                    return None
                results = fewer

    async def _reply(self, value: str, request: dict[str, Any]) -> bool:
        """Send ``value``; False when it could not be sent, MessageTooLarge when the
        transport cannot carry it."""
        try:
            await self.kernel.send_input_reply(value, request)
        except MessageTooLarge:
            raise
        except Exception as exc:  # the kernel or gateway went away: the execution notices
            log.info("could not answer the kernel's input_request: %s", exc)
            return False
        return True


def _key(call: dict[str, Any]) -> Key | None:
    """The recording line a call names, if it names one."""
    entry = host_result(call, None)
    return None if entry is None else (entry["program"], entry["k"])


def _largest_refused(
    results: list[dict[str, Any]], too_large: MessageTooLarge
) -> list[dict[str, Any]] | None:
    """``results`` with the largest turned into errors that give the size and the limit, as
    many as the reply must lose to fit, going by their JSON size (sending again tells whether
    it was enough); None when none is larger than the error that would replace it."""
    fewer, changed = list(results), False
    excess = too_large.size - too_large.limit
    payloads = [result.get("result" if result.get("ok") is True else "error") for result in results]
    sizes = [len(json.dumps(payload, ensure_ascii=False).encode("utf-8")) for payload in payloads]
    for n in sorted(range(len(results)), key=sizes.__getitem__, reverse=True):
        what = "result" if results[n].get("ok") is True else "error message"
        error = (
            f"its {what} ({sizes[n]:,} bytes as JSON) is too large to send to the kernel: "
            f"{too_large}; return less at a time (a part, or a summary)"
        )
        saved = sizes[n] - len(json.dumps(error, ensure_ascii=False).encode("utf-8"))
        if saved <= 0:
            break  # this one and the rest are no larger than what would replace them
        fewer[n], changed = {"id": results[n].get("id"), "ok": False, "error": error}, True
        excess -= saved
        if excess <= 0:
            break
    return fewer if changed else None
