"""Reading what a session directory holds, by the layout's rules and never through a link:
its history, its checkpoints, what ``previous/`` and ``calls/`` entries stand for, the calls
that never finished and the programs' tool calls (and appending those). The store reads a
session it reopens through this, and so does the CLI's read-only ``SessionReader``."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .fs import (
    Dir,
    fix_mode,
    held_elsewhere,
    open_dir,
    open_for_append,
    open_regular,
    pread,
    read_file,
    write_all,
)
from .layout import (
    BY_ID,
    CALLS,
    HISTORY,
    IDS,
    RESEND,
    TOOL_CALLS,
    SessionNumbers,
    entry_number,
    history_path,
    is_name,
    link_target_id,
    parse_records,
    split_lines,
    tool_calls_name,
    unfinished_line,
)


def read_history(session_dir: Path) -> list[dict[str, Any]]:
    """The records of ``session_dir/history.jsonl`` by the store's rules; [] when there is no
    readable regular file there (a link is never followed). Raises nothing."""
    try:
        fd, _ = open_regular(Dir(session_dir), HISTORY, os.O_RDONLY)
    except OSError:
        return []
    try:
        return parse_records(split_lines(lambda size: os.read(fd, size)))
    except OSError:
        return []
    finally:
        os.close(fd)


def session_in_use(session_dir: str | os.PathLike[str]) -> bool:
    """True while a live process has the session open (holds its lock); changes nothing.

    False too where sessions cannot be locked (no ``fcntl``, a filesystem without locks).
    """
    return held_elsewhere(history_path(session_dir))


# -- the calls of a session ---------------------------------------------------------------------


@dataclass
class Survey:
    """What a session holds, as the store takes it in when it reopens the session."""

    records: list[dict[str, Any]]  # the history's lines, then ``unfinished``
    numbers: SessionNumbers
    unfinished: list[dict[str, Any]]  # a line for each checkpoint without a history line
    skipped: list[str]  # ``by-id/`` entries that are no checkpoint

    def skipped_warning(self, by_id: Path) -> str:
        """What the store says once of the ``skipped`` entries of ``by_id``."""
        skipped, many = self.skipped, len(self.skipped) > 1
        return (
            f"skipped {len(skipped)} entr{'ies' if many else 'y'} of {by_id} "
            f"that {'are' if many else 'is'} not a checkpoint (a link, or not a regular "
            f"file): {', '.join(sorted(skipped)[:3])}{', ...' if len(skipped) > 3 else ''}"
        )


def survey(
    records: list[dict[str, Any]], calls: Dir, by_id: Dir, names: Callable[[Dir], list[str]]
) -> Survey:
    """Take in a session whose history holds ``records``; ``names(directory)`` lists a
    directory (the store's listing also deletes stale temp files, a reader's changes nothing).

    A checkpoint in ``by-id/`` that has no history line is a call saved and never finished
    (still running, or its process died): it gets the line the store appends for it
    (``unfinished_line``), oldest first, with the number a notice gave it (``calls/``) or
    else the next one.
    """
    numbers = SessionNumbers()
    for record in records:
        numbers.note(record.get("n"), record["id"])
        if record.get("status") == "unfinished" and "sent_id" not in record:
            numbers.note_unrecorded(record["id"])  # its line was written when a store reopened
        else:
            numbers.note_sent(record["id"], record.get("sent_id"))
    for n, call_id in linked_numbers(calls, names(calls)):
        numbers.note(n, call_id)
    orphans, skipped = checkpoint_files(by_id, names(by_id), {r["id"] for r in records})
    named = numbers.by_id()
    unfinished = []
    for _, call_id, st in sorted((st.st_mtime, cid, st) for cid, st in orphans.items()):
        number = named.get(call_id)
        if number is None:
            number = numbers.next
            numbers.note(number, call_id)
        numbers.note_unrecorded(call_id)
        unfinished.append(unfinished_line(call_id, st, number))
    return Survey(records + unfinished, numbers, unfinished, skipped)


def calls_sent_as(session_dir: Path, sent_id: str) -> list[tuple[str, str | None, object]]:
    """``(id, reference, status)`` of each call of ``session_dir`` that the call id
    ``sent_id`` names (see ``SessionNumbers.named``), oldest first, as a store reopening the
    session would number them (a call saved and never finished is ``unfinished``): for a
    backend whose kernel died before it said where it saved a program. [] when there is
    none or the session cannot be read; changes nothing."""

    def listing(directory: Dir) -> list[str]:
        # Read by path, so a directory that is a link is not read (as the CLI reader does).
        try:
            if not stat.S_ISDIR(os.lstat(directory.path).st_mode):
                return []
            return directory.names()
        except OSError:
            return []

    by_id, calls = Dir(session_dir / BY_ID), Dir(session_dir / CALLS)
    found = survey(read_history(session_dir), calls, by_id, listing)
    status = {record["id"]: record.get("status") for record in found.records}
    named = found.numbers.named(sent_id)
    return [(cid, found.numbers.reference_of(cid), status.get(cid)) for cid in named]


def linked_numbers(calls: Dir, names: Iterable[str]) -> list[tuple[int, str]]:
    """``(n, id)`` of each ``calls/<n>.json`` symlink among ``names``: numbers that notices
    gave, also to calls that never finished. Only a link's own text is read, never followed."""
    found = []
    for name in names:
        n = entry_number(name)
        if n is None:
            continue
        try:
            call_id = link_target_id(calls.readlink(name))
        except OSError:  # a copy (no symlinks here) or gone: the history has its number
            continue
        if call_id is not None:
            found.append((n, call_id))
    return found


def checkpoint_files(
    by_id: Dir, names: Iterable[str], known: Iterable[str] = ()
) -> tuple[dict[str, os.stat_result], list[str]]:
    """``({id: stat}, skipped)`` of the checkpoints among ``names`` (entries of ``by-id/``),
    leaving out the ids in ``known``. Skipped: ``.json`` entries that are no checkpoint (a
    link, never followed; not a regular file; a name the store never gives)."""
    skip = set(known)
    found: dict[str, os.stat_result] = {}
    skipped = []
    for name in names:
        call_id = name[: -len(".json")]
        if not name.endswith(".json") or call_id in skip:
            continue
        try:
            st: os.stat_result | None = by_id.lstat(name) if is_name(call_id) else None
        except OSError:  # finished and replaced meanwhile, or unreadable
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            skipped.append(name)
        else:
            found[call_id] = st
    return found, skipped


def checkpoint_names(by_id: Dir) -> list[str]:
    """The ``.json`` names in ``by-id/``, without hidden ones; [] when it cannot be read."""
    try:
        return [n for n in by_id.names() if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return []


# -- one checkpoint -----------------------------------------------------------------------------


def read_checkpoint(by_id: Dir, call_id: str, shown: Path) -> bytes:
    """The bytes of ``by_id/<call_id>.json``; CheckpointError naming ``shown`` when it is
    missing, a link (never followed: it could point outside the session), not a regular file
    or unreadable."""
    name = f"{call_id}.json"
    try:
        return read_file(by_id, name)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {shown} was deleted; {RESEND}.") from None
    except OSError as exc:
        try:
            link = stat.S_ISLNK(by_id.lstat(name).st_mode)
        except OSError:
            link = False
        if link:
            raise CheckpointError(
                f"checkpoint {by_id.path / name} is a symbolic link, which could point outside "
                f"the session, so it is not read; {RESEND}."
            ) from None
        if isinstance(exc, IsADirectoryError):
            raise CheckpointError(
                f"checkpoint {by_id.path / name} is not a regular file; {RESEND}."
            ) from None
        raise CheckpointError(
            f"cannot read checkpoint {shown} ({exc.strerror}); {RESEND}."
        ) from None


def decode_checkpoint(data: bytes, path: Path) -> tuple[str, dict[str, Any]]:
    """``(text, object)`` of a checkpoint's bytes; CheckpointError (naming ``path``) when they
    are not UTF-8, not JSON or not a JSON object."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(
            f"checkpoint {path} is not UTF-8 text (bad byte at offset {exc.start}); {RESEND}."
        ) from None
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint {path} is not JSON ({exc}); {RESEND}.") from None
    if not isinstance(decoded, dict):
        kind = type(decoded).__name__
        raise CheckpointError(f"checkpoint {path} holds a {kind}, not a JSON object; {RESEND}.")
    return text, decoded


def checkpoint_code(decoded: dict[str, Any], path: Path) -> str:
    """The ``"code"`` of a decoded checkpoint; CheckpointError when it is not a string."""
    code = decoded.get("code")
    if not isinstance(code, str):
        wrong = f'"code" is a {type(code).__name__}' if "code" in decoded else 'no "code" key'
        raise CheckpointError(f"checkpoint {path} has {wrong}, not a string; {RESEND}.")
    return code


def previous_id(previous: Dir, by_id: Dir, n: int, candidates: Iterable[str]) -> str | None:
    """The call id ``previous/<n>.json`` stands for, or None when it cannot tell.

    A symlink names it in its text (CheckpointError when that text is not ours: the link is
    not followed); a hard link is the by-id/ file with the same inode, looked for among
    ``candidates`` (most likely first) and then among all of ``by-id/``; a copy has its id
    on line n of ``previous/.ids``. Raises OSError when the entry is missing.
    """
    name = f"{n}.json"
    st = previous.lstat(name)
    if stat.S_ISLNK(st.st_mode):
        target = previous.readlink(name)
        call_id = link_target_id(target)
        if call_id is None:
            raise CheckpointError(
                f"{previous.path / name} is a link to {target!r}, not to a checkpoint of this "
                "session, so it is not followed; load the program by reference or call id."
            )
        return call_id
    if not stat.S_ISREG(st.st_mode):
        return None
    if st.st_nlink > 1:
        seen = set()
        for call_id in chain(candidates, (name[:-5] for name in checkpoint_names(by_id))):
            if call_id in seen or not is_name(call_id):
                continue
            seen.add(call_id)
            try:
                other = by_id.lstat(f"{call_id}.json")
            except OSError:
                continue
            if (other.st_ino, other.st_dev) == (st.st_ino, st.st_dev):
                return call_id
    try:
        ids = read_file(previous, IDS).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    call_id = ids[n - 1] if 0 < n <= len(ids) else None
    return call_id if is_name(call_id) else None


# -- a program's tool calls ---------------------------------------------------------------------


class ToolCallFiles:
    """A store's ``tool-calls/``, made at the session's first tool call (a session without
    any has none). ``dirs``: the store's open directories, which this one joins."""

    def __init__(self, session: Dir, dirs: list[Dir]) -> None:
        self._session = session
        self._dirs = dirs
        self._directory: Dir | None = None

    def read(self, call_id: str) -> list[dict[str, Any]]:
        """The recorded tool calls of ``call_id`` (see ``read_tool_calls``)."""
        if self._directory is not None:
            return read_tool_calls(self._directory, call_id)
        if not self._session.exists(TOOL_CALLS):
            return []
        directory = self._open()  # kept open only once a program writes there
        try:
            return read_tool_calls(directory, call_id)
        finally:
            directory.close()

    def append(self, call_id: str, data: bytes) -> None:
        """Append ``data`` to the tool calls of ``call_id`` (see ``append_lines``)."""
        if self._directory is None:
            self._directory = self._open()
            self._dirs.append(self._directory)
        append_lines(self._directory, tool_calls_name(call_id), data)

    def _open(self) -> Dir:
        return open_dir(self._session, TOOL_CALLS, "tool-call directory", ours=True)


def read_tool_calls(directory: Dir, call_id: str) -> list[dict[str, Any]]:
    """The JSON objects of ``tool-calls/<call_id>.jsonl`` (``directory`` is ``tool-calls/``)
    in file order, other lines skipped; [] when there is no such file. Raises OSError when it
    cannot be read, a link included (never followed)."""
    try:
        data = read_file(directory, tool_calls_name(call_id))
    except FileNotFoundError:
        return []
    records = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line) if line else None
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def latest_calls(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last line of each call of a recording (lines with an int ``k``), in ``k`` order.

    A call can have several lines: a recorded function's as it starts, then the kernel's
    at its end, then the host's, appended when the host completed a call whose result the
    kernel never took. The last one is the truth.
    """
    latest: dict[int, dict[str, Any]] = {}
    for line in records:
        k = line.get("k")
        if isinstance(k, int) and not isinstance(k, bool):
            latest[k] = line
    return [latest[k] for k in sorted(latest)]


def append_lines(directory: Dir, name: str, data: bytes) -> None:
    """Append ``data`` (whole lines) to ``directory/name``, created 0600, never through a link.

    A file that ends in a torn line gets a line end first; a write that fails part-way (a
    full disk) is taken back, so the file holds whole lines only. Raises OSError, and
    StoreError for a file with more than one hard link (see ``open_for_append``).
    """
    fd, st = open_for_append(directory, name)
    try:
        if st.st_size == 0:
            fix_mode(fd)
        elif pread(fd, 1, st.st_size - 1) != b"\n":
            data = b"\n" + data
        try:
            write_all(fd, data)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, st.st_size)
            raise
    finally:
        os.close(fd)
