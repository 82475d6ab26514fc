"""Direct tool calls cut off mid-stream: what the journal keeps of one, and what the model reads.

``NativeTools.call_partial`` journals a call whose arguments stopped inside a string value;
an ``editPreviousToolCalling`` call with ``append`` completes it (see :mod:`.edit`).
"""

from __future__ import annotations

import json
from typing import Any

from ..core.notice import PREFIX, last_line, quoted_end
from ..core.partial import CutArguments
from .definitions import EDIT_TOOL

__all__ = ["CUT_NO_TARGET", "CUT_OUTSIDE_STRING", "partial_arguments", "partial_notice"]

#: What a call cut off outside any string value is told: there is nothing to go on from.
CUT_OUTSIDE_STRING = (
    f"{PREFIX}The call was cut off outside a string value, so it cannot be continued; "
    "nothing was saved or run. Send the whole call again."
)


#: What an edit call cut off before its call_id (or previous_ordinal) arrived whole is told.
CUT_NO_TARGET = (
    f"{PREFIX}The {EDIT_TOOL} call was cut off before it said which call it edits; nothing "
    "was saved or run. Send it again in full."
)


def partial_arguments(cut: CutArguments) -> dict[str, Any]:
    """The object a cut-off call's checkpoint holds: the values that arrived whole, then the
    string value it stopped in (``cut.open_key``) with what it holds so far, last."""
    assert cut.open_key is not None
    arguments = {key: value for key, value in cut.values.items() if key != cut.open_key}
    arguments[cut.open_key] = cut.open_prefix
    return arguments


def partial_notice(call_id: str, key: str, prefix: str) -> str:
    """What a call cut off inside the string value of ``key`` is told: where it stopped (the
    end of the last line of ``prefix``, quoted) and the call that sends only the rest."""
    example = json.dumps({"call_id": call_id, "append": "<rest>"}, ensure_ascii=False)
    return (
        f"{PREFIX}Saved; cut off {_where(json.dumps(key, ensure_ascii=False), prefix)}. "
        f"Send only the rest: {EDIT_TOOL}({example})"
    )


def _where(key: str, prefix: str) -> str:
    """``in "text" after 'the end of its last line'``, or ``at the start of "text"``."""
    last = last_line(prefix)
    return f"in {key} after {quoted_end(last)}" if last else f"at the start of {key}"
