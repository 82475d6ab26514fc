"""The filesystem work of a store: directories opened without following links and used
through their descriptors, atomic writes, links that fall back to copies, and the lock that
gives a session to one process. Where a root may live is :mod:`.root`'s. Knows nothing of the
layout."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import stat
from pathlib import Path
from typing import NamedTuple

from .errors import StoreError
from .root import check_dir, uid
from .root import default_root as default_root  # kept importable here: the store's home

try:
    import fcntl
except ImportError:  # Windows: sessions are not locked there
    fcntl = None  # type: ignore[assignment]

_CHUNK = 1 << 20
DIR_MODE = 0o700
FILE_MODE = 0o600
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


# -- the lock -----------------------------------------------------------------------------------


def held_elsewhere(path: str | os.PathLike[str]) -> bool:
    """True while a live process holds an exclusive lock on the file ``path``; changes nothing.

    False too where files cannot be locked (no ``fcntl``, a filesystem without locks).
    """
    if fcntl is None:
        return False
    try:
        fd = os.open(path, _O_READ)
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


def try_lock(fd: int) -> bool | None:
    """Take an exclusive lock on ``fd``: True, False when another process holds it, None
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


# -- directories and files ----------------------------------------------------------------------


class Dir:
    """A directory the store works in: through its descriptor where the OS allows it, so that
    a link swapped in for the directory later is never followed; else (Windows, or once the
    store is closed) through its path."""

    __slots__ = ("path", "fd")

    def __init__(self, path: Path, fd: int | None = None) -> None:
        self.path = path
        self.fd = fd

    def _at(self, name: str) -> str | Path:
        return name if self.fd is not None else self.path / name

    def open(self, name: str, flags: int, mode: int = FILE_MODE) -> int:
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
            os.mkdir(self._at(name), DIR_MODE, dir_fd=self.fd)
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

    def link_from(self, source: Dir, src: str, name: str) -> None:
        """Hard-link ``source/src`` as ``name`` here; a link at ``src`` is linked, not followed."""
        if self.fd is not None and source.fd is not None:
            os.link(src, name, src_dir_fd=source.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        else:
            os.link(source.path / src, self.path / name)

    def names(self) -> list[str]:
        return os.listdir(self.fd if self.fd is not None else self.path)

    def scan(self) -> list[str]:
        """The names here without hidden ones; stale temp files are deleted."""
        names = []
        for name in self.names():
            if not name.startswith("."):
                names.append(name)
            elif name.endswith(".tmp"):  # left by a process that died mid-write
                with contextlib.suppress(OSError):
                    self.unlink(name)
        return names

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __truediv__(self, name: str) -> Entry:
        return Entry(self, name)


class Entry(NamedTuple):
    """The file ``name`` in ``directory``: what ``write_atomic`` replaces."""

    directory: Dir
    name: str


def open_dir(parent: Dir, name: str, what: str, *, ours: bool) -> Dir:
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
        mine = uid() in (None, st.st_uid)
        if mine and (created or (ours and stat.S_IMODE(st.st_mode) != DIR_MODE)):
            # The umask may have removed bits we need, or added some we do not want.
            if fd is not None:
                os.fchmod(fd, DIR_MODE)
            else:
                os.chmod(path, DIR_MODE)
            st = os.fstat(fd) if fd is not None else parent.lstat(name)
        check_dir(path, what, st)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return Dir(path, fd)


def open_regular(directory: Dir, name: str, flags: int) -> tuple[int, os.stat_result]:
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


def open_for_append(directory: Dir, name: str) -> tuple[int, os.stat_result]:
    """Open the regular file ``directory/name`` for appending (read and write), created
    0600 if missing, never through a link: what ``open_regular`` raises, and StoreError for
    a file with more than one hard link, which could be a file outside the session that a
    program linked there (appending would write into it). Overwrites need no such check:
    ``write_atomic`` renames a new file over the name, leaving any other link as it was."""
    fd, st = open_regular(directory, name, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    if st.st_nlink > 1:
        os.close(fd)
        raise StoreError(
            f"{directory.path / name} has {st.st_nlink} hard links, so it may be a file "
            "outside the session; ptc-retry never appends to a linked file: remove it."
        )
    return fd, st


def read_file(directory: Dir, name: str) -> bytes:
    """The whole content of the regular file ``directory/name``, never through a link; raises
    what ``open_regular`` and ``os.read`` raise."""
    fd, _ = open_regular(directory, name, os.O_RDONLY)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def write_atomic(entry: Entry, data: bytes) -> None:
    """Replace ``entry`` by ``data`` whole: a reader sees the old file or the new one.

    The temp file gets a fresh random name and is created with ``O_EXCL | O_NOFOLLOW``, so a
    link planted under a predictable name is never written through. No fsync: the rename
    already protects against a crashing process, the failure we keep checkpoints for;
    surviving power loss is not worth a disk flush on every cell.
    """
    directory, name = entry
    tmp = temp_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_BINARY
    fd = directory.open(tmp, flags, FILE_MODE)  # fails on anything already there, a link too
    try:
        try:
            fix_mode(fd)
            write_all(fd, data)
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


def temp_name(name: str) -> str:
    """A fresh temp name for ``name``: hidden (every reader skips it) and ending in .tmp (a
    reopened store deletes it if it stays)."""
    return f".{name}.{os.getpid()}-{_TEMP_SECRET}-{next(_temp_counter)}.tmp"


def _umask_keeps_file_mode() -> bool:
    """Whether the process umask leaves 0600 as it is, read without changing it (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & FILE_MODE == 0
    except (OSError, ValueError, IndexError):
        pass
    return False


_UMASK_KEEPS_FILE_MODE = False


def read_umask() -> None:
    """Read the umask again: whenever a store opens, since a program may change it."""
    global _UMASK_KEEPS_FILE_MODE
    _UMASK_KEEPS_FILE_MODE = _umask_keeps_file_mode()


def fix_mode(fd: int) -> None:
    """Make the file 0600."""
    # os.open's mode passes through the umask, which can only take bits away: where it
    # keeps 0600 (the usual 022 or 077) the file is 0600 already and the call is saved.
    if hasattr(os, "fchmod") and not _UMASK_KEEPS_FILE_MODE:
        os.fchmod(fd, FILE_MODE)


def write_all(fd: int, data: bytes) -> None:
    # A regular file takes the whole buffer in one write; loop only for the rare short write.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows; appends still go to the end (O_APPEND)
    return os.read(fd, size)


class Linker:
    """Makes an entry stand for a file of another directory, replacing it atomically: a hard
    link (no new inode: the cheapest, and it reads as the file itself), else a symlink, else
    a copy, and remembers what the filesystem refused."""

    def __init__(self) -> None:
        self.hard_links = True  # False once the filesystem refused a hard link
        self.copies = False  # True once the filesystem refused a symlink too

    def link(
        self, directory: Dir, name: str, source: Dir, src: str, symlink_text: str, *, hard: bool
    ) -> None:
        """Make ``directory/name`` stand for ``source/src``; a symlink reads ``symlink_text``.

        A hard link only when ``hard``. A source deleted meanwhile gets a symlink (which says
        what was there), or no entry where symlinks are refused.
        """
        tmp = temp_name(name)
        if hard and self.hard_links:
            try:
                directory.link_from(source, src, tmp)
            except FileNotFoundError:
                pass  # no file to link: a symlink says which was there
            except NotImplementedError:
                self.hard_links = False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                self.hard_links = False
            else:
                _rename(directory, tmp, name)
                return
        if not self.copies:
            try:
                directory.symlink(symlink_text, tmp)
            except (NotImplementedError, OSError):
                self.copies = True  # e.g. FAT, some network mounts, Windows without rights
            else:
                _rename(directory, tmp, name)
                return
        try:
            data = read_file(source, src)
        except FileNotFoundError:
            with contextlib.suppress(FileNotFoundError):
                directory.unlink(name)
            return
        write_atomic(directory / name, data)


def _rename(directory: Dir, tmp: str, name: str) -> None:
    try:
        directory.replace(tmp, name)  # atomic: the old entry stays until the new one is in
    except BaseException:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
        raise
