"""The words the model reads: the failure notice and the static prompt section.

Both are plain text with no ANSI codes. The notice is short (about 40 tokens)
because it is paid on every failure; the prompt section is byte-identical for a
session so it never breaks a prompt cache.
"""

from __future__ import annotations

from pathlib import Path

CODE_PROMPT = """\
Saved programs (ptc-retry): every program you run is saved as JSON {{"code": ...}} in \
{session_dir}/by-id/<id>.json; previous/1.json is your previous program and history.jsonl \
lists every call. When a program fails you are told its checkpoint id. For a small \
correction do not re-send the program; send only:
await ptc_retry.replay("<id>", "<old text>", "<new text>")
It replaces the old text (which must occur exactly once) and runs the corrected program again \
in this kernel. Several fixes: edits=[("<old>", "<new>"), ...]. Use it only for a small \
correction; otherwise write a fresh program. Without the helper: read the file, json.loads \
it, replace the text in its "code", and run that as an async function.
"""


def failure_notice(call_id: str, checkpoint: str | Path) -> str:
    """The one sentence appended to a failed program's traceback.

    It names the checkpoint id, its path and the one-line helper call; it never
    repeats the error. "Checkpoint" rather than "call id", because some agent
    frameworks print a ``Call id: call_N`` of their own.
    """
    return (
        f'[ptc-retry] Program saved as checkpoint "{call_id}" ({checkpoint}). '
        f"Small fix? Send only: "
        f'await ptc_retry.replay("{call_id}", "<old text>", "<new text>")'
    )


def prompt_section(mode: str = "code", session_dir: str | Path | None = None) -> str:
    """The system-prompt section that teaches the model to replay instead of re-send.

    ``session_dir`` is the directory the kernel saves this session's programs in
    (``CheckpointStore.session_dir``); without it the text names the default
    location pattern. The result depends only on its arguments.
    """
    if mode != "code":
        raise ValueError(f"prompt_section: unknown mode {mode!r}; use mode='code'")
    where = str(session_dir) if session_dir is not None else "<checkpoint root>/<session>"
    return CODE_PROMPT.format(session_dir=where)
