"""A scripted model behind the providers' real wire formats: OpenAI Chat Completions and
Responses, and Anthropic Messages, each streamed (server-sent events as the APIs send them)
and not. The official ``openai`` and ``anthropic`` clients talk to it through ``base_url``,
so the tests see the SDKs' own types.

``ModelServer`` runs ``http.server`` in a thread; ``server.script(reply, ...)`` queues what
the next requests get, one ``Reply`` each, or a function of the ``Request`` that returns one
(a model that reads what it was sent); a request with nothing queued gets a 500 naming that,
and a Messages conversation the API would refuse (an empty message, a ``tool_result``
without its ``tool_use``) its 400, before any reply is taken.
``server.requests`` holds every request's path and JSON body, in order.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FIX", "PROGRAM", "TOTAL", "Call", "ModelServer", "Reply", "Request"]

#: Each delta carries at most this many characters, so a stream has many events to cut.
PIECE = 16
MODEL = "scripted-model"


_ROWS = "\n".join(
    f'    {{"item": "{item}", "qty": {qty}, "note": "order {n} of the weekly delivery run"}},'
    for n, (item, qty) in enumerate([("tea", 2), ("milk", 3), ("bread", 1), ("milk", 4)] * 3)
)
#: What the scripted model writes: about 1 KB, three calls of the host tool ``price``
#: (``tools.price``), then a wrong key.
PROGRAM = f"""\
prices = {{}}
for item in ["tea", "milk", "bread"]:
    prices[item] = await tools.price(item=item)
orders = [
{_ROWS}
]
total = sum(prices[order["item"]] * order["qyt"] for order in orders)
print("total", total)
"""
#: The fix of ``PROGRAM`` (old, new), and what the fixed program prints.
FIX = ('order["qyt"]', 'order["qty"]')
TOTAL = "total 73.5"


@dataclass(frozen=True)
class Call:
    """One tool call the model makes: ``arguments`` is the raw JSON string it writes (for
    Anthropic too, whose non-streamed ``input`` is that string decoded)."""

    name: str
    arguments: str
    id: str = ""


@dataclass
class Reply:
    """What the model answers one request with.

    ``reasoning`` comes first (Chat: ``reasoning_content``, as compatible servers send it;
    Responses: a reasoning summary; Anthropic: a thinking block), then ``text``, then
    ``calls``. ``stop``: ``"stop"`` (the end, or the tool calls), ``"length"`` (the output
    limit: ``finish_reason: "length"``, ``incomplete`` for ``max_output_tokens``,
    ``stop_reason: "max_tokens"``) or ``"refusal"`` (``text`` is then the refusal).
    ``drop_after``: a streamed reply's connection is closed after that many events, without
    the end of its chunked body (a non-streamed one before any byte). ``stall_after``: a
    streamed reply stops sending after that many events, until the client goes or the
    server closes (a model that thinks a long while). ``end_after``: a streamed reply's body
    ends cleanly after that many events, without the rest (a proxy that ends it at its read
    timeout); with ``failed``, Responses sends ``response.failed`` there (the model failed
    part-way). ``empty_deltas``: Chat sends an empty delta after each piece of a call's
    arguments (as some compatible servers do); ``indexless``: each call whole in one delta,
    without its ``index`` (as Gemini's compatible endpoint). ``status``: an HTTP
    error (429, 500, 529...) in the API's error shape instead of a reply, with ``error`` as
    its message when given. ``usage``: the input and output tokens it reports.
    """

    text: str = ""
    reasoning: str = ""
    calls: list[Call] = field(default_factory=list)
    stop: str = "stop"
    drop_after: int | None = None
    stall_after: int | None = None
    end_after: int | None = None
    failed: bool = False
    empty_deltas: bool = False
    indexless: bool = False
    status: int | None = None
    error: str = ""
    usage: tuple[int, int] = (120, 30)
    token: str = field(default_factory=lambda: secrets.token_hex(10))


@dataclass(frozen=True)
class Request:
    """One request the server received: its path and its JSON body."""

    path: str
    body: dict[str, Any]

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))


Event = tuple[str | None, dict[str, Any]]


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)]


def _call_id(reply: Reply, index: int, prefix: str) -> str:
    """The call's own id, else one shaped like the API's (``call_`` or ``toolu_01`` and 22
    characters), unique to the reply."""
    call = reply.calls[index]
    return call.id or f"{prefix}{index:02d}{reply.token}"


# -- OpenAI Chat Completions ---------------------------------------------------------------


def _chat_finish(reply: Reply) -> str:
    if reply.stop == "length":
        return "length"
    return "tool_calls" if reply.calls else "stop"


def _chat_usage(reply: Reply) -> dict[str, Any]:
    prompt, completion = reply.usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def chat_completion(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if reply.stop == "refusal":
        message["refusal"] = reply.text
    elif reply.text:
        message["content"] = reply.text
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": _call_id(reply, i, "call_"),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for i, call in enumerate(reply.calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": _chat_finish(reply), "logprobs": None}
        ],
        "usage": _chat_usage(reply),
    }


def chat_chunks(reply: Reply, include_usage: bool) -> list[Event]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        body = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": created,
            "model": MODEL,
            "choices": [choice],
        }
        return None, body

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": piece}) for piece in _pieces(reply.reasoning)]
    key = "refusal" if reply.stop == "refusal" else "content"
    events += [chunk({key: piece}) for piece in _pieces(reply.text)]
    for index, call in enumerate(reply.calls):
        start = {
            "index": index,
            "id": _call_id(reply, index, "call_"),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        if reply.indexless:
            del start["index"]
            start["function"]["arguments"] = call.arguments
            events.append(chunk({"tool_calls": [start]}))
            continue
        events.append(chunk({"tool_calls": [start]}))
        for piece in _pieces(call.arguments):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
            if reply.empty_deltas:
                events.append(chunk({}))
    events.append(chunk({}, _chat_finish(reply)))
    if include_usage:
        last = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": created,
            "model": MODEL,
            "choices": [],
            "usage": _chat_usage(reply),
        }
        events.append((None, last))
    return events


# -- OpenAI Responses ----------------------------------------------------------------------


def _responses_items(reply: Reply) -> list[dict[str, Any]]:
    """The whole output items, as ``response.output_item.done`` and the response carry."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        summary = [{"type": "summary_text", "text": reply.reasoning}]
        items.append({"type": "reasoning", "id": "rs_scripted", "summary": summary})
    if reply.text:
        part: dict[str, Any] = (
            {"type": "refusal", "refusal": reply.text}
            if reply.stop == "refusal"
            else {"type": "output_text", "text": reply.text, "annotations": []}
        )
        items.append(
            {
                "type": "message",
                "id": "msg_scripted",
                "role": "assistant",
                "status": "incomplete"
                if reply.stop == "length" and not reply.calls
                else "completed",
                "content": [part],
            }
        )
    for index, call in enumerate(reply.calls):
        cut = reply.stop == "length" and index == len(reply.calls) - 1
        items.append(
            {
                "type": "function_call",
                "id": f"fc_scripted{index}",
                "call_id": _call_id(reply, index, "call_"),
                "name": call.name,
                "arguments": call.arguments,
                "status": "incomplete" if cut else "completed",
            }
        )
    return items


def response_object(reply: Reply, *, done: bool = True) -> dict[str, Any]:
    incomplete = reply.stop == "length"
    prompt, completion = reply.usage
    status = ("incomplete" if incomplete else "completed") if done else "in_progress"
    return {
        "id": "resp_scripted",
        "object": "response",
        "created_at": time.time(),
        "model": MODEL,
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete and done else None,
        "output": _responses_items(reply) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
        if done
        else None,
    }


def responses_events(reply: Reply) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    emit("response.created", response=response_object(reply, done=False))
    emit("response.in_progress", response=response_object(reply, done=False))
    for index, item in enumerate(_responses_items(reply)):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=index, item={**item, "summary": []})
            part = {"type": "summary_text", "text": ""}
            emit("response.reasoning_summary_part.added", **at, summary_index=0, part=part)
            for piece in _pieces(reply.reasoning):
                emit("response.reasoning_summary_text.delta", **at, summary_index=0, delta=piece)
            emit(
                "response.reasoning_summary_text.done", **at, summary_index=0, text=reply.reasoning
            )
        elif item["type"] == "message":
            started = {**item, "status": "in_progress", "content": []}
            emit("response.output_item.added", output_index=index, item=started)
            part = item["content"][0]
            refusal = part["type"] == "refusal"
            empty = {**part, ("refusal" if refusal else "text"): ""}
            emit("response.content_part.added", **at, content_index=0, part=empty)
            for piece in _pieces(reply.text):
                if refusal:
                    emit("response.refusal.delta", **at, content_index=0, delta=piece)
                else:
                    emit(
                        "response.output_text.delta",
                        **at,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
            if refusal:
                emit("response.refusal.done", **at, content_index=0, refusal=reply.text)
            else:
                emit(
                    "response.output_text.done", **at, content_index=0, text=reply.text, logprobs=[]
                )
            emit("response.content_part.done", **at, content_index=0, part=part)
        else:
            started = {**item, "arguments": "", "status": "in_progress"}
            emit("response.output_item.added", output_index=index, item=started)
            for piece in _pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", **at, delta=piece)
            emit(
                "response.function_call_arguments.done",
                **at,
                name=item["name"],
                arguments=item["arguments"],
            )
        emit("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if reply.stop == "length" else "response.completed"
    emit(final, response=response_object(reply))
    return events


def _response_failed(reply: Reply, number: int) -> Event:
    """The ``response.failed`` event of a response the model failed part-way."""
    response = response_object(reply, done=False)
    error = {"code": "server_error", "message": "The model failed to generate a response."}
    response.update(status="failed", error=error)
    body = {"type": "response.failed", "sequence_number": number, "response": response}
    return "response.failed", body


# -- Anthropic Messages --------------------------------------------------------------------


def _anthropic_stop(reply: Reply) -> str:
    if reply.stop == "length":
        return "max_tokens"
    if reply.stop == "refusal":
        return "refusal"
    return "tool_use" if reply.calls else "end_turn"


def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": "c2lnbmVk"})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for index, call in enumerate(reply.calls):
        cut = reply.stop == "length" and index == len(reply.calls) - 1
        try:
            decoded = {} if cut else json.loads(call.arguments)
        except ValueError:
            decoded = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": _call_id(reply, index, "toolu_01"),
                "name": call.name,
                "input": decoded,
            }
        )
    return blocks


def anthropic_message(reply: Reply, *, done: bool = True) -> dict[str, Any]:
    prompt, completion = reply.usage
    return {
        "id": "msg_01scripted",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": _anthropic_blocks(reply) if done else [],
        "stop_reason": _anthropic_stop(reply) if done else None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt,
            "output_tokens": completion if done else 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_events(reply: Reply) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    emit("message_start", message=anthropic_message(reply, done=False))
    emit("ping")
    for index, block in enumerate(_anthropic_blocks(reply)):
        if block["type"] == "thinking":
            emit(
                "content_block_start",
                index=index,
                content_block={**block, "thinking": "", "signature": ""},
            )
            for piece in _pieces(reply.reasoning):
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "thinking_delta", "thinking": piece},
                )
            signature = {"type": "signature_delta", "signature": block["signature"]}
            emit("content_block_delta", index=index, delta=signature)
        elif block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in _pieces(reply.text):
                emit(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
        else:
            call = reply.calls[index - _first_call_block(reply)]
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in _pieces(call.arguments):
                delta = {"type": "input_json_delta", "partial_json": piece}
                emit("content_block_delta", index=index, delta=delta)
        emit("content_block_stop", index=index)
    usage = {"output_tokens": reply.usage[1]}
    emit(
        "message_delta",
        delta={"stop_reason": _anthropic_stop(reply), "stop_sequence": None},
        usage=usage,
    )
    emit("message_stop")
    return events


def _first_call_block(reply: Reply) -> int:
    return int(bool(reply.reasoning)) + int(bool(reply.text))


# -- errors --------------------------------------------------------------------------------

_OPENAI_ERRORS = {429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error_body(path: str, status: int, message: str = "") -> dict[str, Any]:
    message = message or f"scripted error {status}"
    if path.endswith("/messages"):
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = _OPENAI_ERRORS.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _anthropic_refusal(request: Request) -> str | None:
    """What the Messages API answers a conversation it refuses before any model reads it: a
    message with no content (but a final assistant one), or a ``tool_result`` whose
    ``tool_use`` is not in the message before it."""
    if not request.path.endswith("/messages"):
        return None
    messages = request.body.get("messages") or []
    for number, message in enumerate(messages):
        content = message.get("content")
        final = number == len(messages) - 1 and message.get("role") == "assistant"
        if not content and not final:
            return (
                f"messages.{number}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        before = messages[number - 1].get("content") if number else None
        used = (
            {b.get("id") for b in before if b.get("type") == "tool_use"}
            if isinstance(before, list)
            else set()
        )
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in used:
                return (
                    f"messages.{number}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
    return None


# -- the server ----------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        request = Request(self.path, body)
        refused = _anthropic_refusal(request)
        reply = Reply(status=400, error=refused) if refused else self.server.owner.take(request)
        if reply is None:
            self._send_json(500, error_body(self.path, 500) | {"detail": "nothing scripted"})
        elif reply.status is not None:
            self._send_json(reply.status, error_body(self.path, reply.status, reply.error))
        elif request.streamed:
            self._stream(self._events(request, reply), reply.drop_after, reply.stall_after)
        elif reply.drop_after is not None:
            self._drop()
        else:
            self._send_json(200, self._whole(request, reply))

    def _events(self, request: Request, reply: Reply) -> list[Event]:
        if request.path.endswith("/chat/completions"):
            include = bool((request.body.get("stream_options") or {}).get("include_usage"))
            events = [*chat_chunks(reply, include), (None, "[DONE]")]  # type: ignore[list-item]
        elif request.path.endswith("/responses"):
            events = responses_events(reply)
        else:
            events = anthropic_events(reply)
        if reply.end_after is None:
            return events
        events = events[: reply.end_after]
        if reply.failed:
            events.append(_response_failed(reply, len(events)))
        return events

    def _whole(self, request: Request, reply: Reply) -> dict[str, Any]:
        if request.path.endswith("/chat/completions"):
            return chat_completion(reply)
        if request.path.endswith("/responses"):
            return response_object(reply)
        return anthropic_message(reply)

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self, events: list[Event], drop_after: int | None, stall_after: int | None = None
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for number, (kind, data) in enumerate(events):
            if drop_after is not None and number >= drop_after:
                self._drop()
                return
            if number == stall_after:
                self.server.owner.stalled.set()
                self.server.owner.closing.wait(60)
                return
            text = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {kind}\n" if kind else "") + f"data: {text}\n\n"
            payload = frame.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _drop(self) -> None:
        """Close the connection at once: the client reads a body cut part-way."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ModelServer


class ModelServer:
    """The scripted model, listening on a free local port until ``close()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Reply | Callable[[Request], Reply]] = []
        self.requests: list[Request] = []
        #: Set by ``close()``: a stalled stream stops waiting.
        self.closing = threading.Event()
        #: Set when a stream stalls (``Reply.stall_after``): what it sent so far is out.
        self.stalled = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The root URL: Anthropic's ``base_url`` (its client adds ``/v1/messages``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        """OpenAI's ``base_url`` (its client adds ``/chat/completions``, ``/responses``)."""
        return f"{self.url}/v1"

    def script(self, *replies: Reply | Callable[[Request], Reply]) -> None:
        """Replace what the next requests get with ``replies``, and forget past requests."""
        with self._lock:
            self._queue = list(replies)
            self.requests = []
            self.stalled.clear()

    @property
    def unplayed(self) -> int:
        """How many scripted replies no request has taken yet."""
        with self._lock:
            return len(self._queue)

    def take(self, request: Request) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            reply = self._queue.pop(0) if self._queue else None
        return reply(request) if callable(reply) else reply

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
