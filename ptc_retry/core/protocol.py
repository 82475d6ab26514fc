"""What ptc-retry puts on the Jupyter wire: the execute_request content and the
metadata key its requests and replies carry."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from . import sentences as said

#: The key of ptc-retry's part of an execute_request's and an execute_reply's metadata.
METADATA_KEY = "ptc_retry"

#: The W3C trace context fields a traced request carries in ``metadata["ptc_retry"]``, and
#: each tool call of a traced program in its tool request: the kernel's spans, and the host's
#: span of a tool call, come beneath the span they name (docs/operators.md).
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"
TRACE_FIELDS = (TRACEPARENT, TRACESTATE)


def execute_request(code: str, *, silent: bool = False, **fields: Any) -> dict[str, Any]:
    """The content of an execute_request for ``code``, as an agent backend sends it.

    ``stop_on_error`` is False: each program is a call of its own, and one failure
    must not abort the calls queued behind it. A silent request stores no history.
    ``fields`` (such as ``user_expressions``) are added as given.
    """
    return {
        "code": code,
        "silent": silent,
        "store_history": not silent,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": False,
        **fields,
    }


# -- host tools: a program's calls of the agent's tools -------------------------------------
#
# While a program runs, the kernel does not read further shell messages, but it can ask its
# client for input on the stdin channel (input_request / input_reply, as input() does), also
# through a gateway's websocket. A program's tool calls travel that way: the kernel sends one
# input_request whose prompt is TOOL_PROMPT followed by a JSON batch of calls, and the client
# answers with one input_reply whose value is the JSON list of their results. The backend
# sends allow_stdin=True, and the catalog of its tools as metadata["ptc_retry"]["tools"], with
# every execute_request while it has tools.
#
# A program may wait for several batches at once (a call in a background task while it makes
# another): each reply answers the input_request its parent_header names. When the program
# stops waiting for calls it sent (a task was cancelled, a timeout, an interrupt), the kernel
# sends a cancel request naming them; the client cancels them, answers the cancel request with
# an empty reply, and the batch's own reply (when its other calls are done) with an error in
# their place, which the program never reads.

#: The start of an input_request prompt that carries tool calls (never a person's prompt).
TOOL_PROMPT = "\x00ptc-retry tools v1 "


def tool_request(calls: list[dict[str, Any]]) -> str:
    """The prompt of an input_request that asks the client to make ``calls``.

    Each call is ``{"id": int, "tool": str, "arguments": {...}, "program": str | None,
    "k": int}``; ids are unique within the batch. ``program`` (the call id of the running
    program, None when it has no checkpoint) and ``k`` (the call's place among its calls)
    name the recording line the call gets: see ``host_result``. A call that a replay makes
    again because its recorded line failed also has ``"retry_of": [program, k]``, that line:
    the host may still be running it (its program stopped while it waited). A call of a
    traced program also has the ``TRACE_FIELDS`` of its kernel span: the host's span of the
    call comes beneath it.
    """
    return TOOL_PROMPT + json.dumps({"calls": calls}, ensure_ascii=False)


@dataclass(frozen=True)
class ToolCancel:
    """A cancel request: the program no longer waits for these calls of an earlier batch."""

    #: The msg_id of the input_request that carried the batch.
    request: str
    #: The ``id`` of each cancelled call in that batch.
    calls: list[int]


def tool_cancel(cancel: ToolCancel) -> str:
    """The prompt of an input_request that cancels calls of an earlier batch; the client
    answers it with ``tool_reply([])``."""
    body = {"cancel": {"request": cancel.request, "calls": cancel.calls}}
    return TOOL_PROMPT + json.dumps(body, ensure_ascii=False)


def parse_tool_request(prompt: str) -> list[dict[str, Any]] | ToolCancel | None:
    """What a tool request's prompt asks: its calls, or the cancel of earlier ones; None when
    ``prompt`` is no tool request (a person's ``input()``). ValueError when it is one but
    malformed."""
    if not prompt.startswith(TOOL_PROMPT):
        return None
    body = json.loads(prompt[len(TOOL_PROMPT) :])
    if isinstance(body, dict) and "cancel" in body:
        cancel = body["cancel"]
        request = cancel.get("request") if isinstance(cancel, dict) else None
        calls = cancel.get("calls") if isinstance(cancel, dict) else None
        if not isinstance(request, str) or not isinstance(calls, list):
            raise ValueError("a cancel request names a request and a list of its calls")
        return ToolCancel(request, calls)
    calls = body.get("calls") if isinstance(body, dict) else None
    if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
        raise ValueError("a tool request holds a list of calls")
    return calls


def tool_reply(results: list[dict[str, Any]]) -> str:
    """The value of the input_reply that answers a tool request.

    Each result is ``{"id": int, "ok": True, "result": <JSON>}`` or ``{"id": int, "ok":
    False, "error": str}`` (``error`` is what the program's ``ToolError`` says), one per call.
    """
    return json.dumps({"results": results}, ensure_ascii=False)


#: Half of a UTF-16 surrogate pair: a Python str may hold one, UTF-8 (the wire) cannot.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: How many characters on each side of a lone surrogate an error quotes.
_QUOTED_CHARS = 20
#: Why a value nested past what Python's json encodes cannot travel (a RecursionError).
TOO_DEEP = "is nested too deeply for JSON (Python's json raised RecursionError); flatten it"


def lone_surrogate(value: Any) -> str | None:
    """Where the JSON value ``value`` holds a lone surrogate (half of a UTF-16 pair, such as
    an emoji an API cut in two), which UTF-8, the Jupyter wire, cannot encode; None when it
    holds none. The answer follows the value's name: ``holds a lone surrogate '\\ud83d' at
    index 10 of 'Great job \\ud83d' (at ['text']): half of a UTF-16 pair ...``; the caller
    says what to do.
    """
    stack: list[tuple[Any, str, bool]] = [(value, "", False)]  # (item, path, is a key)
    while stack:
        item, path, key = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                return _surrogate_at(item, found.start(), path, key)
        elif isinstance(item, dict):
            for name, child in reversed(list(item.items())):  # last in, first out
                stack.append((child, f"{path}[{name!r}]", False))
                stack.append((name, path, True))
        elif isinstance(item, (list, tuple)):
            for n in reversed(range(len(item))):
                stack.append((item[n], f"{path}[{n}]", False))
    return None


def not_str_key(value: Any) -> str | None:
    """Where the value ``value`` (JSON by ``json.dumps``) holds a dict key that is not a str
    (``{1: "a"}``, which JSON sends as ``{"1": "a"}``), as the words that follow its name
    (``has the dict key 1 (int at ['rows']), which JSON would turn into ...``); None when
    every key is a str. Keys that JSON cannot encode at all are left to its own error."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for name, child in reversed(list(item.items())):
                if not isinstance(name, str):
                    return _key_problem(name, path)
                stack.append((child, f"{path}[{name!r}]"))
        elif isinstance(item, (list, tuple)):
            for n in reversed(range(len(item))):
                stack.append((item[n], f"{path}[{n}]"))
    return None


def _key_problem(key: Any, path: str) -> str | None:
    try:
        text = json.loads(json.dumps({key: 0}))
    except (TypeError, ValueError):
        return None  # json.dumps names it itself
    (as_text,) = text
    kind = type(key).__name__
    return said.NOT_STR_KEY.render(
        key=repr(key), kind=kind, place=f" at {path}" if path else "", text=as_text
    )


def _surrogate_at(text: str, index: int, path: str, key: bool) -> str:
    start, end = max(0, index - _QUOTED_CHARS), index + _QUOTED_CHARS
    quoted = ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
    place = ("a key" + (f" at {path}" if path else "")) if key else (f"at {path}" if path else "")
    return (
        f"holds a lone surrogate {ascii(text[index])} at index {index} of {ascii(quoted)}"
        f"{f' ({place})' if place else ''}: half of a UTF-16 pair (an emoji cut in two, or "
        "undecodable bytes), which UTF-8 cannot encode"
    )


#: Terminal escape codes: CSI sequences (colours, cursor moves), OSC ones (titles), and
#: two-character escapes, as IPython's coloured tracebacks hold them.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape codes (colours, cursor moves, titles): a traceback
    as a person or a model reads it."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def sendable_text(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud83d``), so that the
    wire carries it: for messages (an exception's text), never for a tool's data."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def parse_tool_reply(value: str) -> list[dict[str, Any]]:
    """The results of a tool request's input_reply; ValueError when it holds none."""
    reply = json.loads(value)
    results = reply.get("results") if isinstance(reply, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise ValueError("a tool reply holds a list of results")
    return results


# -- results the kernel never took ------------------------------------------------------------
#
# A call can complete on the host after the kernel stopped waiting for it (a time limit, an
# interrupt, the kernel's death): the kernel recorded it as failed, or not at all. The host
# keeps what it completed and sends it with its next execute_request, as
# metadata["ptc_retry"]["tool_results"], a list of host_result entries; the kernel appends each
# to the program's recording, where the last line of a call wins.

#: The request metadata key that carries the results the kernel never took.
TOOL_RESULTS = "tool_results"


def host_result(call: dict[str, Any], result: Any) -> dict[str, Any] | None:
    """The ``tool_results`` entry saying that the host completed ``call`` (a call of a tool
    request) with ``result``: ``{"program", "k", "tool", "arguments", "result"}``; None when
    the call names no recording line (it has no ``program`` or no ``k`` of at least 1)."""
    program, k = call.get("program"), call.get("k")
    if not isinstance(program, str) or isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return None
    return {
        "program": program,
        "k": k,
        "tool": call.get("tool"),
        "arguments": call.get("arguments"),
        "result": result,
    }
