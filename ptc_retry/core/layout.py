"""The session directory's layout: its paths, the names calls get, references (``#n``) and
what a history line holds and how it is parsed. One home for these facts: the store writes
by them, and every reader (:mod:`.session_files`, the CLI, the backend, the native journal)
reads by them.

    <root>/<session>/
    ├── history.jsonl              one JSON object a line, appended, never rewritten
    ├── by-id/<sanitize(id)>.json  the only real copy of each call's arguments
    ├── by-id/<sanitize(id)>.partial  a cut-off call's arguments as they arrived (the .json
    │                              beside it holds what they decode to)
    ├── previous/<n>.json          the calls of the latest step (links into by-id/)
    ├── calls/<n>.json             session number n (link into by-id/), once a notice names it
    ├── tool-calls/<id>.jsonl      the tool calls a program made, one JSON object a line
    └── .owner                     which kernel session this directory belongs to
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import AmbiguousReferenceError, CheckpointError
from .status import HistoryStatus

HISTORY = "history.jsonl"
BY_ID = "by-id"
PREVIOUS = "previous"
CALLS = "calls"
OWNER = ".owner"
#: Made at a session's first tool call (see :mod:`ptc_retry.kernel.recording`).
TOOL_CALLS = "tool-calls"
#: Beside ``by-id/<id>.json`` of a call cut off mid-stream: its arguments as they arrived.
PARTIAL_SUFFIX = ".partial"
#: In ``previous/`` where the filesystem refuses links: the id of each copy, a line each.
IDS = ".ids"

#: The keys the store writes on every history line (extra keys may not override them).
LINE_KEYS = frozenset(
    "id n tool turn step ordinal status time duration bytes code_bytes replay_of extend_of "
    "sent_id".split()
)
#: How a message about an unusable checkpoint ends: what the model does instead.
RESEND = "send the call again in full instead of replaying it"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,119}")  # exactly the fixed points of sanitize
_AUTO_ID = re.compile(r"c([0-9]+)")
_NUMBERED_ENTRY = re.compile(r"([0-9]+)\.json")
_REFERENCE = re.compile(r"#([0-9]+)")
_DUPLICATE = re.compile(r"(.+)\.([0-9]+)")  # how the store saves an id sent again: <id>.<k>
_MAX_ID = 120
_DIGEST = 8  # hex digits of the hash that keeps a changed name apart from every other
_MAX_NUMBER = 2**31 - 1  # a larger session number in a history line is damage, not a call
#: A number written with more digits is no program's and no step's position; Python refuses
#: to convert one of over 4,300 (sys.get_int_max_str_digits()), so it is never converted.
MAX_DIGITS = 18
_MAX_LINE = 1 << 20  # a longer history line is skipped unread (the store writes < 1 KiB)
_CHUNK = 1 << 20


# -- names and paths ----------------------------------------------------------------------------


def checkpoint_path(session_dir: str | os.PathLike[str], call_id: str) -> Path:
    """Where the checkpoint of ``call_id`` lives in ``session_dir``."""
    return Path(session_dir) / BY_ID / f"{sanitize(call_id)}.json"


def history_path(session_dir: str | os.PathLike[str]) -> Path:
    """The history file of ``session_dir``."""
    return Path(session_dir) / HISTORY


def calls_path(session_dir: str | os.PathLike[str], n: int) -> Path:
    """Where program number ``n`` of ``session_dir`` is linked once a notice names it."""
    return Path(session_dir) / CALLS / f"{n}.json"


def tool_calls_name(call_id: str) -> str:
    """The file in ``tool-calls/`` that records the tool calls of ``call_id``."""
    return f"{sanitize(call_id)}.jsonl"


def previous_count(session_dir: str | os.PathLike[str]) -> int:
    """How many calls ``previous/`` holds (``1.json`` up to the first gap): the calls of the
    step before the latest one."""
    previous = Path(session_dir) / PREVIOUS
    count = 0
    while os.path.lexists(previous / f"{count + 1}.json"):
        count += 1
    return count


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


def auto_id(n: int) -> str:
    """The id a call gets without one: ``c<n>``."""
    return f"c{n}"


def auto_number(call_id: str) -> int | None:
    """The n of an automatic id ``c<n>``, else None."""
    match = _AUTO_ID.fullmatch(call_id)
    return int(match.group(1)) if match else None


def entry_number(name: str) -> int | None:
    """The n of a ``previous/`` or ``calls/`` entry named ``<n>.json``, else None."""
    match = _NUMBERED_ENTRY.fullmatch(name)
    return int(match.group(1)) if match else None


def link_text(call_id: str) -> str:
    """What a ``previous/`` or ``calls/`` symlink to ``by-id/<call_id>.json`` reads."""
    return os.path.join(os.pardir, BY_ID, f"{call_id}.json")


def link_target_id(target: str) -> str | None:
    """The call id a ``previous/`` or ``calls/`` symlink's text names, if it is one of ours.

    Ours read ``../by-id/<id>.json``; any other text (an absolute path, another directory,
    a name the store never gives) is None: such a link is never followed.
    """
    parts = re.split(r"[\\/]", target)
    if len(parts) != 3 or parts[:2] != [os.pardir, BY_ID] or not parts[2].endswith(".json"):
        return None
    call_id = parts[2][: -len(".json")]
    return call_id if is_name(call_id) else None


# -- references ---------------------------------------------------------------------------------


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
    digits = match.group(1)
    # Too long to be a program's: a number no program has, so the refusal names the nearest.
    return int(digits) if len(digits) <= MAX_DIGITS else _MAX_NUMBER + 1


def too_long(n: int) -> bool:
    """True when ``n`` has more than ``MAX_DIGITS`` digits: no position, and a message must
    not write it out (Python refuses past 4,300 digits)."""
    return abs(n) >= 10**MAX_DIGITS


def is_reference(target: object) -> bool:
    """True when ``target`` is written like a short reference (``"#7"``)."""
    return isinstance(target, str) and target.startswith("#")


def is_number(n: object) -> bool:
    """True when ``n`` can be a session number (an int from 1 up; larger ones are damage)."""
    return isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= _MAX_NUMBER


class SessionNumbers:
    """Which call each session number names: what a reference ``#n`` resolves to, and which
    calls a call id names.

    A number carried by two calls (a damaged history), a reference that is also the id a
    caller sent for a call, and a call id sent for two calls (frameworks that number their
    calls again from 1; the second is saved as ``<id>.2``) are ambiguous: refused, never
    guessed.
    """

    def __init__(self) -> None:
        self.claims: dict[int, list[str]] = {}  # n -> the ids carrying it, first first
        self.sent_as_references: set[str] = set()  # ids sent that look like "#n"
        self.sent: dict[str, list[str]] = {}  # sanitize(sent id) -> the ids saved for it
        self.saved: set[str] = set()  # every id a call is saved under
        self.next = 1  # the number the next call gets

    def note(self, n: object, call_id: str) -> None:
        """Record that ``call_id`` carries ``n``; a value that is no session number is ignored."""
        if not is_number(n):
            return
        assert isinstance(n, int)
        ids = self.claims.setdefault(n, [])
        if call_id not in ids:
            ids.append(call_id)
        self.next = max(self.next, n + 1)

    def note_sent(self, call_id: str, sent_id: object = None) -> None:
        """Record that ``call_id`` is the id a call was saved under, sent with the id
        ``sent_id`` (None: with ``call_id`` itself, or with none)."""
        if is_reference(sent_id):
            assert isinstance(sent_id, str)
            self.sent_as_references.add(sent_id)
        name = sanitize(sent_id) if isinstance(sent_id, str) else call_id
        ids = self.sent.setdefault(name, [])
        if call_id not in ids:
            ids.append(call_id)
        self.saved.add(call_id)

    def note_unrecorded(self, call_id: str) -> None:
        """Record ``call_id``, saved by a call that never got a history line (so its sent id
        is unknown): ``<id>.<k>`` counts as sent as ``<id>`` when a call is saved as that."""
        match = _DUPLICATE.fullmatch(call_id)
        base = match.group(1) if match and int(match.group(2)) >= 2 else None
        folded = {saved.lower() for saved in self.saved}
        self.note_sent(call_id, base if base is not None and base.lower() in folded else None)

    def named(self, target: str) -> list[str]:
        """The ids of the calls the call id ``target`` names: the one saved as
        ``sanitize(target)`` and each one sent with ``target``, oldest first."""
        name = sanitize(target)
        ids = list(self.sent.get(name, []))
        if name in self.saved and name not in ids:
            ids.append(name)
        order = self.by_id()
        return sorted(ids, key=lambda call_id: order.get(call_id, _MAX_NUMBER + 1))

    def id_named(self, target: str, where: str = "this session") -> str | None:
        """The id of the one call that the call id ``target`` names, None when it names none;
        ``AmbiguousReferenceError`` when it names more (``where``: the session, for it)."""
        ids = self.named(target)
        if len(ids) > 1:
            raise AmbiguousReferenceError(self.ambiguous_id_text(target, ids, where))
        return ids[0] if ids else None

    def ambiguous_id_text(self, target: str, ids: list[str], where: str) -> str:
        """Why the call id ``target``, which names the calls ``ids``, is refused; what to give."""
        references = [ref for ref in map(self.reference_of, ids) if ref is not None]
        instead = (
            f'give the reference of the one you mean instead, like "{references[-1]}"'
            if references
            else "give the call id of the one you mean from that list instead"
        )
        return (
            f"call id {target!r} names {len(ids)} programs in {where} (it was sent again): "
            f"{self.described(ids)}; {instead}."
        )

    def ids(self, ref: str) -> list[str]:
        """The ids carrying the number of ``ref``; CheckpointError when it is malformed."""
        return self.claims.get(reference_number(ref), [])

    def nearest(self, n: int) -> str | None:
        """The reference of the program whose number is nearest ``n`` (the lower of two as
        near), for a refusal of a number there is none for; None before the first program."""
        numbers = [k for k, ids in self.claims.items() if len(ids) == 1]
        if not numbers:
            return None
        return reference(min(numbers, key=lambda k: (abs(k - n), k)))

    def position_advice(self, n: int, count: int, ids: Sequence[str]) -> str:
        """What a refusal of position ``n`` of a step of ``count`` calls (``ids``, as far as
        known) adds: the nearest position there is, and the program ``#n`` when there is one."""
        advice = ""
        if count:
            near = min(max(n, 1), count)
            ref = self.reference_of(ids[near - 1]) if near <= len(ids) else None
            advice = f"; the nearest is {near}" + (f" ({ref})" if ref else "")
        if is_number(n) and len(self.claims.get(n, [])) == 1:
            advice += f'; for program number {n} of the session write "{reference(n)}"'
        return advice

    def is_ambiguous(self, ref: str) -> bool:
        return len(self.ids(ref)) > 1 or ref in self.sent_as_references

    def reference_of(self, call_id: str) -> str | None:
        """The reference ``"#n"`` of ``call_id``; None when it has none or shares it."""
        for n, ids in self.claims.items():
            if ids == [call_id]:
                return reference(n)
        return None

    def described(self, ids: Iterable[str]) -> str:
        """``ids`` with their references, for a message: ``"#3 (call_a), c2"``."""
        pairs = []
        for call_id in ids:
            ref = self.reference_of(call_id)
            pairs.append(f"{ref} ({call_id})" if ref else call_id)
        return ", ".join(pairs) or "none yet"

    def by_id(self) -> dict[str, int]:
        """``{id: n}`` of the first id carrying each number (a later number wins)."""
        return {ids[0]: n for n, ids in self.claims.items()}


# -- history lines ------------------------------------------------------------------------------


def line_text(record: dict[str, Any]) -> str:
    """A history record as the store writes it: compact JSON, UTF-8 kept as is."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)


def split_lines(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """The lines of a file read in chunks by ``read(size)`` (b"" at the end).

    A line longer than ``_MAX_LINE`` is skipped without ever being held whole.
    """
    rest, skipping = b"", False
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for part in parts:
            if skipping:  # the end of a line too long to keep
                skipping = False
            elif len(part) <= _MAX_LINE:
                yield part
        if len(rest) > _MAX_LINE:
            rest, skipping = b"", True
    if rest and not skipping:
        yield rest


def parse_record(line: bytes) -> dict[str, Any] | None:
    """The history record on ``line``, or None for a line the store could not have written.

    Skipped, never raised: torn or garbage lines, invalid UTF-8, JSON nested too deep to
    parse, JSON that is not an object, and objects whose ``id`` is not a name the store gives
    (such an id could lead a path out of ``by-id/``).
    """
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if isinstance(record, dict) and is_name(record.get("id")):
        return record
    return None


def parse_records(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    return [record for record in map(parse_record, lines) if record is not None]


def unfinished_line(call_id: str, st: os.stat_result, n: int | None = None) -> dict[str, Any]:
    """The history line of a call saved as ``st`` that never finished (its process died)."""
    line: dict[str, Any] = {"id": call_id, "n": n, "tool": None, "turn": None, "step": None}
    line.update(ordinal=None, status=HistoryStatus.UNFINISHED, time=st.st_mtime, duration=None)
    line["bytes"] = st.st_size
    return line
