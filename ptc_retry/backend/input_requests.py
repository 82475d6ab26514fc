"""The stdin channel of one running program: a batch of tool calls is answered by the
host's tools, any other input_request (the program called ``input()``) by end-of-file.

Why stdin: while a program runs, the kernel reads no further shell messages (a comm message
waits behind the running execute_request), but ``kernel.raw_input`` sends an input_request
and blocks the program until the reply, on ipykernel 6.29 and 7.x alike; a gateway's
websocket carries the stdin channel as well, so the same calls work locally and remotely.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..core.protocol import parse_tool_request, tool_reply
from .host_tools import HostTools
from .transport import Transport

__all__ = ["EOF", "InputRequests"]

log = logging.getLogger(__name__)

#: The reply to a person's ``input()``: end-of-file, so the program gets EOFError, not a hang.
EOF = "\x04"
#: Seconds ``cancel`` waits for a cancelled batch's functions to let go.
_CANCEL_WAIT = 1.0


class InputRequests:
    """Answers the input_requests of one execution on ``kernel``, with ``tools``.

    One batch is pending at a time: the kernel waits for the reply to its latest request
    only, so a new request (or ``cancel``) abandons the one before. An abandoned batch's
    calls are cancelled (a function in a worker thread runs to its end) and its results
    are never sent.
    """

    def __init__(self, kernel: Transport, tools: HostTools) -> None:
        self.kernel = kernel
        self.tools = tools
        self._pending: asyncio.Task[None] | None = None

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

    async def _answer(self, calls: list[dict[str, Any]], request: dict[str, Any]) -> None:
        results = await self.tools.answer(calls)
        if asyncio.current_task() is self._pending:  # not abandoned meanwhile
            self._pending = None
            await self._reply(tool_reply(results), request)

    async def _reply(self, value: str, request: dict[str, Any]) -> None:
        try:
            await self.kernel.send_input_reply(value, request)
        except Exception as exc:  # the kernel or gateway went away: the execution notices
            log.info("could not answer the kernel's input_request: %s", exc)
