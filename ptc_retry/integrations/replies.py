"""What the provider adapters share (``ptc_retry.integrations.openai``, ``.anthropic``): a
model's reply as the adapters read it (``Reply``, ``ToolCall``, ``Usage``), the step that
runs its tool calls on a ``KernelBackend`` (``Step``, ``CallResult``), and the continuation
of a stream cut off by the network (``Continuation``, ``Resume``). It imports no SDK. The
reply's types live in ``model_reply`` and the continuation's in ``continuation``; this module
holds ``ProviderAdapter`` and is where the adapters and their users import all of them from.

An adapter (``ProviderAdapter``'s subclass per API) reads the SDK's objects or stream
events into a ``Reply``; ``step(reply)`` runs every whole tool call through
``KernelBackend.handle_tool_call`` and every cut-off one through
``handle_partial_tool_call``, all as one step, and returns the messages (or input items)
the API expects next. ``stream(create, **params)`` makes the request itself, so that a
stream the network cuts is continued instead of sent again (docs/integrations.md,
"Provider SDKs").
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Generic, TypeVar

from ..backend import KernelBackend
from ..core import sentences as said
from ..core.partial import cut_json
from ..core.status import ResultStatus
from .continuation import (
    Continuation,
    dropped,
    join_parts,
    resume_of,
)
from .model_reply import (
    CallResult,
    Message,
    Reply,
    ReplyCollector,
    Resume,
    Step,
    Stop,
    ToolCall,
    UnfinishedStream,
    Usage,
    whole_json,
)

__all__ = [
    "CallResult",
    "Continuation",
    "ProviderAdapter",
    "Reply",
    "ReplyCollector",
    "Resume",
    "Step",
    "Stop",
    "ToolCall",
    "UnfinishedStream",
    "Usage",
    "whole_json",
]

#: What ``stream()`` calls: the SDK's create method (``client.chat.completions.create``).
Create = Callable[..., Any]
R = TypeVar("R", bound="ReplyCollector")


class ProviderAdapter(Generic[R]):
    """The loop's one piece between an SDK and a ``KernelBackend`` (a subclass per API).

    ``user(text)`` is a person's message (it calls ``kb.new_turn()``); ``reply_of(obj)``
    reads a non-streamed response; ``collector()`` reads a stream the loop iterates itself;
    ``stream(create, **params)`` makes a streamed request and continues it across network
    cuts; ``step(reply)`` runs the reply's tool calls. ``usage`` lists every request's
    tokens, in order, for the life of the adapter.
    """

    #: The default ``Continuation.errors`` (the subclass's SDK's transient errors).
    transient: tuple[type[BaseException], ...] = ()

    def __init__(self, backend: KernelBackend, continuation: Continuation | None = None) -> None:
        self.backend = backend
        self.continuation = continuation or Continuation()
        self.usage: list[Usage] = []
        self._resumed = 0
        self._turn = backend.turn
        #: The results of a step that did not end (a cancel), by call: step() again on the
        #: same reply takes them instead of running those calls a second time.
        self._finished: dict[tuple[str, str, str], CallResult] = {}

    # -- what a subclass provides ------------------------------------------------------------

    def collector(self) -> R:
        raise NotImplementedError

    def reply_of(self, response: Any) -> Reply:
        raise NotImplementedError

    def user(self, text: str) -> Message:
        """A person's message: a new turn (``kb.new_turn()``), in the API's shape."""
        self.backend.new_turn()
        return {"role": "user", "content": text}

    def _messages(self, reply: Reply, results: list[CallResult]) -> list[Message]:
        """The reply's own message or items and the tool results, as the API takes them."""
        raise NotImplementedError

    def _continued(self, params: dict[str, Any], partial: Reply) -> dict[str, Any]:
        """``params`` with the partial output and the request for the rest added."""
        raise NotImplementedError

    def _kept(self, params: dict[str, Any], partial: Reply) -> Reply:
        """What of ``partial`` the continued reply starts from (all of it, unless the API
        takes a prefill only in part)."""
        return partial

    def _stream_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` for a streamed request (Chat also asks for the usage chunk)."""
        return {**params, "stream": True}

    # -- the tool calls ------------------------------------------------------------------------

    async def step(self, reply: Reply | Any) -> Step:
        """Run every tool call of ``reply`` (a ``Reply``, or the SDK's response object) as
        one step: a whole call through ``handle_tool_call``, a cut-off one through
        ``handle_partial_tool_call``, in the order the model made them. ``messages`` is what
        the conversation takes next; without tool calls, only the reply's own message.
        A step cancelled part-way keeps the results of the calls that finished: ``step()``
        again on the same reply reuses them and runs only the others."""
        if not isinstance(reply, Reply):
            reply = self.reply_of(reply)
        results: list[CallResult] = []
        if reply.tool_calls:
            step = self.backend.next_step()
            for call in reply.tool_calls:
                key = _call_key(call)
                if key not in self._finished:
                    self._finished[key] = await self._run(call, step)
                results.append(self._finished[key])
        self._finished.clear()  # the step ended: its results are the caller's now
        if reply.stop == Stop.DROPPED and results and results[-1].status != ResultStatus.PARTIAL:
            results[-1] = _told_cut_after(results[-1])
        return Step(reply, results, self._messages(reply, results))

    async def _run(self, call: ToolCall, step: int) -> CallResult:
        kb = self.backend
        if call.cut:
            raw = call.arguments
            text_so_far = raw if isinstance(raw, str) else cut_json(raw)
            text = await kb.handle_partial_tool_call(call.name, text_so_far, call.id, step=step)
        else:
            text = await kb.handle_tool_call(call.name, call.arguments, call.id, step=step)
        result = kb.last_result
        return CallResult(call, text, str(result.status) if result is not None else None)

    # -- streaming, and its continuation -------------------------------------------------------

    def _budget_left(self) -> int:
        if self.backend.turn != self._turn:  # a person spoke since: a new turn's budget
            self._turn, self._resumed = self.backend.turn, 0
        return self.continuation.budget - self._resumed

    def _resumable(self, exc: BaseException) -> bool:
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            return False  # the user's own cancel, whatever the error kinds say
        if isinstance(exc, UnfinishedStream):
            return True  # no SDK raises it: it is ours, and always a cut
        kinds = self.continuation.errors
        return isinstance(exc, kinds if kinds is not None else self.transient)

    async def stream(self, create: Create, **params: Any) -> Reply:
        """Make a streamed request with ``create(**params, stream=True)`` (an async or sync
        client's create method) and return the whole reply.

        A transient error part-way (``Continuation.errors``) is continued: after text or
        reasoning arrived, the next request carries that partial output and asks for the
        rest (``resumes`` says so, and the texts are joined); with nothing arrived, it is the
        same request again; cut after a tool call began, the reply ends there (``stop`` is
        ``DROPPED``): ``step()`` runs the calls that arrived whole and saves one cut
        part-way, for the model to extend. Any other error, the user's
        cancel, or an error past the turn's budget is raised as the SDK raised it.
        """
        parts: list[Reply] = []  # what arrived before the cuts so far, as one part
        resumes: list[Resume] = []
        request = params
        while True:
            collector = self.collector()
            try:
                await self._read(create, self._stream_params(request), collector)
            except BaseException as exc:
                if not self._resumable(exc):
                    raise
                part = collector.reply(cut=exc)
                self._count(part)
                joined = join_parts([*parts, part], resumes)
                if part.tool_calls:  # a call began: run what arrived, extend a cut one
                    return dropped(joined, exc)
                if self._budget_left() <= 0:
                    raise
                delay = await self._back_off()
                if part.partial:
                    joined = self._kept(params, joined)
                    parts, request = [joined], self._continued(params, joined)
                    quoted = len(self.quote(joined.text)) + len(self.quote(joined.reasoning))
                else:  # nothing arrived in this request: the same request again
                    quoted = 0
                resumes.append(resume_of(exc, joined, quoted, delay, continued=part.partial))
                continue
            part = collector.reply()
            self._count(part)
            return join_parts([*parts, part], resumes)

    async def _back_off(self) -> float:
        """Wait before the turn's next request more (a cancel ends the wait); its seconds."""
        delay = self.continuation.delay(self._resumed)
        self._resumed += 1
        await self.continuation.sleep(delay)
        return delay

    async def _read(self, create: Create, params: dict[str, Any], collector: R) -> None:
        events = create(**params)
        if inspect.isawaitable(events):
            events = await events
        if hasattr(events, "__aiter__"):
            async for event in events:
                collector.add(event)
        else:
            for event in events:
                collector.add(event)
        why = collector.unfinished()
        if why is not None:
            raise UnfinishedStream(why)

    def _count(self, part: Reply) -> None:
        self.usage += part.usage

    def quote(self, text: str) -> str:
        """The end of ``text`` that a continuation quotes (``Continuation.quote_limit``)."""
        return text[-self.continuation.quote_limit :]


def _call_key(call: ToolCall) -> tuple[str, str, str]:
    """What makes a call the same call in a second ``step()``: its id, name and arguments."""
    arguments = call.arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)
    return call.id, call.name, text


def _told_cut_after(result: CallResult) -> CallResult:
    """``result`` of the last call that arrived whole, telling that the reply was cut after it."""
    return replace(result, text=result.text + said.CUT_AFTER_CALL.render())
