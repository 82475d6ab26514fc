"""Reading sessions for a person: saved programs, history and per-session figures.

Everything here is read-only: it never creates, writes or deletes a file, so the ``ptc-retry``
commands can look at a session while its kernel is still writing to it. It reads by the
store's own rules (:mod:`ptc_retry.core.session_files`) and never follows a link.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .core.errors import AmbiguousReferenceError, CheckpointError
from .core.fs import Dir
from .core.layout import (
    BY_ID,
    CALLS,
    HISTORY,
    PREVIOUS,
    TOOL_CALLS,
    SessionNumbers,
    is_reference,
    sanitize,
)
from .core.root import check_ancestors, check_dir, uid
from .core.session_files import (
    checkpoint_files,
    checkpoint_names,
    previous_id,
    read_checkpoint,
    read_history,
    read_tool_calls,
    survey,
)
from .core.status import FAILED, HistoryStatus

# -- finding sessions without touching them ----------------------------------------------------


def check_root(root: Path) -> bool:
    """True when ``root`` exists and is safe to read, False when it does not exist.

    Raises StoreError by the store's own rules (a symlink, or under a symlink someone other
    than the superuser could change; not a directory, another user's, a shared sticky
    directory, writable by others). A missing root is not created.
    """
    check_ancestors(root)
    if not os.path.lexists(root):
        return False
    check_dir(root, "checkpoint root")
    return True


def session_problem(path: Path) -> str | None:
    """Why ``path`` is not a session directory we may read or remove, or None when it is one.

    A session directory is a real directory (not a symlink) of ours holding a
    ``history.jsonl`` file or a ``by-id/`` directory.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink (never followed)"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    user = uid()
    if user is not None and st.st_uid != user:
        return f"owned by uid {st.st_uid}, not by you"
    if not (_is(path / HISTORY, stat.S_ISREG) or _is(path / BY_ID, stat.S_ISDIR)):
        return "not a ptc-retry session (no history.jsonl and no by-id/)"
    return None


def _is(path: Path, kind: Callable[[int], bool]) -> bool:
    try:
        return bool(kind(os.lstat(path).st_mode))
    except OSError:
        return False


def list_sessions(root: Path) -> list[Path]:
    """The session directories in ``root``, most recently modified first."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    sessions = [root / name for name in names if session_problem(root / name) is None]
    return sorted(sessions, key=lambda path: tree_stats(path)[0], reverse=True)


def tree_stats(path: Path) -> tuple[float, int]:
    """``(newest mtime, bytes of regular files)`` of everything under ``path``, itself included.

    Symlinks are looked at (lstat), never followed; a file with several hard links (a
    ``previous/`` entry and its checkpoint) is counted once.
    """
    newest = os.lstat(path).st_mtime
    size = 0
    seen: set[tuple[int, int]] = set()
    pending = [path]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:  # vanished or unreadable meanwhile: it has nothing to add
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            newest = max(newest, st.st_mtime)
            if stat.S_ISDIR(st.st_mode):
                pending.append(Path(entry.path))
            elif stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                if st.st_nlink > 1:
                    seen.add((st.st_dev, st.st_ino))
                size += st.st_size
    return newest, size


# -- one session, read-only --------------------------------------------------------------------


class SessionReader:
    """A read-only view of one session directory, by the store's parsing rules."""

    def __init__(self, session_dir: Path) -> None:
        self.path = session_dir
        self.name = session_dir.name
        self._by_id = Dir(session_dir / BY_ID)
        self._previous = Dir(session_dir / PREVIOUS)
        self._calls = Dir(session_dir / CALLS)

    def checkpoint_sizes(self) -> dict[str, int]:
        """``{call id: bytes}`` of the checkpoints in ``by-id/``: regular files only, named as
        the store names them (temp and hidden files, links and foreign names skipped)."""
        found, _ = checkpoint_files(self._by_id, checkpoint_names(self._by_id))
        return {cid: st.st_size for cid, st in found.items()}

    def history(self) -> list[dict[str, Any]]:
        """Every parseable history line in file order, then a line for each unfinished call:
        the one the store appends when it reopens the session (see ``survey``)."""
        return self._read()[0]

    def _read(self) -> tuple[list[dict[str, Any]], SessionNumbers]:
        found = survey(read_history(self.path), self._calls, self._by_id, self._names)
        return found.records, found.numbers

    def _names(self, directory: Dir) -> list[str]:
        """What ``directory`` holds, changing nothing; [] when it cannot be read. ``calls/`` is
        read only when it is a real directory: its links' texts name numbers."""
        if directory is self._calls and not _is(directory.path, stat.S_ISDIR):
            return []
        try:
            return directory.names()
        except OSError:
            return []

    def latest_ids(self, n: int = 5) -> list[str]:
        """The ``n`` most recently recorded ids, newest first, like ``CheckpointStore``'s."""
        return _latest(self.history())[:n]

    def reference_of(self, call_id: str) -> str | None:
        """The short reference ``"#n"`` of ``call_id``; None when it has none or shares it."""
        return self._read()[1].reference_of(call_id)

    def read(self, target: str | int) -> tuple[str, Path, bytes]:
        """``(call id, path, raw bytes)`` of the checkpoint ``target`` names.

        ``target`` is a reference ``"#n"`` (program n of the session, by its history lines),
        a call id (by ``CheckpointStore.path_for``'s rules) or an int n
        (``previous/<n>.json``). Raises CheckpointError when there is no such checkpoint,
        naming the latest ids, and when a reference is malformed or unknown;
        AmbiguousReferenceError when a reference or call id names two calls: it never names
        another program.
        """
        call_id, path = self._resolve(target)
        return call_id, path, read_checkpoint(self._by_id, call_id, path)

    def _resolve(self, target: str | int) -> tuple[str, Path]:
        if isinstance(target, str) and is_reference(target):
            call_id = self._id_for_reference(target)
            path = self._by_id.path / f"{call_id}.json"
            if self._is_checkpoint(call_id):
                return call_id, path
            raise self._missing(f"program {target} is {call_id}, but {path} does not exist")
        if isinstance(target, str):
            named = self._read()[1].id_named(target, f"session {self.name}")
            call_id = named if named is not None else sanitize(target)
            path = self._by_id.path / f"{call_id}.json"
            if self._is_checkpoint(call_id):
                return call_id, path
            raise self._missing(f"no checkpoint for call id {target!r} ({path} does not exist)")
        path = self._previous.path / f"{target}.json"
        try:  # a link, a hard link or a copy: read its by-id/ file directly, never through a link
            found = previous_id(self._previous, self._by_id, target, _latest(self.history()))
        except OSError:
            found = None
        if found is not None:
            linked = self._by_id.path / f"{found}.json"
            if self._is_checkpoint(found):
                return found, linked
            raise self._missing(f"{path} points to a checkpoint that was deleted")
        raise self._missing(
            f"no previous/{target}.json (previous/ holds the calls of the step before the "
            f'latest one, numbered from 1; for program number {target} write "#{target}")'
        )

    def tool_calls(self, call_id: str) -> list[dict[str, Any]]:
        """The recorded tool calls of ``call_id`` in file order; [] when there are none or
        they cannot be read (a link is never followed)."""
        try:
            return read_tool_calls(Dir(self.path / TOOL_CALLS), call_id)
        except OSError:
            return []

    def _is_checkpoint(self, call_id: str) -> bool:
        """True when ``by-id/`` holds ``<call_id>.json`` under exactly that name (a
        case-insensitive disk would also open ``Call_A.json`` for ``call_a.json``); what it
        is (a link is refused) is for ``read_checkpoint`` to say."""
        try:
            return f"{call_id}.json" in self._by_id.names()
        except OSError:
            return False

    def _id_for_reference(self, ref: str) -> str:
        """The call id ``ref`` names, by ``CheckpointStore.id_for_reference``'s rules."""
        numbers = self._read()[1]
        ids = numbers.ids(ref)
        if not ids:
            last = numbers.next - 1
            known = (
                f"its programs are #1 to #{last}"
                if last
                else "its history records no program numbers (an older ptc-retry wrote it): "
                "give the call id"
            )
            raise self._missing(
                f"no program {ref} in session {self.name}: {known}. A reference belongs to "
                "the session whose notice gave it",
                session=False,
            )
        if numbers.is_ambiguous(ref):
            which = (
                f"two calls carry it ({', '.join(ids)})"
                if len(ids) > 1
                else f"a call was sent with the id {ref!r}"
            )
            raise AmbiguousReferenceError(
                f"{ref} is ambiguous in session {self.name}: {which}. Give the call id instead; "
                f"`ptc-retry history --session {self.name}` lists every call."
            )
        return ids[0]

    def _missing(self, what: str, *, session: bool = True) -> CheckpointError:
        history, numbers = self._read()
        where = f" in session {self.name}" if session else ""
        return CheckpointError(
            f"{what}{where}; the most recent are: {numbers.described(_latest(history)[:5])}. "
            f"`ptc-retry history --session {self.name}` lists every call."
        )


def _latest(history: list[dict[str, Any]]) -> list[str]:
    """The ids of ``history``, most recently recorded first."""
    recent: dict[str, None] = {}
    for record in history:
        if isinstance(record.get("id"), str):
            recent.pop(record["id"], None)
            recent[record["id"]] = None
    return list(reversed(recent))


# -- figures -----------------------------------------------------------------------------------


@dataclass
class SessionStats:
    """What one session's calls add up to. Every figure comes from the files on disk."""

    session: str
    calls: int = 0  # distinct call ids
    failures: int = 0  # calls whose latest status is error or interrupted
    replays: int = 0  # calls that replayed another one (their history line has replay_of)
    unfinished: int = 0  # calls saved but never finished: still running, or their process died
    program_bytes: int = 0  # bytes of every checkpoint in by-id/
    not_resent: int = 0  # bytes of the programs the replays replayed: what they did not re-send

    def __add__(self, other: SessionStats) -> SessionStats:
        total = SessionStats("total")
        for figure in fields(self)[1:]:
            name = figure.name
            setattr(total, name, getattr(self, name) + getattr(other, name))
        return total


def session_stats(reader: SessionReader) -> SessionStats:
    """Count one session's calls, failures, replays and bytes; see ``SessionStats``.

    ``not_resent`` adds, for each replay, the saved size of the checkpoint it replayed (the
    target's ``by-id/`` file, else the size its history line recorded). The bytes the model
    sent for the replay call itself are not recorded anywhere, so they are not subtracted.
    """
    sizes = reader.checkpoint_sizes()
    latest: dict[str, dict[str, Any]] = {}
    for record in reader.history():
        if isinstance(record.get("id"), str):
            latest[record["id"]] = record
    stats = SessionStats(reader.name, calls=len(latest), program_bytes=sum(sizes.values()))
    for record in latest.values():
        status = record.get("status")
        stats.failures += isinstance(status, str) and status in FAILED
        stats.unfinished += status == HistoryStatus.UNFINISHED
        target = record.get("replay_of")
        if isinstance(target, str):
            stats.replays += 1
            recorded = latest.get(target, {}).get("bytes")
            size = sizes.get(target, recorded if isinstance(recorded, int) else 0)
            stats.not_resent += size
    return stats


STATS_COLUMNS = (
    ("session", "session"),
    ("calls", "calls"),
    ("failures", "failures"),
    ("replays", "replays"),
    ("unfinished", "unfinished"),
    ("program_bytes", "program bytes"),
    ("not_resent", "bytes not re-sent"),
)


def format_stats(rows: list[SessionStats], *, total: bool = False) -> str:
    """A table, one row per session, numbers right-aligned; ``total`` adds a total line."""
    table = [[str(getattr(row, key)) for key, _ in STATS_COLUMNS] for row in rows]
    if total:
        summed = SessionStats("total")
        for row in rows:
            summed = summed + row
        table.append([str(getattr(summed, key)) for key, _ in STATS_COLUMNS])
    header = [title for _, title in STATS_COLUMNS]
    widths = [max(len(cell) for cell in column) for column in zip(header, *table)]
    lines = []
    for texts in [header, *table]:
        cells = [texts[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(texts[1:], widths[1:])]
        lines.append("  ".join(cells))
    if total:
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)
