"""The approval scenarios (``scenarios.APPROVALS``): a program pauses before a tool call a
person must approve, and goes on once approved. Two ways, each on its own ptc-retry kernel
with the evaluation's host tools, counted on the host:

- a re-run from the top: the loop aborts the program at the approval point and, once the
  person said yes, sends it again whole (the approved tool needing no approval any more);
  every call it made before the pause is made again;
- ptc-retry: the program pauses (``register_tool(approval=True)``) and ``kb.approve`` goes
  on from the paused statement; it makes none of them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backend import KernelBackend, RunResult
from ..core.status import ResultStatus
from .host import EvalTools
from .scenarios import ApprovalScenario

__all__ = ["ApprovalOutcome", "approvals_section", "play_approvals"]


@dataclass
class ApprovalOutcome:
    """What the two ways did: the host calls made before the pause, how many of them each
    made again, and the value each program ended with."""

    scenario: ApprovalScenario
    before_pause: int = 0
    rerun_repeated: int = 0
    ptc_repeated: int = 0
    rerun_value: str | None = None
    ptc_value: str | None = None
    problem: str | None = None

    @property
    def agree(self) -> bool:
        expected = self.scenario.expected
        return self.problem is None and self.rerun_value == self.ptc_value == expected

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.name,
            "size": self.scenario.size,
            "calls_before_pause": self.before_pause,
            "repeated_by_rerun": self.rerun_repeated,
            "repeated_by_ptc_retry": self.ptc_repeated,
            "agree": self.agree,
            "problem": self.problem,
        }


async def play_approvals(
    scenarios: Sequence[ApprovalScenario], root: Path, delay: float = 1.0
) -> list[ApprovalOutcome]:
    """Play each scenario both ways; ``delay`` scales the host tools' waits (0: none)."""
    rerun_host, ptc_host = EvalTools(delay), EvalTools(delay)
    rerun = KernelBackend(root=root, tools=rerun_host.functions())
    ptc = KernelBackend(root=root)
    approved = {scenario.approved for scenario in scenarios}
    for function in ptc_host.functions():
        ptc.register_tool(function, approval=function.__name__ in approved)
    outcomes = []
    async with rerun, ptc:
        for scenario in scenarios:
            outcome = ApprovalOutcome(scenario)
            await _with_ptc_retry(ptc, ptc_host, outcome)
            await _rerun_from_the_top(rerun, rerun_host, outcome)
            outcomes.append(outcome)
    return outcomes


async def _with_ptc_retry(kb: KernelBackend, host: EvalTools, outcome: ApprovalOutcome) -> None:
    """The program pauses; the person approves; ``kb.approve`` goes on."""
    approved = outcome.scenario.approved
    host.calls.clear()
    kb.new_turn()
    paused = await kb.run_code(outcome.scenario.program)
    if paused.status != ResultStatus.PAUSED:
        outcome.problem = f"the program did not pause ({paused.status})"
        return
    outcome.before_pause = host.total
    waiting = kb.pending_approvals()
    host.calls.clear()
    result: RunResult | None = None
    for reference in dict.fromkeys(call.reference for call in waiting):
        result = await kb.approve(reference)
    if result is None or not result.ok:
        outcome.problem = f"the continuation did not end ok: {result and result.text}"
        return
    # Every call besides the approved ones is a call made again.
    outcome.ptc_repeated = host.total - min(host.calls[approved], len(waiting))
    outcome.ptc_value = result.value


async def _rerun_from_the_top(kb: KernelBackend, host: EvalTools, outcome: ApprovalOutcome) -> None:
    """Once approved, the whole program again, as a loop without ptc-retry sends it."""
    approved = outcome.scenario.approved
    host.calls.clear()
    kb.new_turn()
    result = await kb.run_code(outcome.scenario.program)
    if not result.ok:
        outcome.problem = f"the re-run did not end ok: {result.text}"
        return
    outcome.rerun_repeated = host.total - host.calls[approved]
    outcome.rerun_value = result.value


def approvals_section(outcomes: Sequence[ApprovalOutcome]) -> list[str]:
    """The report's section on the approval scenarios, as Markdown lines."""
    if not outcomes:
        return []
    lines = [
        "## Approvals",
        "",
        "A program pauses before a tool call a person must approve. Once approved, a loop "
        "without ptc-retry runs it again from the top; ptc-retry goes on from the paused "
        "statement (`kb.approve`). Host calls counted on the host:",
        "",
        "| scenario | calls before the pause | made again by a re-run | made again by ptc-retry "
        "| both reach the value |",
        "|---|---:|---:|---:|---|",
    ]
    for o in outcomes:
        verdict = "yes" if o.agree else f"NO: {o.problem or 'different values'}"
        lines.append(
            f"| {o.scenario.name} | {o.before_pause} | {o.rerun_repeated} | {o.ptc_repeated} "
            f"| {verdict} |"
        )
    return [*lines, ""]
