"""The IPython extension (``%load_ext ptc_retry``): its hooks save every program before it
runs, add the notice to a failed program's traceback and keep what the kernel's reply
tells the backend. docs/notebook.md is its manual; the guard's rules live in core/guard.py."""

from __future__ import annotations

import json
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

from ..core import sentences as said
from ..core.guard import RepeatedFailureGuard, refusal_message
from ..core.notice import partial_notice
from ..core.partial import cut_arguments
from ..core.protocol import TOOL_RESULTS
from ..core.status import STOPPED, HistoryStatus, history_status
from ..core.store import Call, CheckpointStore
from ..core.time_limit import TimeLimit
from . import host, tracebacks
from .catalog import Catalogs
from .checkpoints import Checkpoints
from .config import PtcRetry
from .endings import history_extra, outcome, reply_metadata, was_interrupted
from .guarding import KernelGuard
from .host_results import record_host_results
from .magics import PtcRetryMagics, is_person_reset, only_own_magics
from .names import add_names, offer_tools, remove_magics, remove_names, restore_names
from .refusal import (
    CallCutOff,
    InterruptedBeforeRun,
    Refuser,
    RetryGuardPaused,
)
from .requests import Request, checkpoint_arguments, read_request
from .resume import KERNEL_TOKEN, Namespace, ResumePolicy
from .running import STARTED_BY, Programs, Running
from .statements import current_task
from .stdin import StdinChannel
from .tool_calls import call_host_tool
from .traceback_hook import TracebackHook
from .tracebacks import failure_of
from .tracing import now_ns, program_trace

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

logger = logging.getLogger(__name__)

# Reply metadata kept for requests whose reply is not sent yet: a few subshells at most.
_MAX_REPLIES = 64


class PtcRetryExtension:
    """The state of ptc-retry in one shell: its store, hooks and pending reply metadata."""

    def __init__(self, shell: InteractiveShell, api: types.ModuleType) -> None:
        self.shell = shell
        #: What programs see as ``ptc_retry``: the package's public API.
        self.api = api
        self.config = PtcRetry(parent=shell)
        self.checkpoints = Checkpoints(self.config)
        self.programs = Programs()
        self.resumes = ResumePolicy(self.config)
        self.guards = KernelGuard(self.config)
        #: Reply metadata by execute_request msg_id, until the kernel's reply takes it: cells
        #: of ipykernel subshells run at the same time, each with its own.
        self._replies: dict[str, dict[str, Any]] = {}
        self._refuser = Refuser(shell)
        self._magics: PtcRetryMagics | None = None
        self.tool_catalogs = Catalogs(call_host_tool)
        self.stdin: StdinChannel | None = None
        self._said_tools_taken = False
        # A frame called by this code and named <module> runs a cell's own code.
        self._run_code = type(shell).run_code.__code__
        self.traceback_hook = TracebackHook(
            shell,
            self.programs,
            self.checkpoints,
            self.guards,
            self.config,
            self.is_control_flow,
            self._run_code,
        )

    @property
    def store(self) -> CheckpointStore | None:
        """The session's store, once a program opened it."""
        return self.checkpoints.store

    def warn_once(self, message: str) -> None:
        self.checkpoints.warn(message)

    def take_reply_metadata(self, msg_id: str | None) -> dict[str, Any] | None:
        """The reply metadata of the request ``msg_id`` (once), for the kernel's reply, once
        the request ended: a program of it that never reached post_run_cell ends here."""
        self._end_leftovers(self.programs.of_request(msg_id), keep_reply=True)
        return self._replies.pop(msg_id, None) if msg_id else None

    @property
    def guard(self) -> RepeatedFailureGuard:
        """The kernel's repeated-failure guard, as the traits set it up now."""
        return self.guards.guard

    # -- before a cell runs ----------------------------------------------------

    def pre_run_cell(self, info: Any) -> None:
        try:
            self._begin_cell(info)
        except Exception as exc:  # our own bug: the cell runs as it would without ptc-retry
            self._hook_failed("pre_run_cell", exc)

    def _hook_failed(self, hook: str, exc: Exception) -> None:
        """A hook's own error never shows as the cell's error: said once on stderr."""
        logger.info("the %s hook failed", hook, exc_info=exc)
        self.warn_once(f"its {hook} hook failed ({type(exc).__name__}: {exc})")

    def _begin_cell(self, info: Any) -> None:
        if restore_names(self.shell, self.api):  # %reset took them, and all a program bound
            Namespace.resets += 1
        request = read_request(self.shell)
        # What an earlier request left, when an exception escaped IPython's machinery or a
        # hook before its post_run_cell: ended here, so that this cell is a call of its own.
        leftovers = self.programs.of_other_requests(request.msg_id, self._run_code)
        self._end_leftovers(leftovers, keep_reply=False)
        source = info.raw_cell
        outermost = not self.programs.stack
        if outermost:
            self._refuser.drop()  # no program runs in this thread: no refusal can be in place
        running = Running(info, None, tool=request.tool, turn=request.turn, msg_id=request.msg_id)
        # Not calls: a cell a program runs (it is part of that program) and a cell that only
        # runs our magics. They take no number or id and leave previous/ as it is.
        partial = outermost and bool(request.fields.get("partial"))
        running.own_magics = (
            outermost and not partial and only_own_magics(source, from_backend=request.from_backend)
        )
        self.programs.stack.append(running)  # first: whatever happens next, post_run_cell finds it
        try:
            if outermost:
                running.task = current_task()
                running.trace = program_trace(request)
                STARTED_BY.set(running)
                catalog = request.fields.get("tools")
                if catalog is not None:
                    running.catalog = self.tool_catalogs.read(catalog)
                    self._said_tools_taken = offer_tools(self.shell, said=self._said_tools_taken)
                self._record_host_results(request)
            if partial:
                self._cut_off(running, request)
            elif outermost and not running.own_magics:
                running.arguments = checkpoint_arguments(source, request.fields.get("arguments"))
                running.call = self._save(running, source, request)
            if outermost and running.cut_off is None:
                self._before_program(running, request)
            if running.trace is not None and self._runs(running):
                running.trace.run_started(running.call)
        except KeyboardInterrupt:
            # An interrupt while the program was being saved: it must not run unsaved and
            # unrecorded, so it does not run at all; its history line says interrupted.
            running.stopped_before_start = True
            logger.info("interrupted while %s was being saved: it did not run", _name(running))
            self._refuser.refuse(InterruptedBeforeRun())

    @staticmethod
    def _runs(running: Running) -> bool:
        """Whether a program's cell runs a program of the agent's: not one refused by the
        guard, cut off mid-stream (saved, not run) or made only of our magics."""
        return running.refusal is None and running.cut_off is None and not running.own_magics

    def _save(self, running: Running, program: str, request: Request) -> Call | None:
        """Save ``program`` (with ``running.arguments``) before it runs, as
        ``Checkpoints.begin``; a traced program's save is a span of its own."""
        if running.trace is None:
            return self.checkpoints.begin(program, running.arguments, request)
        started = now_ns()
        call = self.checkpoints.begin(program, running.arguments, request)
        running.trace.saved(started, call)
        return call

    def _record_host_results(self, request: Request) -> None:
        """The results the host completed after their programs stopped waiting go into
        those programs' recordings, before this program runs: a resume it makes reuses
        them. A failure here is said once and never stops the program."""
        entries = request.fields.get(TOOL_RESULTS)
        if not entries:
            return
        try:
            record_host_results(self.checkpoints, entries)
        except Exception as exc:
            logger.info("could not record the host's tool results", exc_info=True)
            self.warn_once(f"could not record the host's tool results ({type(exc).__name__})")

    def _cut_off(self, running: Running, request: Request) -> None:
        """A call cut off mid-stream (``KernelBackend.handle_partial_tool_call``): the start
        of its program, decoded from its arguments as they arrived, is saved with them, and
        nothing runs (the cell is a placeholder); its notice says how to go on."""
        self._new_program(running, request)
        raw = request.fields.get("arguments")
        try:
            found = cut_arguments(raw).string("code") if raw is not None else None
        except ValueError:
            found = None
        call = None
        if found is not None:
            program = found[0]
            running.arguments = json.dumps({"code": program}, ensure_ascii=False)
            call = running.call = self._save(running, program, request)
        if found is None:
            running.notice = said.CUT_BEFORE_CODE.render()
        elif call is not None and self.checkpoints.save_partial(call, str(raw)):
            running.notice = partial_notice(call.reference, found[0], whole=found[1])
            self.checkpoints.link_number(call)
        else:
            problem = self.checkpoints.problem or "checkpoints are off"
            running.notice = said.CUT_NOT_SAVED.render(problem=problem)
        running.cut_off = CallCutOff(running.notice)
        self._refuser.refuse(running.cut_off)

    def _new_program(self, running: Running, request: Request) -> None:
        """A new instruction lifts the guard; it, or a new turn, renews the resume budget."""
        new_instruction = bool(request.fields.get("new_instruction"))
        if new_instruction:
            self.guard.reset()
        self.resumes.begin_program(running.turn, new_instruction=new_instruction)

    def _before_program(self, running: Running, request: Request) -> None:
        """The guard's decision, the resume budget and the time limit of an agent's call."""
        self._new_program(running, request)
        running.person_reset = is_person_reset(
            running.info.raw_cell, from_backend=request.from_backend
        )
        if self.guard.refusing and not running.person_reset and not running.own_magics:
            running.refused = self.guard.refuse()
            message = refusal_message(running.refused, self.checkpoints.person_name)
            running.refusal = RetryGuardPaused(message, running.refused)
            # It is in place only while this cell runs: IPython shows the error, runs nothing.
            self._refuser.refuse(running.refusal)
            return
        self._start_time_limit(running, request.fields.get("time_limit"))

    def _start_time_limit(self, running: Running, requested: object) -> None:
        # Also without a limit for a cell that may await (every replay does): there it makes
        # a person's interrupt stop the program's own code at once, as Python's default
        # handler does in a plain cell, where ipykernel would only cancel it at its next
        # await. A plain cell keeps the default handler and costs nothing here.
        seconds = self.config.limit_for(requested)
        source = running.info.raw_cell
        if not seconds and "await" not in source and "async" not in source:
            return
        limit = TimeLimit(seconds or None, self._run_code)
        if limit.start():
            running.time_limit = limit
        elif seconds:
            self.warn_once("the time limit works only in the kernel's main thread")

    # -- after a cell ran ------------------------------------------------------

    def post_run_cell(self, result: Any) -> None:
        try:
            self._end_cell(result)
        except Exception as exc:  # the next cell, or the reply, ends what is left
            self._hook_failed("post_run_cell", exc)

    def _end_cell(self, result: Any) -> None:
        error = getattr(result, "error_in_exec", None)
        if error is not None:
            self.traceback_hook.close_abandoned_cell(error)
            # ipykernel writes the reply's evalue from this error: one it cannot send
            # would leave the client without a reply.
            result.error_in_exec = tracebacks.sendable_error(error)
        running = self.programs.pop(result)
        if running is None:
            return  # an empty cell: IPython fires post_run_cell without pre_run_cell
        outermost = not self.programs.stack
        try:
            self._stop(running)
        finally:  # an interrupt while it stopped still leaves the program recorded
            error, status = outcome(running, result, self.is_control_flow)
            self._finish(running, error, status, outermost=outermost, keep_reply=True)

    def _end_leftovers(self, left: list[Running], *, keep_reply: bool) -> None:
        """End programs whose post_run_cell never came, innermost first: stopped as any
        program, and recorded as ended by the error IPython showed, if it showed one, else
        as an error (the cell failed inside IPython, or inside a hook)."""
        outermost = left[0] if left and not self.programs.stack else None
        for running in reversed(left):
            logger.info("%s ended without post_run_cell", _name(running))
            try:
                self._stop(running)
            finally:
                error = running.failure.error if running.failure is not None else None
                status = history_status(interrupted=was_interrupted(running, error), failed=True)
                self._finish(
                    running, error, status, outermost=running is outermost, keep_reply=keep_reply
                )

    def _stop(self, running: Running) -> None:
        """First: no interrupt or tool call of the program may reach what follows it."""
        try:
            if running.time_limit is not None:
                running.time_limit.stop()
        finally:
            self._refuser.drop()
            if running.calls is not None:
                running.calls.close()
        if running.stopped_by_limit is not None:
            logger.info(
                "the time limit of %g s stopped %s", running.stopped_by_limit, _name(running)
            )

    def _finish(
        self,
        running: Running,
        error: BaseException | None,
        status: HistoryStatus,
        *,
        outermost: bool,
        keep_reply: bool,
    ) -> None:
        """Record how the program ended: its history line, the guard (``outermost``: the
        program of a request, not a cell it ran) and the reply metadata (``keep_reply``: its
        request's reply is still to come)."""
        failure = None
        if error is not None and status in STOPPED:
            failure = failure_of(self.shell, running, error, self._run_code)
        if running.call is not None:
            self.checkpoints.finish(running.call, status, **history_extra(running, error, failure))
        if running.trace is not None:
            tool_calls = running.calls.summary() if running.calls is not None else None
            running.trace.run_ended(running.call, status, error, tool_calls)
        guard = running.refused
        # A pause waits for a person: it is no failure, and no success either.
        counted = not running.own_magics and status not in (
            HistoryStatus.PARTIAL,
            HistoryStatus.PAUSED,
        )
        if outermost and guard is None and counted:
            # Tell the guard how an agent's call ended; its report, if it has one.
            guard = self.guards.record(running, error, failure)
            if status == HistoryStatus.OK:
                self.resumes.renew()
        if keep_reply:
            self._keep_reply_metadata(running, status, guard, outermost=outermost)
        for replay in running.replays:
            if not replay.awaited:
                print(replay.not_awaited_message(), file=sys.stderr)

    def _keep_reply_metadata(
        self,
        running: Running,
        status: HistoryStatus,
        guard: dict[str, Any] | None,
        *,
        outermost: bool,
    ) -> None:
        """What the execute_reply of this program's request will carry."""
        metadata = reply_metadata(running, status, guard)
        if outermost and running.msg_id is not None:
            self._replies[running.msg_id] = metadata
            while len(self._replies) > _MAX_REPLIES:  # a kernel that never takes them
                del self._replies[next(iter(self._replies))]

    def is_control_flow(self, error: BaseException) -> bool:
        if isinstance(error, SystemExit):
            return True
        names = set(self.config.control_flow_exceptions)
        return any(cls.__name__ in names for cls in type(error).__mro__)

    # -- load / unload ---------------------------------------------------------

    def register(self) -> None:
        shell = self.shell
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)
        # IPython formats every traceback and hands the lines to _showtraceback, which
        # ipykernel turns into the error output and the reply: the notice goes there.
        self.traceback_hook.install()
        shell.configurables.append(self.config)
        add_names(shell, self.api)
        self._magics = PtcRetryMagics(shell, extension=self)
        shell.register_magics(self._magics)
        # Tool calls and a person's input() share the kernel's stdin channel: each request
        # gets its own reply, and a tool call does not block the program's event loop.
        self.stdin = StdinChannel.attach(getattr(shell, "kernel", None))
        # The store opens at the first program, so that a problem with it is
        # reported in that program's output, where the model reads it, rather
        # than in a kernel log nobody sees.

    def say_where_saved(self) -> None:
        """One line on stdout naming the session directory, opening the store for it (a
        problem with it is said instead, once, as at a program's start)."""
        store = self.checkpoints.open()
        if store is not None:
            print(said.LOADED.render(session_dir=store.session_dir))

    def unregister(self) -> None:
        shell = self.shell
        shell.events.unregister("pre_run_cell", self.pre_run_cell)
        shell.events.unregister("post_run_cell", self.post_run_cell)
        self._refuser.drop()
        for running in self.programs.stack:  # unloaded by the program that is running
            if running.time_limit is not None:
                running.time_limit.stop()
                running.time_limit = None
            # Its post_run_cell will not come: record it now, or it would stay unfinished.
            if running.call is not None:
                self.checkpoints.finish(running.call, HistoryStatus.OK, kernel=KERNEL_TOKEN)
        self.traceback_hook.remove()
        for configurable in (self.config, self._magics):
            if configurable in shell.configurables:
                shell.configurables.remove(configurable)
        remove_magics(shell, self._magics)
        remove_names(shell, self.api)
        if self.stdin is not None:
            self.stdin.detach()
            self.stdin = None
        self.checkpoints.close()


def _name(running: Running) -> str:
    return f"call {running.call.id}" if running.call is not None else "a program"


def active_for(shell: Any) -> PtcRetryExtension | None:
    """The extension loaded in ``shell``, if any."""
    extension = host.loaded(shell)
    return extension if isinstance(extension, PtcRetryExtension) else None


def active_extension() -> PtcRetryExtension:
    """The extension loaded in the running IPython shell; PtcRetryError if none."""
    extension = host.current_host()
    assert isinstance(extension, PtcRetryExtension)
    return extension


def load_ipython_extension(shell: InteractiveShell, api: types.ModuleType) -> None:
    """``%load_ext ptc_retry``, which gives ``api`` (the ``ptc_retry`` package) to put in
    the namespace: loading twice in one shell is a no-op."""
    if host.loaded(shell) is not None:
        return
    extension = PtcRetryExtension(shell, api)
    host.add(shell, extension)
    extension.register()
    if _in_a_cell(shell):
        extension.say_where_saved()


def _in_a_cell(shell: InteractiveShell) -> bool:
    """Whether a cell is running: ``%load_ext`` typed by a person, not a kernel loading the
    extension at start-up (IPython gives the displayhook a cell's result only while the cell
    runs)."""
    return getattr(getattr(shell, "displayhook", None), "exec_result", None) is not None


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """``%unload_ext ptc_retry``: remove every hook, name and magic, restore what was replaced."""
    extension = host.remove(shell)
    if isinstance(extension, PtcRetryExtension):
        extension.unregister()
