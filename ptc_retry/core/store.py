"""The checkpoint store: every call's arguments on disk, before the call runs.

One session lives in ``<root>/<session>/``::

    history.jsonl        one JSON object a line, appended, never rewritten
    by-id/<id>.json      the only real copy of each call's arguments, byte for byte
    previous/<n>.json    the calls of the step before the current one: hard links to their
                         by-id/ files (symlinks -> ../by-id/<id>.json where hard links are
                         refused, copies with their ids in previous/.ids where both are)
    calls/<n>.json       -> ../by-id/<id>.json: program #n of the session, made when a notice
                         names it (``link_number``), so that a model without the helper finds it

Every call has a session number ``n`` (1, 2, 3, ... across kernel restarts), recorded in its
history line. ``"#n"`` is the short reference a notice gives: it names one program for the life
of the session, whatever ran since, and is refused when it is unknown or ambiguous.

One process per session: a store holds an exclusive ``flock`` on its ``history.jsonl`` for its
life (the OS drops it when the process dies, so a restarted kernel continues its session). A
store whose session another live process holds opens ``<session>.2`` (``.3``, ...) instead and
says so in ``warning``. Without ``fcntl`` (Windows) sessions are not locked.

Nothing is read or written through a link planted in a session: the store works in its
directories through file descriptors opened without following links (a directory swapped for a
link later is not followed), creates temp files with ``O_EXCL | O_NOFOLLOW`` under fresh random
names, opens ``history.jsonl`` and checkpoints with ``O_NOFOLLOW``, and reads ``previous/`` and
``calls/`` symlinks only as text naming a ``by-id/`` file. A root is refused when it is a
symlink, another user's, a shared sticky directory or writable by others (its mode is never
changed), or when a directory above it is reached through a symlink that someone other than
the superuser could change (system links such as macOS ``/var -> private/var`` are fine).

Plain Python: this module knows nothing of IPython or Jupyter.

Errors a caller must expect: opening a store raises ``StoreError`` when the location is
unsafe (see above, or a file where a directory belongs) and ``OSError`` when the filesystem
refuses (read-only, full, permission denied, a file in the path). ``begin``,
``replace_arguments`` and ``finish`` raise ``OSError`` on the same filesystem failures, and
``StoreError`` once the store is closed or when the arguments cannot be encoded as UTF-8 (a
lone surrogate). So a caller that must never fail catches ``(OSError, StoreError)``. Reading a
checkpoint raises ``CheckpointError``. Damage found while opening (an unusable ``by-id/``
entry, garbage history lines) never fails the store: such entries and lines are skipped.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, NamedTuple

from .errors import CheckpointError, StoreError
from .layout import (
    _AUTO_ID,
    _LINE_KEYS,
    _PREVIOUS_NAME,
    STATUSES,
    is_name,
    is_number,
    is_reference,
    numbered,
    reference,
    reference_number,
    sanitize,
    unfinished_line,
)

try:
    import fcntl
except ImportError:  # Windows: sessions are not locked there
    fcntl = None  # type: ignore[assignment]

_MAX_LINE = 1 << 20  # a longer history line is skipped unread (the store writes < 1 KiB)
_CHUNK = 1 << 20
_MAX_SESSIONS = 100  # <session>, <session>.2, ... <session>.100
_MAX_PENDING = 1000  # history lines kept for the next write while the disk is full
_DIR_MODE = 0o700
_FILE_MODE = 0o600
# Without O_BINARY, Windows would turn "\n" into "\r\n" and break byte-for-byte copies.
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted as a file must not hang the open
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_READ = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY
# Work in directories through descriptors where the OS allows it (Linux, macOS, the BSDs).
_DIR_FDS = (
    os.name == "posix"
    and {os.open, os.mkdir, os.rename, os.unlink, os.symlink, os.readlink, os.stat, os.link}
    <= os.supports_dir_fd
    and os.listdir in os.supports_fd
)
# errnos by which a filesystem says it has no hard links (FAT, some network mounts).
_NO_HARD_LINKS = {
    getattr(errno, name)
    for name in ("EPERM", "EOPNOTSUPP", "ENOTSUP", "ENOSYS", "EXDEV", "EMLINK", "EINVAL")
    if hasattr(errno, name)
}
_HINT = "set PTC_RETRY_ROOT to a directory you own"
_RESEND = "send the call again in full instead of replaying it"


def _uid() -> int | None:
    # os.getuid does not exist on Windows, where the temp directory is per-user already.
    return os.getuid() if hasattr(os, "getuid") else None


def default_root() -> Path:
    """``$PTC_RETRY_ROOT`` when set and non-empty, else ``<tempdir>/ptc-retry-<uid>``."""
    env = os.environ.get("PTC_RETRY_ROOT")
    if env:
        return Path(env).expanduser()
    uid = _uid()
    return Path(tempfile.gettempdir()) / f"ptc-retry-{uid if uid is not None else 'user'}"


# -- where a store may live ---------------------------------------------------------------------


def check_ancestors(root: Path) -> None:
    """Raise StoreError when a directory above ``root`` is reached through an unsafe symlink.

    ``root`` is absolute. Walking down from ``/``, a symlink is followed only when nobody but
    the superuser could have made or changed it: the link belongs to uid 0 and so does the
    directory holding it, which others cannot write (or which is sticky). That admits system
    links such as macOS ``/var -> private/var`` or ``/tmp -> private/tmp`` and refuses every
    other one, including the user's own (a program run by the kernel could have planted it).
    Components that do not exist yet are fine: they are created as real directories. Owners
    and modes of the directories above are not checked: the root itself is opened without
    following a link and must be ours and closed to others, so whatever happens above it,
    the store writes only into a directory that is the user's alone. Nothing is changed.
    """
    real = Path(root.anchor)
    pending = list(root.parts[1:-1])  # the root itself is checked when it is opened
    hops = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            real = real.parent
            continue
        here = real / name
        try:
            st = os.lstat(here)
        except OSError:  # missing (created later, without links) or unreadable (open fails)
            return
        if not stat.S_ISLNK(st.st_mode):
            real = here
            continue
        target = os.readlink(here)
        if not _only_superuser_controls(st, real) or hops >= 40:
            raise StoreError(
                f"checkpoint root {root} lies under the symlink {here} -> {target}, which "
                f"could be changed to point anywhere; set PTC_RETRY_ROOT to the real path "
                f"{os.path.realpath(root)}, or to another directory you own."
            )
        hops += 1
        if os.path.isabs(target):
            real = Path(Path(target).anchor)
            pending[:0] = Path(target).parts[1:]
        else:
            pending[:0] = Path(target).parts


def _only_superuser_controls(link: os.stat_result, parent: Path) -> bool:
    if not hasattr(os, "getuid"):
        return False
    try:
        holder = os.lstat(parent)
    except OSError:
        return False
    open_to_others = holder.st_mode & 0o022 and not holder.st_mode & stat.S_ISVTX
    return link.st_uid == 0 and holder.st_uid == 0 and not open_to_others


def check_dir(path: Path, what: str, st: os.stat_result | None = None) -> None:
    """Raise StoreError unless ``path`` is a real directory of ours that only we can write.

    Refused: a symlink (it could point anywhere), another user's directory (they could
    read or swap our programs), a shared sticky directory such as /tmp itself, and a
    directory others can write (they could plant or swap files in it). Changes nothing.
    """
    st = st if st is not None else os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise StoreError(f"{what} {path} is a symlink, which could point anywhere; {_HINT}.")
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{what} {path} exists but is not a directory; {_HINT}.")
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        raise StoreError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {uid}), so it could "
            f"read or swap your programs; {_HINT}."
        )
    if st.st_mode & stat.S_ISVTX:  # chmod would break a shared directory such as /tmp
        raise StoreError(f"{what} {path} is a shared directory (sticky bit); {_HINT}.")
    if uid is not None and st.st_mode & 0o022:
        who = " and ".join(
            name for bit, name in ((0o020, "its group"), (0o002, "all users")) if st.st_mode & bit
        )
        raise StoreError(
            f"{what} {path} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o}), who "
            f"could plant or swap programs in it; ptc-retry leaves its mode as it is: run "
            f"`chmod go-w {path}` if only you should write there, or {_HINT} alone."
        )


def session_in_use(session_dir: str | os.PathLike[str]) -> bool:
    """True while a live process has the session open (holds its lock); changes nothing.

    False too where sessions cannot be locked (no ``fcntl``, a filesystem without locks).
    """
    if fcntl is None:
        return False
    try:
        fd = os.open(Path(session_dir) / "history.jsonl", _O_READ)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also drops the shared lock just taken
    return False


def _lock(fd: int) -> bool | None:
    """Take the session's exclusive lock: True, False when another process holds it, None
    when this filesystem (or OS) cannot lock."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EOPNOTSUPP: some network filesystems
        return None
    return True


class _Dir:
    """A directory the store works in: through its descriptor where the OS allows it, so that
    a link swapped in for the directory later is never followed; else (Windows, or once the
    store is closed) through its path."""

    __slots__ = ("path", "fd")

    def __init__(self, path: Path, fd: int | None = None) -> None:
        self.path = path
        self.fd = fd

    def _at(self, name: str) -> str | Path:
        return name if self.fd is not None else self.path / name

    def open(self, name: str, flags: int, mode: int = _FILE_MODE) -> int:
        return os.open(self._at(name), flags, mode, dir_fd=self.fd)

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(self._at(name), dir_fd=self.fd, follow_symlinks=False)

    def exists(self, name: str) -> bool:
        """True when ``name`` is here, a dangling link included."""
        try:
            self.lstat(name)
        except OSError:
            return False
        return True

    def mkdir(self, name: str) -> bool:
        """Create the directory ``name`` (mode 0700 before the umask); False if it exists."""
        try:
            os.mkdir(self._at(name), _DIR_MODE, dir_fd=self.fd)
        except FileExistsError:
            return False
        except FileNotFoundError:
            if self.fd is not None:
                raise
            os.makedirs(self.path, exist_ok=True)  # the root's parents: plain directories
            return self.mkdir(name)
        return True

    def replace(self, src: str, dst: str) -> None:
        os.replace(self._at(src), self._at(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        os.unlink(self._at(name), dir_fd=self.fd)

    def symlink(self, target: str, name: str) -> None:
        os.symlink(target, self._at(name), dir_fd=self.fd)

    def readlink(self, name: str) -> str:
        return os.readlink(self._at(name), dir_fd=self.fd)

    def link_from(self, source: _Dir, src: str, name: str) -> None:
        """Hard-link ``source/src`` as ``name`` here; a link at ``src`` is linked, not followed."""
        if self.fd is not None and source.fd is not None:
            os.link(src, name, src_dir_fd=source.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        else:
            os.link(source.path / src, self.path / name)

    def names(self) -> list[str]:
        return os.listdir(self.fd if self.fd is not None else self.path)

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __truediv__(self, name: str) -> _Entry:
        return _Entry(self, name)


class _Entry(NamedTuple):
    """The file ``name`` in ``directory``: what ``_write_atomic`` replaces."""

    directory: _Dir
    name: str


def _open_dir(parent: _Dir, name: str, what: str, *, ours: bool) -> _Dir:
    """Open the directory ``parent/name`` without following a link, creating it 0700 if missing.

    ``ours``: a directory of the session's own layout, made 0700 when its mode differs.
    Otherwise (the root, the session directory, which may be a user's directory) an existing
    one keeps its mode and must pass ``check_dir``.
    """
    path = parent.path / name
    created = parent.mkdir(name)
    check = parent.lstat(name)
    if stat.S_ISLNK(check.st_mode) or not stat.S_ISDIR(check.st_mode):
        check_dir(path, what, check)  # raises, with the message for what it is
    fd = parent.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW) if _DIR_FDS else None
    try:
        st = os.fstat(fd) if fd is not None else check
        mine = _uid() in (None, st.st_uid)
        if mine and (created or (ours and stat.S_IMODE(st.st_mode) != _DIR_MODE)):
            # The umask may have removed bits we need, or added some we do not want.
            if fd is not None:
                os.fchmod(fd, _DIR_MODE)
            else:
                os.chmod(path, _DIR_MODE)
            st = os.fstat(fd) if fd is not None else parent.lstat(name)
        check_dir(path, what, st)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return _Dir(path, fd)


def _open_regular(directory: _Dir, name: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``directory/name`` without following a link; ``OSError`` (ELOOP) for a link,
    ``IsADirectoryError`` for anything but a regular file."""
    fd = directory.open(name, flags | _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", str(directory.path / name))
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


# The kernel that last held a session: a hidden file, so every reader skips it.
_OWNER = ".owner"


def _owner_of(root: _Dir, session: str) -> str | None:
    """What ``root/session/.owner`` says, or None (no such session or file, unreadable)."""
    try:
        if not stat.S_ISDIR(root.lstat(session).st_mode):
            return None
        directory = _open_dir(root, session, "session directory", ours=False)
    except (OSError, StoreError):
        return None
    try:
        fd, _ = _open_regular(directory, _OWNER, os.O_RDONLY)
    except OSError:
        return None
    finally:
        directory.close()
    try:
        return os.read(fd, 200).decode("ascii", "replace")
    finally:
        os.close(fd)


def _write_atomic(entry: _Entry, data: bytes) -> None:
    """Replace ``entry`` by ``data`` whole: a reader sees the old file or the new one.

    The temp file gets a fresh random name and is created with ``O_EXCL | O_NOFOLLOW``, so a
    link planted under a predictable name is never written through. No fsync: the rename
    already protects against a crashing process, the failure we keep checkpoints for;
    surviving power loss is not worth a disk flush on every cell.
    """
    directory, name = entry
    tmp = _temp_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_BINARY
    fd = directory.open(tmp, flags, _FILE_MODE)  # fails on anything already there, a link too
    try:
        try:
            _fix_mode(fd)
            _write_all(fd, data)
        finally:
            os.close(fd)
        directory.replace(tmp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
        raise


# Temp names: a random part drawn once per process (nobody outside our 0700 directories can
# guess it), the pid (a forked child draws the same part) and a counter. O_EXCL still refuses
# anything already there; one random draw per cell cost a system call on every cell.
_TEMP_SECRET = secrets.token_hex(6)
_temp_counter = itertools.count()


def _temp_name(name: str) -> str:
    # Hidden (every reader skips it) and ending in .tmp (a reopen deletes it if it stays).
    return f".{name}.{os.getpid()}-{_TEMP_SECRET}-{next(_temp_counter)}.tmp"


def _umask_keeps_file_mode() -> bool:
    """Whether the process umask leaves 0600 as it is, read without changing it (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & _FILE_MODE == 0
    except (OSError, ValueError, IndexError):
        pass
    return False


# Read again whenever a store opens (a program may change the umask).
_UMASK_KEEPS_FILE_MODE = False


def _fix_mode(fd: int) -> None:
    # os.open's mode passes through the umask, which can only take bits away: where it
    # keeps 0600 (the usual 022 or 077) the file is 0600 already and the call is saved.
    if hasattr(os, "fchmod") and not _UMASK_KEEPS_FILE_MODE:
        os.fchmod(fd, _FILE_MODE)


def _write_all(fd: int, data: bytes) -> None:
    # A regular file takes the whole buffer in one write; loop only for the rare short write.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _utf8(arguments: str) -> bytes:
    try:
        return arguments.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: a store failure the caller reports
        raise StoreError(
            f"the arguments cannot be saved as UTF-8 ({exc.reason} at index {exc.start})"
        ) from None


# -- reading what is on disk, by rules the store and the CLI share -------------------------------


def _lines(read: Callable[[int], bytes]) -> Iterator[bytes]:
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


def _record(line: bytes) -> dict[str, Any] | None:
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


def _records(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    return [record for record in map(_record, lines) if record is not None]


def read_history(session_dir: Path) -> list[dict[str, Any]]:
    """The records of ``session_dir/history.jsonl`` by the store's rules; [] when there is no
    readable regular file there (a link is never followed). Raises nothing."""
    try:
        fd, _ = _open_regular(_Dir(session_dir), "history.jsonl", os.O_RDONLY)
    except OSError:
        return []
    try:
        return _records(_lines(lambda size: os.read(fd, size)))
    except OSError:
        return []
    finally:
        os.close(fd)


def link_target_id(target: str) -> str | None:
    """The call id a ``previous/`` or ``calls/`` symlink's text names, if it is one of ours.

    Ours read ``../by-id/<id>.json``; any other text (an absolute path, another directory,
    a name the store never gives) is None: such a link is never followed.
    """
    parts = re.split(r"[\\/]", target)
    if len(parts) != 3 or parts[:2] != [os.pardir, "by-id"] or not parts[2].endswith(".json"):
        return None
    call_id = parts[2][: -len(".json")]
    return call_id if is_name(call_id) else None


def read_checkpoint(by_id: _Dir, call_id: str, shown: Path) -> bytes:
    """The bytes of ``by_id/<call_id>.json``; CheckpointError naming ``shown`` when it is
    missing, a link (never followed: it could point outside the session), not a regular file
    or unreadable."""
    name = f"{call_id}.json"
    try:
        fd, _ = _open_regular(by_id, name, os.O_RDONLY)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {shown} was deleted; {_RESEND}.") from None
    except OSError as exc:
        try:
            link = stat.S_ISLNK(by_id.lstat(name).st_mode)
        except OSError:
            link = False
        if link:
            raise CheckpointError(
                f"checkpoint {by_id.path / name} is a symbolic link, which could point outside "
                f"the session, so it is not read; {_RESEND}."
            ) from None
        if isinstance(exc, IsADirectoryError):
            raise CheckpointError(
                f"checkpoint {by_id.path / name} is not a regular file; {_RESEND}."
            ) from None
        raise CheckpointError(
            f"cannot read checkpoint {shown} ({exc.strerror}); {_RESEND}."
        ) from None
    try:
        return _read_all(fd)
    except OSError as exc:
        raise CheckpointError(
            f"cannot read checkpoint {shown} ({exc.strerror}); {_RESEND}."
        ) from None
    finally:
        os.close(fd)


def previous_id(previous: _Dir, by_id: _Dir, n: int, candidates: Iterable[str]) -> str | None:
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
        for call_id in chain(candidates, (name[:-5] for name in _json_names(by_id))):
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
        fd, _ = _open_regular(previous, ".ids", os.O_RDONLY)
    except OSError:
        return None
    try:
        ids = _read_all(fd).decode("utf-8", "replace").splitlines()
    finally:
        os.close(fd)
    call_id = ids[n - 1] if 0 < n <= len(ids) else None
    return call_id if is_name(call_id) else None


def _json_names(directory: _Dir) -> list[str]:
    try:
        return [n for n in directory.names() if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return []


def _pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows; appends still go to the end (O_APPEND)
    return os.read(fd, size)


@dataclass
class Call:
    """One checkpointed call, as ``begin`` saved it; pass it to ``finish``."""

    id: str  # the sanitized, de-duplicated id actually used: the file name stem
    sent_id: str | None  # the id the caller asked for, when it differs from ``id``
    tool: str
    turn: int
    step: int | None  # None: the call was a step of its own
    ordinal: int  # 1-based position of the call within its step
    path: Path  # by-id/<id>.json
    bytes: int  # UTF-8 size of the saved arguments
    started: float  # time.time() at begin
    replay_of: str | None = None
    n: int = 0  # the call's number in its session: its short reference is "#<n>"
    code_bytes: int | None = None  # UTF-8 size of the program, when the caller knows it

    @property
    def reference(self) -> str:
        return reference(self.n)


_OPEN: weakref.WeakSet[CheckpointStore] = weakref.WeakSet()


def _forget_in_child() -> None:
    # A forked child (multiprocessing's fork) must neither write to its parent's session nor
    # keep it locked once the parent dies: it drops its copies of the descriptors.
    for store in list(_OPEN):
        store._abandon()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class CheckpointStore:
    """The checkpoints and history of one session; safe to share between threads.

    Opening an existing session continues it (a kernel restart): ids never collide with the
    earlier ones, and checkpoints that never got a history line are recorded as
    ``unfinished``. Torn or garbage history lines are skipped, never fatal, and so are
    ``by-id/`` entries that are not regular files (``warning`` says so).

    The session belongs to this store until ``close`` (or the process's end): when another
    live process holds it, the store opens ``<session>.2`` (or the next free number) and
    ``session``, ``session_dir`` and ``warning`` say so.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        session: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """``owner``: what names this kernel across its restarts (the extension passes a
        digest of its connection file). A restarted kernel that had been moved to
        ``<session>.2`` goes back there, not into a ``<session>`` that has become free."""
        # absolute(): user code may chdir, and later paths must still mean the same place.
        self.root = (Path(root).expanduser() if root is not None else default_root()).absolute()
        requested = sanitize(session) if session is not None else f"s{secrets.token_hex(4)}"
        self.session = requested
        self.session_dir = self.root / requested
        #: One line on what opening found or changed (another kernel holds the session, a
        #: damaged entry was skipped), for the caller to show once; None when all was well.
        self.warning: str | None = None
        self._warnings: list[str] = []
        self._lock = threading.Lock()
        self._fd: int | None = None  # history.jsonl, open for appending; holds the lock
        self._dirs: list[_Dir] = []
        self._used: set[str] = set()  # every id this session has, case-folded: none is reused
        self._status: dict[str, str] = {}  # latest history status of each id
        self._recent: dict[str, None] = {}  # ids, least recent first (dicts keep order)
        self._next_auto = 1  # next N to try for an automatic id c<N>
        self._step_key: object = None  # (turn, step) of the current step
        self._step_ids: list[str] = []  # the current step's ids, in ordinal order
        self._prev_ids: list[str] = []  # what previous/ holds, when this process rebuilt it
        self._numbers: dict[int, str] = {}  # session number -> id
        self._ambiguous: set[int] = set()  # numbers that name two calls (a damaged history)
        self._hash_ids: set[str] = set()  # ids a caller sent that look like "#n" references
        self._next_n = 1
        self._prev_count = 0  # how many previous/<n>.json exist (n = 1..count)
        self._hard_links = True  # False once the filesystem refused a hard link
        self._copy_links = False  # True once the filesystem refused a symlink too
        self._torn = False  # history.jsonl ends in a torn line: start the next one fresh
        global _UMASK_KEEPS_FILE_MODE
        _UMASK_KEEPS_FILE_MODE = _umask_keeps_file_mode()
        self._size = 0  # bytes in history.jsonl, kept here while only this store appends
        self._alone = False  # True once the session is locked: nobody else appends
        self._pending: list[tuple[str, str, bytes]] = []  # history lines a write failed to add
        check_ancestors(self.root)
        root_dir = _open_dir(_Dir(self.root.parent), self.root.name, "checkpoint root", ours=False)
        try:
            session_dir = self._claim(root_dir, requested, owner)
        finally:
            root_dir.close()
        try:
            self._by_id = _open_dir(session_dir, "by-id", "checkpoint directory", ours=True)
            self._dirs.append(self._by_id)
            self._previous = _open_dir(
                session_dir, "previous", "previous-step directory", ours=True
            )
            self._dirs.append(self._previous)
            self._calls = _open_dir(session_dir, "calls", "numbered-calls directory", ours=True)
            self._dirs.append(self._calls)
            self._continue_session()
        except BaseException:
            self.close()
            raise
        finally:
            session_dir.close()
        self.warning = "; ".join(self._warnings) or None
        _OPEN.add(self)

    # -- opening ------------------------------------------------------------------------------

    def _claim(self, root: _Dir, requested: str, owner: str | None) -> _Dir:
        """Open and lock the session directory: the free one ``owner`` had (a restart), else
        ``requested``, else the first free numbered one."""
        names = [requested] + [numbered(requested, n) for n in range(2, _MAX_SESSIONS + 1)]
        if owner is not None:
            mine = [name for name in names if _owner_of(root, name) == owner]
            names = mine + [name for name in names if name not in mine]
        for name in names:
            attempt = 1 if name == requested else 2
            session = _open_dir(root, name, "session directory", ours=False)
            try:
                fd = self._open_history(session)
            except BaseException:
                session.close()
                raise
            held = _lock(fd)
            if held is False:  # another live process has it: try the next name
                os.close(fd)
                session.close()
                continue
            self._fd, self.session, self.session_dir = fd, name, session.path
            self._alone = held is True
            if held is None and fcntl is not None:
                self._warnings.append(
                    f"the filesystem of {session.path} cannot lock it, so a second kernel given "
                    "the same session would share it"
                )
            returning = owner is not None and _owner_of(root, name) == owner
            if owner is not None and not returning:
                with contextlib.suppress(OSError):  # without it, a restart may land elsewhere
                    _write_atomic((session, _OWNER), owner.encode())
            if attempt > 1 and not returning:
                self._warnings.append(
                    f"session {requested} is in use by another live kernel, so this one saves "
                    f"its programs in {session.path}"
                )
            return session
        raise StoreError(
            f"sessions {requested} to {numbered(requested, _MAX_SESSIONS)} in {self.root} are "
            "all in use by live kernels; give this kernel another session name "
            "(PTC_RETRY_SESSION or PtcRetry.session_id)."
        )

    @staticmethod
    def _open_history(session: _Dir) -> int:
        path = session.path / "history.jsonl"
        try:
            fd, st = _open_regular(session, "history.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            try:
                kind = session.lstat("history.jsonl").st_mode
            except OSError:
                raise exc from None
            if stat.S_ISLNK(kind) or not stat.S_ISREG(kind):
                what = "a symlink" if stat.S_ISLNK(kind) else "not a regular file"
                raise StoreError(
                    f"{path} is {what}; ptc-retry never writes through a link: remove it, or "
                    "give this kernel another session name."
                ) from None
            raise
        try:
            uid = _uid()
            if uid is not None and st.st_uid != uid:
                raise StoreError(f"{path} belongs to uid {st.st_uid}, not to you; {_HINT}.")
            if stat.S_IMODE(st.st_mode) != _FILE_MODE:
                _fix_mode(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _continue_session(self) -> None:
        assert self._fd is not None
        size = self._size = os.fstat(self._fd).st_size
        self._torn = size > 0 and _pread(self._fd, 1, size - 1) != b"\n"
        records = self._read_records()
        for record in records:
            self._note_id(record["id"])
            self._status[record["id"]] = str(record.get("status"))
            self._note_number(record.get("n"), record["id"])
            if is_reference(record.get("sent_id")):
                self._hash_ids.add(record["sent_id"])
        for name in self._scan(self._calls):  # numbers a notice gave to calls never finished
            match = _PREVIOUS_NAME.fullmatch(name)
            try:
                target = link_target_id(self._calls.readlink(name)) if match else None
            except OSError:  # a copy: the history has its number
                continue
            if match and target is not None:
                self._note_number(int(match.group(1)), target)
        for name in self._scan(self._previous):
            match = _PREVIOUS_NAME.fullmatch(name)
            if match:
                self._prev_count = max(self._prev_count, int(match.group(1)))
        orphans, skipped = [], []
        for name in self._scan(self._by_id):
            call_id = name[: -len(".json")]
            if not name.endswith(".json") or call_id in self._status:
                continue
            try:
                st: os.stat_result | None = self._by_id.lstat(name)
            except OSError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode) or not is_name(call_id):
                skipped.append(name)  # a link (never followed), a directory, a foreign name
            else:
                orphans.append((st.st_mtime, call_id, st))
        if skipped:
            many = len(skipped) > 1
            self._warnings.append(
                f"skipped {len(skipped)} entr{'ies' if many else 'y'} of {self._by_id.path} "
                f"that {'are' if many else 'is'} not a checkpoint (a link, or not a regular "
                f"file): {', '.join(sorted(skipped)[:3])}{', ...' if len(skipped) > 3 else ''}"
            )
        named = {cid: n for n, cid in self._numbers.items()}
        for _, call_id, st in sorted(orphans):  # saved, then the process died before finish
            n = named.get(call_id)
            if n is None:
                n = self._next_n
                self._note_number(n, call_id)
            line = unfinished_line(call_id, st, n)
            self._pending.append((call_id, "unfinished", self._encode(line)))
            records.append(line)
            self._note_id(call_id)
            self._status[call_id] = "unfinished"
        if self._pending:
            try:
                self._write_pending()
            except OSError as exc:  # a full disk: the next finish tries again
                self._warnings.append(
                    f"could not record {len(self._pending)} unfinished call(s) in the history "
                    f"yet ({exc.strerror})"
                )
        if records:  # the last step goes on, so its calls become previous/ at the next step
            last = records[-1]
            if last.get("step") is None:
                self._step_key, self._step_ids = object(), [last["id"]]
            else:
                self._step_key = (last.get("turn"), last["step"])
                run = []
                for record in reversed(records):
                    if (record.get("turn"), record.get("step")) != self._step_key:
                        break
                    run.append(record)
                run.sort(key=lambda r: r.get("ordinal") if isinstance(r.get("ordinal"), int) else 0)
                self._step_ids = [r["id"] for r in run]

    @staticmethod
    def _scan(directory: _Dir) -> list[str]:
        """Names in ``directory``, without hidden ones; stale temp files are deleted."""
        names = []
        for name in directory.names():
            if not name.startswith("."):
                names.append(name)
            elif name.endswith(".tmp"):  # left by a process that died mid-write
                with contextlib.suppress(OSError):
                    directory.unlink(name)
        return names

    def _note_number(self, n: object, call_id: str) -> None:
        if not is_number(n):
            return
        known = self._numbers.setdefault(n, call_id)  # type: ignore[arg-type]
        if known != call_id:
            self._ambiguous.add(n)  # type: ignore[arg-type]
        self._next_n = max(self._next_n, n + 1)  # type: ignore[operator]

    def _note_id(self, call_id: str) -> None:
        # Case-folded: on a case-insensitive filesystem "Call_A" and "call_a" are one file.
        self._used.add(call_id.lower())
        self._recent.pop(call_id, None)
        self._recent[call_id] = None
        match = _AUTO_ID.fullmatch(call_id)
        if match:
            self._next_auto = max(self._next_auto, int(match.group(1)) + 1)

    # -- the hot path -------------------------------------------------------------------------

    def begin(
        self,
        arguments: str,
        *,
        call_id: str | None = None,
        tool: str = "run_code",
        turn: int = 0,
        step: int | None = None,
        code_bytes: int | None = None,
    ) -> Call:
        """Save ``arguments`` byte for byte (UTF-8) as ``by-id/<id>.json`` and return the Call.

        The call gets the session's next number ``n`` (its reference ``"#n"``).
        ``code_bytes``, the program's own size, goes into the history line when given.
        The id is ``sanitize(call_id)``, de-duplicated as ``<id>.2``, ``<id>.3``... within the
        session (ids that differ only in case count as the same); without ``call_id`` it is
        the next unused ``c<N>``. A call whose ``(turn, step)`` differs from the current
        step's (always, when ``step`` is None) starts a new step, and ``previous/`` then holds
        the calls of the step that just ended. One new file per call: its checkpoint
        (``previous/`` entries are hard links). The content is not validated here: ``load``
        does that when it is read back.
        """
        data = _utf8(arguments)
        with self._lock:
            self._require_open()
            if call_id is None:
                while f"c{self._next_auto}" in self._used:
                    self._next_auto += 1
                cid = f"c{self._next_auto}"
            else:
                cid = self._unique(sanitize(call_id))
            # First: a program that kills the kernel is still saved.
            _write_atomic(self._by_id / f"{cid}.json", data)
            self._note_id(cid)
            n = self._next_n
            self._note_number(n, cid)
            if is_reference(call_id):
                self._hash_ids.add(call_id)  # type: ignore[arg-type]
            key = (turn, step) if step is not None else object()
            if key != self._step_key:
                ended, self._step_key, self._step_ids = self._step_ids, key, []
                self._step_ids.append(cid)
                self._rebuild_previous(ended)
            else:
                self._step_ids.append(cid)
            sent_id = call_id if call_id is not None and call_id != cid else None
            ordinal = len(self._step_ids)
            path = self._by_id.path / f"{cid}.json"
            call = Call(cid, sent_id, tool, turn, step, ordinal, path, len(data), time.time())
            call.n, call.code_bytes = n, code_bytes
            return call

    def _unique(self, base: str) -> str:
        # A linear probe is fine: callers send unique ids, duplicates are the rare exception.
        cid, n = base, 1
        while cid.lower() in self._used:
            n += 1
            cid = numbered(base, n)
        return cid

    def _rebuild_previous(self, ids: list[str]) -> None:
        """Make previous/<n>.json the n-th of ``ids``, and remove higher-numbered entries."""
        try:
            for n, cid in enumerate(ids, 1):
                # An entry that already is this call stays: renaming a hard link onto another
                # link of the same file would do nothing and leave the temp name behind.
                if self._prev_ids[n - 1 : n] != [cid]:
                    self._link(self._previous, f"{n}.json", cid, hard=True)
            for n in range(len(ids) + 1, self._prev_count + 1):
                with contextlib.suppress(FileNotFoundError):
                    self._previous.unlink(f"{n}.json")
            if self._copy_links:  # a copy does not say which call it is: .ids does, a line each
                _write_atomic(self._previous / ".ids", "".join(f"{i}\n" for i in ids).encode())
        except BaseException:
            # previous/ is half rebuilt: say nothing of it, the next step rebuilds it whole.
            self._prev_ids, self._prev_count = [], max(self._prev_count, len(ids))
            raise
        self._prev_ids, self._prev_count = list(ids), len(ids)

    def _link(self, directory: _Dir, name: str, call_id: str, *, hard: bool) -> None:
        """Make ``directory/name`` stand for ``by-id/<call_id>.json``, replacing it atomically.

        A hard link when ``hard`` (no new inode: the cheapest, and it reads as the checkpoint
        itself), else or where refused a symlink ``../by-id/<id>.json``, else a copy. A
        checkpoint deleted meanwhile gets a symlink (which ``load`` reports as deleted), or
        no entry where symlinks are refused.
        """
        source = f"{call_id}.json"
        tmp = _temp_name(name)
        if hard and self._hard_links:
            try:
                directory.link_from(self._by_id, source, tmp)
            except FileNotFoundError:
                pass  # no checkpoint to link: a symlink says which call was there
            except NotImplementedError:
                self._hard_links = False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                self._hard_links = False
            else:
                self._replace_link(directory, tmp, name)
                return
        if not self._copy_links:
            try:
                directory.symlink(os.path.join(os.pardir, "by-id", source), tmp)
            except (NotImplementedError, OSError):
                self._copy_links = True  # e.g. FAT, some network mounts, Windows without rights
            else:
                self._replace_link(directory, tmp, name)
                return
        try:
            fd, _ = _open_regular(self._by_id, source, os.O_RDONLY)
        except FileNotFoundError:
            with contextlib.suppress(FileNotFoundError):
                directory.unlink(name)
            return
        try:
            data = _read_all(fd)
        finally:
            os.close(fd)
        _write_atomic(directory / name, data)

    @staticmethod
    def _replace_link(directory: _Dir, tmp: str, name: str) -> None:
        try:
            directory.replace(tmp, name)  # atomic: the old entry stays until the new one is in
        except BaseException:
            with contextlib.suppress(OSError):
                directory.unlink(tmp)
            raise

    def replace_arguments(
        self,
        call: Call,
        arguments: str,
        *,
        replay_of: str | None = None,
        code_bytes: int | None = None,
    ) -> None:
        """Atomically make ``arguments`` the call's checkpoint (a replay's corrected program).

        Updates ``call.bytes`` and ``call.code_bytes``, and ``call.replay_of`` when
        ``replay_of`` is given.
        """
        data = _utf8(arguments)
        with self._lock:
            self._require_open()
            _write_atomic(self._by_id / f"{call.id}.json", data)
            # A hard link or a copy in previous/ still holds the old content: renew it.
            if call.id in self._prev_ids and (self._hard_links or self._copy_links):
                name = f"{self._prev_ids.index(call.id) + 1}.json"
                self._link(self._previous, name, call.id, hard=True)
        call.bytes, call.code_bytes = len(data), code_bytes
        if replay_of is not None:
            call.replay_of = replay_of

    def finish(self, call: Call, status: str, **extra: object) -> dict[str, Any]:
        """Append the call's line to history.jsonl and return it.

        ``status`` is one of ``STATUSES`` (ValueError otherwise); ``extra`` adds keys (e.g.
        ``ename``) but may not override the standard ones. Values JSON cannot encode are
        written as ``str(value)``. The append is one write on a file kept open, so its cost
        does not grow with the history. A write that fails part-way (a full disk) is taken
        back, so the lines after it stay whole, and its line is written with the next one.
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(sorted(STATUSES))}, not {status!r}")
        clash = _LINE_KEYS.intersection(extra)
        if clash:
            raise ValueError(f"extra keys {sorted(clash)} would override the standard ones")
        line: dict[str, Any] = {"id": call.id, "n": call.n, "tool": call.tool, "turn": call.turn}
        line.update(step=call.step, ordinal=call.ordinal, status=status, time=call.started)
        line.update(duration=round(time.time() - call.started, 3), bytes=call.bytes)
        if call.code_bytes is not None:
            line["code_bytes"] = call.code_bytes
        if call.replay_of is not None:
            line["replay_of"] = call.replay_of
        if call.sent_id is not None:
            line["sent_id"] = call.sent_id
        line.update(extra)
        data = self._encode(line)
        with self._lock:
            self._require_open()
            self._pending.append((call.id, status, data))
            del self._pending[:-_MAX_PENDING]
            self._write_pending()
        return line

    @staticmethod
    def _encode(line: dict[str, Any]) -> bytes:
        text = json.dumps(line, separators=(",", ":"), ensure_ascii=False, default=str) + "\n"
        # backslashreplace turns a lone surrogate into its JSON escape, which reads back as is.
        return text.encode("utf-8", "backslashreplace")

    def _write_pending(self) -> None:
        """Append the pending lines in one write, or leave the file as it was and raise."""
        fd = self._fd
        assert fd is not None
        data = b"".join(line for _, _, line in self._pending)
        if self._torn:
            data = b"\n" + data
        # Locked, we alone append: the size kept here saves a system call on every line.
        size = self._size if self._alone else os.fstat(fd).st_size
        try:
            _write_all(fd, data)
        except BaseException:
            # A partial write would leave a torn line for the next one to be glued to.
            try:
                os.ftruncate(fd, size)
            except OSError:
                self._torn = True
                with contextlib.suppress(OSError):
                    self._size = os.fstat(fd).st_size
            raise
        self._size = size + len(data)
        for call_id, status, _ in self._pending:
            self._status[call_id] = status
        self._pending.clear()
        self._torn = False

    def _require_open(self) -> None:
        if self._fd is None:
            raise StoreError(f"the store of {self.session_dir} is closed; open a new one.")

    def close(self) -> None:
        """Close the history file, which frees the session for another process; later
        ``begin``/``finish`` raise StoreError, reading goes on by path. Idempotent."""
        with self._lock:
            if self._fd is not None:
                if self._pending:
                    with contextlib.suppress(OSError):
                        self._write_pending()
                fd, self._fd = self._fd, None
                os.close(fd)
            for directory in self._dirs:
                directory.close()
        _OPEN.discard(self)

    def _abandon(self) -> None:
        """In a forked child: drop this process's copies of the descriptors, write nothing."""
        self._lock = threading.Lock()  # another thread of the parent may have held it
        self._pending.clear()
        fds = [self._fd] + [directory.fd for directory in self._dirs]
        self._fd = None
        for directory in self._dirs:
            directory.fd = None
        for fd in fds:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        # A store dropped without close must not keep its session locked until the process ends.
        try:
            self.close()
        except Exception:  # half-built, or the interpreter is shutting down
            pass

    # -- reading ------------------------------------------------------------------------------

    def path_for(self, target: str | int) -> Path:
        """The checkpoint file of ``target``; always inside the session directory.

        ``target`` is a reference ``"#n"`` (program number n of this session), a call id
        (``by-id/<sanitize(id)>.json``) or an int n (``previous/<n>.json``). Raises
        CheckpointError when the file does not exist, when a reference is unknown or names
        two calls (a damaged history), or when ``target`` is none of these (a bool is no int).
        """
        if is_reference(target):
            return self._by_id.path / f"{self.id_for_reference(target)}.json"  # type: ignore[arg-type]
        if isinstance(target, str):
            call_id = sanitize(target)
            path = self._by_id.path / f"{call_id}.json"
            with self._lock:
                known = call_id in self._recent
            # A file put there by hand counts under exactly its name: a case-insensitive disk
            # would also find Call_A.json for call_a.json.
            if not self._by_id.exists(f"{call_id}.json") or not (
                known or f"{call_id}.json" in _json_names(self._by_id)
            ):
                raise CheckpointError(
                    f"no checkpoint for call id {target!r} in this session ({path} does not "
                    f"exist); the most recent are: {self._recent_text()}."
                )
            return path
        if isinstance(target, int) and not isinstance(target, bool):
            path = self._previous.path / f"{target}.json"
            # exists() looks at the entry itself: a link to a deleted checkpoint is reported
            # as deleted by load.
            if target < 1 or not self._previous.exists(f"{target}.json"):
                raise CheckpointError(
                    f"no previous/{target}.json: previous/ holds the {self._prev_count} call(s) "
                    f"of the step before this one, numbered from 1. For program number "
                    f'{target} of the session write "#{target}"; the most recent are: '
                    f"{self._recent_text()}."
                )
            return path
        raise CheckpointError(
            f'a checkpoint target is a reference like "#7", a call id (str) or a position in '
            f"the previous step (int >= 1), not {type(target).__name__} {target!r}."
        )

    def id_for_reference(self, ref: str) -> str:
        """The call id that reference ``"#n"`` names; CheckpointError when there is none.

        A reference is refused, never guessed, when it is malformed, names no call of this
        session (a reference from another session, or a number not given yet), names two
        calls, or is also the id a caller sent for another call.
        """
        n = reference_number(ref)
        with self._lock:
            call_id = self._numbers.get(n)
            last = self._next_n - 1
            ambiguous = n in self._ambiguous or (ref in self._hash_ids and call_id != ref)
        if call_id is None:
            known = f"#1 to #{last}" if last else "none yet"
            raise CheckpointError(
                f"no program {ref} in this session ({self.session_dir}); its programs are "
                f"{known}. A reference belongs to the session whose notice gave it: give the "
                "call id, or send the program again."
            )
        if ambiguous:
            raise CheckpointError(
                f"{ref} is ambiguous in this session (two calls carry it, or a call id is "
                f"{ref!r} itself); replay by call id instead: {self._recent_text()}."
            )
        return call_id

    def reference_of(self, call_id: str) -> str | None:
        """The short reference ``"#n"`` of the call saved as ``call_id``, if it has one."""
        with self._lock:
            for n, cid in self._numbers.items():
                if cid == call_id and n not in self._ambiguous:
                    return reference(n)
        return None

    def link_number(self, call: Call) -> Path:
        """Make ``calls/<n>.json`` point at the call's checkpoint and return that path.

        Done when a notice names the call, not for every call: one file fewer per cell.
        A symlink (its text tells a reopened store the number of a call that never
        finished), or a copy where the filesystem refuses symlinks.
        """
        name = f"{call.n}.json"
        with self._lock:
            self._require_open()
            if not self._calls.exists(name):
                self._link(self._calls, name, call.id, hard=False)
        return self._calls.path / name

    def _recent_text(self) -> str:
        pairs = []
        for cid in self.latest_ids():
            ref = self.reference_of(cid)
            pairs.append(f"{ref} ({cid})" if ref else cid)
        return ", ".join(pairs) or "none yet"

    def load(self, target: str | int) -> tuple[str, str, dict[str, Any]]:
        """``(call_id, raw_text, decoded)`` of a checkpoint that is a JSON object.

        Raises CheckpointError (naming the path) when it is missing, unreadable, a link (never
        followed), not UTF-8, not JSON or not a JSON object.
        """
        call_id, _, text, decoded = self._load(target)
        return call_id, text, decoded

    def load_code(self, target: str | int) -> tuple[str, str]:
        """``(call_id, code)``: like ``load``, and the object's ``"code"`` must be a string."""
        call_id, path, _, decoded = self._load(target)
        code = decoded.get("code")
        if not isinstance(code, str):
            wrong = f'"code" is a {type(code).__name__}' if "code" in decoded else 'no "code" key'
            raise CheckpointError(f"checkpoint {path} has {wrong}, not a string; {_RESEND}.")
        return call_id, code

    def _load(self, target: str | int) -> tuple[str, Path, str, dict[str, Any]]:
        path = self.path_for(target)
        if isinstance(target, int):  # previous/<n>.json: read its by-id/ file, never a link
            call_id = self._id_of(target, path)
        else:
            call_id = path.name[: -len(".json")]
        data = read_checkpoint(self._by_id, call_id, path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError(
                f"checkpoint {path} is not UTF-8 text (bad byte at offset {exc.start}); {_RESEND}."
            ) from None
        try:
            decoded = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise CheckpointError(f"checkpoint {path} is not JSON ({exc}); {_RESEND}.") from None
        if not isinstance(decoded, dict):
            kind = type(decoded).__name__
            raise CheckpointError(
                f"checkpoint {path} holds a {kind}, not a JSON object; {_RESEND}."
            )
        return call_id, path, text, decoded

    def _id_of(self, n: int, path: Path) -> str:
        """The call id ``previous/<n>.json`` stands for (see ``previous_id``)."""
        with self._lock:
            known = self._prev_ids[n - 1] if n <= len(self._prev_ids) else None
            candidates = ([known] if known else []) + list(reversed(self._recent))
        try:
            call_id = previous_id(self._previous, self._by_id, n, candidates)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path} was deleted; {_RESEND}.") from None
        except OSError:
            call_id = None
        call_id = call_id or known  # e.g. a hard link whose by-id/ file was deleted
        if call_id is None:
            raise CheckpointError(
                f"cannot tell which call {path} is (not a link to a checkpoint, and "
                f"previous/.ids does not name it); load it by reference or call id instead: "
                f"{self._recent_text()}."
            )
        return call_id

    def history(self) -> list[dict[str, Any]]:
        """Every history line the store could have written, in file order: torn, garbage and
        damaged lines are skipped."""
        with self._lock:
            if self._fd is not None:
                return self._read_records()
        return read_history(self.session_dir)

    def _read_records(self) -> list[dict[str, Any]]:
        fd, offset = self._fd, 0
        assert fd is not None

        def read(size: int) -> bytes:
            nonlocal offset
            chunk = _pread(fd, size, offset)
            offset += len(chunk)
            return chunk

        return _records(_lines(read))

    def latest_ids(self, n: int = 5) -> list[str]:
        """The ``n`` most recently begun ids (or recorded, before a reopen), newest first."""
        with self._lock:
            return list(islice(reversed(self._recent), n))

    def unfinished(self) -> list[str]:
        """Ids whose latest history line says ``unfinished`` (their process died mid-call)."""
        with self._lock:
            return [cid for cid, status in self._status.items() if status == "unfinished"]
