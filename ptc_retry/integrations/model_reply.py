"""A model's reply as the provider adapters read it, in the same words for every API: the
reply (``Reply``, with its ``ToolCall``, ``Usage`` and ``Stop``), what one step of its tool calls
gave (``Step``, ``CallResult``), and the reader of one API's stream (``ReplyCollector``). It
imports no SDK; ``ptc_retry.integrations.replies`` is where adapters and users import it from.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CallResult",
    "Message",
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


def whole_json(arguments: str) -> bool:
    """A tool call's arguments arrived whole: they decode as JSON. A cut after them left
    nothing of the call unsaid, so it runs as it is instead of being saved to extend."""
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True
