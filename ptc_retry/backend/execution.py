"""One execute_request: send it, collect its outputs and reply, watch its time limit and the
kernel's life (restarting a dead or deaf kernel), and make the ``RunResult``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import sentences as said
from ..core.errors import BackendError
from ..core.layout import checkpoint_path, sanitize
from ..core.notice import parse_notice
from ..core.protocol import METADATA_KEY, TOOL_RESULTS, execute_request
from ..core.session_files import calls_sent_as
from ..core.status import HistoryStatus, ResultStatus
from .capture import Capture, strip_ansi
from .host_tools import HostTools
from .input_requests import InputRequests
from .late_results import LateResults
from .results import RunResult, join_notes
from .transport import Transport

__all__ = ["POLL_INTERVAL", "Execution", "ExecutionSettings"]

log = logging.getLogger(__name__)

#: How often (seconds) a waiting call checks that the kernel still runs and that the
#: backend is not shutting down: a local kernel's death, or a shutdown, ends a running call
#: within about this long. Behind a gateway, the gateway's own notice of a death decides.
POLL_INTERVAL = 0.5
#: Seconds a program without a timeout waits, before it is sent, for host calls of earlier
#: programs that still run in worker threads (see ``Execution._host_calls_returned``).
THREADS_WAIT = 60.0


@dataclass(frozen=True)
class ExecutionSettings:
    """What an execution needs to know of its backend."""

    max_output_chars: int
    time_limit_margin: float  # the backend interrupts this much later than the kernel's limit
    interrupt_grace: float  # seconds an interrupted program gets before the kernel restarts
    checkpoints: Path | None  # the kernel's session directory, as it sees it (None: unknown)
    resume_hint: bool  # after a restart, say how to go on with ``ptc_retry.resume``
    #: The host's tools programs may call; while there are any, the request allows stdin
    #: and carries their catalog.
    tools: HostTools | None = None
    #: Results of the host's tools the kernel never took, carried by the next request.
    late_results: LateResults | None = None


class Execution:
    """``code`` on ``kernel``, sent with ``metadata["ptc_retry"] = request``; ``timeout`` in
    seconds. ``restart`` restarts the kernel (BackendError when it cannot); ``closing``
    tells whether the backend began to shut down. Run it once."""

    def __init__(
        self,
        kernel: Transport,
        code: str,
        request: dict[str, Any],
        timeout: float | None,
        settings: ExecutionSettings,
        *,
        restart: Callable[[], Awaitable[None]],
        closing: Callable[[], bool],
    ) -> None:
        self.kernel = kernel
        self.code = code
        self.request = request
        self.timeout = timeout
        self.settings = settings
        self.restart = restart
        self.closing = closing
        self.capture = Capture(settings.max_output_chars)
        self.reply: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.value: str | None = None
        self.interrupted = False
        self.notes: list[str] = []
        self.status: ResultStatus | None = None  # set when the backend decides it (timeout, died)
        self.restarted = False
        self.msg_id: str | None = None
        #: Whether the execute_request may have reached the kernel (its sending began).
        self.sent = False
        self.cancelled = False  # the caller gave up on it
        self.cancelled_in_restart = False  # ... while the kernel restarted
        self.input_requests = InputRequests(
            kernel, settings.tools or HostTools(), settings.late_results
        )
        #: The late results this request carries to the kernel.
        self._carried: list[dict[str, Any]] = []

    async def run(self) -> RunResult:
        await self._host_calls_returned()
        prelude = await self._revive()
        result = await self._execute()
        if prelude is not None:
            result.text = join_notes([prelude, result.text])
            result.restarted = True
        return result

    async def _host_calls_returned(self) -> None:
        """Wait until the host calls of earlier programs that still run in worker threads
        have returned (at most this call's timeout, else ``THREADS_WAIT``), so that what
        they return goes with this request: a resume of their program must not make them
        again while they still run."""
        tools = self.settings.tools
        if tools is None:
            return
        wait = self.timeout if self.timeout is not None else THREADS_WAIT
        if not await tools.wait_for_threads(wait):
            log.info(
                "host calls of an earlier program still run after %g s: call %s goes on; "
                "their results go with a later program",
                wait,
                self.request.get("call_id"),
            )

    async def _revive(self) -> str | None:
        """Restart a kernel that died since the last call; the note that says so, or None."""
        if await self.kernel.is_alive():
            return None
        how = await self.kernel.exit_description()
        log.warning("the %r kernel had died (%s): restarting it", self.kernel.kernel_name, how)
        await self._restart_kernel()
        return said.KERNEL_REVIVED.render(how=how)

    async def _execute(self) -> RunResult:
        kernel, settings = self.kernel, self.settings
        started = time.monotonic()
        limit = None if self.timeout is None else self.timeout + settings.time_limit_margin
        stop_at = None if limit is None else started + limit
        give_up_at: float | None = None
        idle = False
        try:
            self.sent = True
            self.msg_id = await kernel.send_execute(*self._request())
            while not (idle and self.reply is not None):
                if self.closing():
                    raise BackendError("the backend was shut down while this program ran")
                now = time.monotonic()
                if stop_at is not None and now >= stop_at and not self.interrupted:
                    self.interrupted = True
                    give_up_at = now + settings.interrupt_grace
                    await self.input_requests.cancel()  # the interrupt ends the kernel's wait
                    await self._interrupt(f"ran past its time limit of {self.timeout:g} s")
                if give_up_at is not None and now >= give_up_at:
                    await self._restart_after_timeout()
                    break
                deadlines = [d for d in (stop_at, give_up_at) if d is not None and d > now]
                wait = min([POLL_INTERVAL, *(d - now for d in deadlines)])
                message = await kernel.receive(self.msg_id, wait)
                if message is None:
                    if self.reply is not None:
                        break  # the reply is in and its idle status was lost: it is enough
                    if not await kernel.is_alive():
                        await self._restart_after_death()
                        break
                    continue
                msg_type = message["msg_type"]
                if msg_type == "execute_reply":
                    self._replied(message)
                elif msg_type == "status":
                    idle = idle or message["content"].get("execution_state") == "idle"
                elif msg_type == "input_request":
                    await self.input_requests.handle(message)
                elif msg_type != "execute_input":
                    self._output(msg_type, message["content"])
        except asyncio.CancelledError:
            # The caller gave up: stop the program too, so the kernel is free for the next call.
            self.cancelled = True
            await self.input_requests.cancel()
            if not self.cancelled_in_restart:  # a kernel starting up would die of the signal
                await self._interrupt("was cancelled by its caller")
            raise
        finally:
            # Whatever ended the program (its reply, a death, a shutdown) ends its tool calls.
            await self.input_requests.cancel()
            self.input_requests.end(stopped=self._stopped())
        return self._result(time.monotonic() - started)

    def _replied(self, message: dict[str, Any]) -> None:
        """The execute_reply: the kernel read this request, and the late results it carried."""
        self.reply = message
        late = self.settings.late_results
        if late is not None and self._carried:
            late.delivered(self._carried)
            self._carried = []

    def _stopped(self) -> bool:
        """Whether the program may have stopped waiting for a tool reply as it went out: it
        was interrupted, timed out, cancelled, or its kernel died or gave no reply."""
        if self.interrupted or self.cancelled or self.restarted or self.reply is None:
            return True
        metadata = self.reply.get("metadata", {}).get(METADATA_KEY)
        if isinstance(metadata, dict):
            return metadata.get("status") == HistoryStatus.INTERRUPTED
        return self.reply["content"].get("ename") == "KeyboardInterrupt"

    def _request(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The execute_request's content and metadata: with host tools, stdin is allowed and
        the catalog goes along; without, the request is as it always was."""
        tools = self.settings.tools
        if not tools:
            return execute_request(self.code), {METADATA_KEY: self.request}
        request = {**self.request, "tools": tools.catalog()}
        late = self.settings.late_results
        # A blank cell never reaches the kernel's hooks: the results wait for the next one.
        if late and self.code and not self.code.isspace():
            self._carried = request[TOOL_RESULTS] = late.entries()
        return execute_request(self.code, allow_stdin=True), {METADATA_KEY: request}

    async def _interrupt(self, why: str) -> None:
        log.info("call %s %s: interrupting the kernel", self.request.get("call_id"), why)
        with contextlib.suppress(Exception):
            await self.kernel.interrupt()

    def _output(self, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type == "error":
            self.error = content
        elif msg_type == "execute_result":
            plain = content.get("data", {}).get("text/plain")
            self.value = plain if isinstance(plain, str) else None
        self.capture.add(msg_type, content)

    async def _restart_after_death(self) -> None:
        await self._drain()
        how = await self.kernel.exit_description()
        call_id = self.request.get("call_id")
        await self._restart_as(
            ResultStatus.DIED,
            f"the kernel died while running call {call_id} ({how})",
            said.KERNEL_DIED.render(how=how),
        )

    async def _restart_after_timeout(self) -> None:
        await self._drain()
        grace, call_id = self.settings.interrupt_grace, self.request.get("call_id")
        await self._restart_as(
            ResultStatus.TIMEOUT,
            f"call {call_id} did not stop within {grace:g} s of the interrupt",
            said.TIMEOUT_RESTARTED.render(seconds=self.timeout, grace=grace),
        )

    async def _restart_as(self, status: ResultStatus, why: str, note: str) -> None:
        """Restart the kernel, which ends this call with ``status``; ``note`` tells the model."""
        log.warning("%s: restarting it", why)
        await self.input_requests.cancel()  # the program waiting for them is gone
        await self._restart_kernel()
        self.status, self.restarted = status, True
        self.notes.append(" ".join(filter(None, [note, self._saved()])))

    async def _restart_kernel(self) -> None:
        """Restart the kernel. A caller that gives up meanwhile still waits for the restart
        to end (``cancelled_in_restart``): the next call must find a kernel that started,
        not one half started, nor one the caller's interrupt killed as it started."""
        restart = asyncio.ensure_future(self.restart())
        try:
            await asyncio.shield(restart)
        except asyncio.CancelledError:
            self.cancelled_in_restart = True
            with contextlib.suppress(Exception):  # it raises BackendError: told next call
                await restart
            raise

    def _saved(self) -> str | None:
        """``Saved as ... resume(...)``: how to go on with a program no reply came for.

        The kernel that numbered the program is gone, so the call id names it; a call id
        also sent for an earlier program names neither, so then its ``#n`` as the session
        directory numbers it, when the backend can read that directory. None without
        ``resume_hint`` (native mode: the journal's own notice follows there).
        """
        if not self.settings.resume_hint:
            return None
        saved = self._saved_unfinished()
        name = (saved[1] or saved[0]) if saved else sanitize(self.request["call_id"])
        return said.SAVED_GO_ON.render(call_id=name)

    def _saved_unfinished(self) -> tuple[str, str | None] | None:
        """For a program no reply came for: ``(id, reference)`` of the program the session
        directory holds for this call, saved and never finished (the reference only when
        the call id names an earlier program too, else None); None when the directory
        cannot be read from here or holds no such program."""
        checkpoints = self.settings.checkpoints
        found = calls_sent_as(checkpoints, self.request["call_id"]) if checkpoints else []
        if not found or found[-1][2] != HistoryStatus.UNFINISHED:
            return None
        call_id, reference, _ = found[-1]
        return call_id, reference if len(found) > 1 else None

    async def _drain(self) -> None:
        """Outputs that arrived before the kernel died or was restarted: keep them."""
        while self.msg_id is not None:
            message = await self.kernel.receive(self.msg_id, 0.05)
            if message is None:
                return
            if message["msg_type"] == "execute_reply":
                self._replied(message)
            elif message["msg_type"] not in ("status", "execute_input", "input_request"):
                self._output(message["msg_type"], message["content"])

    def _checkpoint(self) -> tuple[str, str]:
        """The id and path the kernel saved this program under, as far as the backend knows
        (a path relative to the session directory when the kernel never said where). When
        no reply came, the session directory says which (an id sent again is saved as
        ``<id>.2``), if it can be read from here."""
        saved = self._saved_unfinished() if self.reply is None else None
        call_id = saved[0] if saved else sanitize(self.request["call_id"])
        return call_id, str(checkpoint_path(self.settings.checkpoints or "", call_id))

    def _result(self, duration: float) -> RunResult:
        reply_content = self.reply["content"] if self.reply is not None else {}
        metadata = None
        if self.reply is not None:
            found = self.reply.get("metadata", {}).get(METADATA_KEY)
            metadata = found if isinstance(found, dict) else None
        error = self.error
        if error is None and reply_content.get("status") == "error":
            error = reply_content
        notice, call_id, checkpoint, reference = self._facts(metadata, error)
        status = self.status or self._status(reply_content, metadata, error, duration)
        # The kernel's time limit stopped it, and its notice (the full one, or the short one
        # of a program too small to replay) said so.
        said_so = (said.NOTICE_TIME_LIMIT.opening, said.SHORT_TIME_LIMIT.opening)
        stopped = notice is not None and any(opening in notice for opening in said_so)
        if status == ResultStatus.TIMEOUT and not self.restarted and not stopped:
            self.notes.append(said.TIMEOUT_KEPT.render(seconds=self.timeout))
        if reply_content.get("status") == "aborted":
            self.notes.append(said.ABORTED.render())
        body = self.capture.text()
        return RunResult(
            status=status,
            text=join_notes([body, *self.notes]) or "[no output]",
            value=self.value,
            call_id=call_id,
            checkpoint=checkpoint,
            reference=reference,
            notice=notice,
            metadata=metadata,
            outputs=self.capture.outputs,
            ename=error.get("ename") if error else None,
            evalue=error.get("evalue") if error else None,
            execution_count=reply_content.get("execution_count"),
            duration=duration,
            output_chars=self.capture.total,
            truncated=self.capture.truncated,
            restarted=self.restarted,
        )

    def _facts(
        self, metadata: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> tuple[str | None, str, str, str | None]:
        """(notice, call id, checkpoint, reference): from the reply metadata, else derived."""
        call_id, checkpoint = self._checkpoint()
        if metadata is not None:
            notice = metadata.get("notice")
            reference = metadata.get("reference")
            return (
                notice if isinstance(notice, str) else None,
                metadata.get("call_id") or call_id,
                metadata.get("checkpoint") or checkpoint,
                reference if isinstance(reference, str) else None,
            )
        # A kernel without ptc-retry's reply metadata: the notice is the traceback's last item
        # (its lines: what happened, the call, the guard's sentence if any).
        lines = (error or {}).get("traceback") or []
        last = strip_ansi(lines[-1]) if lines else ""
        reference = parse_notice(last)
        if reference is None:
            return None, call_id, checkpoint, None
        return last, call_id, checkpoint, reference

    def _status(
        self,
        reply: dict[str, Any],
        metadata: dict[str, Any] | None,
        error: dict[str, Any] | None,
        duration: float,
    ) -> ResultStatus:
        """The result's status, from the history status the kernel gave (or, from a kernel
        without ptc-retry's reply metadata, the error's name), the reply and the clock."""
        kernel_status = (metadata or {}).get("status")
        ename = (error or {}).get("ename")
        if kernel_status == HistoryStatus.REFUSED or ename == "RetryGuardPaused":
            return ResultStatus.REFUSED
        if kernel_status == HistoryStatus.PARTIAL or ename == "CallCutOff":
            return ResultStatus.PARTIAL
        if kernel_status == HistoryStatus.PAUSED or ename == "ApprovalPending":
            return ResultStatus.PAUSED
        if reply.get("status") == "ok":  # the execute_reply's own status, not ours
            return ResultStatus.OK
        if self.interrupted:
            return ResultStatus.TIMEOUT
        limit = self.request.get("time_limit")
        stopped_by = (metadata or {}).get("time_limit")
        # The kernel's own time limit ended it: the reply says so (time_limit: the seconds
        # that stopped it), or the program was interrupted after running for the limit.
        if limit is not None and (
            isinstance(stopped_by, (int, float))
            or (kernel_status == HistoryStatus.INTERRUPTED and duration >= limit)
        ):
            return ResultStatus.TIMEOUT
        return ResultStatus.ERROR
