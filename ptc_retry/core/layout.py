"""The session directory's layout: its file names, the names calls get, references
(``#n``), and what a history line may hold. One home for these facts; the store
writes by them and every reader (CLI, backend, native journal) reads by them.

    <root>/<session>/
    ├── history.jsonl              one JSON object a line, appended, never rewritten
    ├── by-id/<sanitize(id)>.json  the only real copy of each call's arguments
    ├── previous/<n>.json          the calls of the latest step (links into by-id/)
    ├── calls/<n>.json             session number n (link into by-id/), once a notice names it
    └── .owner                     which kernel session this directory belongs to
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from .errors import CheckpointError

HISTORY = "history.jsonl"
BY_ID = "by-id"
PREVIOUS = "previous"
CALLS = "calls"
OWNER = ".owner"

#: The statuses a history line may have.
STATUSES = frozenset({"ok", "error", "interrupted", "unfinished", "refused"})
_LINE_KEYS = frozenset(
    "id n tool turn step ordinal status time duration bytes code_bytes replay_of sent_id".split()
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,119}")  # exactly the fixed points of sanitize
_AUTO_ID = re.compile(r"c([0-9]+)")
_PREVIOUS_NAME = re.compile(r"([0-9]+)\.json")
_REFERENCE = re.compile(r"#([0-9]+)")
_MAX_ID = 120
_DIGEST = 8  # hex digits of the hash that keeps a changed name apart from every other
_MAX_NUMBER = 2**31 - 1  # a larger session number in a history line is damage, not a call


def checkpoint_path(session_dir: str | os.PathLike[str], call_id: str) -> Path:
    """Where the checkpoint of ``call_id`` lives in ``session_dir``."""
    return Path(session_dir) / BY_ID / f"{sanitize(call_id)}.json"


def history_path(session_dir: str | os.PathLike[str]) -> Path:
    """The history file of ``session_dir``."""
    return Path(session_dir) / HISTORY


def sanitize(call_id: str) -> str:
    """Return the file-name stem used for ``call_id`` (a call id or a session name).

    A name that is already safe is kept as it is: only ``[A-Za-z0-9._-]``, not empty, not
    starting with ``.`` (so never ``.``, ``..``, hidden or a temp name), at most 120
    characters. Any other name is changed (each other character becomes ``_``, a leading
    ``_`` is added where needed, a long name is cut) and gets ``-`` and 8 hex digits of a hash
    of the whole name, so that two different names never share a file: ``"ü"`` and ``"é"``
    do not both become ``_``. ``sanitize(sanitize(x)) == sanitize(x)``.
    """
    if _NAME.fullmatch(call_id):
        return call_id
    safe = _UNSAFE.sub("_", call_id)
    if not safe or safe.startswith("."):
        safe = "_" + safe
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST]
    return f"{safe[: _MAX_ID - _DIGEST - 1]}-{digest}"


def is_name(name: object) -> bool:
    """True when ``name`` is a name the store could have given (a fixed point of sanitize)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def numbered(name: str, n: int) -> str:
    """``<name>.<n>``, cut to stay at most 120 characters: still a fixed point of sanitize."""
    return f"{name[: _MAX_ID - len(str(n)) - 1]}.{n}"


def reference(n: int) -> str:
    """The short reference of program number ``n`` of a session: ``"#7"``."""
    return f"#{n}"


def reference_number(ref: str) -> int:
    """The number n of a reference ``"#n"``; CheckpointError when ``ref`` is not one."""
    match = _REFERENCE.fullmatch(ref)
    if match is None:
        raise CheckpointError(
            f'{ref!r} is not a reference: write "#" and the program\'s number, like "#7", '
            "or give the call id."
        )
    return int(match.group(1))


def is_reference(target: object) -> bool:
    """True when ``target`` is written like a short reference (``"#7"``)."""
    return isinstance(target, str) and target.startswith("#")


def is_number(n: object) -> bool:
    """True when ``n`` can be a session number (an int from 1 up; larger ones are damage)."""
    return isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= _MAX_NUMBER


def unfinished_line(call_id: str, st: os.stat_result, n: int | None = None) -> dict[str, Any]:
    """The history line of a call saved as ``st`` that never finished (its process died)."""
    line: dict[str, Any] = {"id": call_id, "n": n, "tool": None, "turn": None, "step": None}
    line.update(ordinal=None, status="unfinished", time=st.st_mtime, duration=None)
    line["bytes"] = st.st_size
    return line
