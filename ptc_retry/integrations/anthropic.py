"""The official ``anthropic`` SDK on a ``KernelBackend``: Messages (``Messages``), streamed or
not. ``pip install 'ptc-retry[anthropic]'``. A loop::

    messages_api = Messages(kb)
    messages = [messages_api.user(task)]
    while True:
        reply = await messages_api.stream(client.messages.create, model=model,
                                          max_tokens=4096, system=kb.system_prompt(),
                                          messages=messages, tools=kb.tool_schemas("anthropic"))
        step = await messages_api.step(reply)
        messages += step.messages
        if not step.results:
            break

``step()`` also takes the SDK's own ``Message``; ``collector()`` reads the raw stream events
a loop iterates itself. docs/integrations.md, "Provider SDKs", has what the model reads and
the limits.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import anthropic

from ..core.partial import cut_arguments
from ..core.status import ResultStatus
from .continuation import continue_text, transport_errors
from .replies import (
    CallResult,
    Create,
    Message,
    ProviderAdapter,
    Reply,
    ReplyCollector,
    Stop,
    ToolCall,
    Usage,
    whole_json,
)

__all__ = ["Messages", "MessagesCollector"]

#: The errors a stream is continued after by default: the connection failed or was cut
#: (also the HTTP client's own, which reach the loop unwrapped while a stream is read), a 429, a 5xx
#: or 529 (overloaded).
TRANSIENT: tuple[type[BaseException], ...] = (
    anthropic.APIConnectionError,
    anthropic.RateLimitError,
    anthropic.InternalServerError,
    *transport_errors(),
)
#: A program that ended so is an error result (``is_error``) for the model.
_FAILED = {ResultStatus.ERROR, ResultStatus.TIMEOUT, ResultStatus.DIED}
_STOPS = {"max_tokens": Stop.LENGTH, "refusal": Stop.REFUSAL, "tool_use": Stop.TOOL_CALLS}


def _usage(usage: Any, input_tokens: int | None = None) -> Usage:
    """Anthropic counts a request's input in three parts: all of them are its input."""
    if usage is None:
        return Usage(input_tokens, None)
    parts = [
        getattr(usage, name, None)
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    known = [part for part in parts if part is not None]
    total = sum(known) if known else input_tokens
    return Usage(total, getattr(usage, "output_tokens", None))


def _decoded(raw: str) -> dict[str, Any]:
    """A tool call's ``input`` from its JSON as far as it arrived: whatever decoded, and the
    start of the string it was cut in (the API takes only an object in ``tool_use``)."""
    try:
        value = json.loads(raw)
        return value if isinstance(value, dict) else {}
    except ValueError:
        pass
    try:
        cut = cut_arguments(raw)
    except ValueError:
        return {}
    values = dict(cut.values)
    if cut.open_key is not None:
        values[cut.open_key] = cut.open_prefix
    return values


def _reply(blocks: list[dict[str, Any]], stop_reason: str | None, usage: list[Usage]) -> Reply:
    stop = _STOPS.get(stop_reason or "", Stop.END)
    text = "".join(block.get("text", "") for block in blocks if block["type"] == "text")
    reasoning = "".join(b.get("thinking", "") for b in blocks if b["type"] == "thinking")
    calls = [
        ToolCall(block["id"], block["name"], block.pop("_raw", block.get("input") or {}))
        for block in blocks
        if block["type"] == "tool_use"
    ]
    if stop == Stop.LENGTH and calls and blocks[-1]["type"] == "tool_use":
        calls[-1].cut = True
    return Reply(
        text=text, reasoning=reasoning, tool_calls=calls, stop=stop, usage=usage, items=blocks
    )


class MessagesCollector(ReplyCollector):
    """Reads the raw stream events (``message_start``, ``content_block_*``,
    ``message_delta``) into a ``Reply``: text, thinking and tool-use blocks, the stop
    reason and the usage. A tool call's arguments are the ``partial_json`` pieces joined,
    byte for byte as the model wrote them."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.open: set[int] = set()
        self.stop_reason: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.model: str | None = None

    def add(self, event: Any) -> None:
        kind = getattr(event, "type", "")
        if kind == "message_start":
            self.model = event.message.model
            self.input_tokens = _usage(event.message.usage).input_tokens
        elif kind == "content_block_start":
            block = event.content_block.model_dump(mode="json", exclude_none=True)
            if block["type"] == "tool_use":
                block["_raw"] = ""
            self.blocks[event.index] = block
            self.open.add(event.index)
        elif kind == "content_block_delta":
            self._delta(self.blocks[event.index], event.delta)
        elif kind == "content_block_stop":
            self.open.discard(event.index)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self.output_tokens = event.usage.output_tokens

    def _delta(self, block: dict[str, Any], delta: Any) -> None:
        kind = delta.type
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.text
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.thinking
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.signature
        elif kind == "input_json_delta":
            block["_raw"] += delta.partial_json

    def in_tool_call(self) -> bool:
        # A block the cut left open whose arguments decode was whole all the same.
        return any(
            self.blocks[index]["type"] == "tool_use" and not whole_json(self.blocks[index]["_raw"])
            for index in self.open
        )

    def unfinished(self) -> str | None:
        if self.stop_reason is not None:
            return None
        return "the stream ended without its message_delta"

    def reply(self, *, cut: BaseException | None = None) -> Reply:
        cut = self._cut_by(cut)
        in_call = cut is not None and self.in_tool_call()
        blocks = [self.blocks[index] for index in sorted(self.blocks)]
        for block in blocks:
            if block["type"] == "tool_use":
                block["_raw"] = block["_raw"] or "{}"  # a tool without arguments sends none
                block["input"] = _decoded(block["_raw"])
        usage = Usage(self.input_tokens, self.output_tokens)
        reply = _reply(blocks, self.stop_reason, [usage])
        reply.model = self.model
        if cut is not None and reply.tool_calls:
            reply.tool_calls[-1].cut = in_call
            reply.stop, reply.dropped = Stop.DROPPED, f"{type(cut).__name__}: {cut}"
        return reply


class Messages(ProviderAdapter[MessagesCollector]):
    """Messages (``client.messages.create``) on a ``KernelBackend``.

    ``step()``'s messages: the assistant message with the reply's content blocks (a
    cut-off ``tool_use`` with the ``input`` that decoded), then one user message of
    ``tool_result`` blocks, ``is_error`` for a program that failed, timed out or killed its
    kernel. A continuation prefills the text that arrived as the assistant's (without its
    trailing blanks, which the API refuses); after reasoning only, with ``thinking`` on, or
    for a model that refuses a prefill (Claude 4.6 and later: the adapter learns it from the
    refusal and sends the same continuation quoted, at once and from then on), it asks for
    the rest in a user message that quotes it.
    """

    transient = TRANSIENT
    #: False once the model refused a prefill: continuations quote the text instead.
    prefill = True
    #: The assistant message the last continuation prefilled (only that one is quoted
    #: instead when refused: a loop's own prefill is the loop's).
    _prefilled: Message | None = None

    def collector(self) -> MessagesCollector:
        return MessagesCollector()

    def reply_of(self, response: Any) -> Reply:
        """A ``Message`` (``stream=False``) as a ``Reply``."""
        blocks = [block.model_dump(mode="json", exclude_none=True) for block in response.content]
        reply = _reply(blocks, response.stop_reason, [_usage(response.usage)])
        reply.model = response.model
        self.usage += reply.usage
        return reply

    def _messages(self, reply: Reply, results: list[CallResult]) -> list[Message]:
        blocks = [sendable for block in reply.items if (sendable := _sendable(block))]
        # After a continued reply's last signed thinking, or for a reply the loop built
        # itself (no blocks of the API's), the content is rebuilt from the text and calls.
        if reply.continued or not reply.items:
            blocks += [{"type": "text", "text": reply.text}] if reply.text.strip() else []
            blocks += [_tool_use(call) for call in reply.tool_calls]
        messages: list[Message] = [{"role": "assistant", "content": blocks}]
        if results:
            content = [
                {
                    "type": "tool_result",
                    "tool_use_id": result.call.id,
                    "content": result.text,
                    "is_error": result.status in _FAILED,
                }
                for result in results
            ]
            messages.append({"role": "user", "content": content})
        return messages

    def _prefills(self, params: dict[str, Any], partial: Reply) -> bool:
        thinking = params.get("thinking") or {}
        return (
            self.prefill
            and bool(partial.text.strip())
            and thinking.get("type") in (None, "disabled")
        )

    async def _read(self, create: Create, params: dict[str, Any], collector: Any) -> None:
        try:
            await super()._read(create, params, collector)
        except anthropic.BadRequestError as exc:
            messages = list(params.get("messages") or ())
            ours = bool(messages) and messages[-1] is self._prefilled
            if not (ours and "prefill" in str(exc).lower()):
                raise
            # The model takes no prefill (the request was refused before any output): the
            # same continuation, its text quoted in a user message.
            self.prefill = False
            words = continue_text(Reply(text=messages[-1]["content"]), self.quote, text_quoted=True)
            quoted = [*messages[:-1], {"role": "user", "content": words}]
            await super()._read(create, {**params, "messages": quoted}, collector)

    def _continued(self, params: dict[str, Any], partial: Reply) -> dict[str, Any]:
        messages = list(params.get("messages") or ())
        if self._prefills(params, partial):
            self._prefilled = {"role": "assistant", "content": self.quote(partial.text).rstrip()}
            messages.append(self._prefilled)
        else:
            words = continue_text(partial, self.quote, text_quoted=True)
            messages.append({"role": "user", "content": words})
        return {**params, "messages": messages}

    def _kept(self, params: dict[str, Any], part: Reply) -> Reply:
        # The prefill leaves out the text's trailing blanks, so the continuation starts
        # right after what is kept of it.
        if self._prefills(params, part):
            return replace(part, text=part.text.rstrip())
        return part


def _sendable(block: dict[str, Any]) -> dict[str, Any] | None:
    """A content block as the next request may carry it back: an empty text block, and a
    thinking block a cut left without its signature, are refused by the API."""
    if block["type"] == "text" and not block.get("text", "").strip():
        return None
    if block["type"] == "thinking" and not block.get("signature"):
        return None
    block = {key: value for key, value in block.items() if key != "_raw"}
    if block["type"] == "text":
        block.pop("citations", None)
    return block


def _tool_use(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    decoded = _decoded(arguments) if isinstance(arguments, str) else dict(arguments)
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": decoded}
