"""A running program's tool calls: numbered in the order it makes them, reused from the
recording of the program a replay replays (:mod:`.recording`), sent to the agent's backend
in batches (:mod:`.host_calls`), and recorded in the session.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core import sentences as said
from ..core.approvals import WAITS, waiting_calls
from ..core.errors import ApprovalPending, PtcRetryError, ToolError
from .call_lines import CallRecord, RecordedCalls, origin
from .catalog import NO_BACKEND
from .host import Host, current_host
from .host_calls import HostCalls
from .pause_stop import PauseStop
from .recording import Reuses
from .running import STARTED_BY
from .statements import Statements

if TYPE_CHECKING:
    from .running import Running

#: Inside a live call of a recorded function, that call's ``k``: the calls it makes are
#: numbered and recorded as made within it, so that a replay that reuses its result does not
#: make them, and one that runs it again (it failed, or its code changed) reuses theirs.
_WITHIN: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ptc_retry_within", default=None
)


class ProgramCalls:
    """The tool calls of one running program (a thread's outermost program)."""

    def __init__(self, host: Host, running: Running) -> None:
        self._host = host
        self.running = running
        #: The replays running in this program, which its calls may take results from.
        self.reuses = Reuses()
        self.reused = 0
        self.live = 0
        self._count = 0
        self._closed = False
        self._statements = Statements(host.shell, running)
        #: The calls the host answered with a pause: they wait for a person's approval.
        self.paused: list[CallRecord] = []
        #: What keeps the program stopped once it paused, should its code catch the pause.
        self._stop: PauseStop | None = None
        #: The live calls of the host's tools, on their way or waiting for their result.
        self.host_calls = HostCalls(host, self)

    def running_programs(self) -> list[Running]:
        """The programs running in this program's thread, outermost first."""
        return list(self._host.programs.stack)

    def pending(self) -> list[dict[str, Any]]:
        """The calls that wait for approval, for the history line and the reply metadata:
        ``{"k", "tool", "arguments"}`` each (and ``policy_error``, what the tool's policy
        raised), in the order the program made them."""
        entries = []
        for record in self.paused:
            entry: dict[str, Any] = {"k": record.k, "tool": record.tool}
            entry["arguments"] = record.arguments
            if record.error and record.error != WAITS:
                entry["policy_error"] = record.error
            entries.append(entry)
        return entries

    def approval_pending(self) -> ApprovalPending:
        """The pause that stops the program at its calls that wait for approval."""
        tools = [record.tool for record in sorted(self.paused, key=lambda record: record.k)]
        call = self.running.call
        reference = call.reference if call is not None else "this program"
        pause = ApprovalPending(
            said.NOTICE_PAUSED.render(calls=waiting_calls(tools), reference=reference)
        )
        statements = [record.statement for record in self.paused if record.statement is not None]
        # Where the program goes on from: the first paused call's statement, even when its
        # code caught the pause and it stopped again on a later line.
        pause.statement = min(statements) if statements else None
        return pause

    def stop_on_every_line(self) -> None:
        """The program paused: from now on, its code stops at each line it would run (it may
        catch the pause with ``except BaseException`` or ``gather(return_exceptions=True)``)."""
        if self._stop is None:
            frames = self._statements.program_frames()
            files = {frame.f_code.co_filename for frame in frames}
            self._stop = PauseStop(files, self.approval_pending)
            self._stop.install(frames)

    def summary(self) -> dict[str, int] | None:
        """``{"reused": n, "live": m}`` for the history line; None when it made no call."""
        return {"reused": self.reused, "live": self.live} if self.reused or self.live else None

    def close(self) -> None:
        """The program ended: the calls still waiting fail (its backend cancels what it
        still runs), none is sent later, and a reply that comes late is dropped."""
        self._closed = True
        if self._stop is not None:
            self._stop.uninstall()
        self.host_calls.close()

    # -- every call ----------------------------------------------------------------------------

    def begin(
        self,
        tool: str,
        arguments: Any,
        *,
        code: str | None = None,
        reads: str | None = None,
        reusable: bool = True,
        schema: str | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> CallRecord:
        """Number the next call; it comes back with its result when a running replay reuses
        one (``reused_from`` set: the call id of the replayed program whose recording gave
        it), else the caller makes it and reports with ``finish``. ``code`` and ``reads``: a
        recorded function's digests; ``reusable=False``: this call is never given a recorded
        result, nor is its own ever reused; ``schema``: a host tool's schema digest and
        ``defaults`` its schema's defaults (filled in when arguments are compared)."""
        if self._closed:
            raise ToolError(f"{tool}: the program that made this call has ended", tool=tool)
        if self.paused:  # the program went on past its pause (a bare except): it stops here
            raise self.approval_pending()
        self._count += 1
        record = CallRecord(self._count, tool, arguments, self._statements.current(), code, reads)
        record.schema, record.defaults = schema, defaults
        record.within = _WITHIN.get()
        record.reusable = reusable
        found = self.reuses.take(record)
        trace = self.running.trace
        if found is None:
            self.live += 1
            if code is not None:
                self._write_unfinished(record)
            if trace is not None:
                trace.tool_call_started(record)
            return record
        self.reused += 1
        reuse, line = found
        record.ok, record.result, record.reused_from = True, line.get("result"), reuse.call_id
        if line.get("ok") is False:  # a recorded failure, given again (``reuse_failures``)
            record.ok, record.error = False, str(line.get("error"))
        self._write(record)
        if trace is not None:
            trace.tool_call_reused(record)
        # The calls made within it are not made; their lines go on, so that a fix of this
        # program that runs the function again still finds them.
        self._carry(reuse.inner, reuse.call_id, {line.get("k"): record.k})
        return record

    def _write_unfinished(self, record: CallRecord) -> None:
        """The line of a recorded function's live call as it starts, which its end replaces
        (a call's last line counts). The calls it makes are written before its own end:
        without this line, a kernel that died inside it would leave a gap in the recording,
        past which a resume could match nothing."""
        record.error = _UNFINISHED
        self._write(record)
        record.error = None

    def _carry(
        self, lines: list[dict[str, Any]], call_id: str, renumbered: dict[Any, int | None]
    ) -> None:
        """Write ``lines`` of ``call_id``'s recording into this program's, numbered on from
        its calls so far and marked reused from ``call_id``; ``renumbered`` maps a ``k`` there
        to its ``k`` here (for ``within``), and takes the new ones. Not counted as calls."""
        call = self.running.call
        for line in lines:
            self._count += 1
            renumbered[line.get("k")] = self._count
            if call is not None:
                carried = dict(line, k=self._count, reused=True, reused_from=call_id)
                carried["origin"] = origin(line, call_id)
                if "within" in line:
                    carried["within"] = renumbered.get(line["within"])
                self._host.checkpoints.record_tool_call(call, carried)

    def record_skipped(self, recorded: RecordedCalls, start: int, call_id: str) -> None:
        """A resume of ``call_id`` starts at top-level statement ``start``, before any call:
        the calls its skipped statements made (in ``recorded``, ``call_id``'s recording)
        come first in this program's recording, marked reused from ``call_id``, since their
        results are what the namespace holds. So a replay of this program, or of a fix of
        it, finds every call of its whole run. Where it is unsure which calls those are, a
        ``k`` without a line follows the sure ones: no later call can be matched by place.
        The counts of the history line stay those of the calls this run makes."""
        before, _, sure = recorded.split(start)
        self._carry(before, call_id, {})
        if not sure:
            self._count += 1

    def finish(
        self,
        record: CallRecord,
        *,
        result: Any = None,
        error: str | None = None,
        reusable: bool = True,
        ename: str | None = None,
    ) -> None:
        """Record how a live call ended: ``result``, or ``error`` (what its ToolError says;
        ``ename``: the type of what a recorded function raised)."""
        record.ok, record.result, record.error = error is None, result, error
        record.reusable = reusable and record.reusable and record.arguments is not None
        record.duration = time.time() - record.started
        self._write(record)
        if record.ok:
            self.reuses.succeeded(record)
        if self.running.trace is not None:
            self.running.trace.tool_call_ended(record, ename)

    def _write(self, record: CallRecord) -> None:
        call = self.running.call
        if call is not None and record.k:
            self._host.checkpoints.record_tool_call(call, record.line())

    @contextlib.contextmanager
    def inside(self, record: CallRecord) -> Iterator[None]:
        """While a recorded function's live call runs: what it calls is made within it."""
        token = _WITHIN.set(record.k)
        try:
            yield
        finally:
            _WITHIN.reset(token)

    def not_made(self) -> None:
        """The host paused or denied a call counted live: the counts are of calls made, in
        this program's and in each running replay's sentence."""
        self.live -= 1
        self.reuses.not_made()

    def joined(self, record: CallRecord, *, result: bool) -> None:
        """The host gave ``record`` (a call that a replay makes again) the outcome of the
        earlier call it names, instead of running the function again: it was not made live,
        and a result counts as reused from that call's program (its line says so)."""
        program = record.retry_of[0] if record.retry_of else None
        if not isinstance(program, str):
            return
        self.live -= 1
        if result:
            record.reused_from = program
            self.reused += 1
        store = self._host.checkpoints.store
        source = (store.reference_of(program) if store else None) or program
        self.reuses.joined(source, result=result)


#: How the live call of a recorded function is recorded until it ends.
_UNFINISHED = "no end recorded: it was running, or its kernel died while it ran"


# -- the calls programs make -------------------------------------------------------------------


def program_calls(host: Host) -> ProgramCalls | None:
    """The tool calls of this thread's running program; None outside a program."""
    running = host.programs.outermost()
    if running is None:
        return None
    calls = running.calls
    if not isinstance(calls, ProgramCalls):
        calls = running.calls = ProgramCalls(host, running)
    return calls


def current_calls() -> ProgramCalls | None:
    """The tool calls of the program running in this thread, if ptc-retry is loaded."""
    try:
        return program_calls(current_host())
    except PtcRetryError:
        return None


async def call_host_tool(name: str, arguments: dict[str, Any]) -> Any:
    """What ``await tools.<name>(...)`` does once its arguments are bound."""
    __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
    calls = current_calls()
    if calls is None:
        raise ToolError(
            f"tools.{name} can be called only by a running program, from its own thread",
            tool=name,
        )
    started_by = STARTED_BY.get()
    if started_by is not None and started_by not in calls.running_programs():
        raise ToolError(
            f"tools.{name}: the program that started this task has ended, and a task that "
            "outlives its program cannot call tools: await the task before that program ends",
            tool=name,
        )
    catalog = calls.running.catalog
    if catalog is None:
        raise ToolError(NO_BACKEND.format(name=name), tool=name)
    if name not in catalog.specs:
        raise ToolError(
            f"tools.{name} is not a tool of this program's request; its tools are: "
            f"{', '.join(catalog.names) or 'none'}",
            tool=name,
        )
    spec = catalog.specs[name]
    return await calls.host_calls.call(name, arguments, spec.schema_digest, spec.defaults)
