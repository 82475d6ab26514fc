"""Reading sessions for a person: saved programs, history and per-session figures.

Everything here is read-only: it never creates, writes or deletes a file, so the ``ptc-retry``
commands can look at a session while its kernel is still writing to it. The parsing rules are
the store's own (``ptc_retry.core.store``): a torn or garbage history line is skipped (invalid
UTF-8, JSON nested too deep, a line over 1 MiB, an object whose id the store would never give),
and a checkpoint in ``by-id/`` that has no history line yet is shown as ``unfinished`` (its
call is still running, or its process died mid-call), with the line the store would write for
it when the session is reopened. No link is ever followed: a ``previous/`` or ``calls/``
symlink is read as the text naming a ``by-id/`` file, and a link in ``by-id/`` is no
checkpoint.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .core.errors import CheckpointError
from .core.history_table import FAILED
from .core.store import (
    _PREVIOUS_NAME,
    _Dir,
    _uid,
    check_ancestors,
    check_dir,
    is_name,
    is_number,
    is_reference,
    link_target_id,
    previous_id,
    read_checkpoint,
    read_history,
    reference,
    reference_number,
    sanitize,
    unfinished_line,
)

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
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by you"
    if not (_is(path / "history.jsonl", stat.S_ISREG) or _is(path / "by-id", stat.S_ISDIR)):
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


@dataclass
class _Numbers:
    """Which call each session number names, read as the store reads them when it reopens."""

    claims: dict[int, list[str]] = field(default_factory=dict)  # n -> the ids carrying it
    sent_as_references: set[str] = field(default_factory=set)  # ids sent that look like "#n"
    next: int = 1  # the number the store gives the next call

    def note(self, n: object, call_id: str) -> None:
        if not is_number(n):  # as the store: ignored
            return
        assert isinstance(n, int)
        ids = self.claims.setdefault(n, [])
        if call_id not in ids:
            ids.append(call_id)
        self.next = max(self.next, n + 1)

    def reference_of(self, call_id: str) -> str | None:
        for n, ids in self.claims.items():
            if ids == [call_id]:
                return reference(n)
        return None


class SessionReader:
    """A read-only view of one session directory, by the store's parsing rules."""

    def __init__(self, session_dir: Path) -> None:
        self.path = session_dir
        self.name = session_dir.name
        self._by_id = _Dir(session_dir / "by-id")
        self._previous = _Dir(session_dir / "previous")
        self._calls = session_dir / "calls"

    def checkpoint_sizes(self) -> dict[str, int]:
        """``{call id: bytes}`` of the checkpoints in ``by-id/``: regular files only, named as
        the store names them (temp and hidden files, links and foreign names skipped)."""
        return {cid: st.st_size for cid, st in self._checkpoints().items()}

    def _checkpoints(self) -> dict[str, os.stat_result]:
        found: dict[str, os.stat_result] = {}
        try:
            entries = list(os.scandir(self._by_id.path))
        except OSError:  # missing, not a directory, unreadable: no checkpoints to show
            return found
        for entry in entries:
            if not entry.name.endswith(".json") or not is_name(entry.name[: -len(".json")]):
                continue  # hidden names are the store's temp files
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # finished and replaced meanwhile: the next look will see it
                continue
            if stat.S_ISREG(st.st_mode):
                found[entry.name[: -len(".json")]] = st
        return found

    def history(self) -> list[dict[str, Any]]:
        """Every parseable history line in file order, then a line for each unfinished call.

        The added lines are the ones the store appends when it reopens the session: status
        ``unfinished``, the checkpoint's mtime as ``time``, its size as ``bytes``, and the
        session number ``n`` the store gives it (the one a notice gave it, else the next),
        oldest first.
        """
        return self._read()[0]

    def _read(self) -> tuple[list[dict[str, Any]], _Numbers]:
        records = read_history(self.path)
        numbers = _Numbers()
        for record in records:
            numbers.note(record.get("n"), record["id"])
            if is_reference(record.get("sent_id")):
                numbers.sent_as_references.add(record["sent_id"])
        for n, call_id in self._linked_numbers():
            numbers.note(n, call_id)
        known = {record["id"] for record in records}
        named = {ids[0]: n for n, ids in numbers.claims.items()}
        orphans = sorted(
            (st.st_mtime, cid, st) for cid, st in self._checkpoints().items() if cid not in known
        )
        for _, cid, st in orphans:
            n = named.get(cid)
            if n is None:
                n = numbers.next
                numbers.note(n, cid)
            records.append(unfinished_line(cid, st, n))
        return records, numbers

    def _linked_numbers(self) -> list[tuple[int, str]]:
        """``(n, id)`` of each ``calls/<n>.json`` symlink: numbers notices gave out.

        Only the link's own text is read (its target's name); it is never followed.
        """
        if not _is(self._calls, stat.S_ISDIR):
            return []
        try:
            names = os.listdir(self._calls)
        except OSError:
            return []
        found = []
        for name in names:
            match = _PREVIOUS_NAME.fullmatch(name)  # calls/<n>.json
            try:
                call_id = link_target_id(os.readlink(self._calls / name)) if match else None
            except OSError:  # a copy (no symlinks here) or gone: the history has its number
                continue
            if match and call_id is not None:
                found.append((int(match.group(1)), call_id))
        return found

    def latest_ids(self, n: int = 5) -> list[str]:
        """The ``n`` most recently recorded ids, newest first, like ``CheckpointStore``'s."""
        return _latest(self.history())[:n]

    def reference_of(self, call_id: str) -> str | None:
        """The short reference ``"#n"`` of ``call_id``; None when it has none or shares it."""
        return self._read()[1].reference_of(call_id)

    def read(self, target: str | int) -> tuple[str, Path, bytes]:
        """``(call id, path, raw bytes)`` of the checkpoint ``target`` names.

        ``target`` is a reference ``"#n"`` (program n of the session, by its history lines),
        a call id (``by-id/<id>.json``) or an int n (``previous/<n>.json``). Raises
        CheckpointError when there is no such checkpoint, naming the latest ids, and when a
        reference is malformed, unknown, or carried by two calls: it never names another
        program.
        """
        call_id, path = self._resolve(target)
        return call_id, path, read_checkpoint(self._by_id, call_id, path)

    def _resolve(self, target: str | int) -> tuple[str, Path]:
        if is_reference(target):
            call_id = self._id_for_reference(target)  # type: ignore[arg-type]
            path = self._by_id.path / f"{call_id}.json"
            if self._is_checkpoint(call_id):
                return call_id, path
            raise self._missing(f"program {target} is {call_id}, but {path} does not exist")
        if isinstance(target, str):
            call_id = sanitize(target)
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
        n = reference_number(ref)
        numbers = self._read()[1]
        ids = numbers.claims.get(n, [])
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
        if len(ids) > 1 or ref in numbers.sent_as_references:
            which = (
                f"two calls carry it ({', '.join(ids)})"
                if len(ids) > 1
                else f"a call was sent with the id {ref!r}"
            )
            raise CheckpointError(
                f"{ref} is ambiguous in session {self.name}: {which}. Give the call id instead; "
                f"`ptc-retry history --session {self.name}` lists every call."
            )
        return ids[0]

    def _missing(self, what: str, *, session: bool = True) -> CheckpointError:
        history, numbers = self._read()
        recent = []
        for call_id in _latest(history)[:5]:
            ref = numbers.reference_of(call_id)
            recent.append(f"{ref} ({call_id})" if ref else call_id)
        where = f" in session {self.name}" if session else ""
        return CheckpointError(
            f"{what}{where}; the most recent are: {', '.join(recent) or 'none yet'}. "
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
        stats.unfinished += status == "unfinished"
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
    for row in [header, *table]:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
    if total:
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)


def to_json_line(record: dict[str, Any]) -> str:
    """One history record as the store writes it: compact JSON, UTF-8 kept as is."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
