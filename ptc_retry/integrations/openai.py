"""The official ``openai`` SDK on a ``KernelBackend``: Chat Completions (``ChatCompletions``)
and Responses (``Responses``), streamed or not. ``pip install 'ptc-retry[openai]'``. A loop::

    chat = ChatCompletions(kb)
    messages = [{"role": "system", "content": kb.system_prompt()}, chat.user(task)]
    while True:
        reply = await chat.stream(client.chat.completions.create, model=model,
                                  messages=messages, tools=kb.tool_schemas("openai"))
        step = await chat.step(reply)
        messages += step.messages
        if not step.results:
            break

``step()`` also takes the SDK's own ``ChatCompletion`` or ``Response``; ``collector()``
reads chunks or events a loop iterates itself. docs/integrations.md, "Provider SDKs", has
what the model reads and the limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai

from .continuation import continue_text, transport_errors
from .replies import (
    CallResult,
    Message,
    ProviderAdapter,
    Reply,
    ReplyCollector,
    Stop,
    ToolCall,
    Usage,
    whole_json,
)

__all__ = ["ChatCollector", "ChatCompletions", "Responses", "ResponsesCollector"]

#: The errors a stream is continued after by default: the connection failed or was cut
#: (also the HTTP client's own, which reach the loop unwrapped while a stream is read),
#: a 429, a 5xx.
TRANSIENT: tuple[type[BaseException], ...] = (
    openai.APIConnectionError,
    openai.RateLimitError,
    openai.InternalServerError,
    *transport_errors(),
)


def _get(obj: Any, name: str) -> Any:
    """A field of an SDK object, also one the SDK does not declare (compatible servers'
    ``reasoning_content``, which pydantic keeps as an extra)."""
    value = getattr(obj, name, None)
    if value is None and isinstance(getattr(obj, "model_extra", None), Mapping):
        value = obj.model_extra.get(name)
    return value


def _reasoning_of(obj: Any) -> str:
    return str(_get(obj, "reasoning_content") or _get(obj, "reasoning") or "")


# -- Chat Completions ----------------------------------------------------------------------


def _chat_stop(finish: str | None, calls: list[ToolCall], refused: bool) -> Stop:
    if refused or finish == "content_filter":
        return Stop.REFUSAL
    if finish == "length":
        return Stop.LENGTH
    return Stop.TOOL_CALLS if calls else Stop.END


def _cut_last(calls: list[ToolCall], stop: Stop) -> None:
    """At an output limit the call that was arriving, the last one, is cut off."""
    if calls and stop == Stop.LENGTH:
        calls[-1].cut = True


def _chat_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(None, None)
    return Usage(usage.prompt_tokens, usage.completion_tokens)


class ChatCollector(ReplyCollector):
    """Reads ``ChatCompletionChunk``s (``stream=True``) into a ``Reply``: the first choice's
    content, refusal, ``reasoning_content`` and tool calls, and the usage chunk. The events
    of the SDK's ``client.chat.completions.stream()`` helper are taken too: its ``chunk``
    events carry the chunks, and the rest repeat them."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None

    def add(self, event: Any) -> None:
        if getattr(event, "type", None) == "chunk":
            event = event.chunk
        elif not hasattr(event, "choices"):
            return  # one of the helper's own events, made of the chunks it read
        self.model = self.model or getattr(event, "model", None)
        if getattr(event, "usage", None) is not None:
            self.usage = _chat_usage(event.usage)
        for choice in event.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            self.text.append(delta.content or "")
            self.refusal.append(delta.refusal or "")
            self.reasoning.append(_reasoning_of(delta))
            for part in delta.tool_calls or ():
                call = self.calls.setdefault(
                    self._index(part), {"id": "", "name": "", "arguments": ""}
                )
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["name"] += part.function.name or ""
                    call["arguments"] += part.function.arguments or ""
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason

    def _index(self, part: Any) -> int:
        """Which call a tool-call delta belongs to: its ``index``; a server that sends none
        (Gemini's compatible endpoint) starts each call with its new ``id``."""
        if part.index is not None:
            return int(part.index)
        last = max(self.calls) if self.calls else None
        if last is None:
            return 0
        same = not part.id or self.calls[last]["id"] in ("", part.id)
        return last if same else last + 1

    def in_tool_call(self) -> bool:
        # Not "the last chunk carried the call": an empty delta may come between two pieces
        # of its arguments. Before the finish_reason, arguments not yet JSON were arriving.
        last = self.calls[max(self.calls)]["arguments"] if self.calls else None
        return last is not None and self.finish is None and not whole_json(last)

    def unfinished(self) -> str | None:
        return None if self.finish is not None else "the stream ended without a finish_reason"

    def reply(self, *, cut: BaseException | None = None) -> Reply:
        cut = self._cut_by(cut)
        calls = [ToolCall(**self.calls[index]) for index in sorted(self.calls)]
        refusal = "".join(self.refusal)
        stop = _chat_stop(self.finish, calls, bool(refusal))
        dropped = None
        if cut is not None and calls:
            stop, dropped = Stop.DROPPED, f"{type(cut).__name__}: {cut}"
            calls[-1].cut = self.in_tool_call()
        _cut_last(calls, stop)
        return Reply(
            text=refusal or "".join(self.text),
            reasoning="".join(self.reasoning),
            tool_calls=calls,
            stop=stop,
            usage=[self.usage or Usage(None, None)],
            model=self.model,
            dropped=dropped,
        )


class ChatCompletions(ProviderAdapter[ChatCollector]):
    """Chat Completions (``client.chat.completions.create``) on a ``KernelBackend``.

    ``step()``'s messages: the assistant message (its ``content``, or ``refusal``, and its
    ``tool_calls`` with the arguments as they arrived, also a cut-off call's), then one
    ``{"role": "tool", "tool_call_id", "content"}`` per call. A continuation sends the text
    that arrived as an assistant message and a user message asking for the rest, quoting
    any ``reasoning_content`` (Chat has no prefill).
    """

    transient = TRANSIENT

    def collector(self) -> ChatCollector:
        return ChatCollector()

    def _stream_params(self, params: dict[str, Any]) -> dict[str, Any]:
        # The usage arrives in a last chunk only when asked for.
        options = {"include_usage": True, **(params.get("stream_options") or {})}
        return {**params, "stream": True, "stream_options": options}

    def reply_of(self, response: Any) -> Reply:
        """A ``ChatCompletion`` (``stream=False``) as a ``Reply``."""
        choice = response.choices[0]
        message = choice.message
        calls = [
            ToolCall(call.id, call.function.name, call.function.arguments)
            for call in message.tool_calls or ()
            if getattr(call, "function", None) is not None
        ]
        stop = _chat_stop(choice.finish_reason, calls, bool(message.refusal))
        _cut_last(calls, stop)
        reply = Reply(
            text=message.refusal or message.content or "",
            reasoning=_reasoning_of(message),
            tool_calls=calls,
            stop=stop,
            usage=[_chat_usage(response.usage)],
            model=response.model,
        )
        self.usage += reply.usage
        return reply

    def _messages(self, reply: Reply, results: list[CallResult]) -> list[Message]:
        assistant: Message = {"role": "assistant", "content": None}
        if reply.stop == Stop.REFUSAL:
            assistant["refusal"] = reply.text
        elif reply.text:
            assistant["content"] = reply.text
        if reply.tool_calls:
            assistant["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _text(call.arguments)},
                }
                for call in reply.tool_calls
            ]
        tools = [
            {"role": "tool", "tool_call_id": result.call.id, "content": result.text}
            for result in results
        ]
        return [assistant, *tools]

    def _continued(self, params: dict[str, Any], partial: Reply) -> dict[str, Any]:
        messages = list(params.get("messages") or ())
        if partial.text:
            messages.append({"role": "assistant", "content": self.quote(partial.text)})
        words = continue_text(partial, self.quote, text_quoted=False)
        messages.append({"role": "user", "content": words})
        return {**params, "messages": messages}


# -- Responses -----------------------------------------------------------------------------


def _dump(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    return dict(item.model_dump(mode="json", exclude_none=True))


def _responses_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(None, None)
    return Usage(usage.input_tokens, usage.output_tokens)


def _responses_reply(items: list[dict[str, Any]], response: Any, cut_item: int | None) -> Reply:
    """A ``Reply`` from output items (dicts): their text, reasoning and function calls, the
    response's status and usage; ``cut_item``: the item a dropped stream cut."""
    text, reasoning, calls, refused = [], [], [], False
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if part.get("type") == "refusal":
                    refused = True
                    text.append(part.get("refusal") or "")
                else:
                    text.append(part.get("text") or "")
        elif kind == "reasoning":
            parts = [*(item.get("summary") or ()), *(item.get("content") or ())]
            reasoning += [part.get("text") or "" for part in parts]
        elif kind == "function_call":
            cut = index == cut_item or item.get("status") == "incomplete"
            calls.append(ToolCall(item["call_id"], item["name"], item.get("arguments", ""), cut))
    details = getattr(response, "incomplete_details", None)
    length = getattr(details, "reason", None) == "max_output_tokens"
    stop = Stop.REFUSAL if refused else Stop.LENGTH if length else Stop.END
    if stop == Stop.END and calls:
        stop = Stop.TOOL_CALLS
    _cut_last(calls, stop)
    return Reply(
        text="".join(text),
        reasoning="".join(reasoning),
        tool_calls=calls,
        stop=stop,
        usage=[_responses_usage(getattr(response, "usage", None))],
        items=items,
        model=getattr(response, "model", None),
    )


#: The events that end a Responses stream (``response.failed``: ended as a cut).
_FINAL = ("response.completed", "response.incomplete", "response.failed")


class ResponsesCollector(ReplyCollector):
    """Reads Responses stream events into a ``Reply``: each output item as
    ``response.output_item.added`` starts it and its deltas fill it (text, refusal,
    reasoning summary and text, function-call arguments), as ``response.output_item.done``
    gives it whole, and the final response's status and usage."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.response: Any = None
        self._arriving: int | None = None

    def add(self, event: Any) -> None:
        kind = getattr(event, "type", "")
        index = getattr(event, "output_index", None)
        item = self.items.get(index) if index is not None else None
        if kind not in _FINAL:  # the final event leaves a call that was arriving cut
            self._arriving = None
        if kind == "response.output_item.added":
            self.items[event.output_index] = _dump(event.item)
            if event.item.type == "function_call":
                self._arriving = event.output_index
        elif kind == "response.output_item.done":
            self.items[event.output_index] = _dump(event.item)
        elif kind in _FINAL:
            self.response = event.response
        elif item is not None:
            self._delta(kind, event, item)

    def _delta(self, kind: str, event: Any, item: dict[str, Any]) -> None:
        if kind == "response.function_call_arguments.delta":
            item["arguments"] = item.get("arguments", "") + event.delta
            self._arriving = event.output_index
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            key = "refusal" if kind == "response.refusal.delta" else "text"
            content = item.setdefault("content", [])
            if not content:
                content.append({"type": "refusal" if key == "refusal" else "output_text", key: ""})
            content[-1][key] = content[-1].get(key, "") + event.delta
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            key = "summary" if "summary" in kind else "content"
            parts = item.setdefault(key, [])
            if not parts:
                parts.append({"type": "summary_text" if key == "summary" else "reasoning_text"})
            parts[-1]["text"] = parts[-1].get("text", "") + event.delta

    def in_tool_call(self) -> bool:
        return self._arriving is not None

    def unfinished(self) -> str | None:
        if self.response is None:
            return "the stream ended without response.completed"
        if getattr(self.response, "status", None) != "failed":
            return None
        error = getattr(self.response, "error", None)
        return f"response.failed: {getattr(error, 'message', None) or 'no error given'}"

    def reply(self, *, cut: BaseException | None = None) -> Reply:
        cut = self._cut_by(cut)
        items = [self.items[index] for index in sorted(self.items)]
        cut_item = None
        if cut is not None and self._arriving is not None:
            arguments = self.items[self._arriving].get("arguments", "")
            cut_item = None if whole_json(arguments) else sorted(self.items).index(self._arriving)
        reply = _responses_reply(items, self.response, cut_item)
        if cut is not None and reply.tool_calls:
            reply.stop, reply.dropped = Stop.DROPPED, f"{type(cut).__name__}: {cut}"
        return reply


class Responses(ProviderAdapter[ResponsesCollector]):
    """Responses (``client.responses.create``) on a ``KernelBackend``.

    ``step()``'s messages are input items: the reply's output items as they came (a
    cut-off function call with its arguments as far as they arrived), then one
    ``{"type": "function_call_output", "call_id", "output"}`` per call. A continuation
    sends the text that arrived as an assistant message and a user message asking for the
    rest, quoting any reasoning (Responses has no prefill).
    """

    transient = TRANSIENT

    def collector(self) -> ResponsesCollector:
        return ResponsesCollector()

    def reply_of(self, response: Any) -> Reply:
        """A ``Response`` (``stream=False``) as a ``Reply``."""
        reply = _responses_reply([_dump(item) for item in response.output], response, None)
        self.usage += reply.usage
        return reply

    def _messages(self, reply: Reply, results: list[CallResult]) -> list[Message]:
        items = [_sent_back(item, reply) for item in reply.items]
        # After a continued reply's last reasoning, or for a reply the loop built itself (no
        # items of the API's), the output is rebuilt from the text and calls.
        if reply.continued or not reply.items:
            if reply.text:
                items.append({"role": "assistant", "content": reply.text})
            items += [
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": _text(call.arguments),
                }
                for call in reply.tool_calls
            ]
        outputs = [
            {"type": "function_call_output", "call_id": result.call.id, "output": result.text}
            for result in results
        ]
        return [*items, *outputs]

    def _continued(self, params: dict[str, Any], partial: Reply) -> dict[str, Any]:
        given = params.get("input") or []
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
        if partial.text:
            items.append({"role": "assistant", "content": self.quote(partial.text)})
        items.append(
            {"role": "user", "content": continue_text(partial, self.quote, text_quoted=False)}
        )
        return {**params, "input": items}


def _text(arguments: str | Mapping[str, Any]) -> str:
    import json

    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _sent_back(item: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    """An output item as the next request carries it: a function call the network cut
    before its ``output_item.done`` is still ``in_progress``; it goes back as it ran,
    ``completed`` (whole) or ``incomplete`` (cut part-way)."""
    item = dict(item)
    if item.get("type") == "function_call" and item.get("status") == "in_progress":
        cut = any(call.cut for call in reply.tool_calls if call.id == item.get("call_id"))
        item["status"] = "incomplete" if cut else "completed"
    return item
