"""``ptc-retry eval``: play every scenario in two arms on real kernels and measure the fix,
and every cut-off call in two arms and measure what the model writes after the cut.

The arms and what the scripted model does in each are :class:`.arms.Arm`'s; how the id
shapes are played, ``run_eval``'s; what is measured, :mod:`.outcomes`'.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backend import KernelBackend
from ..tokens import Tokenizer, load_tokenizer
from .approvals import ApprovalOutcome, play_approvals
from .arms import Arm
from .host import EvalTools
from .outcomes import ID_SHAPES, CutOutcome, IdShape, Outcome, ShapeRun
from .scenarios import (
    APPROVALS,
    CUT_OFFS,
    QUICK,
    QUICK_CUT_OFFS,
    SCENARIOS,
    ApprovalScenario,
    CutOff,
    Scenario,
    by_name,
)

__all__ = ["eval_backend", "main", "run_eval", "stock_backend", "work_dir"]

# Quiet kernels: their startup warnings are not part of what the model reads.
_KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
_KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
# The ON kernels' sessions, named like a default one ("s" and 8 hex digits), so that the
# path in the prompt section is as long as a default install's; the last digit is the
# id shape's index.
EVAL_SESSION = "s0e7a1c20"
# The tool scenarios' re-send arm: a ptc-retry kernel that gives no notice (see Arm).
_NO_NOTICE = f"--PtcRetry.notice_min_bytes={2**62}"


@dataclass
class _Backends:
    """The evaluation's kernels: the stock one (OFF), one ptc-retry kernel per id shape (ON)
    and, when some scenario calls host tools, the tool scenarios' own: their OFF, then one
    ON per id shape, each with its host (``hosts``, in the same order)."""

    off: KernelBackend
    on: list[KernelBackend]
    tools: list[KernelBackend]
    hosts: list[EvalTools]

    @property
    def every(self) -> list[KernelBackend]:
        return [self.off, *self.on, *self.tools]


@dataclass
class _Arms:
    """The arms the scenarios are played in: OFF and one ON per id shape, and the tool
    scenarios' own (None without tool scenarios)."""

    off: Arm
    on: list[Arm]
    off_tools: Arm | None
    on_tools: list[Arm]

    def of(self, scenario: Scenario) -> tuple[Arm, list[Arm]]:
        """The OFF arm and the ON arms that play ``scenario``."""
        if scenario.tools:
            assert self.off_tools is not None  # the tool backends exist for tool scenarios
            return self.off_tools, self.on_tools
        return self.off, self.on


def eval_backend(work: Path, cwd: str, **options: Any) -> KernelBackend:
    """A quiet kernel's backend, not started yet: its checkpoints under ``work`` and its
    working directory ``work/cwd`` (made here); ``options`` as ``KernelBackend``'s."""
    (work / cwd).mkdir()
    options.setdefault("extra_arguments", _KERNEL_ARGS)
    return KernelBackend(root=work, env=_KERNEL_ENV, cwd=work / cwd, **options)


def stock_backend(work: Path, cwd: str) -> KernelBackend:
    """The re-send arm's kernel: the stock ``python3`` one, without ptc-retry."""
    return eval_backend(work, cwd, kernel_name="python3", extension=False, time_limit_margin=0)


def _backends(work: Path, shapes: Sequence[IdShape], *, tools: bool) -> _Backends:
    """The kernels' backends, not started yet, each with a working directory under ``work``."""

    def backend(cwd: str, **options: Any) -> KernelBackend:
        return eval_backend(work, cwd, **options)

    off_backend = stock_backend(work, "off")
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
    if tools:
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
    return _Backends(off_backend, on_backends, tool_backends, hosts)


def _shape_runs(shapes: Sequence[IdShape], backends: _Backends) -> list[ShapeRun]:
    """One empty run per id shape, with the prompt sections its ON kernels give."""
    tool_backends = backends.tools
    return [
        ShapeRun(
            shape,
            [],
            on.system_prompt(),
            str(on.session_dir),
            tools_prompt=tool_backends[1 + index].system_prompt() if tool_backends else None,
        )
        for index, (shape, on) in enumerate(zip(shapes, backends.on))
    ]


async def _start(backends: _Backends) -> None:
    """Start every kernel at once; raise the first start that failed."""
    started = await asyncio.gather(*(b.start() for b in backends.every), return_exceptions=True)
    for failure in started:
        if isinstance(failure, BaseException):
            raise failure


def _arms(backends: _Backends, tokens: Tokenizer, work: Path, shapes: Sequence[IdShape]) -> _Arms:
    """The arms on the started backends."""
    # The stock kernel never shows the model a call id: one OFF play serves every shape.
    off = Arm("off", backends.off, tokens, work / "off", shapes[0], resends=True)
    ons = [
        Arm("on", on, tokens, work / f"on-{shape.name}", shape)
        for shape, on in zip(shapes, backends.on)
    ]
    if not backends.tools:
        return _Arms(off, ons, None, [])
    hosts = backends.hosts
    off_tools = Arm(
        "off",
        backends.tools[0],
        tokens,
        work / "off-tools",
        shapes[0],
        resends=True,
        host=hosts[0],
    )
    on_tools = [
        Arm("on", on, tokens, work / f"on-tools-{shape.name}", shape, host=host)
        for shape, on, host in zip(shapes, backends.tools[1:], hosts[1:])
    ]
    return _Arms(off, ons, off_tools, on_tools)


async def _play_scenario(scenario: Scenario, arms: _Arms, runs: Sequence[ShapeRun]) -> list[str]:
    """Play ``scenario`` in its OFF arm, then in every ON arm at once; add each shape's
    outcome to its run and say how each went."""
    off_arm, on_arms = arms.of(scenario)
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
    return said


async def _play_cut(cut: CutOff, arms: _Arms, runs: Sequence[ShapeRun]) -> list[str]:
    """Play the cut-off call ``cut``: regenerate (OFF), then extend in every ON arm at once,
    which must print what the whole program printed; add each shape's outcome to its run
    and say how each went."""
    regenerated = await arms.off.play_cut(cut)
    extended = await asyncio.gather(*(on.play_cut(cut) for on in arms.on))
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
    return said


async def _play_all(
    scenarios: Sequence[Scenario],
    cut_offs: Sequence[CutOff],
    tokens: Tokenizer,
    work: Path,
    progress: bool,
    shapes: Sequence[IdShape],
) -> list[ShapeRun]:
    """Start the kernels, play every scenario and then every cut-off call, shut the
    kernels down; one run per id shape."""
    backends = _backends(work, shapes, tools=any(scenario.tools for scenario in scenarios))
    runs = _shape_runs(shapes, backends)
    try:
        await _start(backends)
        arms = _arms(backends, tokens, work, shapes)
        count = len(scenarios) + len(cut_offs)
        for number, scenario in enumerate(scenarios, 1):
            if progress:
                print(f"[{number}/{count}] {scenario.name} ...", end=" ", flush=True)
            said = await _play_scenario(scenario, arms, runs)
            if progress:
                print("; ".join(said))
        # After the scenarios, so that the references their notices give stay as they were.
        for number, cut in enumerate(cut_offs, len(scenarios) + 1):
            if progress:
                print(f"[{number}/{count}] {cut.name} ...", end=" ", flush=True)
            said = await _play_cut(cut, arms, runs)
            if progress:
                print("; ".join(said))
    finally:
        await asyncio.gather(*(backend.shutdown() for backend in backends.every))
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
    work = work_dir()
    try:
        runs = run_sync(_play_all)(chosen, cuts, tokens, work, progress, list(shapes))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs, tokens


def run_approvals(
    scenarios: Sequence[ApprovalScenario], *, delay: float = 1.0
) -> list[ApprovalOutcome]:
    """Play the approval scenarios (:mod:`.approvals`), printing one line each: the host
    calls a re-run from the top makes again against those ptc-retry makes again."""
    from jupyter_core.utils import run_sync

    work = work_dir()
    try:
        outcomes = run_sync(play_approvals)(scenarios, work, delay)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for outcome in outcomes:
        print(
            f"[approval] {outcome.scenario.name} ... calls made again: a re-run from the top "
            f"{outcome.rerun_repeated}, ptc-retry {outcome.ptc_repeated}"
            + ("" if outcome.agree else f" (FAILED: {outcome.problem or 'different values'})")
        )
    return outcomes


def work_dir() -> Path:
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
    approvals = run_approvals(APPROVALS)
    elapsed = time.monotonic() - started
    paths, headline = write_report(
        out_dir, runs, tokens, quick=quick, elapsed=elapsed, approvals=approvals
    )
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
    ) + [f"{outcome.scenario.name} (approval)" for outcome in approvals if not outcome.agree]
    if failed:
        print(
            f"ptc-retry eval: the arms did not both reach the expected result in: "
            f"{', '.join(failed)} (see the report)",
            file=sys.stderr,
        )
        return 1
    return 0
