"""Tool calls cut off mid-stream: what a cut JSON arguments string already holds.

A model streams a call's arguments token by token; when the stream stops (an output-token
limit, a dropped connection), the string ends anywhere: inside a key, inside a string
value, inside an escape such as ``\\u00e9`` or ``\\"``. ``cut_arguments`` reads the object as
far as it arrived: the keys whose values are whole, and the longest decodable prefix of
the string value being written when it stopped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CutArguments", "cut_arguments", "string_prefix"]

_DECODER = json.JSONDecoder(strict=False)
_SPACE = re.compile(r"[ \t\n\r]*")
# A string body's incomplete end: a lone backslash, or a \u escape missing hex digits.
_OPEN_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*(\\|\\u[0-9a-fA-F]{0,3})\Z")
# A complete escape of a high surrogate at the end: its low half may not have arrived.
_HIGH_SURROGATE = re.compile(r"(?<!\\)(?:\\\\)*(\\u[dD][89abAB][0-9a-fA-F]{2})\Z")


@dataclass
class CutArguments:
    """What a cut arguments object holds: ``values``, the keys whose values arrived whole,
    and, when the cut fell inside a string value, its key (``open_key``) and decoded prefix
    (``open_prefix``)."""

    values: dict[str, Any] = field(default_factory=dict)
    open_key: str | None = None
    open_prefix: str = ""

    def string(self, key: str) -> tuple[str, bool] | None:
        """``(text, whole)`` for the string value of ``key``: all of it (``whole``), or the
        prefix that arrived before the cut; None when its opening quote did not arrive or
        the value is not a string."""
        if self.open_key == key:
            return self.open_prefix, False
        value = self.values.get(key)
        return (value, True) if isinstance(value, str) else None


def cut_arguments(raw: str) -> CutArguments:
    """Read the JSON object ``raw`` as far as it arrived (ValueError when it does not start
    as an object). A key that did not arrive whole and a value other than a string that was
    cut are left out."""
    position = _skip(raw, 0)
    if position == len(raw):
        return CutArguments()  # nothing arrived
    if raw[position] != "{":
        raise ValueError("the arguments do not start as a JSON object ({)")
    found = CutArguments()
    position += 1
    while True:
        position = _skip(raw, position)
        if position >= len(raw) or raw[position] == "}":
            return found
        if raw[position] == ",":
            position = _skip(raw, position + 1)
        try:
            key, position = _DECODER.raw_decode(raw, position)
        except ValueError:
            return found  # cut inside a key (or not JSON from here on)
        position = _skip(raw, position)
        if raw[position : position + 1] != ":":
            return found
        position = _skip(raw, position + 1)
        if raw[position : position + 1] == '"':
            body, closed = _string_body(raw, position + 1)
            if not closed:
                found.open_key, found.open_prefix = str(key), string_prefix(body)
                return found
        try:
            value, position = _DECODER.raw_decode(raw, position)
        except ValueError:
            return found  # cut inside a number, a list or an object
        found.values[str(key)] = value


def string_prefix(body: str) -> str:
    """The decoded text of a JSON string body (no quotes) cut anywhere: an escape that did
    not arrive whole, or a high surrogate whose low half may still follow, is left out."""
    for incomplete in (_OPEN_ESCAPE, _HIGH_SURROGATE):
        match = incomplete.search(body)
        if match:
            body = body[: match.start(1)]
    decoded = _DECODER.decode(f'"{body}"')
    assert isinstance(decoded, str)
    return decoded


def _string_body(raw: str, start: int) -> tuple[str, bool]:
    """The body of the JSON string that starts at ``start`` (after its quote), and whether
    its closing quote arrived."""
    position = start
    while position < len(raw):
        char = raw[position]
        if char == "\\":
            position += 2
        elif char == '"':
            return raw[start:position], True
        else:
            position += 1
    return raw[start:], False


def _skip(raw: str, position: int) -> int:
    match = _SPACE.match(raw, position)
    return match.end() if match else position
