"""The words the model reads: the failure notice and the static prompt section.

Both are plain text with no ANSI codes. The notice is short (about 40 tokens)
because it is paid on every failure; the prompt section is byte-identical for a
session so it never breaks a prompt cache.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

#: Below this many bytes of arguments a failure gets no notice. The evaluation's
#: break-even (``ptc-retry eval``, docs/eval.md): a replay line (~50 tokens) plus the
#: notice (~100) cost less than re-sending a program from about 450 bytes on, 550
#: when a quarter of the noticed failures need a rewrite anyway.
NOTICE_MIN_BYTES = 500

CODE_PROMPT = """\
Every program you run is saved as JSON {{"code": ...}} in {session_dir}/by-id/<id>.json \
(previous/1.json: your last program; history.jsonl: all calls). When a program fails you are \
told its id. For a small correction do not re-send the program; send only:
await ptc_retry.replay("<id>", "<old text>", "<new text>")
It replaces the old text (exactly one match) and runs the corrected program again. Several \
fixes: edits=[("<old>", "<new>"), ...]. Only for a small correction; otherwise write a fresh \
program. Without the helper: read the file, json.loads it, replace in "code", run it as an \
async function.
"""


# Native mode (ptc_retry.native). Filled with str.replace, not str.format, so the JSON
# examples need no doubled braces. Each example line is a valid patch.
NATIVE_PROMPT = """\
Your tool calls are saved in {session_dir}: by-id/<id>.json, previous/1.json (your last \
message's first call), history.jsonl. To fix a failed call, do not re-send it: call \
editPreviousToolCalling with call_id or previous_ordinal and a patch (list of entries); the \
tool runs again, patched. Entries for a typo, a stale value, a wrong type:
{"path": "text", "old_string": "teh", "new_string": "the"}
{"path": "query.since", "old_string": "2023", "new_string": "2024"}
{"path": "port", "value": 80}
Only for a small correction; otherwise call the tool again with fresh arguments.
"""


def failure_notice(
    call_id: str,
    checkpoint: str | Path,
    *,
    completed: int = 0,
    time_limit: float | None = None,
    repeated: int = 0,
    paused: bool = False,
) -> str:
    """The one line appended to a failed program's traceback.

    It names the checkpoint's path and the one-line helper call with its id; it
    never repeats the error, and it does not say "call id", because some agent
    frameworks print a ``Call id: call_N`` of their own. A few words more only
    when they apply: ``completed`` statements that ``resume=True`` would skip, the
    ``time_limit`` that stopped the program, and the guard's sentence when this
    failure is the ``repeated``-th identical one in a row (see :func:`guard_sentence`).
    """
    stopped = f"Stopped by the time limit ({time_limit:g} s). " if time_limit else ""
    resume = ""
    if completed > 0:
        statements = "statement" if completed == 1 else "statements"
        resume = f"; add resume=True to skip the {completed} {statements} that completed"
    notice = (
        f"[ptc-retry] {stopped}Saved as {checkpoint}. Small fix? Send only: "
        f'await ptc_retry.replay("{call_id}", "<old>", "<new>"){resume}'
    )
    if repeated:
        notice += f". {guard_sentence(repeated, paused=paused)}"
    return notice


_NOTICE = re.compile(
    r"\[ptc-retry\] (?:.*? )?Saved as (?P<path>.+?\.json)\. Small fix\? Send only: "
    r'await ptc_retry\.replay\("(?P<id>(?:[^"\\]|\\.)*)"'
)


def parse_notice(text: str) -> tuple[str, str] | None:
    """``(call_id, checkpoint path)`` of a failure notice found in ``text``, or None.

    For clients that see only the traceback (a kernel that sends no reply metadata).
    """
    match = _NOTICE.search(text)
    return (match.group("id"), match.group("path")) if match else None


def short_failure_notice(
    *, time_limit: float | None = None, repeated: int = 0, paused: bool = False
) -> str | None:
    """The notice of a program below ``notice_min_bytes``: only what it must not miss.

    None when there is nothing to say: the time limit that stopped it and the
    guard's sentence are said even for a one-line program.
    """
    parts = []
    if time_limit:
        parts.append(f"Stopped by the time limit ({time_limit:g} s).")
    if repeated:
        parts.append(guard_sentence(repeated, paused=paused))
    return f"[ptc-retry] {' '.join(parts)}" if parts else None


def guard_sentence(repeated: int, *, paused: bool = False) -> str:
    """The repeated-failure guard's sentence, said once per streak."""
    if paused:
        return (
            f"{repeated} identical failures in a row: programs are paused until the "
            "user's next instruction; tell the user what fails."
        )
    return f"{repeated} identical failures in a row: change the program, do not repeat it."


def native_failure_notice(call_id: str, *, field: str = "<field>") -> str:
    """The one sentence appended to a failed direct tool call's result (native mode).

    It says the arguments are saved, names the call id and shows the one
    ``editPreviousToolCalling`` call that fixes it, in about 50 tokens; it never repeats
    the error. No path: a tool-calling model addresses saved calls by id, and the prompt
    section already names the directory. ``field`` is the example's patch path: the
    caller's best guess of the value to fix.
    """
    patch = [{"path": field, "old_string": "<old>", "new_string": "<new>"}]
    example = json.dumps({"call_id": call_id, "patch": patch}, ensure_ascii=False)
    return (
        f'[ptc-retry] Arguments saved as "{call_id}". '
        f"Small fix? Don't re-send; call editPreviousToolCalling({example})"
    )


def prompt_section(mode: str = "code", session_dir: str | Path | None = None) -> str:
    """The system-prompt section that teaches the model to replay instead of re-send.

    ``mode="code"`` teaches the ``ptc_retry.replay`` helper, ``mode="native"`` the
    ``editPreviousToolCalling`` tool (``ptc_retry.native``).
    ``session_dir`` is the directory the kernel saves this session's programs in
    (``CheckpointStore.session_dir``); without it the text names the default
    location pattern. The result depends only on its arguments.
    """
    if mode not in ("code", "native"):
        raise ValueError(f"prompt_section: unknown mode {mode!r}; use mode='code' or mode='native'")
    where = str(session_dir) if session_dir is not None else "<checkpoint root>/<session>"
    if mode == "native":
        return NATIVE_PROMPT.replace("{session_dir}", where)
    return CODE_PROMPT.format(session_dir=where)
