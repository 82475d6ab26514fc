"""What one native tool call comes to: the :class:`ToolResult` the loop gets, the
:class:`ToolFailure` a tool raises to choose the text, and how a return value, an exception
and the likely place of a fix read for the model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.patch import format_path

__all__ = ["ToolFailure", "ToolResult", "as_text", "describe_failure", "likely_field"]

_MAX_DEPTH = 32  # how deep the notice looks for the longest string; deeper is not worth it


class ToolFailure(Exception):
    """Raise it from a tool to fail with exactly ``text`` as the result the model reads.

    Any other exception reads ``<ExceptionName>: <message>``. ``ename`` goes to the
    history line (default ``"ToolFailure"``).
    """

    def __init__(self, text: str, *, ename: str | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.ename = ename or type(self).__name__


@dataclass
class ToolResult:
    """What one direct call, replay or cut-off call produced; ``text`` is what the model reads."""

    text: str
    status: str  # "ok" or "error"; "partial" for a cut-off call that was saved (nothing ran)
    tool: str  # the tool that ran or was asked for; for a replay, the original tool
    call_id: str | None  # the journal id; None when the arguments could not be saved
    checkpoint: Path | None  # by-id/<call_id>.json
    notice: str | None = None  # the native notice, already at the end of ``text``
    ename: str | None = None
    replay_of: str | None = None  # for a replay: the id of the call it re-ran
    extend_of: str | None = None  # for a completion: the id of the cut-off call it completed


def describe_failure(exc: Exception) -> tuple[str, str]:
    """``(ename, text)``: the model reads ``ename: message``, or a ToolFailure's own text."""
    if isinstance(exc, ToolFailure):
        return exc.ename, exc.text
    ename = type(exc).__name__
    message = str(exc)
    return ename, f"{ename}: {message}" if message else ename


def as_text(value: Any) -> str:
    """A tool's return value as the model reads it: a str as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a circular structure
        return str(value)


def likely_field(arguments: dict[str, Any]) -> str:
    """The path of the longest string in ``arguments``: where a small fix most likely goes."""
    best: tuple[int, tuple[str | int, ...]] = (-1, ())
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(arguments, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if path and len(value) > best[0]:
                best = (len(value), path)
        elif len(path) < _MAX_DEPTH:
            if isinstance(value, dict):
                items: list[tuple[Any, tuple[str | int, ...]]] = [
                    (v, (*path, str(k))) for k, v in value.items()
                ]
            elif isinstance(value, list):
                items = [(v, (*path, i)) for i, v in enumerate(value)]
            else:
                continue
            stack.extend(reversed(items))  # so ties go to the first in document order
    return format_path(best[1]) if best[1] else "<field>"
