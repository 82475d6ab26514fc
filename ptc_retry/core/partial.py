"""Tool calls cut off mid-stream: what a cut JSON arguments string already holds.

A model streams a call's arguments token by token; when the stream stops (an output-token
limit, a dropped connection), the string ends anywhere: inside a key, inside a string
value, inside an escape such as ``\\u00e9`` or ``\\"``. ``cut_arguments`` reads the object as
far as it arrived: the keys whose values are whole, the longest decodable prefix of the
string value being written when it stopped, and where the cut fell (``CutPlace``).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CutArguments", "CutPlace", "cut_arguments", "cut_json", "string_prefix"]

_DECODER = json.JSONDecoder(strict=False)
_SPACE = re.compile(r"[ \t\n\r]*")
# A string body: characters other than a quote or a backslash, and whole escapes (unrolled,
# so runs of plain characters are taken at once).
_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
# The longest escape either pattern below ends with (\uD83D).
_ESCAPE_CHARS = 6
# A string body's incomplete end: a lone backslash, or a \u escape missing hex digits.
_OPEN_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*(\\|\\u[0-9a-fA-F]{0,3})\Z")
# A complete escape of a high surrogate at the end: its low half may not have arrived.
_HIGH_SURROGATE = re.compile(r"(?<!\\)(?:\\\\)*(\\u[dD][89abAB][0-9a-fA-F]{2})\Z")


class CutPlace(str, enum.Enum):
    """Where a stream of JSON arguments stopped."""

    #: Before the object began (nothing, or only blanks).
    NOTHING = "nothing"
    #: Between members: after ``{``, after a whole value or its comma, before the final ``}``.
    BETWEEN = "between"
    #: Inside a key's name: which key it was is not known.
    KEY = "key"
    #: Inside the string value of ``cut_key`` (``open_key``: it can be continued).
    STRING = "string"
    #: Inside another value of ``cut_key``: before it began, inside a number or a word
    #: (``true``), or inside an array or object, outside any string in it.
    VALUE = "value"
    #: Inside a string nested in the array or object value of ``cut_key``.
    NESTED_STRING = "nested string"
    #: Nowhere: the closing ``}`` arrived, the object is whole.
    WHOLE = "whole"


@dataclass
class CutArguments:
    """What a cut arguments object holds: ``values``, the keys whose values arrived whole;
    ``place``, where the cut fell, and ``cut_key``, the key whose value it fell in (None
    when the cut fell outside any value, or inside a key's name); when that value is a
    string, its key again (``open_key``) and its decoded prefix (``open_prefix``)."""

    values: dict[str, Any] = field(default_factory=dict)
    open_key: str | None = None
    open_prefix: str = ""
    place: CutPlace = CutPlace.NOTHING
    cut_key: str | None = None

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
    cut are left out; a number that reaches the end of ``raw`` counts as cut (more digits
    may follow). A closing ``}`` ends the reading (``CutPlace.WHOLE``). A value nested too
    deep for Python to decode counts as cut."""
    position = _skip(raw, 0)
    if position == len(raw):
        return CutArguments()  # nothing arrived
    if raw[position] != "{":
        raise ValueError("the arguments do not start as a JSON object ({)")
    found = CutArguments(place=CutPlace.BETWEEN)
    position += 1
    while True:
        position = _skip(raw, position)
        if position < len(raw) and raw[position] == "}":
            found.place = CutPlace.WHOLE
            return found
        if position < len(raw) and raw[position] == ",":
            position = _skip(raw, position + 1)
        if position >= len(raw):
            return found
        read = _key(raw, position)
        if read is None:
            found.place = CutPlace.KEY
            return found  # cut inside a key (or not JSON from here on)
        key, position = read
        found.place, found.cut_key = CutPlace.VALUE, key
        # A key given twice takes its last value (as json.loads does): the earlier one is
        # no longer what arrived, whatever the cut leaves of this one.
        found.values.pop(found.cut_key, None)
        position = _skip(raw, position)
        if raw[position : position + 1] != ":":
            return found
        position = _skip(raw, position + 1)
        if raw[position : position + 1] == '"':
            body, closed = _string_body(raw, position + 1)
            if not closed:
                found.place = CutPlace.STRING
                found.open_key, found.open_prefix = key, string_prefix(body)
                return found
        try:
            value, end = _DECODER.raw_decode(raw, position)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python goes
            if _inside_nested_string(raw, position):
                found.place = CutPlace.NESTED_STRING
            return found  # cut inside a number, a word, an array or an object
        if end == len(raw) and _is_number(value):
            return found  # "12" may have been the start of "125"
        found.values[key] = value
        found.place, found.cut_key, position = CutPlace.BETWEEN, None, end


def cut_json(value: Mapping[str, Any]) -> str:
    """The arguments string of a cut-off call that an API or a framework decoded as far as
    it arrived (Anthropic's non-streamed ``input``, LangChain's partial JSON): the last
    string value was cut inside, so its closing quote and the ``}`` are left off, and its
    program is saved to be extended, never run cut short."""
    text = json.dumps(value, ensure_ascii=False)
    return text[:-2] if text.endswith('"}') else text


def string_prefix(body: str) -> str:
    """The decoded text of a JSON string body (no quotes) cut anywhere: an escape that did
    not arrive whole, or a high surrogate whose low half may still follow, is left out."""
    for incomplete in (_OPEN_ESCAPE, _HIGH_SURROGATE):
        match = incomplete.search(body, _tail(body))
        if match:
            body = body[: match.start(1)]
    decoded = _DECODER.decode(f'"{body}"')
    assert isinstance(decoded, str)
    return decoded


def _tail(body: str) -> int:
    """Where the end of ``body`` that an escape at its end can reach begins: its last
    characters, and the backslashes just before them (they decide what is escaped)."""
    start = max(0, len(body) - _ESCAPE_CHARS)
    while start > 0 and body[start - 1] == "\\":
        start -= 1
    return start


def _string_body(raw: str, start: int) -> tuple[str, bool]:
    """The body of the JSON string that starts at ``start`` (after its quote), and whether
    its closing quote arrived."""
    match = _BODY.match(raw, start)
    end = match.end() if match else start
    if raw[end : end + 1] == '"':
        return raw[start:end], True
    return raw[start:], False


def _key(raw: str, start: int) -> tuple[str, int] | None:
    """The key whose string starts at ``start`` and where it ends, or None when it did not
    arrive whole (or what is there is no string)."""
    if raw[start : start + 1] != '"':
        return None
    body, closed = _string_body(raw, start + 1)
    if not closed:
        return None
    try:
        key = _DECODER.decode(f'"{body}"')
    except ValueError:
        return None
    return str(key), start + len(body) + 2


def _inside_nested_string(raw: str, start: int) -> bool:
    """Whether ``raw`` ends inside a string of the array or object that starts at ``start``."""
    if raw[start : start + 1] not in ("[", "{"):
        return False
    inside = False
    position = start
    while position < len(raw):
        char = raw[position]
        if inside and char == "\\":
            position += 1  # the escaped character cannot end the string
        elif char == '"':
            inside = not inside
        position += 1
    return inside


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _skip(raw: str, position: int) -> int:
    match = _SPACE.match(raw, position)
    return match.end() if match else position
