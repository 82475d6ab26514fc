"""The IPython extension: checkpoint every program, add the notice on failure.

Load it in any IPython or ipykernel session::

    %load_ext ptc_retry

or for every session, in ``ipython_config.py``::

    c.InteractiveShellApp.extensions = ["ptc_retry"]
    c.PtcRetry.notice_min_bytes = 200

Every cell that runs is saved to the checkpoint store *before* it runs, and gets
the session's next number n. When a cell fails and its program is at least
``PtcRetry.notice_min_bytes`` long, the notice is appended to the end of its
traceback (``ename`` and ``evalue`` stay as they were): the program's short
reference ``#n`` and the helper call ``await ptc_retry.replay("#n", "<old>",
"<new>")``; an interrupted program, or one stopped by the time limit, is offered
``await ptc_retry.resume("#n")`` instead. The program is then also at
``calls/<n>.json`` in the session directory.

When the execute_request carries ``metadata["ptc_retry"]`` (see the README), its
call id, raw arguments, tool, turn and step are used; otherwise ids are ``c1,
c2, ...`` and each cell is its own step. A cell that only runs this extension's
magics, and a cell that a program runs, are not calls: they take no number and
no id. ``%unload_ext ptc_retry`` removes every hook, name and magic this
extension added and restores what it replaced.

Repeated-failure guard
----------------------
An agent that sends the same failing program again and again is told so, and
can be stopped::

    c.PtcRetry.guard_mode = "pause"     # "off" | "observe" (default) | "pause"
    c.PtcRetry.failure_limit = 3        # an integer >= 2; anything else is an error
    c.PtcRetry.guard_exclude = ["shell"]

Failures are *identical* when the tool name, the program (the call's arguments
as canonical JSON: keys sorted, arrays in order; whitespace inside the program
counts), the exception name and the first line of its message (``0x...``
addresses masked) are equal. The guard counts identical failures in a row within
one turn (the ``turn`` of the request metadata; 0 without one); a success, a
different failure, a call of an excluded tool or a new turn ends the streak.
Output on stderr is not a failure; an interrupt or a time-limit stop is.

- ``observe``: the failure that makes the streak reach the limit gets one more
  sentence in its notice (even below ``notice_min_bytes``, where that sentence
  is the whole notice), once per streak.
- ``pause``: also, every later program is refused: nothing runs, its output is an
  ``application/json`` report and an error ``RetryGuardPaused`` naming the tool,
  the count, the first and last ids and times. The refused call is still saved,
  with status ``refused``. The reply metadata ``guard`` carries the report
  (ids, counts, times, tool, exception name; never program or error text).

A pause lifts when a request carries ``metadata["ptc_retry"]["new_instruction"]:
true`` (a backend sends it when the user speaks; that program then runs), or
when a person runs a cell that is exactly ``%ptc_guard reset`` and carries no
``metadata["ptc_retry"]`` at all. The rule rests on what a model cannot choose:
it writes a cell's text, not the request's metadata. So ``%ptc_guard reset``
inside a larger program, ``get_ipython().run_line_magic("ptc_guard", "reset")``,
or the exact line sent by a backend with our metadata, reset nothing. Its limit:
a client that sends no metadata (nbclient, most gateway executors) cannot be told
from a person, so a model behind such a client that sends exactly that one line
does lift the pause; and the guard stops a model that repeats itself, not a
hostile program (code running in the kernel can change the kernel). Also,
without ``new_instruction`` a paused kernel stays paused until that reset: use
``pause`` with a backend that sends it, ``observe`` otherwise. ``%ptc_guard``
shows the guard's state. Changing a guard option starts the guard fresh; the
guard lives in memory, so a kernel restart starts it fresh too.

Resume
------
When a program fails or is interrupted, its history line records the top-level
statement that was running (``failed_statement: {"index", "lines": [first,
last]}``, 0-based index, 1-based lines) and how many ``completed`` before it,
and, when the program had run for ``PtcRetry.resume_min_seconds`` (default 1)
before it failed, the notice's template ends in ``resume=True``.
``await ptc_retry.replay(id, old, new, resume=True)`` then runs the corrected
program from the earlier of that statement and the first statement an edit
touches; ``await ptc_retry.resume(id)`` does it without an edit. What the
skipped statements made is still in the namespace. A statement cut off half-way
runs again whole: a loop starts again from its first iteration. The whole
program runs, with one line on stderr saying why, when the target did not fail,
when the kernel restarted since it ran (its state is gone), or when the turn
has used up ``PtcRetry.max_resumes_per_turn`` (default 3; a new turn, a new
instruction or a program that succeeds renews it).

Time limit
----------
``c.PtcRetry.time_limit = 55`` (seconds; default None, no limit), or per call
``metadata["ptc_retry"]["time_limit"]``: the kernel stops its own program when
the limit passes, so a client's own timeout is the last resort. The program
ends with ``KeyboardInterrupt("time limit of 55 s reached")``, or
``CancelledError`` with that message when it was awaiting; all its output stays;
the notice says "Stopped by the time limit" and offers resume; the kernel takes
the next call at once. A program that catches the interrupt and goes on is
interrupted again every second. A person's interrupt works as before. The limit
needs the kernel's main thread (not an ipykernel subshell); a thread runs only
while a program with a limit runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from IPython.core.error import InputRejected
from IPython.core.magic import Magics, line_magic, magics_class
from traitlets import Enum, Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from ..core.errors import PtcRetryError
from ..core.guard import GUARD_MODES, RepeatedFailureGuard, failure_key, refusal_message
from ..core.history_table import format_history
from ..core.notice import NOTICE_MIN_BYTES, failure_notice, short_failure_notice
from ..core.program import statement_spans
from ..core.protocol import METADATA_KEY
from ..core.store import Call, CheckpointStore
from ..core.time_limit import HANDLER_CODE, TimeLimit, valid_limit
from .replay import edited_statement

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .replay import Replay

#: The metadata key of execute_requests and execute_replies.

#: Names this kernel process in history lines, so a resume can tell that the kernel
#: restarted since a program ran (and its state is gone).
KERNEL_TOKEN = f"{os.getpid()}-{secrets.token_hex(4)}"

# A person's reset: a cell that is exactly this magic line (see PtcRetryMagics.ptc_guard).
_PERSON_RESET = re.compile(r"\s*%ptc_guard[ \t]+reset\s*")
# Reply metadata kept for requests whose reply is not sent yet: a few subshells at most.
_MAX_REPLIES = 64
# A cell that only runs our own magics (and blank or comment lines) is not a call.
_OWN_MAGICS_ONLY = re.compile(r"(?:[ \t]*(?:%ptc_(?:history|show|guard)\b[^\n]*|#[^\n]*)?\n)*")

# Request metadata fields and their types; a field of another type is ignored.
_REQUEST_FIELDS: dict[str, tuple[type, ...]] = {
    "call_id": (str,),
    "arguments": (str,),
    "tool": (str,),
    "turn": (int,),
    "step": (int,),
    "new_instruction": (bool,),
    "time_limit": (int, float),
}


class PtcRetry(Configurable):
    """Configuration of ptc-retry in a kernel (``--PtcRetry.<name>=...``, ``%config``)."""

    root_dir = Unicode(
        None,
        allow_none=True,
        help="""Directory that holds the checkpoints of every session. None means
        $PTC_RETRY_ROOT, else <tempdir>/ptc-retry-<uid>. It must be a directory
        the kernel's user owns and not a symlink.""",
    ).tag(config=True)

    session_id = Unicode(
        None,
        allow_none=True,
        help="""Name of this kernel's session directory under root_dir. None means
        $PTC_RETRY_SESSION, else an id derived from the kernel's connection file
        (so a restarted kernel continues its session), else a fresh short id.""",
    ).tag(config=True)

    notice_min_bytes = Integer(
        NOTICE_MIN_BYTES,
        min=0,
        help="""A failed program gets the replay notice only when its saved arguments
        are at least this many UTF-8 bytes: below it, re-sending the program costs
        the model less than reading the notice and writing a replay (the default is
        the break-even the evaluation measured). 0 notices every failure.""",
    ).tag(config=True)

    control_flow_exceptions = List(
        Unicode(),
        default_value=["FinalAnswerException"],
        help="""Names of exception classes that end a program on purpose and are not
        failures: they get no notice. SystemExit is always one of them.""",
    ).tag(config=True)

    guard_mode = Enum(
        list(GUARD_MODES),
        default_value="observe",
        help="""What the repeated-failure guard does when one program fails the same way
        failure_limit times in a row within a turn. "observe": the notice of that failure
        says so, once per streak. "pause": also, every later program is refused (error
        RetryGuardPaused) until a new instruction or a person's `%ptc_guard reset`.
        "off": no guard. Changing any guard option starts the guard fresh.""",
    ).tag(config=True)

    failure_limit = Integer(
        3,
        help="""How many identical failures in a row trip the guard: an integer >= 2.""",
    ).tag(config=True)

    guard_exclude = List(
        Unicode(),
        default_value=[],
        help="""Tool names (exact) whose calls the guard never counts; a call of one
        of them ends a streak.""",
    ).tag(config=True)

    max_resumes_per_turn = Integer(
        3,
        min=0,
        help="""How many times a turn may resume a program (replay with resume=True, or
        ptc_retry.resume) before a resume runs the whole program instead, so a loop of
        resumes cannot go on forever. A new turn, a new instruction or a program that
        succeeds gives a fresh budget. 0 turns resume off.""",
    ).tag(config=True)

    resume_min_seconds = Float(
        1.0,
        min=0.0,
        help="""A failure's notice offers resume=True (skip the statements that completed)
        only when the program had run at least this many seconds when it failed: below it,
        running those statements again costs less than the words that offer to skip them.
        0 offers it whenever a statement completed.""",
    ).tag(config=True)

    time_limit = Float(
        None,
        allow_none=True,
        help="""Seconds a program may run before the kernel stops it (a KeyboardInterrupt,
        or CancelledError while it awaits, keeping its output); the next program runs at
        once. None means no limit. A request's metadata["ptc_retry"]["time_limit"]
        overrides it for one call.""",
    ).tag(config=True)

    @validate("failure_limit")
    def _check_failure_limit(self, proposal: Any) -> int:
        value = proposal["value"]
        if isinstance(value, bool) or value < 2:
            raise TraitError(
                f"PtcRetry.failure_limit must be an integer >= 2 (how many identical failures "
                f"in a row trip the guard), not {value!r}."
            )
        return int(value)

    @validate("time_limit")
    def _check_time_limit(self, proposal: Any) -> float | None:
        value = proposal["value"]
        if value is not None and valid_limit(value) is None:
            raise TraitError(
                f"PtcRetry.time_limit must be a finite number of seconds > 0, or None for no "
                f"limit, not {value!r}."
            )
        return value


@dataclass
class _Running:
    """A program between pre_run_cell and post_run_cell."""

    info: Any
    call: Call | None
    notice: str | None = None
    replays: list[Replay] = field(default_factory=list)
    tool: str = "run_code"
    turn: int = 0
    #: The checkpointed arguments, for the guard's key.
    arguments: str = ""
    #: The guard's report when this program is refused, and the error it shows.
    refused: dict[str, Any] | None = None
    refusal: RetryGuardPaused | None = None
    refusal_shown: bool = False
    #: A cell that is exactly ``%ptc_guard reset``, sent by a person (no backend metadata).
    person_reset: bool = False
    #: A cell that only runs ptc-retry's magics: not a call, the guard does not see it.
    own_magics: bool = False
    #: The msg_id of the execute_request that runs it (None outside a kernel).
    msg_id: str | None = None
    #: An interrupt arrived while it was being saved: it did not run.
    stopped_before_start: bool = False
    time_limit: TimeLimit | None = None
    #: ``(filename, transformed text)`` of the program a replay runs in this call.
    program: tuple[str, str] | None = None
    resumed_from: int | None = None
    failure: _Failure | None = None


@dataclass
class _Failure:
    """What the guard and a resume need to know of a failure."""

    error: BaseException
    key: str
    #: ``{"index": i, "lines": [first, last]}`` of the top-level statement that was running.
    statement: dict[str, Any] | None

    @property
    def completed(self) -> int:
        return self.statement["index"] if self.statement else 0


class RetryGuardPaused(InputRejected):
    """The repeated-failure guard refused to run this program (``guard_mode = "pause"``)."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback: nothing ran, there are no frames.
        return [f"RetryGuardPaused: {self}"]


class InterruptedBeforeRun(InputRejected):
    """An interrupt arrived while the program was being saved: it did not run."""

    def __init__(self) -> None:
        super().__init__("interrupted while the program was being saved; nothing ran")

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {self}"]


class _Refuser:
    """An AST transformer that rejects the cell: IPython shows the error and runs nothing."""

    def __init__(self, error: InputRejected) -> None:
        self.error = error

    def visit(self, node: Any) -> Any:
        raise self.error


class PtcRetryExtension:
    """The state of ptc-retry in one shell: its store, hooks and last reply metadata."""

    def __init__(self, shell: InteractiveShell, api: types.ModuleType) -> None:
        self.shell = shell
        #: What programs see as ``ptc_retry``: the package's public API.
        self.api = api
        self.config = PtcRetry(parent=shell)
        self.config.observe(self._reopen, names=["root_dir", "session_id"])
        self.store: CheckpointStore | None = None
        #: Why the store could not open, the last time it was tried.
        self.store_problem: str | None = None
        #: The reply metadata of the latest program that ended (any thread).
        self.reply_metadata: dict[str, Any] | None = None
        #: Reply metadata by execute_request msg_id, until the kernel's reply takes it: cells
        #: of ipykernel subshells run at the same time, each with its own.
        self._replies: dict[str, dict[str, Any]] = {}
        # Each thread its own stack of running programs (ipykernel subshells run cells in
        # threads of their own): a cell never sees another thread's program as its own.
        self._stacks = threading.local()
        self._guard_lock = threading.Lock()
        self._reported: str | None = None
        self._replaced_showtraceback: Any = None
        self._had_own_showtraceback = False
        self._magics: Any = None
        #: Kept in memory only: a kernel restart starts a fresh guard.
        self.guard = self._new_guard()
        self.config.observe(
            self._restart_guard, names=["guard_mode", "failure_limit", "guard_exclude"]
        )
        self._refuser: _Refuser | None = None
        self._resume_turn: int | None = None
        self._resumes = 0
        # A frame called by this code and named <module> runs a cell's own code.
        self._run_code = shell.run_code.__func__.__code__

    @property
    def _running(self) -> list[_Running]:
        """The programs running in this thread, outermost first."""
        stack = getattr(self._stacks, "running", None)
        if stack is None:
            stack = self._stacks.running = []
        return stack

    def take_reply_metadata(self, msg_id: str | None) -> dict[str, Any] | None:
        """The reply metadata of the request ``msg_id`` (once), for the kernel's reply."""
        return self._replies.pop(msg_id, None) if msg_id else None

    def _new_guard(self) -> RepeatedFailureGuard:
        config = self.config
        return RepeatedFailureGuard(
            mode=config.guard_mode, limit=config.failure_limit, exclude=config.guard_exclude
        )

    def _restart_guard(self, change: Any = None) -> None:
        self.guard = self._new_guard()

    # -- store ---------------------------------------------------------------

    def open_store(self) -> CheckpointStore | None:
        """Open the store if it is not open; on failure warn once and return None."""
        if self.store is None:
            try:
                self.store = CheckpointStore(
                    self.config.root_dir, self.session_name(), owner=kernel_session_name()
                )
            except (OSError, PtcRetryError) as exc:
                self.store_problem = f"checkpoints are off: {exc}"
                self.warn_once(self.store_problem)
            else:
                if self.store.warning:  # e.g. the session was another kernel's: said once
                    self.warn_once(self.store.warning)
        return self.store

    def session_name(self) -> str | None:
        if self.config.session_id:
            return self.config.session_id
        if os.environ.get("PTC_RETRY_SESSION"):
            return os.environ["PTC_RETRY_SESSION"]
        return kernel_session_name()

    def _reopen(self, change: Any = None) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        self._reported = None

    def warn_once(self, message: str) -> None:
        # One warning per distinct problem: an agent pays for every line it reads.
        if message != self._reported:
            self._reported = message
            sentence = message.rstrip(".")
            print(f"ptc-retry: {sentence}. Programs still run as usual.", file=sys.stderr)

    # -- hooks ---------------------------------------------------------------

    def pre_run_cell(self, info: Any) -> None:
        parent = self._request()
        raw_request = self.raw_request_metadata(parent)
        request = checked_metadata(raw_request)
        source = info.raw_cell
        tool = request.get("tool", "run_code")
        turn = request.get("turn", 0)
        outermost = not self._running
        # Not calls: a cell a program runs (it is part of that program) and a cell that only
        # runs our magics. They take no number or id and leave previous/ as it is.
        own_magics = outermost and _OWN_MAGICS_ONLY.fullmatch(source + "\n") is not None
        running = _Running(info, None, tool=tool, turn=turn)
        running.own_magics = own_magics
        msg_id = (parent.get("header") or {}).get("msg_id") if parent else None
        running.msg_id = msg_id if isinstance(msg_id, str) else None
        self._running.append(running)  # first: whatever happens next, post_run_cell finds it
        try:
            if outermost and not own_magics:
                running.arguments = checkpoint_arguments(source, request.get("arguments"))
                running.call = self._begin(source, running.arguments, request, tool=tool, turn=turn)
            if outermost:
                self._before_program(running, request, from_backend=raw_request is not None)
        except KeyboardInterrupt:
            # An interrupt while the program was being saved: it must not run unsaved and
            # unrecorded, so it does not run at all; its history line says interrupted.
            self._stop_before_start(running)

    def _stop_before_start(self, running: _Running) -> None:
        running.stopped_before_start = True
        self._drop_refuser()
        self._refuser = _Refuser(InterruptedBeforeRun())
        self.shell.ast_transformers.append(self._refuser)

    def _begin(
        self, source: str, arguments: str, request: dict[str, Any], *, tool: str, turn: int
    ) -> Call | None:
        """Save the program before it runs; None (and a warning, once) when it cannot be."""
        store = self.open_store()
        if store is None:
            return None
        try:
            call = store.begin(
                arguments,
                call_id=request.get("call_id"),
                tool=tool,
                turn=turn,
                step=request.get("step"),
                code_bytes=len(source.encode("utf-8", "surrogatepass")),
            )
        except (OSError, PtcRetryError) as exc:
            self.warn_once(f"could not save this program ({exc})")
            return None
        self._reported = None
        return call

    def _before_program(
        self, running: _Running, request: dict[str, Any], *, from_backend: bool
    ) -> None:
        """The guard's decision, the resume budget and the time limit of an agent's call."""
        if request.get("new_instruction"):
            self.guard.reset()
            self._resumes = 0
        if running.turn != self._resume_turn:
            self._resume_turn, self._resumes = running.turn, 0
        # Only a person types into a cell without our backend's metadata; a model's
        # program is whatever the cell holds, so "exactly this line" keeps it out.
        running.person_reset = (
            not from_backend and _PERSON_RESET.fullmatch(running.info.raw_cell) is not None
        )
        if self.guard.refusing and not running.person_reset and not running.own_magics:
            running.refused = self.guard.refuse()
            running.refusal = RetryGuardPaused(refusal_message(running.refused), running.refused)
            # The cell parses, then this transformer rejects it: IPython shows the error
            # and runs nothing. It is in place only while a refused cell runs.
            self._refuser = _Refuser(running.refusal)
            self.shell.ast_transformers.append(self._refuser)
            return
        # Also without a limit for a cell that may await (every replay does): there it makes
        # a person's interrupt stop the program's own code at once, as Python's default
        # handler does in a plain cell, where ipykernel would only cancel it at its next
        # await. A plain cell keeps the default handler and costs nothing here.
        seconds = valid_limit(request.get("time_limit")) or self.config.time_limit
        source = running.info.raw_cell
        if not seconds and "await" not in source and "async" not in source:
            return
        limit = TimeLimit(seconds or None, self._run_code)
        if limit.start():
            running.time_limit = limit
        elif seconds:
            self.warn_once("the time limit works only in the kernel's main thread")

    def post_run_cell(self, result: Any) -> None:
        running = self._pop(result)
        if running is None:
            return  # an empty cell: IPython fires post_run_cell without pre_run_cell
        outermost = not self._running
        limit = running.time_limit
        if limit is not None:
            limit.stop()  # first: no interrupt may reach what follows
        self._drop_refuser()
        error = None
        if result is not None:
            error = result.error_before_exec or result.error_in_exec
        if running.refusal is not None:
            status = "refused"
            if result is not None and error is not running.refusal:
                # Input that fails before the transformer (a syntax error) is refused
                # too: the reply must say RetryGuardPaused, as the output did.
                result.error_before_exec = error = running.refusal
        elif running.stopped_before_start:
            status = "interrupted"
        else:
            status = self._status(error, cancelled=result is None)
            if limit is not None and limit.stopped and status == "error":
                status = "interrupted"  # a CancelledError of an awaiting program
        failure = None
        if error is not None and status in ("error", "interrupted"):
            failure = self._failure(running, error)
        call = running.call
        if call is not None and self.store is not None:
            extra: dict[str, Any] = {"kernel": KERNEL_TOKEN}
            if error is not None:
                extra["ename"] = type(error).__name__
            if failure is not None and failure.statement is not None:
                extra["failed_statement"] = failure.statement
                extra["completed"] = failure.completed
            if limit is not None and limit.stopped:
                extra["time_limit"] = limit.seconds
            if running.resumed_from is not None:
                extra["resumed_from"] = running.resumed_from
            try:
                self.store.finish(call, status, **extra)
            except (OSError, PtcRetryError) as exc:
                self.warn_once(f"could not write the history ({exc})")
        guard = running.refused
        if outermost and running.refused is None and not running.own_magics:
            with self._guard_lock:
                guard = self.guard.record(
                    failure.key if failure is not None else None,
                    tool=running.tool,
                    turn=running.turn,
                    ename=type(error).__name__ if error is not None else None,
                    call_id=call.id if call else None,
                    when=call.started if call else time.time(),
                )
            if status == "ok":
                self._resumes = 0
        metadata: dict[str, Any] = {
            "call_id": call.id if call else None,
            "reference": call.reference if call else None,
            "checkpoint": str(call.path) if call else None,
            "ordinal": call.ordinal if call else None,
            "status": status,
            "notice": running.notice,
            "guard": guard,
        }
        if limit is not None and limit.stopped:
            # Only then: the seconds of the kernel's own time limit that stopped the program.
            metadata["time_limit"] = limit.seconds
        self.reply_metadata = metadata
        if outermost and running.msg_id is not None:
            self._replies[running.msg_id] = metadata
            while len(self._replies) > _MAX_REPLIES:  # a kernel that never takes them
                del self._replies[next(iter(self._replies))]
        for replay in running.replays:
            if not replay.awaited:
                print(replay.not_awaited_message(), file=sys.stderr)

    def _drop_refuser(self) -> None:
        if self._refuser is not None:
            transformers = self.shell.ast_transformers
            if self._refuser in transformers:
                transformers.remove(self._refuser)
            self._refuser = None

    def _failure(self, running: _Running, error: BaseException) -> _Failure:
        """The failure of ``error`` in ``running``, computed once."""
        failure = running.failure
        if failure is None or failure.error is not error:
            key = failure_key(running.tool, running.arguments, error)
            failure = running.failure = _Failure(error, key, self._failed_statement(running, error))
        return failure

    def _failed_statement(self, running: _Running, error: BaseException) -> dict[str, Any] | None:
        """The top-level statement that was running when ``error`` ended the program.

        Read from the traceback: in a replay, the outermost frame of the replayed
        program's file; otherwise the frame that IPython's ``run_code`` called, the
        cell's own code. None when no statement ran (e.g. a syntax error).
        """
        tb = error.__traceback__
        line = None
        if running.program is not None:
            filename, text = running.program
            while tb is not None and line is None:
                if tb.tb_frame.f_code.co_filename == filename:
                    line = tb.tb_lineno
                tb = tb.tb_next
        else:
            text = None
            while tb is not None and line is None:
                if tb.tb_frame.f_code is self._run_code and tb.tb_next is not None:
                    line = tb.tb_next.tb_lineno
                tb = tb.tb_next
            if line is not None:
                text = self.cell_text(running.info)
        if not isinstance(line, int) or text is None:
            return None
        try:
            spans = statement_spans(text)
        except SyntaxError:
            return None
        for index, (first, last) in enumerate(spans):
            if first <= line <= last:
                return {"index": index, "lines": [first, last]}
        return None

    def cell_text(self, info: Any) -> str | None:
        """The cell as IPython compiled it (magics turned into calls; same lines)."""
        transformed = getattr(info, "transformed_cell", None)  # IPython >= 9
        if isinstance(transformed, str):
            return transformed
        try:
            return self.shell.transform_cell(info.raw_cell)
        except Exception:
            return None

    def _pop(self, result: Any) -> _Running | None:
        if not self._running:
            return None
        info = getattr(result, "info", None)
        if result is None or self._running[-1].info is info:
            return self._running.pop()
        return None

    def _status(self, error: BaseException | None, *, cancelled: bool) -> str:
        if cancelled or isinstance(error, KeyboardInterrupt):
            return "interrupted"
        if error is None or self.is_control_flow(error):
            return "ok"
        return "error"

    def is_control_flow(self, error: BaseException) -> bool:
        if isinstance(error, SystemExit):
            return True
        names = set(self.config.control_flow_exceptions)
        return any(cls.__name__ in names for cls in type(error).__mro__)

    def request_metadata(self) -> dict[str, Any]:
        """``metadata["ptc_retry"]`` of the execute_request being run, checked field by field.

        Plain IPython has no request; a field of the wrong type is ignored, so a
        backend's mistake never stops a program.
        """
        return checked_metadata(self.raw_request_metadata())

    def raw_request_metadata(self, parent: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``metadata["ptc_retry"]`` of the execute_request being run (or ``parent``) as
        sent, if a dict."""
        parent = parent if parent is not None else self._request()
        raw = (parent.get("metadata") or {}).get(METADATA_KEY) if parent else None
        return raw if isinstance(raw, dict) else None

    def _request(self) -> dict[str, Any] | None:
        """The execute_request being run in this thread; None outside a kernel."""
        kernel = getattr(self.shell, "kernel", None)
        if kernel is None:
            return None
        try:
            parent = kernel.get_parent("shell")
        except Exception:
            return None
        return parent if isinstance(parent, dict) else None

    def show_traceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
        """Wraps the shell's ``_showtraceback``: IPython formats, we append the notice.

        A refused program shows the guard's report and its RetryGuardPaused error
        instead, whatever IPython was about to show (e.g. a syntax error).
        """
        try:
            running = self._running[-1] if self._running else None
            if running is not None and running.refusal is not None:
                etype, evalue, stb = self._refusal_output(running)
            else:
                stb = self._with_notice(evalue, self._own_lines_only(etype, evalue, stb))
        except Exception as exc:  # never lose the user's traceback to our own bug
            self.warn_once(f"could not add the notice ({type(exc).__name__}: {exc})")
        finally:
            self._replaced_showtraceback(etype, evalue, stb)

    def _own_lines_only(self, etype: type, evalue: BaseException, stb: list[str]) -> list[str]:
        """The traceback without ptc-retry's own frames where they would show.

        A replayed program that does not compile is a syntax error in that program: shown
        as IPython shows one in a cell (the line and the caret), not through the frames of
        the replay that compiled it. An interrupt raised by our SIGINT handler would end in
        the handler's frame; the reader needs it to end in the program's line.
        """
        filename = getattr(evalue, "filename", None)
        if isinstance(evalue, SyntaxError) and str(filename).startswith("<ptc-retry "):
            return list(self.shell.SyntaxTB.structured_traceback(etype, evalue, []))
        entries = []
        tb = evalue.__traceback__
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        if not entries or entries[-1].tb_frame.f_code is not HANDLER_CODE:
            return stb
        trimmed = None
        for entry in reversed(entries[:-1]):
            trimmed = types.TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        evalue.__traceback__ = trimmed
        return list(self.shell.InteractiveTB.structured_traceback(etype, evalue, trimmed))

    def _refusal_output(self, running: _Running) -> tuple[type, BaseException, list[str]]:
        refusal = running.refusal
        assert refusal is not None
        if not running.refusal_shown:
            running.refusal_shown = True
            from IPython.display import display

            # Metadata only (ids, counts, times, tool, exception name), for tools.
            display({"application/json": refusal.report}, raw=True)
        return type(refusal), refusal, refusal._render_traceback_()

    def _with_notice(self, evalue: BaseException, stb: list[str]) -> list[str]:
        if not self._running:
            return stb
        running = self._running[-1]
        if running.notice is not None or running.stopped_before_start:
            return stb
        if self.is_control_flow(evalue):
            return stb
        failure = self._failure(running, evalue)
        limit = running.time_limit
        stopped = limit.seconds if limit is not None and limit.stopped else None
        repeated = 0
        if running is self._running[0]:
            with self._guard_lock:
                count = self.guard.count_if_failed(failure.key, running.tool, running.turn)
            repeated = count if count == self.guard.limit else 0
        paused = bool(repeated) and self.guard.mode == "pause"
        call = running.call
        if call is not None and call.bytes >= self.config.notice_min_bytes:
            interrupted = isinstance(evalue, KeyboardInterrupt)
            ran = time.time() - call.started
            saves_work = ran >= self.config.resume_min_seconds
            notice: str | None = failure_notice(
                call.reference,
                interrupted=interrupted,
                completed=failure.completed if saves_work else 0,
                time_limit=stopped,
                repeated=repeated,
                paused=paused,
            )
            self._link_number(call)
        else:
            notice = short_failure_notice(time_limit=stopped, repeated=repeated, paused=paused)
        if notice is None:
            return stb
        running.notice = notice
        return [*stb, notice]

    def _link_number(self, call: Call) -> None:
        """``calls/<n>.json``, for a model that reads the file without the helper."""
        if self.store is not None:
            try:
                self.store.link_number(call)
            except (OSError, PtcRetryError) as exc:
                self.warn_once(f"could not save calls/{call.n}.json ({exc})")

    def current_call(self) -> _Running | None:
        """The program that is running now (the innermost one), if any."""
        return self._running[-1] if self._running else None

    # -- resume ----------------------------------------------------------------

    def resume_start(self, call_id: str, code: str, corrected: str, transformed: str) -> int:
        """The top-level statement a resume of ``call_id`` starts at (0-based).

        ``code`` is the program ``call_id`` ran, ``corrected`` the program to run now
        and ``transformed`` that as compiled. The start is the earlier of the statement
        that failed and the first statement an edit touched. 0 when the whole program
        must run: then one line on stderr says why, unless nothing had run anyway
        (e.g. a syntax error).
        """
        line = self._history_line(call_id) or {}
        status = line.get("status")
        restarted = f"the kernel restarted after {call_id} ran, so what it computed is gone"
        if status == "unfinished":  # the kernel died while it ran
            return self._run_whole(restarted)
        if status not in ("error", "interrupted"):
            return self._run_whole(f"{call_id} did not fail, so there is nothing to skip")
        failed = line.get("failed_statement")
        index = failed.get("index") if isinstance(failed, dict) else None
        if not isinstance(index, int):
            return 0  # no statement ran (a syntax error): the whole program it is
        if line.get("kernel") != KERNEL_TOKEN:
            return self._run_whole(restarted)
        if index == 0:
            return 0
        touched = edited_statement(code, corrected, transformed)
        start = index if touched is None else min(index, touched)
        if start == 0:
            return 0
        budget = self.config.max_resumes_per_turn
        if self._resumes >= budget:
            return self._run_whole(
                f"this turn has used its {budget} resumes (PtcRetry.max_resumes_per_turn)"
            )
        self._resumes += 1
        return start

    def _history_line(self, call_id: str) -> dict[str, Any] | None:
        store = self.open_store()
        if store is None:
            return None
        for line in reversed(store.history()):
            if line.get("id") == call_id:
                return line
        return None

    @staticmethod
    def _run_whole(reason: str) -> int:
        print(f"ptc-retry: {reason}: running the whole program.", file=sys.stderr)
        return 0

    # -- load / unload -------------------------------------------------------

    def register(self) -> None:
        shell = self.shell
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)
        # IPython formats every traceback (runtime, syntax, interrupt) and hands the
        # lines to _showtraceback, which ipykernel turns into the error output and
        # the reply: the one place where appending a line reaches every client.
        self._had_own_showtraceback = "_showtraceback" in shell.__dict__
        self._replaced_showtraceback = shell._showtraceback
        shell._showtraceback = self.show_traceback
        shell.configurables.append(self.config)
        shell.user_ns["ptc_retry"] = self.api
        shell.user_ns_hidden["ptc_retry"] = self.api
        self._magics = PtcRetryMagics(shell, extension=self)
        shell.register_magics(self._magics)
        # The store opens at the first program, so that a problem with it is
        # reported in that program's output, where the model reads it, rather
        # than in a kernel log nobody sees.

    def unregister(self) -> None:
        shell = self.shell
        shell.events.unregister("pre_run_cell", self.pre_run_cell)
        shell.events.unregister("post_run_cell", self.post_run_cell)
        self._drop_refuser()
        for running in self._running:  # unloaded by the program that is running
            if running.time_limit is not None:
                running.time_limit.stop()
                running.time_limit = None
            # Its post_run_cell will not come: record it now, or it would stay unfinished.
            if running.call is not None and self.store is not None:
                try:
                    self.store.finish(running.call, "ok", kernel=KERNEL_TOKEN)
                except (OSError, PtcRetryError) as exc:
                    self.warn_once(f"could not write the history ({exc})")
        if shell.__dict__.get("_showtraceback") == self.show_traceback:
            if self._had_own_showtraceback:
                shell._showtraceback = self._replaced_showtraceback
            else:
                del shell._showtraceback
        for configurable in (self.config, self._magics):
            if configurable in shell.configurables:
                shell.configurables.remove(configurable)
        if shell.magics_manager.registry.get(type(self._magics).__name__) is self._magics:
            del shell.magics_manager.registry[type(self._magics).__name__]
        if shell.user_ns.get("ptc_retry") is self.api:
            del shell.user_ns["ptc_retry"]
        shell.user_ns_hidden.pop("ptc_retry", None)
        for kind, names in MAGIC_NAMES.items():
            for name in names:
                shell.magics_manager.magics[kind].pop(name, None)
        if self.store is not None:
            self.store.close()
            self.store = None


def checked_metadata(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The fields of request metadata that have the expected type (a bool is no int here)."""
    if not raw:
        return {}
    checked = {}
    for key, value in raw.items():
        types = _REQUEST_FIELDS.get(key)
        if types is None or not isinstance(value, types):
            continue
        if isinstance(value, bool) and bool not in types:
            continue
        checked[key] = value
    return checked


def checkpoint_arguments(source: str, arguments: str | None) -> str:
    """What ``by-id/<id>.json`` holds: the backend's raw arguments when their
    ``"code"`` is the source that runs, else ``{"code": source}``."""
    if arguments is not None:
        try:
            decoded = json.loads(arguments)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("code") == source:
            return arguments
    return json.dumps({"code": source}, ensure_ascii=False)


def kernel_session_name() -> str | None:
    """A session name derived from the kernel's connection file, or None outside a kernel.

    A restarted kernel keeps its connection file, so it continues its session.
    """
    app_module = sys.modules.get("ipykernel.kernelapp")
    if app_module is None or not app_module.IPKernelApp.initialized():
        return None
    app = app_module.IPKernelApp.instance()
    path = getattr(app, "abs_connection_file", None) or app.connection_file
    if not path:
        return None
    digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()
    return "k" + digest[:10]


# -- IPython connectivity ------------------------------------------------------

_active: dict[int, PtcRetryExtension] = {}


def active_for(shell: Any) -> PtcRetryExtension | None:
    """The extension loaded in ``shell``, if any."""
    return _active.get(id(shell))


def active_extension() -> PtcRetryExtension:
    """The extension loaded in the running IPython shell; PtcRetryError if none."""
    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    extension = _active.get(id(shell)) if shell is not None else None
    if extension is None:
        raise PtcRetryError(
            "ptc-retry is not loaded in this kernel: run `%load_ext ptc_retry` first, "
            "or start the `ptc-retry` kernel"
        )
    return extension


MAGIC_NAMES = {"line": ["ptc_history", "ptc_show", "ptc_guard"]}


@magics_class
class PtcRetryMagics(Magics):
    """Magics for a person at the notebook."""

    def __init__(self, shell: Any, extension: PtcRetryExtension) -> None:
        super().__init__(shell)
        self.extension = extension

    @line_magic
    def ptc_history(self, line: str) -> None:
        """%ptc_history [N]: the last N calls of this session (default 20)."""
        store = self.extension.open_store()
        if store is None:
            return
        count = int(line) if line.strip().isdigit() else 20
        print(format_history(store.history()[-count:], session_dir=store.session_dir))

    @line_magic
    def ptc_show(self, line: str) -> None:
        """%ptc_show #N|ID|N: the program saved as #N, for a call id, or as previous/N.json."""
        store = self.extension.open_store()
        if store is None:
            return
        text = line.strip()
        if not text:
            print("usage: %ptc_show #N (program N), <call id>, or a number N for previous/N.json")
            return
        target: str | int = int(text) if text.isdigit() else text
        try:
            call_id, code = store.load_code(target)
        except PtcRetryError as exc:
            print(exc, file=sys.stderr)
            return
        ref = store.reference_of(call_id)
        name = f"{ref} ({call_id})" if ref else call_id
        print(f"# {name}: {store.path_for(target)}\n{code}")

    @line_magic
    def ptc_guard(self, line: str) -> None:
        """%ptc_guard: the repeated-failure guard's state. %ptc_guard reset: start it fresh.

        A reset lifts a pause. It works only as a cell of its own, exactly
        ``%ptc_guard reset``, sent without ptc-retry metadata: a person at the
        notebook. Inside a larger program, from Python, or in a call from a backend
        it resets nothing, so a model's program cannot lift a pause.
        """
        extension = self.extension
        word = line.strip()
        if word in ("", "status"):
            print(extension.guard.status())
        elif word == "reset":
            running = extension._running[0] if extension._running else None
            if running is None or not running.person_reset:
                print(
                    "ptc-retry: nothing was reset. %ptc_guard reset works only as a cell of "
                    "its own, run by a person at the notebook.",
                    file=sys.stderr,
                )
                return
            extension.guard.reset()
            print("ptc-retry: the guard starts fresh; programs run again.")
        else:
            print("usage: %ptc_guard [reset]", file=sys.stderr)


def load_ipython_extension(shell: InteractiveShell, api: types.ModuleType) -> None:
    """``%load_ext ptc_retry``, which gives ``api`` (the ``ptc_retry`` package) to put in
    the namespace: loading twice in one shell is a no-op."""
    if id(shell) in _active:
        return
    extension = PtcRetryExtension(shell, api)
    _active[id(shell)] = extension
    extension.register()


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """``%unload_ext ptc_retry``: remove every hook, name and magic, restore what was replaced."""
    extension = _active.pop(id(shell), None)
    if extension is not None:
        extension.unregister()
