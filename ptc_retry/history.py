"""Reading sessions for a person: the history table, saved programs and per-session figures.

Everything here is read-only: it never creates, writes or deletes a file, so the ``ptc-retry``
commands can look at a session while its kernel is still writing to it. The parsing rules are
the store's own (``ptc_retry.store``): a torn or garbage history line is skipped, and a
checkpoint in ``by-id/`` that has no history line yet is shown as ``unfinished`` (its call is
still running, or its process died mid-call), with the line the store would write for it when
the session is reopened.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .store import _parse_lines, _uid, check_dir, sanitize, unfinished_line

COLUMNS = ("id", "status", "turn", "step", "ordinal", "bytes", "ename", "replay_of", "when")
FAILED = frozenset({"error", "interrupted"})


def format_history(
    lines: Iterable[dict[str, Any]], *, session_dir: str | Path | None = None
) -> str:
    """One row per history line, oldest first, in fixed-width columns."""
    rows = [[_cell(line, column) for column in COLUMNS] for line in lines]
    if not rows:
        return f"no calls yet in {session_dir}" if session_dir else "no calls yet"
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(COLUMNS)]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [list(COLUMNS), *rows]
    ]
    if session_dir:
        text.insert(0, f"session: {session_dir}")
    return "\n".join(text)


def _cell(line: dict[str, Any], column: str) -> str:
    if column == "when":
        stamp = line.get("time")
        return time.strftime("%H:%M:%S", time.localtime(stamp)) if stamp else ""
    value = line.get(column)
    return "" if value is None else str(value)


# -- finding sessions without touching them ----------------------------------------------------


def check_root(root: Path) -> bool:
    """True when ``root`` exists and is safe to read, False when it does not exist.

    Raises StoreError by the store's own rules (a symlink, not a directory, another user's,
    a shared sticky directory). A missing root is not created.
    """
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

    Symlinks are looked at (lstat), never followed.
    """
    newest = os.lstat(path).st_mtime
    size = 0
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
            elif stat.S_ISREG(st.st_mode):
                size += st.st_size
    return newest, size


# -- one session, read-only --------------------------------------------------------------------


class SessionReader:
    """A read-only view of one session directory, by the store's parsing rules."""

    def __init__(self, session_dir: Path) -> None:
        self.path = session_dir
        self.name = session_dir.name
        self._by_id = session_dir / "by-id"
        self._previous = session_dir / "previous"

    def checkpoint_sizes(self) -> dict[str, int]:
        """``{call id: bytes}`` of the checkpoints in ``by-id/`` (temp and hidden files skipped)."""
        return {cid: st.st_size for cid, st in self._checkpoints().items()}

    def _checkpoints(self) -> dict[str, os.stat_result]:
        found: dict[str, os.stat_result] = {}
        try:
            entries = list(os.scandir(self._by_id))
        except (FileNotFoundError, NotADirectoryError):
            return found
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
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
        ``unfinished``, the checkpoint's mtime as ``time`` and its size as ``bytes``, oldest
        first.
        """
        try:
            records = _parse_lines((self.path / "history.jsonl").read_bytes())
        except FileNotFoundError:
            records = []
        known = {record["id"] for record in records if isinstance(record.get("id"), str)}
        orphans = sorted(
            (st.st_mtime, cid, st) for cid, st in self._checkpoints().items() if cid not in known
        )
        records.extend(unfinished_line(cid, st) for _, cid, st in orphans)
        return records

    def latest_ids(self, n: int = 5) -> list[str]:
        """The ``n`` most recently recorded ids, newest first, like ``CheckpointStore``'s."""
        recent: dict[str, None] = {}
        for record in self.history():
            if isinstance(record.get("id"), str):
                recent.pop(record["id"], None)
                recent[record["id"]] = None
        return list(reversed(recent))[:n]

    def read(self, target: str | int) -> tuple[str, Path, bytes]:
        """``(call id, path, raw bytes)`` of ``by-id/<id>.json``, or of ``previous/<n>.json``.

        Raises CheckpointError when there is no such checkpoint, naming the latest ids.
        """
        call_id, path = self._resolve(target)
        try:
            return call_id, path, path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {path} ({exc.strerror}).") from None

    def _resolve(self, target: str | int) -> tuple[str, Path]:
        if isinstance(target, str):
            call_id = sanitize(target)
            path = self._by_id / f"{call_id}.json"
            if _is(path, stat.S_ISREG):
                return call_id, path
            raise self._missing(f"no checkpoint for call id {target!r} ({path} does not exist)")
        path = self._previous / f"{target}.json"
        try:
            if path.is_symlink():  # -> ../by-id/<id>.json; read by-id/ directly, never elsewhere
                call_id = sanitize(os.path.basename(os.readlink(path))[: -len(".json")])
                linked = self._by_id / f"{call_id}.json"
                if _is(linked, stat.S_ISREG):
                    return call_id, linked
                raise self._missing(f"{path} points to a checkpoint that was deleted")
            if _is(path, stat.S_ISREG):  # a copy: previous/.ids names it, a line each
                ids = (self._previous / ".ids").read_text("utf-8").splitlines()
                return (ids[target - 1] if 0 < target <= len(ids) else f"previous/{target}"), path
        except OSError:
            pass
        raise self._missing(
            f"no previous/{target}.json (previous/ holds the calls of the step before the "
            "latest one, numbered from 1)"
        )

    def _missing(self, what: str) -> CheckpointError:
        recent = ", ".join(self.latest_ids()) or "none yet"
        return CheckpointError(
            f"{what} in session {self.name}; the most recent ids are: {recent}. "
            f"`ptc-retry history --session {self.name}` lists every call."
        )


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
        for field in fields(self)[1:]:
            setattr(total, field.name, getattr(self, field.name) + getattr(other, field.name))
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
