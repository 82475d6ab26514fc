"""Which session directory a store gets, and the lock that makes it the store's alone: the
one asked for, unless another live process holds it (then ``<session>.2``, ``.3``, ...),
and a restarted kernel's own one first."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import NamedTuple

from .errors import SessionInUseError, StoreError
from .fs import (
    FILE_MODE,
    Dir,
    fcntl,
    fix_mode,
    open_dir,
    open_for_append,
    open_regular,
    try_lock,
    write_atomic,
)
from .layout import HISTORY, OWNER, numbered
from .root import ROOT_HINT, check_ancestors, uid

_MAX_SESSIONS = 100  # <session>, <session>.2, ... <session>.100


class Claimed(NamedTuple):
    """A session directory a store holds: open, with its history open for appending."""

    name: str
    directory: Dir  # the caller closes it
    history_fd: int  # holds the lock, when there is one
    alone: bool  # locked: no other process appends
    warnings: list[str]  # what the caller should say once (moved elsewhere, cannot lock)


def claim(root: Path, requested: str, owner: str | None, *, moves: bool = True) -> Claimed:
    """Open and lock a session directory in ``root`` (absolute, created if missing): the free
    one ``owner`` had (a restart), else ``requested``, else the first free numbered one.

    ``owner`` names a kernel across its restarts; it is written into the directory it gets.
    StoreError when the root or a session directory is unsafe, or every name is in use;
    with ``moves=False`` only ``requested`` is tried, and SessionInUseError, with nothing
    created, says another live process holds it.
    """
    check_ancestors(root)
    root_dir = open_dir(Dir(root.parent), root.name, "checkpoint root", ours=False)
    try:
        return _claim(root_dir, requested, owner, moves)
    finally:
        root_dir.close()


def _claim(root: Dir, requested: str, owner: str | None, moves: bool) -> Claimed:
    names = [requested] + [numbered(requested, n) for n in range(2, _MAX_SESSIONS + 1)]
    if not moves:
        names = [requested]
    if owner is not None:
        mine = [name for name in names if _owner_of(root, name) == owner]
        names = mine + [name for name in names if name not in mine]
    for name in names:
        attempt = 1 if name == requested else 2
        session = open_dir(root, name, "session directory", ours=False)
        try:
            fd = _open_history(session)
        except BaseException:
            session.close()
            raise
        held = try_lock(fd)
        if held is False:  # another live process has it: try the next name
            os.close(fd)
            session.close()
            continue
        warnings = []
        if held is None and fcntl is not None:
            warnings.append(
                f"the filesystem of {session.path} cannot lock it, so a second kernel given "
                "the same session would share it"
            )
        returning = owner is not None and _owner_of(root, name) == owner
        if owner is not None and not returning:
            with contextlib.suppress(OSError):  # without it, a restart may land elsewhere
                write_atomic(session / OWNER, owner.encode())
        if attempt > 1 and not returning:
            warnings.append(
                f"session {requested} is in use by another live kernel, so this one saves "
                f"its programs in {session.path}"
            )
        return Claimed(name, session, fd, held is True, warnings)
    if not moves:
        raise SessionInUseError(f"session {requested} in {root.path} is in use by a live kernel")
    raise StoreError(
        f"sessions {requested} to {numbered(requested, _MAX_SESSIONS)} in {root.path} are "
        "all in use by live kernels; give this kernel another session name "
        "(PTC_RETRY_SESSION or PtcRetry.session_id)."
    )


def _open_history(session: Dir) -> int:
    path = session.path / HISTORY
    try:
        fd, st = open_for_append(session, HISTORY)
    except OSError as exc:
        try:
            kind = session.lstat(HISTORY).st_mode
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
        user = uid()
        if user is not None and st.st_uid != user:
            raise StoreError(f"{path} belongs to uid {st.st_uid}, not to you; {ROOT_HINT}.")
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            fix_mode(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _owner_of(root: Dir, session: str) -> str | None:
    """What ``root/session/.owner`` says (the kernel that last held the session), or None (no
    such session or file, unreadable)."""
    try:
        if not stat.S_ISDIR(root.lstat(session).st_mode):
            return None
        directory = open_dir(root, session, "session directory", ours=False)
    except (OSError, StoreError):
        return None
    try:
        fd, _ = open_regular(directory, OWNER, os.O_RDONLY)
    except OSError:
        return None
    finally:
        directory.close()
    try:
        return os.read(fd, 200).decode("ascii", "replace")
    finally:
        os.close(fd)
