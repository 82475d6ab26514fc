"""The backend's side of approvals: the programs that wait for a person's decision
(``kb.pending_approvals()``), and ``kb.approve`` / ``kb.deny``, which go on with such a
program from its paused statement, as ``ptc_retry.resume`` does, every recorded result
reused. ``core/approvals.py`` says where the trust boundary is."""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core import sentences as said
from ..core.approvals import PendingApproval, pending_calls, pending_in_history, waiting_calls
from ..core.errors import ApprovalError
from ..core.protocol import execute_request
from ..core.session_files import read_history
from ..core.status import ResultStatus
from .code_mode import CodeSession
from .results import RunResult
from .tracing import Operation, described
from .transport import Transport

__all__ = ["ApprovalSide", "Waiting"]

log = logging.getLogger(__name__)


class Waiting:
    """The programs of one session that wait for decisions, by call id, in the order they
    paused, and the decisions made on some of their calls while others still wait."""

    def __init__(self) -> None:
        self._programs: dict[str, list[PendingApproval]] = {}
        self._decided: dict[str, str | None] = {}
        #: The code and result of each program of this backend that paused, by call id.
        self._sent: dict[str, tuple[str, RunResult]] = {}
        #: A program that went on from a waiting one and failed -> the waiting one, which
        #: still waits until a program that goes on from either ends (see ``took``).
        self._went_on: dict[str, str] = {}

    def calls(self) -> list[PendingApproval]:
        """Every call that waits for a decision, program by program."""
        return [
            call
            for calls in self._programs.values()
            for call in calls
            if call.ref not in self._decided
        ]

    def load(self, lines: Iterable[Mapping[str, Any]]) -> None:
        """Add what a session's history says waits (a backend that starts on a session that
        another one left): offered to a person, never taken as a decision."""
        for call in pending_in_history(lines):
            self._programs.setdefault(call.call_id, []).append(call)

    def took(self, result: RunResult, paused: list[PendingApproval], code: str) -> None:
        """Program ``code`` ended as ``result``; ``paused``: the calls the host itself
        answered with a pause meanwhile. Only those wait: the kernel's word that a call
        waits is not taken. A program that went on from a waiting one (``replay_of``)
        replaces it once it ran to its end or paused; one that failed (an edit that fails
        before the paused call) leaves it waiting, until a program that goes on from the
        failed one replaces both."""
        metadata = result.metadata or {}
        went_on_from = metadata.get("replay_of")
        if isinstance(went_on_from, str):
            origin = self._went_on.pop(went_on_from, went_on_from)
            if result.status in (ResultStatus.OK, ResultStatus.PAUSED):
                self.forget(origin)
            elif result.call_id is not None and origin in self._programs:
                self._went_on[result.call_id] = origin
        self._sent = {key: sent for key, sent in self._sent.items() if key in self._programs}
        if result.status != ResultStatus.PAUSED or result.call_id is None or not paused:
            return
        self._sent[result.call_id] = (code, result)
        reference = result.reference or result.call_id
        # One entry per call of this program (by its number there): a request the program
        # sent itself, naming another program or a number twice, adds nothing.
        entries = {
            call.k: {
                "k": call.k,
                "tool": call.tool,
                "arguments": call.arguments,
                "policy_error": call.policy_error,
            }
            for call in paused
            if call.call_id == result.call_id
        }
        calls = pending_calls(reference, result.call_id, list(entries.values()))
        if calls:
            self._programs[result.call_id] = calls

    def sent_again(self, code: str) -> RunResult | None:
        """What a program that is ``code`` exactly, sent while an earlier run of it waits
        for decisions, gets instead of running: a result that says it still waits (run, it
        would make its calls before the pause again and wait a second time)."""
        for call_id, (sent, result) in self._sent.items():
            waiting = [
                call for call in self._programs.get(call_id, ()) if call.ref not in self._decided
            ]
            if sent != code or not waiting:
                continue
            tools = [call.tool for call in sorted(waiting, key=lambda call: call.k)]
            reference = waiting[0].reference
            text = said.STILL_WAITS.render(reference=reference, calls=waiting_calls(tools))
            return dataclasses.replace(
                result, text=text, value=None, outputs=[], duration=0.0, output_chars=0
            )
        return None

    def forget(self, call_id: str) -> None:
        self._sent.pop(call_id, None)
        for failed in [key for key, origin in self._went_on.items() if origin == call_id]:
            del self._went_on[failed]
        for call in self._programs.pop(call_id, []):
            self._decided.pop(call.ref, None)

    def restore(self, call_id: str, calls: list[PendingApproval]) -> None:
        """Put back a program whose continuation could not be sent: it still waits."""
        self._programs[call_id] = calls

    def decide(
        self, ref: object, denial: str | None, session_id: str, tools: Iterable[str] = ()
    ) -> tuple[str, list[PendingApproval], dict[str, str | None]] | None:
        """Record the decision on what ``ref`` names: a program's reference (``"#3"``) or
        call id (every call of it that waits), or one call's ``ref`` (``"#3/2"``). When that
        leaves none of the program's calls undecided: ``(call id, its calls, the decision of
        each by ref)``, and it waits no more; else None. ApprovalError, saying what waits,
        when ``ref`` names nothing that waits in this session, or a call of a tool that is
        not among ``tools`` (the backend's): its continuation could not make the call, and
        nothing is decided."""
        if not isinstance(ref, str):
            raise ApprovalError(
                f"approve and deny take a reference such as '#3' (a program) or '#3/2' (one "
                f"call of it), not {type(ref).__name__}; see kb.pending_approvals()"
            )
        chosen = [call for call in self.calls() if ref in (call.ref, call.reference, call.call_id)]
        if not chosen:
            raise ApprovalError(self._nothing_waits(ref, session_id))
        registered = set(tools)
        gone = list(dict.fromkeys(call.tool for call in chosen if call.tool not in registered))
        if gone:
            names = ", ".join(f"tools.{tool}" for tool in gone)
            raise ApprovalError(
                f"{ref!r} waits to call {names}, which this backend has no tool for (it is "
                "not registered, or was registered under another name): nothing was decided "
                f"and it still waits; register it (kb.register_tool) and approve or deny again"
            )
        for call in chosen:
            self._decided[call.ref] = denial
        call_id = chosen[0].call_id
        calls = self._programs[call_id]
        if any(call.ref not in self._decided for call in calls):
            return None
        decisions = {call.ref: self._decided.pop(call.ref) for call in calls}
        del self._programs[call_id]
        return call_id, calls, decisions

    def _nothing_waits(self, ref: str, session_id: str) -> str:
        waiting = ", ".join(dict.fromkeys(call.reference for call in self.calls()))
        return (
            f"nothing waits for approval under {ref!r} in session {session_id!r} (it was "
            "decided already, never paused, or belongs to another session: decide it with a "
            "backend of its own session_id); "
            + (f"waiting now: {waiting}" if waiting else "nothing waits now")
        )


class ApprovalSide:
    """``KernelBackend``'s approvals; it sets the attributes declared here."""

    session_id: str
    _code: CodeSession
    _waiting: Waiting
    _reached: str | None

    def pending_approvals(self) -> list[PendingApproval]:
        """Every tool call that waits for a person's decision, in the order they paused:
        those of this backend's programs, and those a backend that ran this session before
        left (read when it starts). Each one's ``ref`` decides it alone, its ``reference``
        every call of its program."""
        return self._waiting.calls()

    async def approve(self, ref: str, *, timeout: float | None = None) -> RunResult | None:
        """Approve what ``ref`` names (see ``pending_approvals``) and, once no call of its
        program waits any more, go on with it from its paused statement, as
        ``ptc_retry.resume`` does: earlier names are still there and recorded results are
        reused, and each approved call runs once. Returns that continuation's result (its
        text is what the model reads next; it may pause again at a call not approved yet),
        or None while other calls of the program still wait. ApprovalError when nothing
        waits under ``ref``; ``timeout`` as ``run_code``'s."""
        return await self._decide(ref, None, timeout)

    async def deny(
        self, ref: str, reason: str = "", *, timeout: float | None = None
    ) -> RunResult | None:
        """Deny what ``ref`` names, with ``reason``: the program goes on as ``approve`` says,
        and gets ``ptc_retry.ToolDenied(reason)`` at each denied call, which it may catch;
        uncaught, it fails the program with the ordinary notice."""
        if not isinstance(reason, str):
            raise TypeError(f"deny: reason must be a str, not {type(reason).__name__}")
        return await self._decide(ref, reason.strip() or "a person denied this call", timeout)

    async def _decide(
        self, ref: str, denial: str | None, timeout: float | None
    ) -> RunResult | None:
        tools = self._code.host_tools.names
        decided = self._waiting.decide(ref, denial, self.session_id, tools)
        if decided is None:
            return None
        call_id, calls, decisions = decided
        # The continuation's own call id, which no program can know before it runs: the
        # decisions cover its calls only, never those of a program that runs meanwhile.
        continuation = f"approved-{secrets.token_hex(6)}"
        host = self._code.host_tools.decisions
        for call in calls:
            host.add(continuation, call.key(), decisions[call.ref])
        target = json.dumps(calls[0].reference, ensure_ascii=False)
        try:
            with described(_approval(call_id, decisions)):
                result = await self._code.run(
                    f"await ptc_retry.resume({target}, reuse_failures=True)",
                    call_id=continuation,
                    timeout=timeout,
                )
        except BaseException:
            # Given up on (cancelled) or failed: once the continuation reached the kernel it
            # is the program (a resume of it goes on, reusing what it recorded), and the
            # paused one waits no more; before that, nothing ran and it still waits.
            if self._reached != continuation:
                self._waiting.restore(call_id, calls)
            raise
        finally:
            host.drop(continuation)  # a decision covers this continuation, never a later one
        if result.status == ResultStatus.REFUSED:
            # The repeated-failure guard paused the session: nothing ran, nothing is decided.
            self._waiting.restore(call_id, calls)
            raise ApprovalError(
                f"the repeated-failure guard pauses this session's programs, so "
                f"{calls[0].reference} did not go on and nothing was decided: it still waits. "
                "Approve or deny it again after the user's next instruction "
                "(kb.new_turn()) or a person's %ptc_guard reset"
            )
        return result

    def _load_waiting(self, session_dir: Path | None) -> None:
        """Read what waits from the session's history, when this machine holds it."""
        if session_dir is not None and session_dir.is_dir():
            self._waiting.load(read_history(session_dir))

    async def _load_remote_waiting(self, transport: Transport, timeout: float) -> None:
        """Read what waits from the history of a session on the kernel's host, through a
        silent request (no checkpoint, no history line). A kernel that does not answer in
        ``timeout`` seconds, or answers oddly, leaves the list as it is (logged)."""
        content = execute_request("", silent=True, user_expressions={"waiting": _WAITING})
        try:
            msg_id = await transport.send_execute(content, {})
            reply = await _reply(transport, msg_id, timeout)
            found = (reply or {}).get("user_expressions", {}).get("waiting", {})
            text = ast.literal_eval(found["data"]["text/plain"])
            self._waiting.load(json.loads(text))
        except Exception as exc:
            log.warning("could not read what waits for approval in the kernel: %s", exc)


def _approval(call_id: str, decisions: dict[str, str | None]) -> Operation:
    """The continuation's trace: a ``ptc_retry.approval`` span linked to the paused program's,
    not a call of the model's (which sent nothing for it, and saved nothing by it)."""
    denied = sum(denial is not None for denial in decisions.values())
    return Operation(
        "approval",
        "ptc_retry.approval",
        link="approval_of",
        of=call_id,
        attributes={
            "ptc_retry.approval.approved": len(decisions) - denied,
            "ptc_retry.approval.denied": denied,
        },
    )


#: The user expression a kernel behind a gateway evaluates (``kernel/remote.py``'s API).
_WAITING = '__import__("ptc_retry.kernel.remote", fromlist=["waiting"]).waiting(1)'


async def _reply(transport: Transport, msg_id: str, timeout: float) -> dict[str, Any] | None:
    """The content of the execute_reply to ``msg_id``, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = await transport.receive(msg_id, min(0.5, deadline - time.monotonic()))
        if message is not None and message["msg_type"] == "execute_reply":
            content: dict[str, Any] = message["content"]
            return content
    return None
