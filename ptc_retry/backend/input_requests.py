"""The stdin channel of one running program: a batch of tool calls is answered by the
host's tools, any other input_request (the program called ``input()``) by end-of-file.

Why stdin: while a program runs, the kernel reads no further shell messages (a comm message
waits behind the running execute_request), but ``kernel.raw_input`` sends an input_request
and blocks the program until the reply, on ipykernel 6.29 and 7.x alike; a gateway's
websocket carries the stdin channel as well, so the same calls work locally and remotely.

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
from ..core.protocol import execute_request, host_result, parse_tool_request, tool_reply
from .host_tools import HostTools
from .late_results import Key, LateResults
from .transport import Transport

__all__ = ["EOF", "InputRequests", "stdin_connected"]

log = logging.getLogger(__name__)

#: The reply to a person's ``input()``: end-of-file, so the program gets EOFError, not a hang.
EOF = "\x04"
#: Seconds ``cancel`` waits for a cancelled batch's functions to let go.
_CANCEL_WAIT = 1.0
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

    One batch is pending at a time: the kernel waits for the reply to its latest request
    only, so a new request (or ``cancel``) abandons the one before. An abandoned batch's
    calls are cancelled (a function in a worker thread runs to its end) and its results
    are never sent. What the host completed and the kernel may not have taken goes to
    ``late`` when the execution ends (see ``end``).
    """

    def __init__(
        self, kernel: Transport, tools: HostTools, late: LateResults | None = None
    ) -> None:
        self.kernel = kernel
        self.tools = tools
        self.late = late
        self._pending: asyncio.Task[None] | None = None
        #: The results the host completed for this execution, and those whose reply went out.
        self._completed: dict[Key, dict[str, Any]] = {}
        self._sent: set[Key] = set()
        self._ended = False

    async def handle(self, request: dict[str, Any]) -> None:
        """Answer ``request``, an input_request of the running program: EOF at once, or
        tool calls in a task of their own (the caller goes on watching the kernel)."""
        await self.cancel()
        prompt = (request.get("content") or {}).get("prompt")
        try:
            calls = parse_tool_request(prompt if isinstance(prompt, str) else "")
        except ValueError as exc:
            log.warning("a malformed tool request from the kernel (%s): answering no calls", exc)
            calls = []
        if calls is None:
            await self._reply(EOF, request)
            return
        self._pending = asyncio.ensure_future(self._answer(calls, request))

    async def cancel(self) -> None:
        """Abandon the pending batch, if any: cancel its calls; its results are never sent."""
        task, self._pending = self._pending, None
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait([task], timeout=_CANCEL_WAIT)

    def end(self, *, stopped: bool) -> None:
        """The execution is over: keep in ``late`` each result the kernel may not have
        taken. That is each one whose reply never went out (its batch was abandoned, or its
        function returned after the execution ended) and, when the program was ``stopped``
        (an interrupt, a time limit, a death: the kernel may have given up on a reply as it
        went out), each one it completed."""
        self._ended = True
        if self.late is not None:
            for key, entry in self._completed.items():
                if stopped or key not in self._sent:
                    self.late.keep(entry)
        self._completed.clear()

    async def _answer(self, calls: list[dict[str, Any]], request: dict[str, Any]) -> None:
        results = await self.tools.answer(calls, self._host_completed)
        if asyncio.current_task() is self._pending:  # not abandoned meanwhile
            self._pending = None
            if await self._reply_results(results, request):
                self._sent.update(key for key in map(_key, calls) if key is not None)

    def _host_completed(self, call: dict[str, Any], result: Any) -> None:
        entry = host_result(call, result)
        if entry is None or self.late is None:
            return
        if self._ended:  # a sync function that returned after its execution ended
            self.late.keep(entry)
        else:
            self._completed[(entry["program"], entry["k"])] = entry

    async def _reply_results(self, results: list[dict[str, Any]], request: dict[str, Any]) -> bool:
        """Send ``results``; False when no reply could be sent. When the transport cannot
        carry them in one message, the largest become errors that say so, until the rest
        fit: the kernel always gets its reply."""
        while True:
            try:
                return await self._reply(tool_reply(results), request)
            except MessageTooLarge as too_large:
                fewer = _largest_refused(results, too_large)
                if fewer is None:  # only errors left, and still too large: nothing fits
                    log.warning("could not answer the kernel's tool request: %s", too_large)
                    return False
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
