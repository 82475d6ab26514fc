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
import logging
import time
from typing import Any

from ..core.protocol import ToolCancel, execute_request, parse_tool_request, tool_reply
from .host_tools import HostTools
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
    are cancelled (a function in a worker thread runs to its end, and its result is dropped)
    and the batch's reply says so in their place. ``cancel`` abandons every batch: its calls
    are cancelled and no reply is sent.
    """

    def __init__(self, kernel: Transport, tools: HostTools) -> None:
        self.kernel = kernel
        self.tools = tools
        #: The calls of each batch being answered, by the msg_id of its input_request.
        self._batches: dict[str, list[tuple[dict[str, Any], asyncio.Task[dict[str, Any]]]]] = {}
        self._answering: set[asyncio.Task[None]] = set()

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

    def _start(self, calls: list[dict[str, Any]], request: dict[str, Any]) -> None:
        msg_id = str(request["header"]["msg_id"])
        batch = [(call, asyncio.ensure_future(self._call(call))) for call in calls]
        self._batches[msg_id] = batch
        answering = asyncio.ensure_future(self._answer(msg_id, batch, request))
        self._answering.add(answering)
        answering.add_done_callback(self._answering.discard)

    async def _call(self, call: dict[str, Any]) -> dict[str, Any]:
        (result,) = await self.tools.answer([call])
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
        await self._reply(tool_reply(results), request)

    def _cancel_calls(self, cancel: ToolCancel) -> None:
        """Cancel the calls ``cancel`` names, of a batch still being answered."""
        for call, task in self._batches.get(cancel.request, []):
            if call.get("id") in cancel.calls:
                task.cancel()

    async def _reply(self, value: str, request: dict[str, Any]) -> None:
        try:
            await self.kernel.send_input_reply(value, request)
        except Exception as exc:  # the kernel or gateway went away: the execution notices
            log.info("could not answer the kernel's input_request: %s", exc)
