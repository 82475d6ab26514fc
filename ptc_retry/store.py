"""The checkpoint store: every call's arguments on disk, before the call runs.

One session lives in ``<root>/<session>/``::

    history.jsonl        one JSON object a line, appended, never rewritten
    by-id/<id>.json      the only real copy of each call's arguments, byte for byte
    previous/<n>.json    -> ../by-id/<id>.json: the calls of the step before the current one
                         (copies, with their ids in previous/.ids, where symlinks are refused)
    calls/<n>.json       -> ../by-id/<id>.json: program #n of the session, made when a notice
                         names it (``link_number``), so that a model without the helper finds it

Every call has a session number ``n`` (1, 2, 3, ... across kernel restarts), recorded in its
history line. ``"#n"`` is the short reference a notice gives: it names one program for the life
of the session, whatever ran since, and is refused when it is unknown or ambiguous.

Plain Python: this module knows nothing of IPython or Jupyter.

Errors a caller must expect: opening a store raises ``StoreError`` when the location is
unsafe (a symlink, another user's directory, a shared sticky directory such as /tmp, a file
where a directory belongs) and ``OSError`` when the filesystem refuses (read-only, full,
permission denied, a file in the path). ``begin``, ``replace_arguments`` and ``finish`` raise
``OSError`` on the same filesystem failures, and ``StoreError`` once the store is closed or
when the arguments cannot be encoded as UTF-8 (a lone surrogate). So a caller that must never fail
catches ``(OSError, StoreError)``. Reading a checkpoint raises ``CheckpointError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from .errors import CheckpointError, StoreError

STATUSES = frozenset({"ok", "error", "interrupted", "unfinished", "refused"})
_LINE_KEYS = frozenset(
    "id n tool turn step ordinal status time duration bytes code_bytes replay_of sent_id".split()
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_AUTO_ID = re.compile(r"c([0-9]+)")
_PREVIOUS_NAME = re.compile(r"([0-9]+)\.json")
_REFERENCE = re.compile(r"#([0-9]+)")
_MAX_ID = 120
_DIR_MODE = 0o700
_FILE_MODE = 0o600
# Without O_BINARY, Windows would turn "\n" into "\r\n" and break byte-for-byte copies.
_O_BINARY = getattr(os, "O_BINARY", 0)
_HINT = "set PTC_RETRY_ROOT to a directory you own"
_RESEND = "send the call again in full instead of replaying it"


def sanitize(call_id: str) -> str:
    """Return the file-name stem used for ``call_id``.

    The result holds only ``[A-Za-z0-9._-]`` (anything else becomes ``_``), is never empty
    and never starts with ``.`` (so it is never ``.``, ``..``, hidden or a temp name), and is
    at most 120 characters: a longer id keeps a hash of the whole id as its suffix, so distinct
    long ids stay distinct. ``sanitize(sanitize(x)) == sanitize(x)``.
    """
    safe = _UNSAFE.sub("_", call_id)
    if not safe or safe.startswith("."):
        safe = "_" + safe
    if len(safe) > _MAX_ID:
        digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe = f"{safe[: _MAX_ID - 13]}-{digest}"
    return safe


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


def _secure_dir(path: Path, what: str) -> None:
    """Create ``path`` with mode 0700 if missing; raise StoreError if it is unsafe to use."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            os.makedirs(path, _DIR_MODE)
        except FileExistsError:  # someone created it meanwhile: the checks below decide
            pass
        else:
            os.chmod(path, _DIR_MODE)  # the umask may have removed bits we need
        st = os.lstat(path)
    check_dir(path, what, st)
    if st.st_mode & 0o022:  # others could plant or swap files in it
        os.chmod(path, _DIR_MODE)


def check_dir(path: Path, what: str, st: os.stat_result | None = None) -> None:
    """Raise StoreError unless ``path`` is a real directory of ours; changes nothing.

    Refused: a symlink (it could point anywhere), another user's directory (they could
    read or swap our programs), and a shared sticky directory such as /tmp itself.
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


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` whole: a reader sees the old file or the new one, never a mix.

    No fsync: the rename already protects against a crashing process, the failure we keep
    checkpoints for; surviving power loss is not worth a disk flush on every cell.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_BINARY, _FILE_MODE)
        try:
            _fix_mode(fd)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fix_mode(fd: int) -> None:
    # os.open's mode passes through the umask; one cheap call makes it exactly 0600.
    if hasattr(os, "fchmod"):
        os.fchmod(fd, _FILE_MODE)


def _write_all(fd: int, data: bytes) -> None:
    # A regular file takes the whole buffer in one write; loop only for the rare short write.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _utf8(arguments: str) -> bytes:
    try:
        return arguments.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: a store failure the caller reports
        raise StoreError(
            f"the arguments cannot be saved as UTF-8 ({exc.reason} at index {exc.start})"
        ) from None


def _parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects among the lines of ``data``; torn or garbage lines are skipped."""
    records = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def reference(n: int) -> str:
    """The short reference of program number ``n`` of a session: ``"#7"``."""
    return f"#{n}"


def is_reference(target: object) -> bool:
    """True when ``target`` is written like a short reference (``"#7"``)."""
    return isinstance(target, str) and target.startswith("#")


def unfinished_line(call_id: str, st: os.stat_result, n: int | None = None) -> dict[str, Any]:
    """The history line of a call saved as ``st`` that never finished (its process died)."""
    line: dict[str, Any] = {"id": call_id, "n": n, "tool": None, "turn": None, "step": None}
    line.update(ordinal=None, status="unfinished", time=st.st_mtime, duration=None)
    line["bytes"] = st.st_size
    return line


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


class CheckpointStore:
    """The checkpoints and history of one session; safe to share between threads.

    Opening an existing session continues it (a kernel restart): ids never collide with the
    earlier ones, and checkpoints that never got a history line are recorded as
    ``unfinished``. A torn last history line (a crash mid-write) is skipped, never fatal.
    """

    def __init__(
        self, root: str | os.PathLike[str] | None = None, session: str | None = None
    ) -> None:
        # absolute(): user code may chdir, and later paths must still mean the same place.
        self.root = (Path(root).expanduser() if root is not None else default_root()).absolute()
        self.session = sanitize(session) if session is not None else f"s{secrets.token_hex(4)}"
        self.session_dir = self.root / self.session
        self._by_id = self.session_dir / "by-id"
        self._previous = self.session_dir / "previous"
        self._calls = self.session_dir / "calls"
        self._history = self.session_dir / "history.jsonl"
        _secure_dir(self.root, "checkpoint root")
        _secure_dir(self.session_dir, "session directory")
        _secure_dir(self._by_id, "checkpoint directory")
        _secure_dir(self._previous, "previous-step directory")
        _secure_dir(self._calls, "numbered-calls directory")
        self._lock = threading.Lock()
        self._used: set[str] = set()  # every id this session has, so none is reused
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
        self._copy_links = False  # True once the filesystem refused a symlink
        self._torn = False  # history.jsonl ends in a torn line: start the next one fresh
        self._fd: int | None = None
        self._continue_session()

    # -- opening ------------------------------------------------------------------------------

    def _continue_session(self) -> None:
        try:
            data = self._history.read_bytes()
        except FileNotFoundError:
            data = b""
        self._torn = bool(data) and not data.endswith(b"\n")
        records = [r for r in _parse_lines(data) if isinstance(r.get("id"), str)]
        for record in records:
            self._note_id(record["id"])
            self._status[record["id"]] = str(record.get("status"))
            self._note_number(record.get("n"), record["id"])
            if is_reference(record.get("sent_id")):
                self._hash_ids.add(record["sent_id"])
        for name in self._scan(self._calls):  # numbers a notice gave to calls never finished
            match = _PREVIOUS_NAME.fullmatch(name)
            if match and os.path.islink(self._calls / name):
                target = os.path.basename(os.readlink(self._calls / name))
                if target.endswith(".json"):
                    self._note_number(int(match.group(1)), target[: -len(".json")])
        on_disk = [name[:-5] for name in self._scan(self._by_id) if name.endswith(".json")]
        for name in self._scan(self._previous):
            match = _PREVIOUS_NAME.fullmatch(name)
            if match:
                self._prev_count = max(self._prev_count, int(match.group(1)))
        stats = [(os.stat(self._by_id / f"{c}.json"), c) for c in on_disk if c not in self._status]
        orphans = sorted((st.st_mtime, cid, st) for st, cid in stats)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_BINARY
        self._fd = os.open(self._history, flags, _FILE_MODE)
        try:
            _fix_mode(self._fd)
            named = {cid: n for n, cid in self._numbers.items()}
            for _, cid, st in orphans:  # saved, then the process died before finish
                n = named.get(cid)
                if n is None:
                    n = self._next_n
                    self._note_number(n, cid)
                line = unfinished_line(cid, st, n)
                self._append(line)
                records.append(line)
                self._note_id(cid)
                self._status[cid] = "unfinished"
        except BaseException:
            self.close()
            raise
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
    def _scan(directory: Path) -> list[str]:
        """Names in ``directory``, without hidden ones; stale temp files are deleted."""
        names = []
        for name in os.listdir(directory):
            if not name.startswith("."):
                names.append(name)
            elif name.endswith(".tmp"):  # left by a process that died mid-write
                with contextlib.suppress(OSError):
                    os.unlink(directory / name)
        return names

    def _note_number(self, n: object, call_id: str) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return
        known = self._numbers.setdefault(n, call_id)
        if known != call_id:
            self._ambiguous.add(n)
        self._next_n = max(self._next_n, n + 1)

    def _note_id(self, call_id: str) -> None:
        self._used.add(call_id)
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
        session; without ``call_id`` it is the next unused ``c<N>``. A call whose
        ``(turn, step)`` differs from the current step's (always, when ``step`` is None) starts
        a new step, and ``previous/`` then holds the calls of the step that just ended.
        The content is not validated here: ``load`` does that when it is read back.
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
            path = self._by_id / f"{cid}.json"
            _write_atomic(path, data)  # first: a program that kills the kernel is still saved
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
            call = Call(cid, sent_id, tool, turn, step, ordinal, path, len(data), time.time())
            call.n, call.code_bytes = n, code_bytes
            return call

    def _unique(self, base: str) -> str:
        # A linear probe is fine: callers send unique ids, duplicates are the rare exception.
        cid, n = base, 1
        while cid in self._used:
            n += 1
            cid = f"{base[: _MAX_ID - len(str(n)) - 1]}.{n}"  # stays a fixed point of sanitize
        return cid

    def _rebuild_previous(self, ids: list[str]) -> None:
        """Make previous/<n>.json the n-th of ``ids``, and remove higher-numbered entries."""
        for n, cid in enumerate(ids, 1):
            self._link(self._previous / f"{n}.json", cid)
        for n in range(len(ids) + 1, self._prev_count + 1):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._previous / f"{n}.json")
        if self._copy_links:  # a copy does not say which call it is: .ids does, a line each
            _write_atomic(self._previous / ".ids", "".join(f"{i}\n" for i in ids).encode())
        self._prev_ids, self._prev_count = list(ids), len(ids)

    def _link(self, dst: Path, call_id: str) -> None:
        if not self._copy_links:
            tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
            target = os.path.join(os.pardir, "by-id", f"{call_id}.json")
            try:
                try:
                    os.symlink(target, tmp)
                except FileExistsError:  # left by a process that died here
                    os.unlink(tmp)
                    os.symlink(target, tmp)
            except (NotImplementedError, OSError):
                self._copy_links = True  # e.g. FAT, some network mounts, Windows without rights
            else:
                os.replace(tmp, dst)  # atomic: the old link stays until the new one is in
                return
        _write_atomic(dst, (self._by_id / f"{call_id}.json").read_bytes())

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
            _write_atomic(call.path, data)
            if self._copy_links and call.id in self._prev_ids:  # keep the copy current
                _write_atomic(self._previous / f"{self._prev_ids.index(call.id) + 1}.json", data)
        call.bytes, call.code_bytes = len(data), code_bytes
        if replay_of is not None:
            call.replay_of = replay_of

    def finish(self, call: Call, status: str, **extra: object) -> dict[str, Any]:
        """Append the call's line to history.jsonl and return it.

        ``status`` is one of ``STATUSES`` (ValueError otherwise); ``extra`` adds keys (e.g.
        ``ename``) but may not override the standard ones. Values JSON cannot encode are
        written as ``str(value)``. The append is one write on a file kept open, so its cost
        does not grow with the history.
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
        with self._lock:
            self._append(line)
            self._status[call.id] = status
        return line

    def _append(self, line: dict[str, Any]) -> None:
        self._require_open()
        text = json.dumps(line, separators=(",", ":"), ensure_ascii=False, default=str) + "\n"
        if self._torn:
            text = "\n" + text
        # backslashreplace turns a lone surrogate into its JSON escape, which reads back as is.
        # O_APPEND puts each write whole at the end, so lines of concurrent writers never mix.
        _write_all(self._fd, text.encode("utf-8", "backslashreplace"))  # type: ignore[arg-type]
        self._torn = False

    def _require_open(self) -> None:
        if self._fd is None:
            raise StoreError(f"the store of {self.session_dir} is closed; open a new one.")

    def close(self) -> None:
        """Close the history file; later ``begin``/``finish`` raise StoreError. Idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ------------------------------------------------------------------------------

    def path_for(self, target: str | int) -> Path:
        """The checkpoint file of ``target``; always inside the session directory.

        ``target`` is a reference ``"#n"`` (program number n of this session), a call id
        (``by-id/<sanitize(id)>.json``) or an int n (``previous/<n>.json``). Raises
        CheckpointError when the file does not exist, when a reference is unknown or names
        two calls (a damaged history), or when ``target`` is none of these (a bool is no int).
        """
        if is_reference(target):
            return self._by_id / f"{self.id_for_reference(target)}.json"  # type: ignore[arg-type]
        if isinstance(target, str):
            path = self._by_id / f"{sanitize(target)}.json"
            if not path.exists():
                raise CheckpointError(
                    f"no checkpoint for call id {target!r} in this session ({path} does not "
                    f"exist); the most recent are: {self._recent_text()}."
                )
            return path
        if isinstance(target, int) and not isinstance(target, bool):
            path = self._previous / f"{target}.json"
            # lexists: a link to a deleted checkpoint is reported as deleted by load.
            if target < 1 or not os.path.lexists(path):
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
        match = _REFERENCE.fullmatch(ref)
        if match is None:
            raise CheckpointError(
                f'{ref!r} is not a reference: write "#" and the program\'s number, like "#7", '
                "or give the call id."
            )
        n = int(match.group(1))
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
        A symlink, or a copy where the filesystem refuses symlinks.
        """
        dst = self._calls / f"{call.n}.json"
        with self._lock:
            self._require_open()
            if not os.path.lexists(dst):
                self._link(dst, call.id)
        return dst

    def _recent_text(self) -> str:
        pairs = []
        for cid in self.latest_ids():
            ref = self.reference_of(cid)
            pairs.append(f"{ref} ({cid})" if ref else cid)
        return ", ".join(pairs) or "none yet"

    def load(self, target: str | int) -> tuple[str, str, dict[str, Any]]:
        """``(call_id, raw_text, decoded)`` of a checkpoint that is a JSON object.

        Raises CheckpointError (naming the path) when it is missing, unreadable, not UTF-8,
        not JSON or not a JSON object.
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
        call_id = self._id_of(target, path)
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path} was deleted; {_RESEND}.") from None
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {path} ({exc}); {_RESEND}.") from None
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

    def _id_of(self, target: str | int, path: Path) -> str:
        """The call id behind ``path``: a symlink names it, a copy has it in previous/.ids."""
        if isinstance(target, str):  # a reference or a call id: path is by-id/<id>.json
            return path.name[: -len(".json")]
        try:
            if path.is_symlink():
                return os.path.basename(os.readlink(path))[: -len(".json")]
            return (self._previous / ".ids").read_text("utf-8").splitlines()[target - 1]
        except (OSError, ValueError, IndexError):
            raise CheckpointError(
                f"cannot tell which call {path} is (previous/.ids is missing or short); "
                f"load it by reference or call id instead: {self._recent_text()}."
            ) from None

    def history(self) -> list[dict[str, Any]]:
        """Every parseable line of history.jsonl, in file order; torn lines are skipped."""
        try:
            return _parse_lines(self._history.read_bytes())
        except FileNotFoundError:
            return []

    def latest_ids(self, n: int = 5) -> list[str]:
        """The ``n`` most recently begun ids (or recorded, before a reopen), newest first."""
        with self._lock:
            return list(islice(reversed(self._recent), n))

    def unfinished(self) -> list[str]:
        """Ids whose latest history line says ``unfinished`` (their process died mid-call)."""
        with self._lock:
            return [cid for cid, status in self._status.items() if status == "unfinished"]
