"""Native-mode patches: the path grammar and the engine behind ``editPreviousToolCalling``.

In native mode an agent calls tools directly and every call's raw JSON argument
string is saved. To fix a failed call, the model sends a ``patch``: a non-empty
list of entries, applied in order (each to the result of the previous one) to
the saved arguments, decoded into a JSON object. This module is that engine,
and nothing else: it knows nothing of the store, IPython or Jupyter.

Entries
-------
``{"path": p, "value": v}``
    Replace the value at ``p`` with ``v`` (any JSON value). A missing key is
    created when its parent object exists; a missing array index is an error
    (there is no append: replace the whole array instead).
``{"path": p, "old_string": a, "new_string": b}`` (optional ``"replace_all": true``)
    Replace the literal text ``a`` with ``b`` inside the string at ``p``. ``a``
    must occur exactly once (overlapping occurrences count), or, with
    ``replace_all``, at least once. ``a`` is matched against the decoded
    string, so it is written with real characters, never JSON escapes. When the
    string itself holds JSON (an object or array) and ``a`` does not occur in
    it, ``a`` is matched in its JSON-escaped form too (what it looks like inside
    that JSON's strings), and ``b`` is escaped the same way, so the inner JSON
    stays valid.
``{"path": p}``
    Delete the key; an array index removes the item and later items shift down.

Paths
-----
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
arguments are an object. The whole path must parse, or :class:`PatchError`
says what is wrong at which (0-based) position.

Every problem raises :class:`PatchError`, with a short message meant for the
model: what was wrong and what to send instead. :func:`apply_patch` never
mutates its inputs; its result is a new object that shares the sub-objects no
entry touched with ``arguments`` (deep-copy it before mutating it in place).
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Union

from .errors import PatchError

PathSegment = Union[str, int]
"""A key of an object (``str``) or an index into an array (``int``)."""

ENTRY_KEYS = frozenset({"path", "value", "old_string", "new_string", "replace_all"})
MAX_LISTED_KEYS = 20

_VALID_FORM = (
    "valid paths look like code, config.mode, items[0].name or a[0][1]; "
    'quote a key holding ".", "[" or "]" as ["a.b"]'
)
_ENTRY_FORMS = (
    "an entry is {path, value} to replace a value, {path, old_string, new_string} "
    "(optionally replace_all) to edit text inside a string, or {path} alone to delete"
)
_BARE_KEY = re.compile(r"[^.\[\]]*")
_INDEX = re.compile(r"[0-9]+")
_NEGATIVE_INDEX = re.compile(r"-[0-9]+")
_MAX_SHOWN = 80


# -- paths --------------------------------------------------------------------


def parse_path(path: str) -> tuple[PathSegment, ...]:
    """Parse ``path`` into its segments: ``"items[0].name"`` -> ``("items", 0, "name")``.

    The first segment is always a key. Raises :class:`PatchError` naming the
    problem and its position unless the whole path matches the grammar in the
    module docstring.
    """
    if not isinstance(path, str):
        raise PatchError(f'a path must be a string like "items[0].name", got {_kind(path)}')
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
        f"[{_clip(content)}] is not an index: indexes are integers like [0], "
        'and a key in brackets is a JSON string like ["a.b"]',
    )


def _path_error(path: str, pos: int, problem: str) -> PatchError:
    rest = path[pos:]
    where = f"before {_show(rest)}" if rest else "the end"
    return PatchError(
        f"invalid path {_show(path)} at position {pos} ({where}): {problem}; {_VALID_FORM}"
    )


# -- patch shape --------------------------------------------------------------


def validate_patch(patch: object) -> list[dict[str, Any]]:
    """Check the shape of ``patch`` without looking at any arguments; return its entries.

    ``patch`` must be a non-empty list of entries, each a dict of one of the
    three kinds in the module docstring, with a ``path`` that parses. Returns a
    new list of shallow copies of the entries. Raises :class:`PatchError` for
    the first problem found, naming the entry (``patch[1]``) and the field.
    """
    return [dict(entry) for entry, _ in _checked(patch)]


def _checked(patch: object) -> list[tuple[dict[str, Any], tuple[PathSegment, ...]]]:
    example = '[{"path": "code", "old_string": "...", "new_string": "..."}]'
    if isinstance(patch, dict):
        raise PatchError(f"patch must be a list of entries: wrap the entry in a list, {example}")
    if isinstance(patch, str):
        raise PatchError(
            f"patch must be a list of entries like {example}, not a string; send the list itself"
        )
    if not isinstance(patch, list):
        raise PatchError(f"patch must be a list of entries like {example}, got {_kind(patch)}")
    if not patch:
        raise PatchError(f"patch is empty: give at least one entry, e.g. {example}")
    return [_check_entry(number, entry) for number, entry in enumerate(patch)]


def _check_entry(number: int, entry: object) -> tuple[dict[str, Any], tuple[PathSegment, ...]]:
    name = f"patch[{number}]"
    if not isinstance(entry, dict):
        raise PatchError(f'{name} must be an object with a "path", got {_kind(entry)}')
    unknown = sorted((key for key in entry if key not in ENTRY_KEYS), key=str)
    if unknown:
        listed = ", ".join(_show(str(key)) for key in unknown)
        noun = "key" if len(unknown) == 1 else "keys"
        raise PatchError(f"{name} has unknown {noun} {listed}; {_ENTRY_FORMS}")
    if "path" not in entry:
        raise PatchError(
            f'{name} has no "path": name the value to change, e.g. "code" or "items[0].name"'
        )
    path = entry["path"]
    if not isinstance(path, str):
        raise PatchError(f'{name}.path must be a string like "items[0].name", got {_kind(path)}')
    try:
        segments = parse_path(path)
    except PatchError as exc:
        raise PatchError(f"{name}: {exc}") from None
    edits_text = "old_string" in entry or "new_string" in entry
    if "value" in entry and edits_text:
        raise PatchError(
            f'{name} mixes "value" with "old_string"/"new_string": send {{path, value}} to '
            "replace the whole value, or {path, old_string, new_string} to edit inside a string"
        )
    if "replace_all" in entry and not edits_text:
        raise PatchError(f'{name}: "replace_all" only goes with "old_string" and "new_string"')
    if edits_text:
        _check_text_fields(name, entry)
    return entry, segments


def _check_text_fields(name: str, entry: dict[str, Any]) -> None:
    for field in ("old_string", "new_string"):
        if field not in entry:
            other = "new_string" if field == "old_string" else "old_string"
            hint = ' (use "" to delete the text)' if field == "new_string" else ""
            raise PatchError(f'{name} has "{other}" but no "{field}"{hint}')
        if not isinstance(entry[field], str):
            raise PatchError(f"{name}.{field} must be a string, got {_kind(entry[field])}")
    if not entry["old_string"]:
        raise PatchError(
            f"{name}.old_string is empty: give the exact text to replace, "
            "with enough context to occur once"
        )
    if "replace_all" in entry and not isinstance(entry["replace_all"], bool):
        raise PatchError(
            f"{name}.replace_all must be true or false, got {_kind(entry['replace_all'])}"
        )


# -- applying -----------------------------------------------------------------


def apply_patch(arguments: dict[str, Any], patch: list[Any]) -> dict[str, Any]:
    """Apply ``patch`` to ``arguments`` and return the patched copy.

    Entries apply in order, each to the result of the previous one. All or
    nothing: on the first entry that cannot apply, :class:`PatchError` says
    which and why, and nothing is returned. Neither ``arguments`` nor ``patch``
    is mutated; the result shares untouched sub-objects with ``arguments``.
    """
    entries = _checked(patch)
    if not isinstance(arguments, dict):
        raise PatchError(
            f"the saved arguments are {_kind(arguments)}, not a JSON object; "
            "a patch applies only to an object"
        )
    result = dict(arguments)
    # Containers this call created, kept alive so their ids stay unique: these may be
    # changed in place, every other container is copied before it is changed.
    owned: dict[int, Any] = {id(result): result}
    for number, (entry, segments) in enumerate(entries):
        _apply_entry(result, number, entry, segments, owned)
    return result


def _apply_entry(
    root: dict[str, Any],
    number: int,
    entry: dict[str, Any],
    segments: tuple[PathSegment, ...],
    owned: dict[int, Any],
) -> None:
    where = f"patch[{number}] (path {_show(entry['path'])})"
    parent: Any = root
    for depth, segment in enumerate(segments[:-1]):
        child = _child(parent, segments, depth, where)
        if isinstance(child, (dict, list)) and id(child) not in owned:
            child = dict(child) if isinstance(child, dict) else list(child)
            owned[id(child)] = child
            parent[segment] = child
        parent = child  # not a container: the next _child says so
    depth, last = len(segments) - 1, segments[-1]
    if "value" in entry:
        if not (isinstance(parent, dict) and isinstance(last, str)):
            _child(parent, segments, depth, where)  # raises unless the index exists
        # A copy, so the result never shares objects with the patch.
        parent[last] = copy.deepcopy(entry["value"])
    elif "old_string" in entry:
        current = _child(parent, segments, depth, where)
        if not isinstance(current, str):
            raise PatchError(
                f"{where}: the value there is {_kind(current)}, not a string; old_string and "
                f"new_string edit text inside a string: to replace it, send "
                f'{{"path": {_show(entry["path"])}, "value": ...}}'
            )
        parent[last] = _replace_text(
            current,
            entry["old_string"],
            entry["new_string"],
            bool(entry.get("replace_all", False)),
            where,
        )
    else:
        _child(parent, segments, depth, where)
        del parent[last]


def _child(container: Any, segments: tuple[PathSegment, ...], depth: int, where: str) -> Any:
    """The value ``segments[depth]`` names inside ``container``, or a PatchError saying why not."""
    segment = segments[depth]
    parent_path = segments[:depth]
    owner = _show(format_path(parent_path)) if parent_path else "the arguments object"
    if isinstance(container, dict):
        if isinstance(segment, str) and segment in container:
            return container[segment]
        if isinstance(segment, int):
            hint = ""
            if str(segment) in container:
                as_key = _show(format_path((*parent_path, str(segment))))
                hint = f'; for its key "{segment}" write {as_key}'
            raise PatchError(
                f"{where}: {owner} is an object, not an array, so it has no "
                f"index [{segment}]{hint}; {_keys_text(container, None)}"
            )
        raise PatchError(
            f"{where} not found: {owner} has no key {_show(segment)}; "
            f"{_keys_text(container, segment)}"
        )
    if isinstance(container, list):
        if isinstance(segment, int) and segment < len(container):
            return container[segment]
        if isinstance(segment, str):
            raise PatchError(
                f"{where}: {owner} is an array of {_plural(len(container), 'item')}, not an "
                f"object, so it has no key {_show(segment)}; use an index, e.g. "
                f"{_show(format_path((*parent_path, 0)))}"
            )
        if not container:
            raise PatchError(
                f"{where} not found: {owner} is an empty array, so [{segment}] is out of range"
            )
        raise PatchError(
            f"{where} not found: {owner} has {_plural(len(container), 'item')}, so "
            f"[{segment}] is out of range (indexes 0 to {len(container) - 1})"
        )
    hint = ""
    if isinstance(container, str):
        hint = (
            f'; to edit text inside it, send {{"path": {_show(format_path(parent_path))}, '
            '"old_string": ..., "new_string": ...}'
        )
    raise PatchError(
        f"{where}: {owner} is {_kind(container)}, so it has no {_describe(segment)}{hint}"
    )


def _keys_text(container: dict[Any, Any], wanted: str | None) -> str:
    if not container:
        return "it is an empty object"
    keys = sorted((str(key) for key in container), key=str)
    shown = ", ".join(_show(key) for key in keys[:MAX_LISTED_KEYS])
    more = f", and {len(keys) - MAX_LISTED_KEYS} more" if len(keys) > MAX_LISTED_KEYS else ""
    text = f"the keys there are {shown}{more}"
    if wanted is not None:
        close = difflib.get_close_matches(wanted, keys, n=1)
        if close:
            text += f" (did you mean {_show(close[0])}?)"
    return text


# -- text edits ----------------------------------------------------------------


def _replace_text(text: str, old: str, new: str, replace_all: bool, where: str) -> str:
    """Replace ``old`` by ``new`` in ``text``; see the module docstring for the exact rule."""
    tried = 0
    for form_old, form_new in itertools.chain([(old, new)], _escaped_forms(text, old, new)):
        tried += 1
        count = text.count(form_old) if replace_all else _count_overlapping(text, form_old)
        if count > 1 and not replace_all:
            raise PatchError(
                f"{where}: old_string occurs {count} times; add surrounding text so it occurs "
                'exactly once, or set "replace_all": true to replace every occurrence'
            )
        if count:
            return text.replace(form_old, form_new)
    also = ", nor in its JSON-escaped form" if tried > 1 else ""
    raise PatchError(
        f"{where}: old_string occurs 0 times in the string there{also}; copy it exactly from "
        f"the current text, whitespace included{_escape_hint(text, old)}"
    )


def _escaped_forms(text: str, old: str, new: str) -> Iterator[tuple[str, str]]:
    """``old`` and ``new`` as they look inside the JSON strings of ``text``, if it holds JSON.

    Lazy: the caller asks only when the literal form did not occur, so ``text`` is
    parsed only then. Both escaping styles are tried (``ensure_ascii`` off, then on).
    """
    if not _holds_json(text):
        return
    seen = {old}
    for ascii_only in (False, True):
        escaped = _json_escape(old, ascii_only)
        if escaped not in seen:
            seen.add(escaped)
            yield escaped, _json_escape(new, ascii_only)


def _count_overlapping(text: str, sub: str) -> int:
    # Overlapping matches count: "aa" in "aaa" is ambiguous, not unique.
    count, start = 0, text.find(sub)
    while start != -1:
        count += 1
        start = text.find(sub, start + 1)
    return count


def _holds_json(text: str) -> bool:
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return False
    try:
        return isinstance(json.loads(text), (dict, list))
    except (ValueError, RecursionError):
        return False


def _json_escape(text: str, ascii_only: bool) -> str:
    return json.dumps(text, ensure_ascii=ascii_only)[1:-1]


def _escape_hint(text: str, old: str) -> str:
    """A hint when old_string was written with JSON escapes that the decoded text lacks."""
    if "\\" not in old:
        return ""
    try:
        decoded = json.loads(f'"{old}"')
    except ValueError:
        return ""
    if decoded != old and decoded in text:
        return (
            '; old_string holds JSON escapes such as \\n or \\", but it is matched '
            "against the decoded text: write the characters themselves"
        )
    return ""


# -- message pieces -------------------------------------------------------------


def _kind(value: object) -> str:
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


def _describe(segment: PathSegment) -> str:
    return f"index [{segment}]" if isinstance(segment, int) else f"key {_show(segment)}"


def _show(text: str) -> str:
    """``text`` as a JSON string, clipped so one long key cannot flood a message."""
    return json.dumps(_clip(text), ensure_ascii=False)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
