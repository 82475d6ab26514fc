"""The checkpoint store: every call's arguments on disk before the call runs, the session's
history and its programs' tool calls, in the layout of :mod:`.layout`, written through
:mod:`.fs`. One process per session: a store holds an exclusive lock on its ``history.jsonl``
for its life (the OS drops it when the process dies, so a restarted kernel continues its
session). Plain Python: this module knows nothing of IPython or Jupyter."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .call import Call
from .claim import claim
from .errors import AmbiguousReferenceError, CheckpointError, StoreError
from .forks import forget, remember
from .fs import Dir, Entry, Linker, default_root, open_dir, read_umask, write_atomic
from .history_file import HistoryFile
from .index import CallIndex
from .layout import (
    BY_ID,
    CALLS,
    LINE_KEYS,
    MAX_DIGITS,
    PARTIAL_SUFFIX,
    PREVIOUS,
    RESEND,
    is_reference,
    line_text,
    link_text,
    reference_number,
    sanitize,
    too_long,
)
from .previous_step import PreviousStep
from .session_files import (
    ToolCallFiles,
    checkpoint_code,
    checkpoint_names,
    decode_checkpoint,
    previous_id,
    read_checkpoint,
    read_history,
    survey,
)
from .status import HistoryStatus

__all__ = ["Call", "CheckpointStore"]


class CheckpointStore:
    """The checkpoints and history of one session; safe to share between threads.

    Opening an existing session continues it (a kernel restart): ids never collide with the
    earlier ones, and checkpoints that never got a history line are recorded as
    ``unfinished``. Torn or garbage history lines are skipped, never fatal, and so are
    ``by-id/`` entries that are not regular files (``warning`` says so).

    The session belongs to this store until ``close`` (or the process's end): when another
    live process holds it, the store opens ``<session>.2`` (or the next free number) and
    ``session``, ``session_dir`` and ``warning`` say so. Without ``fcntl`` (Windows) sessions
    are not locked.

    Nothing is read or written through a link planted in a session (see :mod:`.fs`). Opening
    raises ``StoreError`` when the location is unsafe (by :mod:`.fs`'s and :mod:`.claim`'s
    rules) and ``OSError`` when the filesystem refuses. Writing raises ``OSError`` on the same
    failures, and ``StoreError`` once the store is closed or when the arguments cannot be
    encoded as UTF-8 (a lone surrogate): a caller that must never fail catches ``(OSError,
    StoreError)``. Reading a checkpoint raises ``CheckpointError``.

    Fault injection: every file the store writes whole (checkpoints, ``previous/``) goes
    through ``write_file(entry, data)``, by default :func:`.fs.write_atomic`. Replace it on a
    store to make those writes slow or fail; a kernel's store is
    ``active_extension().checkpoints.store``.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        session: str | None = None,
        *,
        owner: str | None = None,
        moves: bool = True,
    ) -> None:
        """``owner``: what names this kernel across its restarts (the extension passes a
        digest of its connection file). A restarted kernel that had been moved to
        ``<session>.2`` goes back there, not into a ``<session>`` that has become free.
        ``moves=False``: never move to ``<session>.2``; a session another live process
        holds is SessionInUseError, and nothing is created."""
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
        self._history: HistoryFile | None = None  # open while the store is; holds the lock
        self._dirs: list[Dir] = []
        self._index = CallIndex()
        self._linker = Linker()
        #: Writes one file whole; the seam for fault injection (see the class docstring).
        self.write_file: Callable[[Entry, bytes], None] = write_atomic
        read_umask()
        claimed = claim(self.root, requested, owner, moves=moves)
        self.session, self.session_dir = claimed.name, claimed.directory.path
        self._warnings.extend(claimed.warnings)
        session_dir = claimed.directory
        self._dirs.append(session_dir)  # open for the store's life: tool-calls/ is made later
        self._tool_calls = ToolCallFiles(session_dir, self._dirs)
        try:
            self._history = HistoryFile(claimed.history_fd, alone=claimed.alone)
            self._by_id = open_dir(session_dir, BY_ID, "checkpoint directory", ours=True)
            self._dirs.append(self._by_id)
            previous = open_dir(session_dir, PREVIOUS, "previous-step directory", ours=True)
            self._dirs.append(previous)
            self._previous = PreviousStep(previous, self._by_id, self._linker)
            self._calls = open_dir(session_dir, CALLS, "numbered-calls directory", ours=True)
            self._dirs.append(self._calls)
            self._continue_session(self._history)
        except BaseException:
            self.close()
            raise
        self.warning = "; ".join(self._warnings) or None
        remember(self)

    # -- opening ------------------------------------------------------------------------------

    def _continue_session(self, history: HistoryFile) -> None:
        found = survey(history.records(), self._calls, self._by_id, Dir.scan)
        self._index = CallIndex(found.numbers)
        self._index.restore(found.records)
        if found.skipped:
            self._warnings.append(found.skipped_warning(self._by_id.path))
        if found.unfinished:
            try:
                history.append([self._encode(line) for line in found.unfinished])
            except OSError as exc:  # a full disk: the next finish tries again
                self._warnings.append(
                    f"could not record {len(history.pending)} unfinished call(s) in the "
                    f"history yet ({exc.strerror})"
                )

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
            cid = self._index.new_id(sanitize(call_id) if call_id is not None else None)
            # First: a program that kills the kernel is still saved.
            self.write_file(self._by_id / f"{cid}.json", data)
            n, ended = self._index.add(cid, call_id, (turn, step) if step is not None else object())
            if ended is not None:
                self._previous.rebuild(ended, self.write_file)
            sent_id = call_id if call_id is not None and call_id != cid else None
            ordinal = len(self._index.step_ids)
            path = self._by_id.path / f"{cid}.json"
            call = Call(cid, sent_id, tool, turn, step, ordinal, path, len(data), time.time())
            call.n, call.code_bytes = n, code_bytes
            return call

    def _link(self, directory: Dir, name: str, call_id: str, *, hard: bool) -> None:
        """Make ``directory/name`` stand for ``by-id/<call_id>.json`` (see ``Linker``)."""
        source = f"{call_id}.json"
        self._linker.link(directory, name, self._by_id, source, link_text(call_id), hard=hard)

    def replace_arguments(
        self,
        call: Call,
        arguments: str,
        *,
        replay_of: str | None = None,
        extend_of: str | None = None,
        code_bytes: int | None = None,
    ) -> None:
        """Atomically make ``arguments`` the call's checkpoint (a replay's corrected program).

        Updates ``call.bytes`` and ``call.code_bytes``, and ``call.replay_of`` or
        ``call.extend_of`` when given.
        """
        data = _utf8(arguments)
        with self._lock:
            self._require_open()
            self.write_file(self._by_id / f"{call.id}.json", data)
            self._previous.renew(call.id)
        call.bytes, call.code_bytes = len(data), code_bytes
        if replay_of is not None:
            call.replay_of = replay_of
        if extend_of is not None:
            call.extend_of = extend_of

    def save_partial(self, call: Call, raw: str) -> None:
        """Keep ``raw``, the arguments of a call cut off mid-stream as they arrived, byte for
        byte beside its checkpoint (``by-id/<id>.partial``), which holds what they decode to."""
        data = _utf8(raw)
        with self._lock:
            self._require_open()
            self.write_file(self._by_id / f"{call.id}{PARTIAL_SUFFIX}", data)

    def finish(self, call: Call, status: str, **extra: object) -> dict[str, Any]:
        """Append the call's line to history.jsonl and return it.

        ``status`` is a ``HistoryStatus`` or its value (ValueError otherwise); ``extra`` adds keys
        (e.g. ``ename``) but may not override the standard ones. Values JSON cannot encode are
        written as ``str(value)``. The append is one write on a file kept open, so its cost
        does not grow with the history. A write that fails part-way (a full disk) is taken
        back, so the lines after it stay whole, and its line is written with the next one.
        """
        status = HistoryStatus.of(status).value
        clash = LINE_KEYS.intersection(extra)
        if clash:
            raise ValueError(f"extra keys {sorted(clash)} would override the standard ones")
        line: dict[str, Any] = {"id": call.id, "n": call.n, "tool": call.tool, "turn": call.turn}
        line.update(step=call.step, ordinal=call.ordinal, status=status, time=call.started)
        line.update(duration=round(time.time() - call.started, 3), bytes=call.bytes)
        if call.code_bytes is not None:
            line["code_bytes"] = call.code_bytes
        if call.replay_of is not None:
            line["replay_of"] = call.replay_of
        if call.extend_of is not None:
            line["extend_of"] = call.extend_of
        if call.sent_id is not None:
            line["sent_id"] = call.sent_id
        line.update(extra)
        data = self._encode(line)
        with self._lock:
            self._require_open().append([data])
        return line

    @staticmethod
    def _encode(line: dict[str, Any]) -> bytes:
        # backslashreplace turns a lone surrogate into its JSON escape, which reads back as is.
        return (line_text(line) + "\n").encode("utf-8", "backslashreplace")

    def _require_open(self) -> HistoryFile:
        if self._history is None or self._history.fd is None:
            raise StoreError(f"the store of {self.session_dir} is closed; open a new one.")
        return self._history

    def close(self) -> None:
        """Close the history file, which frees the session for another process; later
        ``begin``/``finish`` raise StoreError, reading goes on by path. Idempotent."""
        with self._lock:
            if self._history is not None:
                self._history.close()
            for directory in self._dirs:
                directory.close()
        forget(self)

    def abandon(self) -> None:
        """In a forked child: drop this process's copies of the descriptors, write nothing."""
        self._lock = threading.Lock()  # another thread of the parent may have held it
        if self._history is not None:
            self._history.abandon()
        for directory in self._dirs:
            fd, directory.fd = directory.fd, None
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
        (the call saved as ``by-id/<sanitize(id)>.json``, or the one call sent with that id
        and saved as ``<id>.2``) or an int n (``previous/<n>.json``). Raises
        CheckpointError when the file does not exist, when a reference is unknown, or when
        ``target`` is none of these (a bool is no int); AmbiguousReferenceError (a
        CheckpointError) when a reference or call id names two calls (a call id sent again,
        a damaged history), listing them.
        """
        if isinstance(target, str) and is_reference(target):
            return self._by_id.path / f"{self.id_for_reference(target)}.json"
        if isinstance(target, str):
            with self._lock:
                named = self._index.numbers.id_named(target)
            call_id = named if named is not None else sanitize(target)
            path = self._by_id.path / f"{call_id}.json"
            # A file put there by hand counts under exactly its name: a case-insensitive disk
            # would also find Call_A.json for call_a.json.
            if not self._by_id.exists(f"{call_id}.json") or not (
                named is not None or f"{call_id}.json" in checkpoint_names(self._by_id)
            ):
                raise CheckpointError(
                    f"no checkpoint for call id {target!r} in this session ({path} does not "
                    f"exist); the most recent are: {self._recent_text()}."
                )
            return path
        if isinstance(target, int) and not isinstance(target, bool):
            self._check_position(target)
            return self._previous.path_for(target, self._position_advice)
        raise CheckpointError(
            f'a checkpoint target is a reference like "#7", a call id (str) or a position in '
            f"the previous step (int >= 1), not {type(target).__name__} {target!r}."
        )

    def next_previous_id(self, n: int) -> str:
        """The call ``previous/<n>.json`` stands for once the next step begins: the n-th call
        of the current step. It is what ``replay(n)`` runs in a person's next cell (each such
        cell is a step of its own), whatever ``previous/`` holds now. CheckpointError when
        the current step has no n-th call."""
        self._check_position(n)
        with self._lock:
            ids = list(self._index.step_ids)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(ids):
            raise CheckpointError(
                f"no previous/{n}.json for the next cell: the current step has {len(ids)} "
                f"call(s), numbered from 1{self._position_advice(n, len(ids), ids)}"
            )
        return ids[n - 1]

    def id_for_reference(self, ref: str) -> str:
        """The call id that reference ``"#n"`` names; CheckpointError when there is none.

        A reference is refused, never guessed, when it is malformed, names no call of this
        session (a reference from another session, or a number not given yet), names two
        calls, or is also the id a caller sent for another call.
        """
        with self._lock:
            ids = self._index.numbers.ids(ref)
            last = self._index.numbers.next - 1
            ambiguous = self._index.numbers.is_ambiguous(ref)
        if not ids:
            known = f"#1 to #{last}" if last else "none yet"
            nearest = self._index.numbers.nearest(reference_number(ref))
            near = f"; the nearest is {nearest}" if nearest else ""
            raise CheckpointError(
                f"no program {ref} in this session ({self.session_dir}); its programs are "
                f"{known}{near}. A reference belongs to the session whose notice gave it: give the "
                "call id, or send the program again."
            )
        if ambiguous:
            raise AmbiguousReferenceError(
                f"{ref} is ambiguous in this session (two calls carry it, or a call id is "
                f"{ref!r} itself); replay by call id instead: {self._recent_text()}."
            )
        return ids[0]

    def reference_of(self, call_id: str) -> str | None:
        """The short reference ``"#n"`` of the call saved as ``call_id``, if it has one."""
        with self._lock:
            return self._index.numbers.reference_of(call_id)

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

    def _check_position(self, n: object) -> None:
        """CheckpointError, without writing ``n`` out, when it has too many digits to be any
        position of a step."""
        if isinstance(n, int) and too_long(n):
            raise CheckpointError(
                f"no previous/<n>.json for a number of more than {MAX_DIGITS} digits: a step's "
                f"calls are numbered from 1. The most recent are: {self._recent_text()}."
            )

    def _position_advice(self, n: int, count: int, ids: Sequence[str] | None = None) -> str:
        """The end of a refusal of position ``n`` of a step of ``count`` calls (``ids``)."""
        with self._lock:
            known = list(ids if ids is not None else self._previous.ids)
            advice = self._index.numbers.position_advice(n, count, known)
        return f"{advice}. The most recent are: {self._recent_text()}."

    def _recent_text(self) -> str:
        with self._lock:
            return self._index.recent_text()

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
        code = checkpoint_code(decoded, path)
        return call_id, code

    def _load(self, target: str | int) -> tuple[str, Path, str, dict[str, Any]]:
        path = self.path_for(target)
        if isinstance(target, int):  # previous/<n>.json: read its by-id/ file, never a link
            call_id = self._id_of(target, path)
        else:
            call_id = path.name[: -len(".json")]
        text, decoded = decode_checkpoint(read_checkpoint(self._by_id, call_id, path), path)
        return call_id, path, text, decoded

    def _id_of(self, n: int, path: Path) -> str:
        """The call id ``previous/<n>.json`` stands for (see ``previous_id``)."""
        with self._lock:
            ids = self._previous.ids
            known = ids[n - 1] if n <= len(ids) else None
            candidates = ([known] if known else []) + self._index.latest_ids(None)
        try:
            call_id = previous_id(self._previous.directory, self._by_id, n, candidates)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path} was deleted; {RESEND}.") from None
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
            if self._history is not None and self._history.fd is not None:
                return self._history.records()
        return read_history(self.session_dir)

    def latest_ids(self, n: int = 5) -> list[str]:
        """The ``n`` most recently begun ids (or recorded, before a reopen), newest first."""
        with self._lock:
            return self._index.latest_ids(n)

    # -- a program's tool calls ---------------------------------------------------------------

    def record_tool_call(self, call_id: str, line: dict[str, Any]) -> None:
        """Append ``line`` to ``tool-calls/<call_id>.jsonl``, the calls ``call_id`` made."""
        data = self._encode(line)
        with self._lock:
            self._require_open()
            self._tool_calls.append(call_id, data)

    def tool_calls(self, call_id: str) -> list[dict[str, Any]]:
        """The recorded tool calls of ``call_id`` in file order ([] when it made none);
        OSError when they cannot be read."""
        with self._lock:
            return self._tool_calls.read(call_id)


def _utf8(arguments: str) -> bytes:
    try:
        return arguments.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: a store failure the caller reports
        raise StoreError(
            f"the arguments cannot be saved as UTF-8 ({exc.reason} at index {exc.start})"
        ) from None
