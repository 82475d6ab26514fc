"""The continuation of a stream cut off by the network: how it is continued
(``Continuation``), the words of the request that asks for the rest (``continue_text``), the
errors that count as a cut besides the SDK's own (``transport_errors``), and one reply made of
the parts a cut split it into (``join_parts``, ``dropped``, ``resume_of``). It imports no SDK.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from ..core import sentences as said
from .model_reply import Message, Reply, Resume, Stop

__all__ = [
    "Continuation",
    "continue_text",
    "dropped",
    "join_parts",
    "resume_of",
    "transport_errors",
]


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


def resume_of(
    exc: BaseException, joined: Reply, quoted: int, delay: float, *, continued: bool
) -> Resume:
    """What ``exc`` cost the reply so far, ``joined`` (a ``Resume`` of ``Reply.resumes``)."""
    error = f"{type(exc).__name__}: {exc}"
    return Resume(error, continued, len(joined.text), len(joined.reasoning), quoted, delay)


def dropped(reply: Reply, exc: BaseException) -> Reply:
    """``reply`` ended by ``exc`` after a tool call began."""
    reply.stop = Stop.DROPPED
    reply.dropped = reply.dropped or f"{type(exc).__name__}: {exc}"
    return reply


def join_parts(parts: list[Reply], resumes: list[Resume]) -> Reply:
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
