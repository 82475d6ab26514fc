"""Direct tool calls cut off mid-stream: what the journal keeps of one, and what the model reads.

``NativeTools.call_partial`` journals a call whose arguments stopped inside a string value
(an ``editPreviousToolCalling`` call with ``append`` completes it, see :mod:`.edit`), or
after some of its arguments arrived whole (a patch of ``value`` entries adds the rest).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core import sentences as said
from ..core.notice import last_line, quoted_end
from ..core.partial import CutArguments, CutPlace
from .definitions import EDIT_TOOL

__all__ = [
    "CUT_NO_TARGET",
    "completion_lacking",
    "patch_paths",
    "cut_saved_notice",
    "cut_unsaved_notice",
    "missing_arguments",
    "partial_arguments",
    "partial_notice",
    "where_cut",
]


#: What an edit call cut off before its call_id (or previous_ordinal) arrived whole is told.
CUT_NO_TARGET = said.NATIVE_CUT_NO_TARGET.render()


def partial_arguments(cut: CutArguments) -> dict[str, Any]:
    """The object a cut-off call's checkpoint holds: the values that arrived whole, then the
    string value it stopped in (``cut.open_key``), if any, with what it holds so far, last."""
    arguments = {key: value for key, value in cut.values.items() if key != cut.open_key}
    if cut.open_key is not None:
        arguments[cut.open_key] = cut.open_prefix
    return arguments


def where_cut(cut: CutArguments) -> str:
    """Where a call was cut off, in a few words, when no ``append`` can go on from there:
    ``in "tags"``, ``in a string inside "tags"``, ``after "path"``..."""
    key = json.dumps(cut.cut_key, ensure_ascii=False)
    after = f" after {json.dumps(list(cut.values)[-1], ensure_ascii=False)}" if cut.values else ""
    if cut.place in (CutPlace.VALUE, CutPlace.STRING):
        return f"in {key}"
    if cut.place is CutPlace.NESTED_STRING:
        return f"in a string inside {key}"
    if cut.place is CutPlace.KEY:
        return f"inside a key's name{after}"
    if cut.place is CutPlace.BETWEEN:
        return after.lstrip() or "before its first argument"
    return "before its arguments object began"


def cut_unsaved_notice(cut: CutArguments) -> str:
    """What a call cut off where nothing of it can be kept is told (before any argument
    arrived whole, or an edit call outside a string value)."""
    return said.NATIVE_CUT_UNSAVED.render(where=where_cut(cut))


def cut_saved_notice(call_id: str, cut: CutArguments, missing: Sequence[str]) -> str:
    """What a call cut off after some of its arguments arrived whole, and before others
    (``missing``: their names, when known), is told: where it stopped, and the edit call
    that adds what is missing (a ``value`` entry each) and runs it."""
    names = ", ".join(json.dumps(name, ensure_ascii=False) for name in missing)
    # An entry for each: a model fills in the call it is shown, and one that lacked a value
    # would be refused and shown another that lacks the first.
    patch = [{"path": name, "value": "<value>"} for name in missing or ["<key>"]]
    example = json.dumps({"call_id": call_id, "patch": patch}, ensure_ascii=False)
    what = names or "the rest"
    return said.NATIVE_CUT_SAVED.render(where=where_cut(cut), what=what, example=example)


def partial_notice(call_id: str, key: str, prefix: str, missing: Sequence[str] = ()) -> str:
    """What a call cut off inside the string value of ``key`` is told: where it stopped (the
    end of the last line of ``prefix``, quoted) and the call that sends only the rest, with
    a ``value`` entry for each argument the tool takes that never arrived (``missing``)."""
    edit: dict[str, Any] = {"call_id": call_id, "append": "<rest>"}
    what = "the rest"
    if missing:
        edit["patch"] = [{"path": name, "value": "<value>"} for name in missing]
        what += ", and " + ", ".join(json.dumps(name, ensure_ascii=False) for name in missing)
    example = json.dumps(edit, ensure_ascii=False)
    where = _where(json.dumps(key, ensure_ascii=False), prefix)
    return said.NATIVE_CUT_SAVED.render(where=where, what=what, example=example)


def _where(key: str, prefix: str) -> str:
    """``in "text" after 'the end of its last line'``, or ``at the start of "text"``."""
    last = last_line(prefix)
    return f"in {key} after {quoted_end(last)}" if last else f"at the start of {key}"


def completion_lacking(
    target: str, tool: str, lacking: list[str], appended: bool, sent: Sequence[str] = ()
) -> str:
    """What a completion that would run ``tool`` without arguments it takes is told: the
    edit to send instead, with the rest again (``appended``) and a value for each of the
    paths its patch ``sent`` (nothing of it was kept) and of those ``lacking``."""
    names = ", ".join(json.dumps(name, ensure_ascii=False) for name in lacking)
    edit: dict[str, Any] = {"call_id": target}
    if appended:
        edit["append"] = "<rest>"
    paths = [*dict.fromkeys(path for path in sent if path not in lacking), *lacking]
    edit["patch"] = [{"path": name, "value": "<value>"} for name in paths]
    example = json.dumps(edit, ensure_ascii=False)
    return (
        f"{EDIT_TOOL} failed, nothing ran, {target} ({tool}) is unchanged: completed so, it "
        f"would run without {names}. Send {'the rest and ' if appended else ''}"
        f"{'its value' if len(paths) == 1 else 'their values'} in one call: "
        f"{EDIT_TOOL}({example})"
    )


def patch_paths(raw: str) -> list[str]:
    """The paths of the patch entries of the edit call ``raw`` (JSON arguments)."""
    try:
        patch = json.loads(raw).get("patch")
    except (ValueError, AttributeError):
        return []
    entries = patch if isinstance(patch, list) else []
    return [e["path"] for e in entries if isinstance(e, dict) and isinstance(e.get("path"), str)]


def missing_arguments(cut: CutArguments, declared: list[str], closed: bool) -> list[str]:
    """The arguments a cut-off call still needs, as far as they are known: the one the cut
    fell in, then the others its tool declares that did not arrive whole."""
    key = cut.cut_key
    # A key a closed schema does not declare is not missing; an open one may take it.
    missing = [key] if key is not None and (not closed or key in declared) else []
    return missing + [name for name in declared if name not in cut.values and name != key]
