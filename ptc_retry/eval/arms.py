"""The evaluation's arms: a backend each, and what its scripted model sends after a failure
(``Arm``). OFF re-sends the whole corrected program, or the whole cut-off call; ON does what
the notice and the prompt section teach: the one-line replay, ``resume=True``, the extend
line. :mod:`.runner` starts the kernels and plays every scenario in both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backend import KernelBackend, RunResult
from ..core.notice import parse_notice, read_notice
from ..core.partial import cut_arguments
from ..core.status import ResultStatus
from ..tokens import Tokenizer
from .host import EvalTools
from .outcomes import (
    ArmOutcome,
    IdShape,
    ModelCall,
    extend_line,
    replay_line,
    same_value,
)
from .scenarios import CutOff, Scenario

__all__ = ["Arm"]

# Generous: only a hung kernel reaches it (the timeout scenario sets its own).
_CALL_TIMEOUT = 300.0


@dataclass(frozen=True)
class _Program:
    """One program of a failed message, and what the model needs to fix it."""

    code: str
    expected: str
    edits: tuple[tuple[str, str], ...]
    corrected: str
    rewrite: bool = False
    resume: bool = False
    first_try: tuple[tuple[str, str], ...] = ()


def _programs(scenario: Scenario) -> list[_Program]:
    """The programs of the scenario's failed message, in the order the model sent them."""
    programs = [
        _Program(
            scenario.program,
            scenario.expected,
            scenario.edits,
            scenario.corrected,
            rewrite=scenario.rewrite is not None,
            resume=scenario.resume,
            first_try=scenario.first_try,
        )
    ]
    if scenario.parallel is not None:
        extra = scenario.parallel
        programs.append(_Program(extra.program, extra.expected, extra.edits, extra.corrected))
    return programs


def _arguments(code: str, extra_keys: dict[str, str] | None = None) -> str:
    """The raw JSON arguments of a ``run_code`` call, as a model writes them."""
    return json.dumps({"code": code, **(extra_keys or {})}, ensure_ascii=False)


class Arm:
    """One backend and how its scripted model answers a failure.

    OFF: the stock ``python3`` kernel, without ptc-retry (``KernelBackend(
    kernel_name="python3", extension=False)``); the scripted model reads the error and
    re-sends the whole corrected program. ON: the ``ptc-retry`` kernel; the scripted
    model reads the tool result and does what the notice and the prompt section teach:
    no notice (a program under ``notice_min_bytes``) or a fix that is a rewrite, it
    re-sends; otherwise it sends the one-line ``ptc_retry.replay`` with the reference the
    notice gives and the fragments, adding ``resume=True`` when the notice offers it. Both
    arms go through the same ``KernelBackend.handle_tool_call``, so they differ only by
    ptc-retry in the kernel (a stray key beside ``"code"`` runs and is named in both).

    The tool scenarios' programs call host tools (``host``), which only a ptc-retry kernel
    offers: their OFF arm runs on a ptc-retry kernel with the same tools that gives no
    notice (``notice_min_bytes`` out of reach), so its model reads the traceback as on the
    stock kernel and re-sends (``resends``); their ON arm, on a ptc-retry kernel with the
    tools, replays. Both count the calls the host made.

    A cut-off call (``play_cut``): the OFF model writes the whole call again (regenerate,
    what agent loops do today: they drop the cut call); the ON model sends the rest of the
    program after the start the backend saved, as the notice teaches (extend).
    """

    def __init__(
        self,
        name: str,
        backend: KernelBackend,
        tokens: Tokenizer,
        cwd: Path,
        shape: IdShape,
        *,
        resends: bool = False,
        host: EvalTools | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self.tokens = tokens
        self.cwd = cwd
        self.shape = shape
        self.resends = resends
        self.host = host

    async def call(
        self,
        code: str,
        call_id: str,
        timeout: float | None,
        *,
        role: str,
        step: int,
        extra_keys: dict[str, str] | None = None,
    ) -> ModelCall:
        arguments = _arguments(code, extra_keys)
        before = self.host.total if self.host is not None else 0
        text = await self.backend.handle_tool_call(
            "run_code", arguments, call_id, step=step, timeout=timeout or _CALL_TIMEOUT
        )
        return self._measured(arguments, text, role=role, call_id=call_id, step=step, before=before)

    async def cut(self, arrived: str, call_id: str, step: int) -> ModelCall:
        """A call whose arguments stopped after ``arrived``. ON: the backend saves its start
        (``handle_partial_tool_call``) and the model reads the notice; OFF: the loop drops it,
        as loops do today, and nothing reaches the kernel (status ``dropped``)."""
        if self.resends:
            return ModelCall(
                arguments=arrived,
                bytes=len(arrived.encode("utf-8")),
                tokens=self.tokens.count(arrived),
                status="dropped",
                duration=0.0,
                notice=None,
                notice_tokens=None,
                result_tokens=None,
                result_bytes=0,
                value=None,
                ename=None,
                role="cut",
                call_id=call_id,
                step=step,
            )
        text = await self.backend.handle_partial_tool_call("run_code", arrived, call_id, step=step)
        return self._measured(arrived, text, role="cut", call_id=call_id, step=step)

    def _measured(
        self, arguments: str, text: str, *, role: str, call_id: str, step: int, before: int = 0
    ) -> ModelCall:
        """The call the model sent and what came back (``text``, ``backend.last_result``)."""
        result = self.backend.last_result
        if result is None:  # a cut call that held no program: nothing was saved or run
            result = RunResult(status=ResultStatus.REFUSED, text=text, call_id=call_id)
        assert isinstance(result, RunResult)
        notice = result.notice if self.backend.extension else None
        counted = (result.metadata or {}).get("tool_calls") or {}
        return ModelCall(
            arguments=arguments,
            bytes=len(arguments.encode("utf-8")),
            tokens=self.tokens.count(arguments),
            status=result.status,
            duration=result.duration,
            notice=notice,
            notice_tokens=self.tokens.count(notice) if notice else None,
            result_tokens=self.tokens.count(text),
            result_bytes=len(text.encode("utf-8")),
            value=result.value,
            ename=result.ename,
            role=role,
            call_id=call_id,
            step=step,
            reference=result.reference if notice else None,
            said_first=text.split("\n", 1)[0][:200],
            tool_calls=self.host.total - before if self.host is not None else 0,
            tools_reused=int(counted.get("reused", 0)),
            result_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        )

    async def play(self, scenario: Scenario) -> ArmOutcome:
        """The failed message, an inspection or a restart if the scenario has one, then
        the fix messages: each holds the next try for every program not yet fixed."""
        backend = self.backend
        backend.new_turn()  # each scenario is a new instruction from the user
        self._write_files(scenario)
        outcome = ArmOutcome(self.name, "re-send")
        numbers = iter(range(1, 100))

        async def send(code: str, role: str, step: int, **extra: Any) -> ModelCall:
            call_id = self.shape.call_id(scenario.name, next(numbers))
            call = await self.call(code, call_id, scenario.timeout, role=role, step=step, **extra)
            outcome.calls.append(call)
            return call

        programs = _programs(scenario)
        step = backend.next_step()
        failed = [
            await send(
                program.code,
                "failed",
                step,
                extra_keys=scenario.extra_keys if index == 0 else None,
            )
            for index, program in enumerate(programs)
        ]
        if any(call.status == "ok" for call in failed):
            outcome.problem = "the program did not fail"
            return outcome
        plans = [self.fixes(p, call, outcome) for p, call in zip(programs, failed)]
        outcome.action = _action(plans, scenario)
        if outcome.problem is not None or not all(plans):
            return outcome
        if scenario.inspect is not None:
            look = await send(scenario.inspect, "inspect", backend.next_step())
            if look.status != "ok":
                outcome.problem = f"the inspection ended with {look.status} ({look.ename})"
                return outcome
        if scenario.restart:
            await backend.restart()
            outcome.restarted = True
        last = await _send_fixes(plans, send, backend)
        outcome.problem = _fix_problem(programs, last)
        return outcome

    def _write_files(self, scenario: Scenario) -> None:
        """The files the scenario's programs read, in this arm's working directory."""
        for relative, text in scenario.files.items():
            path = self.cwd / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    async def play_cut(self, cut: CutOff) -> ArmOutcome:
        """The call cut off at ``cut.at`` of its arguments, then the model's next call: the
        whole call again (OFF) or the extend line the notice teaches, with the rest of the
        program after the start the model sent (ON). It must end with the whole program's
        value."""
        backend = self.backend
        backend.new_turn()
        outcome = ArmOutcome(self.name, "regenerate" if self.resends else "extend")
        arguments = _arguments(cut.program)
        arrived = arguments[: int(len(arguments) * cut.at)]
        cut_call = await self.cut(arrived, self.shape.call_id(cut.name, 1), backend.next_step())
        outcome.calls.append(cut_call)
        if self.resends:
            role, code = "regenerate", cut.program
        else:
            target = parse_notice(cut_call.notice or "")
            sent = cut_arguments(arrived).string("code")
            if cut_call.status != ResultStatus.PARTIAL or target is None or sent is None:
                outcome.problem = f"the cut call was not saved: {cut_call.said_first!r}"
                return outcome
            if target != cut_call.reference:
                outcome.problem = f"the notice names {target!r}, the reply {cut_call.reference!r}"
                return outcome
            # The model goes on from the end of what it sent, which the notice quotes.
            role, code = "extend", extend_line(target, cut.program[len(sent[0]) :])
        call_id = self.shape.call_id(cut.name, 2)
        fix = await self.call(code, call_id, None, role=role, step=backend.next_step())
        outcome.calls.append(fix)
        if fix.status != "ok":
            outcome.problem = f"the {role} call ended with {fix.status} ({fix.ename})"
        elif not same_value(fix.value, cut.expected):
            outcome.problem = f"the {role} call returned {fix.value!r}, expected {cut.expected!r}"
        return outcome

    def fixes(
        self, program: _Program, failed: ModelCall, outcome: ArmOutcome
    ) -> list[tuple[str, str]]:
        """What the scripted model sends to fix ``program`` after reading its failure, in
        order, as ``(role, code)``: one re-send, or one replay (two when its first try's
        fragment does not match)."""
        notice = failed.notice
        if self.resends or notice is None or program.rewrite:
            return [("re-send", program.corrected)]
        offered = read_notice(notice)
        if offered is None:
            outcome.problem = f"the notice names no program: {notice!r}"
            return []
        target = offered.reference
        if target != failed.reference:
            outcome.problem = f"the notice names {target!r}, the reply {failed.reference!r}"
        resume = program.resume and offered.resumes
        if program.resume and not resume:
            outcome.problem = "the notice did not offer resume=True"
        lines = []
        if program.first_try:
            lines.append(("replay", replay_line(target, program.first_try, resume=resume)))
        lines.append(("replay", replay_line(target, program.edits, resume=resume)))
        return lines


async def _send_fixes(
    plans: list[list[tuple[str, str]]],
    send: Callable[[str, str, int], Awaitable[ModelCall]],
    backend: KernelBackend,
) -> dict[int, ModelCall]:
    """Send the fix messages: each holds the next try of every program not fixed yet (by
    its plan, ``(role, code)`` a try). Each program's latest fix, by the program's index."""
    last: dict[int, ModelCall] = {}
    pending = list(range(len(plans)))
    tries = 0
    while pending:
        step = backend.next_step()  # one model message: a try for each program not fixed
        for index in pending:
            role, code = plans[index][tries]
            last[index] = await send(code, role, step)
        tries += 1
        pending = [i for i in pending if last[i].status != "ok" and tries < len(plans[i])]
    return last


def _fix_problem(programs: list[_Program], last: dict[int, ModelCall]) -> str | None:
    """Why the fixes did not reach every program's expected value; None when they did."""
    for index, program in enumerate(programs):
        call = last[index]
        if call.status != "ok":
            return f"the fix ended with {call.status} ({call.ename})"
        if not same_value(call.value, program.expected):
            return f"the fix returned {call.value!r}, expected {program.expected!r}"
    return None


def _action(plans: list[list[tuple[str, str]]], scenario: Scenario) -> str:
    """How the model fixed the scenario, in a few words: ``replay + resume``, ``inspect,
    replay``, ``2 replays``, ``replay after restart``..."""
    kinds = [plan[-1][0] for plan in plans if plan]
    if not kinds:
        return "none"
    if len(set(kinds)) > 1:
        kind = " and ".join(kinds)
    else:
        kind = kinds[0] if len(kinds) == 1 else f"{len(kinds)} {kinds[0]}s"
    if any("resume=True" in plan[-1][1] for plan in plans if plan and plan[-1][0] == "replay"):
        kind += " + resume"
    if any(len(plan) > 1 for plan in plans):
        kind += " (2 tries)"
    if scenario.inspect is not None:
        kind = f"inspect, {kind}"
    if scenario.restart:
        kind += " after restart"
    return kind
