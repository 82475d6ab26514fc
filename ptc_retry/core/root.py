"""Where a store may live: the default root, and the checks a root, the directories above it
and each directory of a session must pass before anything is written there (a symlink,
another user's directory, one others can write is refused with the fix to make). Reads only:
nothing here creates, changes or deletes a file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import StoreError

#: How every refusal of a root ends: what the user does about it.
ROOT_HINT = "set PTC_RETRY_ROOT to a directory you own"


def uid() -> int | None:
    """This process's uid; None on Windows, where the temp directory is per-user already."""
    return os.getuid() if hasattr(os, "getuid") else None


def default_root() -> Path:
    """``$PTC_RETRY_ROOT`` when set and non-empty, else ``<tempdir>/ptc-retry-<uid>``."""
    env = os.environ.get("PTC_RETRY_ROOT")
    if env:
        return Path(env).expanduser()
    user = uid()
    return Path(tempfile.gettempdir()) / f"ptc-retry-{user if user is not None else 'user'}"


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
        raise StoreError(f"{what} {path} is a symlink, which could point anywhere; {ROOT_HINT}.")
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{what} {path} exists but is not a directory; {ROOT_HINT}.")
    user = uid()
    if user is not None and st.st_uid != user:
        raise StoreError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {user}), so it could "
            f"read or swap your programs; {ROOT_HINT}."
        )
    if st.st_mode & stat.S_ISVTX:  # chmod would break a shared directory such as /tmp
        raise StoreError(f"{what} {path} is a shared directory (sticky bit); {ROOT_HINT}.")
    if user is not None and st.st_mode & 0o022:
        who = " and ".join(
            name for bit, name in ((0o020, "its group"), (0o002, "all users")) if st.st_mode & bit
        )
        raise StoreError(
            f"{what} {path} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o}), who "
            f"could plant or swap programs in it; ptc-retry leaves its mode as it is: run "
            f"`chmod go-w {path}` if only you should write there, or {ROOT_HINT} alone."
        )
