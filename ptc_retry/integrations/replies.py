"""What the provider adapters share (``ptc_retry.integrations.openai``, ``.anthropic``): a
model's reply as the adapters read it (``Reply``, ``ToolCall``, ``Usage``), the step that
runs its tool calls on a ``KernelBackend`` (``Step``, ``CallResult``), and the continuation
of a stream cut off by the network (``Continuation``, ``Resume``). It imports no SDK.

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
import enum
import importlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from ..backend import KernelBackend
from ..core import sentences as said
from ..core.partial import cut_json
from ..core.status import ResultStatus

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
    "transport_errors",
    "whole_json",
]

Message = dict[str, Any]


class Stop(str, enum.Enum):
    """Why a reply ended, in the same words for every API."""

    #: The model finished (``stop``, ``end_turn``, ``completed``).
    END = "end"
    #: The model asks for its tool calls' results.
    TOOL_CALLS = "tool_calls"
    #: The output-token limit (``length``, ``max_tokens``, ``max_output_tokens``).
    LENGTH = "length"
    #: The model refused (``refusal``).
    REFUSAL = "refusal"
    #: The stream was cut by the network after a tool call began: the calls that arrived
    #: whole run, and one cut part-way is saved to be extended.
    DROPPED = "dropped"

    def __str__(self) -> str:
        return self.value


@dataclass
class ToolCall:
    """One tool call as it arrived: ``arguments`` is the raw JSON string the model wrote
    (Anthropic's non-streamed ``input``: the decoded mapping); ``cut``: it stopped part-way
    (the output limit, or a dropped stream), and goes to ``handle_partial_tool_call``."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]
    cut: bool = False


class UnfinishedStream(ConnectionError):
    """A stream that ended without the event that ends a reply (Chat's ``finish_reason``,
    Messages' ``message_delta``, Responses' ``response.completed`` or ``.incomplete``), as a
    proxy that closes the body at its read timeout leaves it, or that ended in Responses'
    ``response.failed``: a network cut, never a whole reply. ``stream()`` always continues
    it (within the budget); a loop that reads a stream itself gets a reply cut there."""


@dataclass(frozen=True)
class Usage:
    """The tokens one request cost, as the API reported them (None: it reported none, as
    for a stream cut before its end)."""

    input_tokens: int | None
    output_tokens: int | None

    @classmethod
    def sum(cls, usages: Iterable[Usage]) -> Usage:
        """The tokens of several requests (None only when none of them reported any)."""
        usages = list(usages)

        def total(values: list[int | None]) -> int | None:
            known = [value for value in values if value is not None]
            return sum(known) if known else None

        return cls(
            total([u.input_tokens for u in usages]), total([u.output_tokens for u in usages])
        )


@dataclass(frozen=True)
class Resume:
    """One request more that a network error cost a reply. ``continued``: it carried the
    partial output and asked for the rest; False: nothing had arrived, so it was the same
    request again (an ordinary retry). ``text_chars``/``reasoning_chars``: what had arrived
    of the reply by then; ``quoted_chars``: how much of it the request quoted back;
    ``delay``: the seconds waited before it."""

    error: str
    continued: bool
    text_chars: int
    reasoning_chars: int
    quoted_chars: int
    delay: float


@dataclass
class Reply:
    """A model's whole reply, joined across the requests a network cut cost.

    ``items``: the API's own output, as the next request must carry it back (Chat: the
    assistant message; Responses: the output items; Anthropic: the content blocks; of a
    ``continued`` reply, the last part's reasoning only).
    ``dropped``: the error that cut the stream after a tool call began (``stop`` is
    ``DROPPED``).
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop: Stop = Stop.END
    usage: list[Usage] = field(default_factory=list)
    resumes: list[Resume] = field(default_factory=list)
    items: list[Message] = field(default_factory=list)
    model: str | None = None
    dropped: str | None = None

    @property
    def tokens(self) -> Usage:
        """The tokens of every request that made this reply."""
        return Usage.sum(self.usage)

    @property
    def continued(self) -> bool:
        """Joined from a continuation: ``items`` holds only the last part's reasoning, and
        the adapter rebuilds the rest from ``text`` and ``tool_calls``."""
        return any(resume.continued for resume in self.resumes)

    @property
    def partial(self) -> bool:
        """Something arrived that a continuation can build on: text or reasoning."""
        return bool(self.text or self.reasoning)


@dataclass(frozen=True)
class CallResult:
    """One tool call of a step, and what the model reads for it. ``status``: the program's
    ``RunResult.status`` (None when nothing ran: a refused call, a cut-off one saved)."""

    call: ToolCall
    text: str
    status: str | None


@dataclass
class Step:
    """A reply and its tool calls' results: ``messages`` is what the conversation takes next
    (the reply's own message or items, then the results in the API's shape)."""

    reply: Reply
    results: list[CallResult]
    messages: list[Message]


@dataclass(frozen=True)
class Continuation:
    """How a stream cut off by the network is continued.

    ``budget``: requests more per turn (``new_turn()`` or ``adapter.user()`` starts one),
    continuations and ordinary retries together; past it the error is raised as the SDK
    raised it. ``backoff``: seconds before the first, doubled each time up to
    ``max_backoff``; the wait is ``sleep`` (``asyncio.sleep``: a cancel ends it).
    ``quote_limit``: at most this many characters (at least 1) of each of the text and the
    reasoning go back, their ends. ``errors``: the exception types that count as a network
    cut (None: the adapter's default, the SDK's connection, rate-limit and server errors
    and the HTTP client's transport errors). The user's cancel (``CancelledError``,
    ``KeyboardInterrupt``) is never continued, whatever ``errors`` holds.
    """

    budget: int = 3
    backoff: float = 2.0
    max_backoff: float = 30.0
    quote_limit: int = 12_000
    errors: tuple[type[BaseException], ...] | None = None
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep

    def __post_init__(self) -> None:
        for name, least in (("budget", 0), ("quote_limit", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                # A quote of nothing would ask the model to continue text it cannot see.
                raise ValueError(
                    f"Continuation({name}=...) must be an int >= {least}, not {value!r}"
                )
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(
                    f"Continuation({name}=...) must be a finite number of seconds >= 0, "
                    f"not {value!r}"
                )

    def delay(self, resumed: int) -> float:
        """The wait before the request after ``resumed`` earlier ones in this turn."""
        return float(min(self.backoff * 2**resumed, self.max_backoff))


#: What ``stream()`` calls: the SDK's create method (``client.chat.completions.create``).
Create = Callable[..., Any]
R = TypeVar("R", bound="ReplyCollector")


class ReplyCollector:
    """Reads one API's stream events (or chunks) as they come, into a ``Reply``.
    ``add(event)`` each; ``reply()`` at the end, or after a cut (``cut``: the error; a tool
    call whose arguments were arriving is marked cut off, and with any tool call the stop
    is ``DROPPED``). A stream that ended without its final event (``unfinished()`` says
    why) is read as cut by ``UnfinishedStream``."""

    def add(self, event: Any) -> None:
        raise NotImplementedError

    def reply(self, *, cut: BaseException | None = None) -> Reply:
        raise NotImplementedError

    def in_tool_call(self) -> bool:
        """A tool call's arguments were arriving when the last event came."""
        raise NotImplementedError

    def unfinished(self) -> str | None:
        """Why the reply is not whole yet (its final event has not come), or None."""
        raise NotImplementedError

    def _cut_by(self, cut: BaseException | None) -> BaseException | None:
        """``cut``, or the ``UnfinishedStream`` of a stream that ended without its end."""
        why = self.unfinished()
        return cut if cut is not None or why is None else UnfinishedStream(why)


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
                joined = _join([*parts, part], resumes)
                if part.tool_calls:  # a call began: run what arrived, extend a cut one
                    return _dropped(joined, exc)
                if self._budget_left() <= 0:
                    raise
                delay = await self._back_off()
                if part.partial:
                    joined = self._kept(params, joined)
                    parts, request = [joined], self._continued(params, joined)
                    quoted = len(self.quote(joined.text)) + len(self.quote(joined.reasoning))
                else:  # nothing arrived in this request: the same request again
                    quoted = 0
                resumes.append(_resume(exc, joined, quoted, delay, continued=part.partial))
                continue
            part = collector.reply()
            self._count(part)
            return _join([*parts, part], resumes)

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


def continue_text(partial: Reply, quote: Callable[[str], str], *, text_quoted: bool) -> str:
    """The continuation request's words: the reasoning quoted (when any arrived), and the
    text quoted too unless ``text_quoted`` is False (it went back as the model's own
    message)."""
    where = " while you were reasoning" if partial.reasoning and not partial.text else ""
    words = said.CONTINUE_CUT_REPLY.render(where=where)
    if partial.reasoning:
        words += said.CUT_REPLY_QUOTE.render(what="reasoning", quote=quote(partial.reasoning))
    if partial.text and text_quoted:
        words += said.CUT_REPLY_QUOTE.render(what="text", quote=quote(partial.text))
    return words


def whole_json(arguments: str) -> bool:
    """A tool call's arguments arrived whole: they decode as JSON. A cut after them left
    nothing of the call unsaid, so it runs as it is instead of being saved to extend."""
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's transport errors (a read cut part-way, a reset connection, a read
    timeout): the SDKs wrap them only while a request starts, so while a stream is read they
    reach the loop as they are. Newer SDK releases use ``httpx2``, older ones ``httpx``."""
    kinds: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            kinds.append(importlib.import_module(name).TransportError)
        except ImportError:
            continue
    return tuple(kinds)


def _resume(
    exc: BaseException, joined: Reply, quoted: int, delay: float, *, continued: bool
) -> Resume:
    error = f"{type(exc).__name__}: {exc}"
    return Resume(error, continued, len(joined.text), len(joined.reasoning), quoted, delay)


def _call_key(call: ToolCall) -> tuple[str, str, str]:
    """What makes a call the same call in a second ``step()``: its id, name and arguments."""
    arguments = call.arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)
    return call.id, call.name, text


def _told_cut_after(result: CallResult) -> CallResult:
    """``result`` of the last call that arrived whole, telling that the reply was cut after it."""
    return replace(result, text=result.text + said.CUT_AFTER_CALL.render())


def _dropped(reply: Reply, exc: BaseException) -> Reply:
    """``reply`` ended by ``exc`` after a tool call began."""
    reply.stop = Stop.DROPPED
    reply.dropped = reply.dropped or f"{type(exc).__name__}: {exc}"
    return reply


def _join(parts: list[Reply], resumes: list[Resume]) -> Reply:
    """One reply from the parts a network cut split it into: texts and reasoning joined,
    tool calls and items in order, the last part's stop, every part's usage."""
    last = parts[-1]
    return replace(
        last,
        text="".join(part.text for part in parts),
        reasoning="".join(part.reasoning for part in parts),
        tool_calls=[call for part in parts for call in part.tool_calls],
        usage=[usage for part in parts for usage in part.usage],
        resumes=list(resumes),
        items=_joined_items(parts),
    )


#: The item types that are a reply's reasoning (Anthropic's thinking blocks, Responses'
#: reasoning items): signed or encrypted, they go back exactly as the API gave them.
_REASONING = frozenset({"thinking", "redacted_thinking", "reasoning"})


def _joined_items(parts: list[Reply]) -> list[Message]:
    # Only the last part's items are the API's own. Of a joined reply only its reasoning
    # goes back as it came (an API that thinks wants it before the tool calls); the text is
    # the joined text, which each adapter puts back in its own shape (see ``_messages``).
    if len(parts) == 1:
        return list(parts[-1].items)
    return [item for item in parts[-1].items if item.get("type") in _REASONING]
