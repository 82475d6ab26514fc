"""Native-mode patches: the engine behind ``editPreviousToolCalling``.

In native mode every tool call's raw JSON arguments are saved; to fix a failed call the model
sends a ``patch``, which this module checks and applies (see :func:`apply_patch`). It knows
nothing of the store, IPython or Jupyter; the path grammar is :mod:`.patch_path`'s.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
from collections.abc import Iterator
from typing import Any

from .errors import PatchError
from .patch_path import PathSegment, format_path, json_kind, parse_path, show

__all__ = ["PathSegment", "apply_patch", "format_path", "parse_path", "validate_patch"]

ENTRY_KEYS = frozenset({"path", "value", "old_string", "new_string", "replace_all"})
MAX_LISTED_KEYS = 20

_ENTRY_FORMS = (
    "an entry is {path, value} to replace a value, {path, old_string, new_string} "
    "(optionally replace_all) to edit text inside a string, or {path} alone to delete"
)


# -- patch shape --------------------------------------------------------------


def validate_patch(patch: object) -> list[dict[str, Any]]:
    """Check the shape of ``patch`` without looking at any arguments; return its entries.

    ``patch`` must be a non-empty list of entries, each a dict of one of the
    three kinds ``apply_patch`` lists, with a ``path`` that parses. Returns a
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
        raise PatchError(f"patch must be a list of entries like {example}, got {json_kind(patch)}")
    if not patch:
        raise PatchError(f"patch is empty: give at least one entry, e.g. {example}")
    return [_check_entry(number, entry) for number, entry in enumerate(patch)]


def _check_entry(number: int, entry: object) -> tuple[dict[str, Any], tuple[PathSegment, ...]]:
    name = f"patch[{number}]"
    if not isinstance(entry, dict):
        raise PatchError(f'{name} must be an object with a "path", got {json_kind(entry)}')
    unknown = sorted((key for key in entry if key not in ENTRY_KEYS), key=str)
    if unknown:
        listed = ", ".join(show(str(key)) for key in unknown)
        noun = "key" if len(unknown) == 1 else "keys"
        raise PatchError(f"{name} has unknown {noun} {listed}; {_ENTRY_FORMS}")
    if "path" not in entry:
        raise PatchError(
            f'{name} has no "path": name the value to change, e.g. "code" or "items[0].name"'
        )
    path = entry["path"]
    if not isinstance(path, str):
        raise PatchError(
            f'{name}.path must be a string like "items[0].name", got {json_kind(path)}'
        )
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
            raise PatchError(f"{name}.{field} must be a string, got {json_kind(entry[field])}")
    if not entry["old_string"]:
        raise PatchError(
            f"{name}.old_string is empty: give the exact text to replace, "
            "with enough context to occur once"
        )
    if "replace_all" in entry and not isinstance(entry["replace_all"], bool):
        raise PatchError(
            f"{name}.replace_all must be true or false, got {json_kind(entry['replace_all'])}"
        )


# -- applying -----------------------------------------------------------------


def apply_patch(arguments: dict[str, Any], patch: list[Any]) -> dict[str, Any]:
    """Apply ``patch`` to ``arguments`` and return the patched copy.

    ``patch`` is a non-empty list of entries, each a path (see :func:`parse_path`) and
    what to do there:

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

    Entries apply in order, each to the result of the previous one. All or
    nothing: on the first entry that cannot apply, :class:`PatchError` says
    which and why, with a short message meant for the model (what was wrong and
    what to send instead), and nothing is returned. Neither ``arguments`` nor
    ``patch`` is mutated; the result is a new object that shares the sub-objects
    no entry touched with ``arguments`` (deep-copy it before mutating it in place).
    """
    entries = _checked(patch)
    if not isinstance(arguments, dict):
        raise PatchError(
            f"the saved arguments are {json_kind(arguments)}, not a JSON object; "
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
    where = f"patch[{number}] (path {show(entry['path'])})"
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
                f"{where}: the value there is {json_kind(current)}, not a string; old_string and "
                f"new_string edit text inside a string: to replace it, send "
                f'{{"path": {show(entry["path"])}, "value": ...}}'
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
    owner = show(format_path(parent_path)) if parent_path else "the arguments object"
    if isinstance(container, dict):
        if isinstance(segment, str) and segment in container:
            return container[segment]
        if isinstance(segment, int):
            hint = ""
            if str(segment) in container:
                as_key = show(format_path((*parent_path, str(segment))))
                hint = f'; for its key "{segment}" write {as_key}'
            raise PatchError(
                f"{where}: {owner} is an object, not an array, so it has no "
                f"index [{segment}]{hint}; {_keys_text(container, None)}"
            )
        raise PatchError(
            f"{where} not found: {owner} has no key {show(segment)}; "
            f"{_keys_text(container, segment)}"
        )
    if isinstance(container, list):
        if isinstance(segment, int) and segment < len(container):
            return container[segment]
        if isinstance(segment, str):
            raise PatchError(
                f"{where}: {owner} is an array of {_plural(len(container), 'item')}, not an "
                f"object, so it has no key {show(segment)}; use an index, e.g. "
                f"{show(format_path((*parent_path, 0)))}"
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
            f'; to edit text inside it, send {{"path": {show(format_path(parent_path))}, '
            '"old_string": ..., "new_string": ...}'
        )
    raise PatchError(
        f"{where}: {owner} is {json_kind(container)}, so it has no {_describe(segment)}{hint}"
    )


def _keys_text(container: dict[Any, Any], wanted: str | None) -> str:
    if not container:
        return "it is an empty object"
    keys = sorted((str(key) for key in container), key=str)
    shown = ", ".join(show(key) for key in keys[:MAX_LISTED_KEYS])
    more = f", and {len(keys) - MAX_LISTED_KEYS} more" if len(keys) > MAX_LISTED_KEYS else ""
    text = f"the keys there are {shown}{more}"
    if wanted is not None:
        close = difflib.get_close_matches(wanted, keys, n=1)
        if close:
            text += f" (did you mean {show(close[0])}?)"
    return text


# -- text edits ----------------------------------------------------------------


def _replace_text(text: str, old: str, new: str, replace_all: bool, where: str) -> str:
    """Replace ``old`` by ``new`` in ``text``; see ``apply_patch`` for the exact rule."""
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


def _describe(segment: PathSegment) -> str:
    return f"index [{segment}]" if isinstance(segment, int) else f"key {show(segment)}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
