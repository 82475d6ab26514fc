"""The path grammar of native-mode patches: a path names a value in a tool call's
arguments (``items[0].name``); :func:`parse_path` reads one, :func:`format_path` writes one.
Also the pieces every patch message is made of."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from .errors import PatchError

PathSegment = str | int
"""A key of an object (``str``) or an index into an array (``int``)."""

_VALID_FORM = (
    "valid paths look like code, config.mode, items[0].name or a[0][1]; "
    'quote a key holding ".", "[" or "]" as ["a.b"]'
)
_BARE_KEY = re.compile(r"[^.\[\]]*")
_INDEX = re.compile(r"[0-9]+")
_NEGATIVE_INDEX = re.compile(r"-[0-9]+")
_MAX_SHOWN = 80


def parse_path(path: str) -> tuple[PathSegment, ...]:
    """Parse ``path`` into its segments: ``"items[0].name"`` -> ``("items", 0, "name")``.

    A path names a value from the top-level keys of the arguments object::

        path    = [ "." ] key { tail }  |  quoted { tail }
        tail    = "." key  |  "[" index "]"  |  quoted
        key     = one or more characters other than ".", "[" and "]"
        index   = one or more ASCII digits              (0-based; no negative indexes)
        quoted  = "[" JSON string "]"                   (a key holding ".", "[" or "]")

    So ``code``, ``.config.mode``, ``items[0].name``, ``a[0][1]`` and
    ``headers["content.type"]`` are paths. A bare key is taken literally, spaces and
    quotes included; a quoted key is one JSON string in double quotes, escapes
    allowed (``["a.b"]``, ``[""]``). A path never starts with an index, because the
    arguments are an object. Raises :class:`PatchError` naming the problem and its
    (0-based) position unless the whole path parses.
    """
    if not isinstance(path, str):
        raise PatchError(f'a path must be a string like "items[0].name", got {json_kind(path)}')
    if not path:
        raise PatchError(f"the path is empty: {_VALID_FORM}")
    segments: list[PathSegment] = []
    if path[0] == "[":
        first, pos = _parse_bracket(path, 0)
        if isinstance(first, int):
            raise _path_error(
                path,
                0,
                "a path starts with a top-level key, not an index (the arguments are an object)",
            )
        segments.append(first)
    else:
        first, pos = _parse_key(path, 1 if path[0] == "." else 0)
        segments.append(first)
    while pos < len(path):
        char = path[pos]
        if char == ".":
            key, pos = _parse_key(path, pos + 1)
            segments.append(key)
        elif char == "[":
            segment, pos = _parse_bracket(path, pos)
            segments.append(segment)
        elif char == "]":
            raise _path_error(path, pos, "unmatched ']'")
        else:
            raise _path_error(path, pos, "expected '.', '[' or the end of the path after ']'")
    return tuple(segments)


def format_path(segments: Sequence[PathSegment]) -> str:
    """The canonical text of a path: ``("items", 0, "a.b")`` -> ``'items[0]["a.b"]'``.

    ``parse_path(format_path(s)) == s`` for every tuple whose first segment is a
    key. Keys that are empty, hold ``.``, ``[``, ``]``, whitespace or unprintable
    characters are written quoted.
    """
    parts: list[str] = []
    for segment in segments:
        if isinstance(segment, int) and not isinstance(segment, bool):
            parts.append(f"[{segment}]")
        elif _is_bare_key(str(segment)):
            parts.append(f".{segment}" if parts else str(segment))
        else:
            parts.append("[" + json.dumps(str(segment), ensure_ascii=False) + "]")
    return "".join(parts)


def _is_bare_key(key: str) -> bool:
    return (
        bool(key)
        and _BARE_KEY.fullmatch(key) is not None
        and key.isprintable()
        and not any(char.isspace() for char in key)
    )


def _parse_key(path: str, pos: int) -> tuple[str, int]:
    match = _BARE_KEY.match(path, pos)
    assert match is not None  # the pattern matches the empty string
    key = match.group()
    if key:
        return key, match.end()
    if pos == len(path):
        raise _path_error(path, pos, "empty key: the path ends with '.'")
    if path[pos] == "[":
        raise _path_error(
            path, pos, "'.' must be followed by a key: write a[0] or a[\"k\"], not a.[0]"
        )
    raise _path_error(path, pos, f"empty key before {path[pos]!r}")


def _parse_bracket(path: str, pos: int) -> tuple[PathSegment, int]:
    """Parse ``[n]`` or ``["key"]`` starting at the ``[`` at ``pos``."""
    inner = pos + 1
    if inner < len(path) and path[inner] == '"':
        try:
            key, end = json.JSONDecoder().raw_decode(path, inner)
        except ValueError as exc:
            reason = getattr(exc, "msg", "not a JSON string").lower()
            at = getattr(exc, "pos", inner)
            raise _path_error(
                path, at, f'bad quoted key ({reason}); a quoted key is a JSON string: ["a.b"]'
            ) from None
        if end >= len(path) or path[end] != "]":
            raise _path_error(path, end, "expected ']' after the quoted key")
        return key, end + 1
    close = path.find("]", inner)
    if close == -1:
        raise _path_error(path, pos, "'[' is never closed")
    content = path[inner:close]
    if _INDEX.fullmatch(content):
        try:
            return int(content), close + 1
        except ValueError:  # more digits than int() accepts
            raise _path_error(path, inner, "index too large") from None
    if _NEGATIVE_INDEX.fullmatch(content):
        raise _path_error(
            path,
            inner,
            f"negative index [{content}]: indexes count from 0, so the last "
            "item of an array of n items is [n-1]",
        )
    if content.startswith("'"):
        raise _path_error(path, inner, 'a quoted key takes double quotes: ["a.b"]')
    if not content:
        raise _path_error(path, inner, "empty brackets: write an index like [0]")
    raise _path_error(
        path,
        inner,
        f"[{clip(content)}] is not an index: indexes are integers like [0], "
        'and a key in brackets is a JSON string like ["a.b"]',
    )


def _path_error(path: str, pos: int, problem: str) -> PatchError:
    rest = path[pos:]
    where = f"before {show(rest)}" if rest else "the end"
    return PatchError(
        f"invalid path {show(path)} at position {pos} ({where}): {problem}; {_VALID_FORM}"
    )


# -- message pieces -------------------------------------------------------------


def json_kind(value: object) -> str:
    """The JSON name of a value's type, with an article: 'a string', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def show(text: str) -> str:
    """``text`` as a JSON string, clipped so one long key cannot flood a message."""
    return json.dumps(clip(text), ensure_ascii=False)


def clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"
