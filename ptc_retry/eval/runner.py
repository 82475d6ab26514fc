"""``ptc-retry eval``: play every scenario in two arms on real kernels and measure the fix,
and every cut-off call in two arms and measure what the model writes after the cut.

The arms and what the scripted model does in each are ``_Arm``'s; how the id shapes are
played, ``run_eval``'s; what is measured, :mod:`.outcomes`'.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backend import KernelBackend, RunResult
from ..core.notice import parse_notice
from ..core.partial import cut_arguments
from ..core.status import ResultStatus
from ..tokens import Tokenizer, load_tokenizer
from .host import EvalTools
from .outcomes import (
    ID_SHAPES,
    ArmOutcome,
    CutOutcome,
    IdShape,
    ModelCall,
    Outcome,
    ShapeRun,
    extend_line,
    replay_line,
    same_value,
)
from .scenarios import CUT_OFFS, QUICK, QUICK_CUT_OFFS, SCENARIOS, CutOff, Scenario, by_name

__all__ = ["main", "run_eval"]

# Quiet kernels: their startup warnings are not part of what the model reads.
_KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
_KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
# Generous: only a hung kernel reaches it (the timeout scenario sets its own).
_CALL_TIMEOUT = 300.0
# The ON kernels' sessions, named like a default one ("s" and 8 hex digits), so that the
# path in the prompt section is as long as a default install's; the last digit is the
# id shape's index.
EVAL_SESSION = "s0e7a1c20"
# The tool scenarios' re-send arm: a ptc-retry kernel that gives no notice (see _Arm).
_NO_NOTICE = f"--PtcRetry.notice_min_bytes={2**62}"


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


def _offers_resume(notice: str) -> bool:
    """A failure's notice offers ``resume=True``; a stopped program's, ``ptc_retry.resume``."""
    return "resume=True" in notice or "ptc_retry.resume(" in notice


class _Arm:
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
        for relative, text in scenario.files.items():
            path = self.cwd / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
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
        last: dict[int, ModelCall] = {}  # each program's latest fix
        pending = list(range(len(programs)))
        tries = 0
        while pending:
            step = backend.next_step()  # one model message: a try for each program not fixed
            for index in pending:
                role, code = plans[index][tries]
                last[index] = await send(code, role, step)
            tries += 1
            pending = [i for i in pending if last[i].status != "ok" and tries < len(plans[i])]
        for index, program in enumerate(programs):
            call = last[index]
            if call.status != "ok":
                outcome.problem = f"the fix ended with {call.status} ({call.ename})"
            elif not same_value(call.value, program.expected):
                outcome.problem = f"the fix returned {call.value!r}, expected {program.expected!r}"
            if outcome.problem is not None:
                break
        return outcome

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
            if cut_call.status != "partial" or target is None or sent is None:
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
        target = parse_notice(notice)
        if target is None:
            outcome.problem = f"the notice names no program: {notice!r}"
            return []
        if target != failed.reference:
            outcome.problem = f"the notice names {target!r}, the reply {failed.reference!r}"
        resume = program.resume and _offers_resume(notice)
        if program.resume and not resume:
            outcome.problem = "the notice did not offer resume=True"
        lines = []
        if program.first_try:
            lines.append(("replay", replay_line(target, program.first_try, resume=resume)))
        lines.append(("replay", replay_line(target, program.edits, resume=resume)))
        return lines


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


async def _play_all(
    scenarios: Sequence[Scenario],
    cut_offs: Sequence[CutOff],
    tokens: Tokenizer,
    work: Path,
    progress: bool,
    shapes: Sequence[IdShape],
) -> list[ShapeRun]:
    common: dict[str, Any] = {"root": work, "env": _KERNEL_ENV}

    def backend(cwd: str, **options: Any) -> KernelBackend:
        (work / cwd).mkdir()
        options.setdefault("extra_arguments", _KERNEL_ARGS)
        return KernelBackend(cwd=work / cwd, **common, **options)

    off_backend = backend("off", kernel_name="python3", extension=False, time_limit_margin=0)
    # One session per shape, each named like a default one, so their prompt sections are
    # as long as a default install's and as each other's.
    on_backends = [
        backend(f"on-{shape.name}", session_id=f"{EVAL_SESSION[:-1]}{index:x}")
        for index, shape in enumerate(shapes)
    ]
    # The tool scenarios play on backends of their own, so the tools' lines in the prompt
    # section leave the other scenarios' figures alone.
    hosts: list[EvalTools] = []
    tool_backends: list[KernelBackend] = []
    if any(scenario.tools for scenario in scenarios):
        hosts = [EvalTools() for _ in range(len(shapes) + 1)]
        tool_backends.append(
            backend(
                "off-tools",
                session_id=f"{EVAL_SESSION[:-2]}f0",
                extra_arguments=[*_KERNEL_ARGS, _NO_NOTICE],
                tools=hosts[0].functions(),
            )
        )
        tool_backends += [
            backend(
                f"on-tools-{shape.name}",
                session_id=f"{EVAL_SESSION[:-2]}3{index:x}",
                tools=host.functions(),
            )
            for index, (shape, host) in enumerate(zip(shapes, hosts[1:]))
        ]
    backends = [off_backend, *on_backends, *tool_backends]
    runs = [
        ShapeRun(
            shape,
            [],
            on.system_prompt(),
            str(on.session_dir),
            tools_prompt=tool_backends[1 + index].system_prompt() if tool_backends else None,
        )
        for index, (shape, on) in enumerate(zip(shapes, on_backends))
    ]
    try:
        started = await asyncio.gather(*(b.start() for b in backends), return_exceptions=True)
        for failure in started:
            if isinstance(failure, BaseException):
                raise failure

        # The stock kernel never shows the model a call id: one OFF play serves every shape.
        off = _Arm("off", off_backend, tokens, work / "off", shapes[0], resends=True)
        ons = [
            _Arm("on", on, tokens, work / f"on-{shape.name}", shape)
            for shape, on in zip(shapes, on_backends)
        ]
        if tool_backends:
            off_tools = _Arm(
                "off",
                tool_backends[0],
                tokens,
                work / "off-tools",
                shapes[0],
                resends=True,
                host=hosts[0],
            )
            on_tools = [
                _Arm("on", on, tokens, work / f"on-tools-{shape.name}", shape, host=host)
                for shape, on, host in zip(shapes, tool_backends[1:], hosts[1:])
            ]
        count = len(scenarios) + len(cut_offs)
        for number, scenario in enumerate(scenarios, 1):
            if progress:
                print(f"[{number}/{count}] {scenario.name} ...", end=" ", flush=True)
            if scenario.tools:
                off_arm, on_arms = off_tools, on_tools
            else:
                off_arm, on_arms = off, ons
            played = await off_arm.play(scenario)
            # The ON kernels are independent: play the shapes at once (two cores).
            replayed = await asyncio.gather(*(on.play(scenario) for on in on_arms))
            said = []
            for run, on_outcome in zip(runs, replayed):
                outcome = Outcome(scenario, played, on_outcome, run.shape.name)
                run.outcomes.append(outcome)
                verdict = "ok" if outcome.agree else "FAILED"
                saved = outcome.off.fix_bytes - outcome.on.fix_bytes
                said.append(f"{run.shape.name} {verdict} ({outcome.on.action}; {saved:+,} B)")
            if progress:
                print("; ".join(said))
        # After the scenarios, so that the references their notices give stay as they were.
        for number, cut in enumerate(cut_offs, len(scenarios) + 1):
            if progress:
                print(f"[{number}/{count}] {cut.name} ...", end=" ", flush=True)
            regenerated = await off.play_cut(cut)
            extended = await asyncio.gather(*(on.play_cut(cut) for on in ons))
            said = []
            for run, extend in zip(runs, extended):
                whole, last = regenerated.calls[-1], extend.calls[-1]
                if extend.problem is None and last.result_sha256 != whole.result_sha256:
                    extend.problem = "the extended program's output differs from the whole one's"
                cut_outcome = CutOutcome(cut, regenerated, extend, run.shape.name)
                run.cut_outcomes.append(cut_outcome)
                verdict = "ok" if cut_outcome.agree else "FAILED"
                saved = regenerated.fix_bytes - extend.fix_bytes
                said.append(f"{run.shape.name} {verdict} (extend; {saved:+,} B)")
            if progress:
                print("; ".join(said))
    finally:
        await asyncio.gather(*(backend.shutdown() for backend in backends))
    return runs


def run_eval(
    scenarios: Sequence[Scenario] | None = None,
    *,
    cut_offs: Sequence[CutOff] | None = None,
    tokenizer: Tokenizer | None = None,
    progress: bool = False,
    shapes: Sequence[IdShape] = ID_SHAPES,
) -> tuple[list[ShapeRun], Tokenizer]:
    """Play ``scenarios`` and then ``cut_offs`` (default: the whole corpus, every cut-off
    call) once per id shape; return one ``ShapeRun`` per shape and the tokenizer that
    counted.

    Every scenario is played in the ON arm once per id shape (``ID_SHAPES``): with the ids
    OpenAI's API gives tool calls and with Anthropic's, each shape on its own ON kernel and
    session, so each shape's figures stand on their own; the shapes' ON plays run at the
    same time. The OFF arm is played once per scenario and serves every shape: the stock
    kernel never shows the model a call id. Per scenario the arms alternate, so both see
    the same machine load (the ON kernels, sharing it with each other, rather more).

    A scenario passes when both arms end with the expected value (every program of it,
    when a message held two); a cut-off call, when both arms end with the whole program's
    value and the extended program printed what the whole one printed. Any other outcome
    fails the evaluation, with the reason in the report.
    """
    from jupyter_core.utils import run_sync

    tokens = tokenizer or load_tokenizer()
    chosen = list(SCENARIOS if scenarios is None else scenarios)
    cuts = list(CUT_OFFS if cut_offs is None else cut_offs)
    work = _work_dir()
    try:
        runs = run_sync(_play_all)(chosen, cuts, tokens, work, progress, list(shapes))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs, tokens


def _work_dir() -> Path:
    """A fresh private directory, ``<tempdir>/ptc-retry-e<pid>``: the checkpoint root.

    Shaped like the default root (``<tempdir>/ptc-retry-<uid>``) so that the notices and
    the prompt section cost what they cost in a default install, give or take a token.
    """
    base = Path(tempfile.gettempdir())
    for n in range(os.getpid(), os.getpid() + 100):
        path = base / f"ptc-retry-e{n}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    return Path(tempfile.mkdtemp(prefix="ptc-retry-eval-"))


def main(out: str | os.PathLike[str] = "eval-report", quick: bool = False) -> int:
    """Run the evaluation and write ``report.md``, ``report.json`` and ``savings.png``
    to ``out``. 0 when every scenario's arms reached the expected value, else 1."""
    from .report import write_report

    if importlib.util.find_spec("matplotlib") is None:  # say so now, not after the run
        print(
            "ptc-retry eval: the chart needs matplotlib; install it with: "
            "pip install 'ptc-retry[eval]'",
            file=sys.stderr,
        )
        return 2
    out_dir = Path(out)
    scenarios = by_name(QUICK) if quick else list(SCENARIOS)
    cut_offs = [c for c in CUT_OFFS if c.name in QUICK_CUT_OFFS] if quick else list(CUT_OFFS)
    # Old ipykernels import debugpy, which warns on stderr unless this is set.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    tokens = load_tokenizer()
    if tokens.problem:
        print(f"ptc-retry eval: {tokens.problem}; reporting bytes only.", file=sys.stderr)
    shapes = ", ".join(shape.label for shape in ID_SHAPES)
    print(
        f"ptc-retry eval: {len(scenarios)} scenarios and {len(cut_offs)} cut-off calls, two "
        f"arms (stock python3 kernel, ptc-retry kernel), once with each id shape ({shapes}); "
        f"tokens: {tokens.name}"
    )
    started = time.monotonic()
    runs, tokens = run_eval(scenarios, cut_offs=cut_offs, tokenizer=tokens, progress=True)
    elapsed = time.monotonic() - started
    paths, headline = write_report(out_dir, runs, tokens, quick=quick, elapsed=elapsed)
    print(f"\n{headline}\n")
    for path in paths:
        print(f"wrote {path}")
    failed = sorted(
        f"{name} ({run.shape.name})"
        for run in runs
        for name, agree in [
            *((o.scenario.name, o.agree) for o in run.outcomes),
            *((o.cut.name, o.agree) for o in run.cut_outcomes),
        ]
        if not agree
    )
    if failed:
        print(
            f"ptc-retry eval: the arms did not both reach the expected result in: "
            f"{', '.join(failed)} (see the report)",
            file=sys.stderr,
        )
        return 1
    return 0
