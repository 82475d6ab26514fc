"""The helpers a program calls to run a saved program again, and the steps they share.

* ``await ptc_retry.replay("#3", "retries=3", "retries=5")`` reads a saved program, applies
  literal replacements, saves the result as this call's own checkpoint and runs it in the
  kernel's namespace (:class:`Replay`).
* ``await ptc_retry.resume("#3")`` (or ``replay(..., resume=True)``) does the same from the
  statement where the program stopped (:class:`Resume`).
* ``await ptc_retry.extend("#4", "<rest>")`` does the same with the start of a call that was
  cut off mid-stream and the rest appended to it (:class:`Extend`).

Each helper returns an awaitable whose ``_run`` is the same sequence of named steps; a kind
differs only in the steps it overrides: which program it runs (``_corrected``) and the
statement it starts at (``_first_statement``).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterable
from typing import Any

from ..core import sentences as said
from ..core.edits import apply_edits, normalize_edits
from ..core.errors import CheckpointError, PtcRetryError, ReplayError
from ..core.program import run_program, statement_spans
from ..core.status import HistoryStatus
from ..core.store import CheckpointStore
from .call_lines import RecordedCalls, calls_made, in_order
from .host import Host, current_host
from .recording import Reuse
from .resume import history_line, where_resumed
from .running import Running
from .tool_calls import program_calls
from .tracebacks import cell_text, replay_filename

__all__ = ["Extend", "Replay", "Resume", "extend", "replay", "resume"]

#: The history statuses of a fix that stopped before its end: what it never reached of the
#: program it ran again is still that program's to give.
_STOPPED = frozenset({"error", "interrupted"})
#: How far back a chain of stopped fixes is followed.
_CHAIN_DEPTH = 16


def replay(
    target: str | int,
    old: str | None = None,
    new: str | None = None,
    *,
    replace_all: bool = False,
    edits: Iterable[tuple[str, str]] | None = None,
    resume: bool = False,
    fresh: bool = False,
    reuse_failures: bool = False,
) -> Replay:
    """Replay a saved program with a small fix; must be awaited.

    ``target`` is a reference ``"#7"`` (program 7 of this session, as a notice names it),
    a call id (``"c3"``, ``"call_7"``) or an int n for ``previous/n.json``. Give either
    ``old, new`` or ``edits=[(old, new), ...]``
    (applied in order). Each old text must occur exactly once, unless
    ``replace_all``. ``resume=True`` skips the statements that completed before
    the target failed (see :class:`.resume.ResumePolicy`); with it, the edits may be left out.
    Tool calls that match the target's recorded ones, in order, get their recorded results
    (see :mod:`.recording`); ``fresh=True`` makes every call again. ``reuse_failures=True``
    gives a host tool call that failed its recorded error again instead of making it anew
    (what the continuation of an approval does: nothing the paused program made is repeated).
    Raises :class:`ReplayError` when the edits are malformed or ptc-retry is not
    loaded; matching errors come when the replay is awaited.
    """
    nothing = old is None and new is None and edits is None
    pairs = [] if resume and nothing else normalize_edits(old, new, edits)
    _check_target(
        target,
        'replay target must be a reference like "#7", a call id like "call_7" or an int n '
        "for previous/n.json",
    )
    kind = Resume if resume else Replay
    replayed = kind(_host(), target, pairs, replace_all=replace_all, fresh=fresh)
    replayed.reuse_failures = reuse_failures
    return _pending(replayed)


def extend(target: str | int, rest: str) -> Replay:
    """Append ``rest`` to the program of a call that was cut off mid-stream and run it whole.

    ``await ptc_retry.extend("#4", "<rest>")``: ``rest`` is added exactly as written (the
    program goes on from the very character where the cut fell, mid-line too), and the
    whole program runs as a replay's does, saved as this call's own checkpoint. A target
    that was not cut off is a ReplayError when awaited: fix a program with ``replay``.
    """
    if not isinstance(rest, str):
        raise ReplayError(
            f"extend takes the rest of the program as a str, not {type(rest).__name__}"
        )
    _check_target(target, 'extend target must be a reference like "#4" or a call id')
    return _pending(Extend(_host(), target, rest))


def resume(target: str | int, *, fresh: bool = False, reuse_failures: bool = False) -> Replay:
    """Run a saved program again from the statement where it failed or was interrupted.

    ``await ptc_retry.resume("#3")`` is ``await ptc_retry.replay("#3", resume=True)``:
    no edit, and the statements that completed are not run again.
    """
    return replay(target, resume=True, fresh=fresh, reuse_failures=reuse_failures)


def _check_target(target: object, expected: str) -> None:
    """ReplayError, ``expected`` and what ``target`` is instead, unless it is a str or int."""
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise ReplayError(f"{expected}, not {type(target).__name__}")


def _host() -> Host:
    try:
        return current_host()
    except PtcRetryError as exc:
        raise ReplayError(str(exc)) from None


def _pending(pending: Replay) -> Replay:
    """``pending``, known to the running program, which reports it if it is never awaited."""
    running = pending.host.programs.current()
    if running is not None:
        running.replays.append(pending)
    return pending


class Replay:
    """A replay waiting to be awaited. Not awaiting it is reported in the cell's output.

    Awaiting it runs ``_run``'s steps; :class:`Resume` and :class:`Extend` override some.
    """

    #: What the helper does, in the texts a person or the model reads.
    action = "replay"
    #: The history key that names the program this call ran again.
    link_key = "replay_of"

    def __init__(
        self,
        host: Host,
        target: str | int,
        edits: list[tuple[str, str]],
        *,
        replace_all: bool = False,
        fresh: bool = False,
    ) -> None:
        self.host = host
        self.target = target
        self.edits = edits
        self.replace_all = replace_all
        self.fresh = fresh
        self.reuse_failures = False
        self.awaited = False

    def __await__(self) -> Generator[Any, None, Any]:
        self.awaited = True
        return self._run().__await__()

    def __repr__(self) -> str:
        # Shown as the value when a cell ends with the call; the message itself follows once.
        state = "" if self.awaited else ", not awaited"
        return f"<ptc_retry {self.action} of {self.target!r}{state}>"

    def not_awaited_message(self) -> str:
        call = self.call_text()
        return said.NOT_AWAITED.render(call=call)

    def call_text(self) -> str:
        """The helper call as the model would write it, the arguments after the target elided."""
        return f"{self.action}({self.target!r}, ...)"

    async def _run(self) -> Any:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        store = self._store()
        call_id, code = self._saved_program(store)
        running = self._running_program(call_id)
        corrected = self._corrected(store, call_id, code)
        _require_utf8(corrected)
        whole_call = _is_whole_call(self.host, running)
        name = self._become_corrected(running, corrected, call_id) if whole_call else call_id
        # Its frames carry the name the notice gives the program: "#11", not "c11".
        filename = replay_filename(store.reference_of(name) or name)
        transformed = self.host.shell.transform_cell(corrected)
        start = self._first_statement(store, call_id, code, corrected, transformed)
        if whole_call:
            running.program = (filename, transformed)
            running.resumed_from = start or None
        reuse = self._reuse(store, call_id, start, whole_call=whole_call)
        namespace = self.host.shell.user_ns
        program = run_program(corrected, filename, namespace, transformed=transformed, start=start)
        if whole_call:
            running.program_coroutine = program
        return await self._run_reusing(program, reuse)

    # -- the steps ----------------------------------------------------------------------------

    def _store(self) -> CheckpointStore:
        store = self.host.checkpoints.open()
        if store is None:
            raise ReplayError("checkpoints are off in this kernel (see the warning above)")
        return store

    def _saved_program(self, store: CheckpointStore) -> tuple[str, str]:
        """``(call_id, code)`` of the target: its checkpoint read and ``json.loads``-ed."""
        try:
            return store.load_code(self.target)
        except CheckpointError as exc:
            raise ReplayError(str(exc)) from None

    def _running_program(self, call_id: str) -> Running:
        """The program this helper was awaited in, which must not be ``call_id`` itself."""
        running = self.host.programs.current()
        if running is None:
            # Never attach to the program of another thread (another subshell's cell).
            raise ReplayError(
                "a replay runs as part of a program: await it in the program's own code, not "
                "from another thread or a silent request"
            )
        if running.call is not None and running.call.id == call_id:
            reference = _as_reference(self.target)
            if reference is not None:  # a number read in another session, most likely
                raise ReplayError(
                    said.REFERENCE_IS_ITSELF.render(reference=reference, action=self.action)
                )
            raise ReplayError(self._itself_message(call_id))
        return running

    def _itself_message(self, call_id: str) -> str:
        return f"{call_id!r} is this replay call itself; replay the call that failed before it"

    def _corrected(self, store: CheckpointStore, call_id: str, code: str) -> str:
        """The program to run: ``code`` with the literal replacements applied."""
        if _status(store, call_id) == HistoryStatus.PARTIAL:
            reference = store.reference_of(call_id) or call_id
            raise ReplayError(said.REPLAY_OF_CUT.render(reference=reference))
        if self.edits:
            return apply_edits(code, self.edits, replace_all=self.replace_all)
        return code

    def _become_corrected(self, running: Running, corrected: str, call_id: str) -> str:
        """Make the corrected program this call's own checkpoint; the name it runs under."""
        assert running.call is not None  # a whole call is a checkpointed one
        self.host.checkpoints.save_corrected(running.call, corrected, **{self.link_key: call_id})
        return running.call.id

    def _first_statement(
        self, store: CheckpointStore, call_id: str, code: str, corrected: str, transformed: str
    ) -> int:
        """The top-level statement the program starts at (0-based): the first, for a replay."""
        return 0

    def _reuse(
        self, store: CheckpointStore, call_id: str, start: int, *, whole_call: bool
    ) -> Reuse:
        """What the program's tool calls may take from the recorded calls of ``call_id``."""
        calls = program_calls(self.host)
        assert calls is not None  # a program is running
        recorded = self._recorded(store, call_id)
        if whole_call and start:
            # This call's recording holds its whole program: first the skipped statements' calls.
            calls.record_skipped(recorded, start, call_id)
        then = None if self.fresh else self._not_reached(store, call_id, recorded)
        return Reuse(
            recorded.from_statement(start),
            call_id=call_id,
            source=store.reference_of(call_id) or call_id,
            fresh=self.fresh,
            next_k=None if then is not None else recorded.next_k(start),
            then=then,
            failures=self.reuse_failures,
        )

    def _recorded(self, store: CheckpointStore, call_id: str) -> RecordedCalls:
        lines = self.host.checkpoints.tool_calls(call_id)
        return in_order(lines, calls_made(history_line(store, call_id)))

    def _not_reached(
        self, store: CheckpointStore, call_id: str, recorded: RecordedCalls, depth: int = 0
    ) -> Reuse | None:
        """When ``call_id`` is a fix (a replay or resume) that stopped before its end (it
        failed or was interrupted), the recording of the program it ran again, placed after
        the calls ``call_id`` made (``recorded``): the calls that program made which the fix
        never reached, and so never recorded. None when it is no such fix, or when its calls
        parted from that program's. A chain of stopped fixes goes back along the chain."""
        line = history_line(store, call_id) or {}
        source = line.get("replay_of")
        started = line.get("resumed_from") or 0
        if (
            depth >= _CHAIN_DEPTH
            or line.get("status") not in _STOPPED
            or not isinstance(source, str)
            or source == call_id
            or not isinstance(started, int)
            or not recorded.complete
        ):
            return None
        source_recorded = self._recorded(store, source)
        reuse = Reuse(
            source_recorded.from_statement(started),
            call_id=source,
            source=store.reference_of(source) or source,
            then=self._not_reached(store, source, source_recorded, depth + 1),
        )
        return reuse if reuse.follow(recorded.from_statement(started)) else None

    async def _run_reusing(self, program: Any, reuse: Reuse) -> Any:
        """Await ``program`` with ``reuse`` in force; the outermost replay then says, on
        stderr, how many tool results it reused."""
        __tracebackhide__ = True  # noqa: F841  (the program's own frames are what to show)
        calls = program_calls(self.host)
        assert calls is not None  # a program is running
        # A replay inside a replay says nothing itself: the outermost one counts its calls.
        outermost = calls.reuses.enter(reuse)
        try:
            return await program
        finally:
            calls.reuses.leave(reuse)
            sentence = reuse.sentence() if outermost else None
            if sentence is not None:
                print(sentence, file=sys.stderr)


class Resume(Replay):
    """A replay that starts at the statement where the target stopped (its edits optional)."""

    def call_text(self) -> str:
        if self.edits:
            return super().call_text()
        return f"resume({self.target!r})"

    def _first_statement(
        self, store: CheckpointStore, call_id: str, code: str, corrected: str, transformed: str
    ) -> int:
        """The earlier of the statement that failed and the first one an edit touched, or
        0 when the whole program must run (see :meth:`.resume.ResumePolicy.start`). A
        start past the first statement is said in one line on stderr."""
        start = self.host.resumes.start(store, call_id, code, corrected, transformed)
        if start:
            reference = store.reference_of(call_id) or call_id
            print(where_resumed(reference, transformed, start), file=sys.stderr)
        return start


class Extend(Replay):
    """A cut-off program with the rest appended, run whole."""

    action = "extend"
    link_key = "extend_of"

    def __init__(self, host: Host, target: str | int, rest: str) -> None:
        super().__init__(host, target, [])
        #: What is appended to the cut-off program.
        self.rest = rest

    def _itself_message(self, call_id: str) -> str:
        return f"{call_id!r} is this extend call itself; extend the call that was cut off"

    def _corrected(self, store: CheckpointStore, call_id: str, code: str) -> str:
        """``code`` with ``rest`` appended, once ``call_id`` is known to have been cut off."""
        status = _status(store, call_id)
        if status != HistoryStatus.PARTIAL:
            reference = store.reference_of(call_id) or call_id
            how = f"its status is {status}" if status else "it has no history line"
            raise ReplayError(said.EXTEND_NOT_CUT.render(reference=reference, why=how))
        return code + self.rest


def _status(store: CheckpointStore, call_id: str) -> object:
    """The status of ``call_id``'s latest history line (None without one)."""
    return (history_line(store, call_id) or {}).get("status")


def _require_utf8(corrected: str) -> None:
    try:
        corrected.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ReplayError(
            f"the corrected program holds a lone surrogate ({exc.reason} at index "
            f"{exc.start}), which cannot be saved or run as UTF-8; write it as an escape "
            'inside a string literal, such as "\\ud800"'
        ) from None


def _is_whole_call(host: Host, running: Running) -> bool:
    """Whether the helper is the whole of its call, so the corrected program becomes it.

    Only a call that is the replay and nothing else becomes the corrected program: a
    program that replays and does more keeps its own checkpoint, byte for byte, and a
    failure after the replay is a failure of that program. A replay inside a replayed
    program is part of that program too.
    """
    return (
        running.call is not None
        and running.program is None
        and running.call.replay_of is None
        and running.call.extend_of is None
        and _only_statement(cell_text(host.shell, running.info))
    )


def _only_statement(source: str | None) -> bool:
    """Whether a cell is one top-level statement: a replay call with nothing around it."""
    try:
        return source is not None and len(statement_spans(source)) == 1
    except SyntaxError:
        return False


def _as_reference(target: str | int) -> str | None:
    """``target`` as the ``#n`` it names, when it is a program's number (``"#3"``, ``3``)."""
    if isinstance(target, int) and not isinstance(target, bool):
        return f"#{target}"
    if isinstance(target, str) and target.startswith("#"):
        return target
    return None
