"""``editPreviousToolCalling``: check an edit call, find the call it names, apply its patch,
or complete a call that was cut off mid-stream with its ``append``.

Nothing here runs a tool; :class:`~ptc_retry.native.tools.NativeTools` runs what
:func:`prepare_edit` returns. Every refusal is a ``PatchError`` or ``CheckpointError``
whose message tells the model what to send instead.
"""

from __future__ import annotations

import json
from collections.abc import Collection, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import AmbiguousReferenceError, CheckpointError, PatchError
from ..core.patch import apply_patch, validate_patch
from ..core.patch_path import json_kind
from .definitions import EDIT_TOOL
from .journal import ToolJournal

__all__ = ["Edit", "decode_arguments", "prepare_edit"]

_LOCATORS = ("previous_ordinal", "call_id")


@dataclass(frozen=True)
class Edit:
    """An edit that applies: re-run ``tool`` with ``arguments`` (``target``'s, completed and
    patched)."""

    target: str  # the id of the call it re-runs
    tool: str
    arguments: dict[str, Any]
    entries: int  # how many patch entries it applied
    completes: bool = False  # it appended the rest of ``target``, a call that was cut off


def decode_arguments(raw: str) -> dict[str, Any]:
    """The JSON object ``raw`` holds; ``""`` is ``{}``. ValueError says what is wrong."""
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"are not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"are a JSON {type(decoded).__name__}, not an object; send an object")
    return decoded


def prepare_edit(
    raw: str,
    journal: ToolJournal,
    tools: Collection[str],
    aims: MutableMapping[str, str],
    own_id: str | None,
) -> Edit:
    """Check the edit call ``own_id`` (arguments ``raw``) and apply its ``append`` and patch.

    ``tools``: the names of the tools that can re-run. ``aims`` records, by edit call id,
    the call each edit named, so a refusal can point back at it. ``append`` goes at the end
    of the string value a cut-off call stopped in (``journal.open_key``), exactly as
    written; then the patch entries apply. A cut-off ``editPreviousToolCalling`` call,
    once completed, is the edit that runs: the result is what it names, re-run.
    """
    try:
        arguments = decode_arguments(raw)
    except ValueError as exc:
        raise PatchError(f"the arguments {exc}") from None
    return _prepare(arguments, journal, tools, aims, own_id, ())


def _prepare(
    arguments: dict[str, Any],
    journal: ToolJournal,
    tools: Collection[str],
    aims: MutableMapping[str, str],
    own_id: str | None,
    chain: tuple[str, ...],
) -> Edit:
    """``prepare_edit`` of decoded ``arguments``; ``chain``: the cut-off edit calls being
    completed around this one, outermost first."""
    unknown = sorted(key for key in arguments if key not in (*_LOCATORS, "patch", "append"))
    if unknown:
        raise PatchError(
            f"unknown argument {', '.join(map(repr, unknown))}; {EDIT_TOOL} takes "
            "call_id or previous_ordinal, and patch or append"
        )
    # A null locator counts as absent: some clients send every optional field as null.
    given = [key for key in _LOCATORS if arguments.get(key) is not None]
    if len(given) != 1:
        which = "not both" if given else "one is missing"
        raise PatchError(
            'give exactly one of "call_id" (e.g. "call_3") and "previous_ordinal" '
            f"(1 = the first call of your previous message), {which}"
        )
    append = arguments.get("append")
    if arguments.get("patch") is None and append is None:
        raise PatchError(
            '"patch" is missing: give a list of entries, e.g. '
            '[{"path": "content", "old_string": "...", "new_string": "..."}]; to complete a '
            'call that was cut off, give "append": the rest of it'
        )
    if append is not None and not isinstance(append, str):
        raise PatchError(
            f'"append" must be a string (the rest of the value the call was cut off in, '
            f"exactly as it goes on), got {json_kind(append)}"
        )
    entries = validate_patch(arguments["patch"]) if arguments.get("patch") is not None else []
    target_id, decoded = _load_target(journal, given[0], arguments[given[0]], own_id)
    if own_id is not None:
        aims[own_id] = target_id
    tool = journal.tool_of(target_id)
    open_key = journal.open_key(target_id)
    # Cut off where no string goes on: the patch's value entries are what completes it.
    adds_the_rest = open_key is None and journal.was_cut_off(target_id)
    if tool == EDIT_TOOL and open_key is None:
        aim = aims.get(target_id)
        fix = f'fix the call it was aimed at (call_id "{aim}")' if aim else "fix its target"
        raise PatchError(
            f"{target_id} is an {EDIT_TOOL} call that did not apply, so nothing of it can "
            f"re-run; {fix} with a new patch"
        )
    if tool is None:
        raise CheckpointError(
            f"cannot tell which tool {target_id} called (no record names it); "
            "call the tool again with fresh arguments"
        )
    if tool not in tools and tool != EDIT_TOOL:
        raise PatchError(
            f"{target_id} was a call of {tool!r}, which is not a tool here "
            f"({', '.join(tools) or 'none'}); call a tool with fresh arguments"
        )
    if append is not None:
        decoded = _completed(target_id, decoded, open_key, append, adds_the_rest)
    if entries:
        decoded = apply_patch(decoded, entries)
    if tool != EDIT_TOOL:
        completes = append is not None or adds_the_rest
        return Edit(target_id, tool, decoded, len(entries), completes=completes)
    # A cut-off edit call, now whole: the edit it holds is what runs.
    if target_id in chain:
        raise PatchError(
            f"{target_id} is already being completed by this chain of cut-off {EDIT_TOOL} "
            "calls; name the call they were aimed at"
        )
    inner = _prepare(decoded, journal, tools, aims, target_id, (*chain, target_id))
    completes = inner.completes or append is not None
    return Edit(inner.target, inner.tool, inner.arguments, inner.entries, completes)


def _completed(
    target_id: str, decoded: dict[str, Any], open_key: str | None, append: str, cut_off: bool
) -> dict[str, Any]:
    """``decoded`` with ``append`` at the end of the string value ``open_key`` names;
    ``cut_off``: the target was cut off, outside any string value."""
    if open_key is None and cut_off:
        raise PatchError(
            f'{target_id} was cut off outside a string value, so "append" has nothing to go '
            'on from; add the arguments that did not arrive with a patch of {"path": ..., '
            '"value": ...} entries instead'
        )
    if open_key is None:
        raise PatchError(
            f'{target_id} was not cut off, so "append" has nothing to go on from; fix it '
            "with a patch (old_string/new_string, or value) instead"
        )
    value = decoded.get(open_key)
    if not isinstance(value, str):
        raise CheckpointError(
            f"the saved arguments of {target_id} hold no string at {open_key!r} to append to "
            f"(they hold {json_kind(value)}); send the whole call again"
        )
    return {**decoded, open_key: value + append}


def _load_target(
    journal: ToolJournal, locator: str, where: object, own_id: str | None
) -> tuple[str, dict[str, Any]]:
    if locator == "previous_ordinal":
        if type(where) is not int or where < 1:
            raise PatchError(
                f"previous_ordinal must be an integer from 1 (1 = the first call of your "
                f"previous message), got {json.dumps(where, default=str)}"
            )
        count = journal.previous_count()
        if where > count:
            made = f"made {count} tool calls (previous_ordinal 1 to {count})"
            if count < 2:
                made = "made 1 tool call (previous_ordinal 1)" if count else "made no tool calls"
            recent = ", ".join(journal.latest_ids(besides=own_id)) or "none"
            raise PatchError(
                f"previous_ordinal {where} is out of range: your previous message {made}; "
                f"or give a call_id (latest: {recent})"
            )
        target: str | int = where
    else:
        if not isinstance(where, str) or not where:
            raise PatchError(
                f'call_id must be a non-empty string like "call_3", '
                f"got {json.dumps(where, default=str)}"
            )
        try:
            journal.store.path_for(where)
        except AmbiguousReferenceError:
            raise  # it lists the calls the id names: the model picks one
        except CheckpointError:
            recent = ", ".join(journal.latest_ids(besides=own_id)) or "none yet"
            raise CheckpointError(
                f"no saved call has the id {where!r}; the latest ids are: {recent}"
            ) from None
        target = where
    target_id, _, decoded = journal.load(target)
    if target_id == own_id:
        raise PatchError(f"{target_id} is this {EDIT_TOOL} call itself; name an earlier call")
    return target_id, decoded
