"""The replay helper: ``await ptc_retry.replay("#3", "retries=3", "retries=5")`` reads a
saved program, applies literal replacements, saves the result as this call's own
checkpoint and runs it in the kernel's namespace, whole or from where it failed (resume).
``await ptc_retry.extend("#4", "<rest>")`` does the same with the start of a call that was
cut off mid-stream and the rest appended to it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Generator, Iterable
from typing import Any

from ..core.edits import apply_edits, normalize_edits
from ..core.errors import CheckpointError, PtcRetryError, ReplayError
from ..core.program import run_program, statement_spans
from ..core.store import CheckpointStore
from .host import Host, current_host
from .recording import RecordedCalls, Reuse, calls_made, in_order
from .resume import history_line
from .tool_calls import program_calls
from .tracebacks import cell_text, replay_filename


def replay(
    target: str | int,
    old: str | None = None,
    new: str | None = None,
    *,
    replace_all: bool = False,
    edits: Iterable[tuple[str, str]] | None = None,
    resume: bool = False,
    fresh: bool = False,
) -> Replay:
    """Replay a saved program with a small fix; must be awaited.

    ``target`` is a reference ``"#7"`` (program 7 of this session, as a notice names it),
    a call id (``"c3"``, ``"call_7"``) or an int n for ``previous/n.json``. Give either
    ``old, new`` or ``edits=[(old, new), ...]``
    (applied in order). Each old text must occur exactly once, unless
    ``replace_all``. ``resume=True`` skips the statements that completed before
    the target failed (see :class:`.resume.ResumePolicy`); with it, the edits may be left out.
    Tool calls that match the target's recorded ones, in order, get their recorded results
    (see :mod:`.recording`); ``fresh=True`` makes every call again.
    Raises :class:`ReplayError` when the edits are malformed or ptc-retry is not
    loaded; matching errors come when the replay is awaited.
    """
    nothing = old is None and new is None and edits is None
    pairs = [] if resume and nothing else normalize_edits(old, new, edits)
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise ReplayError(
            f'replay target must be a reference like "#7", a call id like "call_7" or an int n '
            f"for previous/n.json, not {type(target).__name__}"
        )
    try:
        host = current_host()
    except PtcRetryError as exc:
        raise ReplayError(str(exc)) from None
    pending = Replay(host, target, pairs, replace_all=replace_all, resume=resume, fresh=fresh)
    running = host.programs.current()
    if running is not None:
        running.replays.append(pending)
    return pending


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
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise ReplayError(
            f'extend target must be a reference like "#4" or a call id, not {type(target).__name__}'
        )
    try:
        host = current_host()
    except PtcRetryError as exc:
        raise ReplayError(str(exc)) from None
    pending = Replay(host, target, [], replace_all=False, rest=rest)
    running = host.programs.current()
    if running is not None:
        running.replays.append(pending)
    return pending


def resume(target: str | int, *, fresh: bool = False) -> Replay:
    """Run a saved program again from the statement where it failed or was interrupted.

    ``await ptc_retry.resume("#3")`` is ``await ptc_retry.replay("#3", resume=True)``:
    no edit, and the statements that completed are not run again.
    """
    return replay(target, resume=True, fresh=fresh)


class Replay:
    """A replay waiting to be awaited. Not awaiting it is reported in the cell's output."""

    def __init__(
        self,
        host: Host,
        target: str | int,
        edits: list[tuple[str, str]],
        *,
        replace_all: bool,
        resume: bool = False,
        fresh: bool = False,
        rest: str | None = None,
    ) -> None:
        self.host = host
        self.target = target
        self.edits = edits
        self.replace_all = replace_all
        self.resume = resume
        self.fresh = fresh
        #: ``extend``: what is appended to the cut-off program (None: a replay).
        self.rest = rest
        self.awaited = False

    def __await__(self) -> Generator[Any, None, Any]:
        self.awaited = True
        return self._run().__await__()

    def __repr__(self) -> str:
        # Shown as the value when a cell ends with the call; the message itself follows once.
        state = "" if self.awaited else ", not awaited"
        what = "replay" if self.rest is None else "extend"
        return f"<ptc_retry {what} of {self.target!r}{state}>"

    def not_awaited_message(self) -> str:
        if self.rest is not None:
            call = f"extend({self.target!r}, ...)"
        elif self.resume and not self.edits:
            call = f"resume({self.target!r})"
        else:
            call = f"replay({self.target!r}, ...)"
        return f"ptc_retry.{call} did not run: it must be awaited. Write: await ptc_retry.{call}"

    async def _run(self) -> Any:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        host = self.host
        store = host.checkpoints.open()
        if store is None:
            raise ReplayError("checkpoints are off in this kernel (see the warning above)")
        # 1. Read the saved program and json.loads it.
        try:
            call_id, code = store.load_code(self.target)
        except CheckpointError as exc:
            raise ReplayError(str(exc)) from None
        running = host.programs.current()
        if running is None:
            # Never attach to the program of another thread (another subshell's cell).
            raise ReplayError(
                "a replay runs as part of a program: await it in the program's own code, not "
                "from another thread or a silent request"
            )
        if running.call is not None and running.call.id == call_id:
            if self.rest is not None:
                raise ReplayError(
                    f"{call_id!r} is this extend call itself; extend the call that was cut off"
                )
            raise ReplayError(
                f"{call_id!r} is this replay call itself; replay the call that failed before it"
            )
        # 2. The literal replacements, or the rest of a cut-off program.
        status = (history_line(store, call_id) or {}).get("status")
        corrected = code
        if self.rest is not None:
            corrected = code + self._rest_of(store, call_id, status)
        elif status == "partial":
            reference = store.reference_of(call_id) or call_id
            raise ReplayError(
                f"{reference} was cut off mid-stream and never ran; send only the rest: "
                f'await ptc_retry.extend({json.dumps(reference)}, "<rest>")'
            )
        elif self.edits:
            corrected = apply_edits(code, self.edits, replace_all=self.replace_all)
        # 3. This call's checkpoint becomes the corrected program.
        try:
            corrected.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ReplayError(
                f"the corrected program holds a lone surrogate ({exc.reason} at index "
                f"{exc.start}), which cannot be saved or run as UTF-8; write it as an escape "
                'inside a string literal, such as "\\ud800"'
            ) from None
        name = call_id
        # Only a call that is the replay and nothing else becomes the corrected program: a
        # program that replays and does more keeps its own checkpoint, byte for byte, and a
        # failure after the replay is a failure of that program.
        # A replay inside a replayed program is part of that program too.
        whole_call = (
            running.call is not None
            and running.program is None
            and running.call.replay_of is None
            and running.call.extend_of is None
            and _only_statement(cell_text(host.shell, running.info))
        )
        if running.call is not None and whole_call:
            of = {"replay_of" if self.rest is None else "extend_of": call_id}
            host.checkpoints.save_corrected(running.call, corrected, **of)
            name = running.call.id
        # 4. Run it as an async function in the kernel's namespace, from the statement
        #    where a resume starts.
        shell = host.shell
        filename = replay_filename(name)
        transformed = shell.transform_cell(corrected)
        start = 0
        if self.resume:
            start = host.resumes.start(store, call_id, code, corrected, transformed)
        if whole_call:
            running.program = (filename, transformed)
            running.resumed_from = start or None
        # 5. Its tool calls that match the recorded ones of call_id get their results.
        calls = program_calls(host)
        assert calls is not None  # a program is running
        recorded = self._recorded(store, call_id)
        if whole_call and start:
            # This call's recording holds its whole program: first the skipped statements' calls.
            calls.record_skipped(recorded, start, call_id)
        reuse = Reuse(
            recorded.from_statement(start),
            call_id=call_id,
            source=store.reference_of(call_id) or call_id,
            fresh=self.fresh,
            next_k=recorded.next_k(start),
        )
        namespace = shell.user_ns
        program = run_program(corrected, filename, namespace, transformed=transformed, start=start)
        if whole_call:
            running.program_coroutine = program
        # A replay inside a replay says nothing itself: the outermost one counts its calls.
        outermost = calls.reuses.enter(reuse)
        try:
            return await program
        finally:
            calls.reuses.leave(reuse)
            sentence = reuse.sentence() if outermost else None
            if sentence is not None:
                print(sentence, file=sys.stderr)

    def _rest_of(self, store: CheckpointStore, call_id: str, status: object) -> str:
        """``self.rest``, once ``call_id`` is known to be a call that was cut off (its
        history ``status`` says ``partial``)."""
        assert self.rest is not None
        if status != "partial":
            reference = store.reference_of(call_id) or call_id
            said = f"its status is {status}" if status else "it has no history line"
            raise ReplayError(
                f"{reference} was not cut off ({said}): extend only goes on with a call whose "
                "arguments stopped part-way; fix a program with ptc_retry.replay"
            )
        return self.rest

    def _recorded(self, store: CheckpointStore, call_id: str) -> RecordedCalls:
        """The calls ``call_id``'s whole program made, in order, as its recording says."""
        lines = self.host.checkpoints.tool_calls(call_id)
        return in_order(lines, calls_made(history_line(store, call_id)))


def _only_statement(source: str | None) -> bool:
    """Whether a cell is one top-level statement: a replay call with nothing around it."""
    try:
        return source is not None and len(statement_spans(source)) == 1
    except SyntaxError:
        return False
