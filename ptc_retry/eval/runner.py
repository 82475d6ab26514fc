"""``ptc-retry eval``: play every scenario in two arms on real kernels and measure the fix.

Arms. OFF: the stock ``python3`` kernel, without ptc-retry (``KernelBackend(
kernel_name="python3", extension=False)``); the scripted model reads the error and
re-sends the whole corrected program. ON: the ``ptc-retry`` kernel; the scripted
model reads the tool result and does what the notice and the prompt section teach:
no notice (a program under ``notice_min_bytes``) or a fix that is a rewrite, it
re-sends; otherwise it sends the one-line ``ptc_retry.replay`` with the reference the
notice gives and the fragments, adding ``resume=True`` when the notice offers it. Both
arms go through the same ``KernelBackend.handle_tool_call``, so they differ only by
ptc-retry in the kernel (a stray key beside ``"code"`` runs and is named in both).

Call ids. Every scenario is played in the ON arm once per id shape (:data:`ID_SHAPES`):
with the ids OpenAI's API gives tool calls (``call_`` and 24 characters) and with
Anthropic's (``toolu_01`` and 22), each shape on its own ON kernel and session, so each
shape's figures stand on their own; the shapes' ON plays run at the same time. The OFF
arm is played once per scenario and serves every shape: the stock kernel never shows
the model a call id. Per scenario the arms alternate, so both see the same machine
load (the ON kernels, sharing it with each other, rather more).

A scenario passes when both arms end with the expected value (every program of it,
when a message held two); any other outcome fails the evaluation (exit status 1),
with the reason in the report.

What is measured, per arm: the bytes and tokens of the tool-call arguments the
model sends after the failure (its output cost: fixes, and an inspection program
when the scenario has one), the tokens of the notices it reads, the number of kernel
executions, and the wall time of the fix (from sending the first call after the
failure to the last result). The prompt section's tokens are counted once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shutil
import string
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backend import KernelBackend, RunResult
from ..core.notice import parse_notice
from .scenarios import QUICK, SCENARIOS, Scenario, by_name
from .tokens import Tokenizer, load_tokenizer

__all__ = [
    "ID_SHAPES",
    "ArmOutcome",
    "Call",
    "IdShape",
    "Outcome",
    "ShapeRun",
    "literal",
    "main",
    "replay_line",
    "run_eval",
    "same_value",
]

# Quiet kernels: their startup warnings are not part of what the model reads.
_KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
_KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
# Generous: only a hung kernel reaches it (the timeout scenario sets its own).
_CALL_TIMEOUT = 300.0
# Calls whose program is longer are stored in report.json by hash only.
_KEEP_CODE = 2000
# The ON kernels' sessions, named like a default one ("s" and 8 hex digits), so that the
# path in the prompt section is as long as a default install's; the last digit is the
# id shape's index.
EVAL_SESSION = "s0e7a1c20"
_ID_CHARACTERS = string.ascii_letters + string.digits


@dataclass(frozen=True)
class IdShape:
    """How a provider's tool-call ids look: ``prefix`` and ``length`` random characters."""

    name: str  # "openai", "anthropic": the key in the report
    label: str  # how the report names it
    prefix: str
    length: int

    def call_id(self, scenario: str, n: int) -> str:
        """The ``n``-th call id of ``scenario``, stable from run to run."""
        rng = random.Random(f"{self.name}/{scenario}/{n}")
        return self.prefix + "".join(rng.choice(_ID_CHARACTERS) for _ in range(self.length))

    @property
    def example(self) -> str:
        return self.call_id("example", 0)


#: The call-id shapes every scenario is played with.
ID_SHAPES: tuple[IdShape, ...] = (
    IdShape("openai", "OpenAI ids (call_ + 24)", "call_", 24),
    IdShape("anthropic", "Anthropic ids (toolu_01 + 22)", "toolu_01", 22),
)


@dataclass
class Call:
    """One tool call of the scripted model and what came back.

    ``role``: ``"failed"`` (the message that failed), ``"inspect"`` (a look at the data
    before the fix), ``"re-send"`` or ``"replay"`` (a fix).
    """

    arguments: str  # the raw JSON arguments, as a model sends them
    bytes: int
    tokens: int | None
    status: str
    duration: float
    notice: str | None
    notice_tokens: int | None
    result_tokens: int | None  # tokens of the text the model read back
    result_bytes: int
    value: str | None
    ename: str | None
    role: str = "failed"
    call_id: str | None = None
    step: int | None = None
    reference: str | None = None  # what the notice names the program by ("#7")
    said_first: str = ""  # the first line of the text the model read (up to 200 characters)

    def as_dict(self) -> dict[str, Any]:
        arguments = json.loads(self.arguments)
        code = arguments["code"]
        return {
            "role": self.role,
            "other_keys": sorted(set(arguments) - {"code"}),
            "call_id": self.call_id,
            "step": self.step,
            # Short calls (replays, small programs) as sent; long programs are in the corpus.
            "code": code if len(code) <= _KEEP_CODE else None,
            "code_sha256": hashlib.sha256(code.encode("utf-8")).hexdigest(),
            "bytes": self.bytes,
            "tokens": self.tokens,
            "status": self.status,
            "duration_s": round(self.duration, 3),
            "notice": self.notice,
            "notice_tokens": self.notice_tokens,
            "reference": self.reference,
            "result_tokens": self.result_tokens,
            "result_bytes": self.result_bytes,
            "said_first": self.said_first,
            "value": self.value,
            "ename": self.ename,
        }


@dataclass
class ArmOutcome:
    """One arm of one scenario: the failed message's calls, then the calls after it."""

    arm: str  # "off" or "on"
    action: str  # e.g. "re-send", "replay + resume", "inspect, replay", "2 replays"
    calls: list[Call] = field(default_factory=list)
    problem: str | None = None  # why this arm did not reach the expected value
    restarted: bool = False  # the kernel was restarted between the failure and the fix

    @property
    def failed(self) -> list[Call]:
        return [call for call in self.calls if call.role == "failed"]

    @property
    def fixes(self) -> list[Call]:
        """Every call sent after the failure: fixes, and an inspection before them."""
        return [call for call in self.calls if call.role != "failed"]

    @property
    def replays(self) -> list[Call]:
        return [call for call in self.calls if call.role == "replay"]

    @property
    def fix_bytes(self) -> int:
        return sum(call.bytes for call in self.fixes)

    @property
    def fix_tokens(self) -> int | None:
        counts = [call.tokens for call in self.fixes]
        return None if None in counts else sum(c for c in counts if c is not None)

    @property
    def notice_tokens(self) -> int:
        return sum(call.notice_tokens or 0 for call in self.calls)

    @property
    def notices(self) -> int:
        return sum(1 for call in self.calls if call.notice)

    @property
    def executions(self) -> int:
        return len(self.calls)

    @property
    def fix_seconds(self) -> float:
        return sum(call.duration for call in self.fixes)

    @property
    def value(self) -> str | None:
        return self.calls[-1].value if self.calls else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "fix_bytes": self.fix_bytes,
            "fix_tokens": self.fix_tokens,
            "notices": self.notices,
            "notice_tokens": self.notice_tokens,
            "executions": self.executions,
            "fix_seconds": round(self.fix_seconds, 3),
            "value": self.value,
            "problem": self.problem,
            "restarted": self.restarted,
            "calls": [call.as_dict() for call in self.calls],
        }


@dataclass
class Outcome:
    """Both arms of one scenario, played with one id shape."""

    scenario: Scenario
    off: ArmOutcome
    on: ArmOutcome
    id_shape: str = ID_SHAPES[0].name

    @property
    def agree(self) -> bool:
        """Both arms reached the expected value."""
        return self.off.problem is None and self.on.problem is None

    @property
    def program_bytes(self) -> int:
        return self.off.calls[0].bytes if self.off.calls else 0

    @property
    def program_tokens(self) -> int | None:
        return self.off.calls[0].tokens if self.off.calls else None


@dataclass
class ShapeRun:
    """Every scenario played with one id shape, and what the ON model was told once."""

    shape: IdShape
    outcomes: list[Outcome]
    prompt: str  # the prompt section the ON model was given
    session_dir: str  # where the ON kernel saved the programs (gone after the run)


def same_value(shown: str | None, expected: str) -> bool:
    """Whether the kernel's ``text/plain`` is the expected ``repr``: IPython's pretty
    printer breaks long values over lines, so whitespace runs count as one space."""
    return shown is not None and " ".join(shown.split()) == " ".join(expected.split())


def literal(text: str) -> str:
    """``text`` as a Python string literal the way a model copies the notice's template:
    in double quotes, unless ``text`` holds a double quote (then as ``repr`` gives it)."""
    shown = repr(text)
    if '"' not in text and shown.startswith("'"):
        return '"' + shown[1:-1] + '"'
    return shown


def replay_line(target: str, edits: Sequence[tuple[str, str]], *, resume: bool = False) -> str:
    """The one line the notice teaches, with the fragments as Python literals."""
    if len(edits) == 1:
        ((old, new),) = edits
        arguments = f"{json.dumps(target)}, {literal(old)}, {literal(new)}"
    else:
        pairs = ", ".join(f"({literal(old)}, {literal(new)})" for old, new in edits)
        arguments = f"{json.dumps(target)}, edits=[{pairs}]"
    if resume:
        arguments += ", resume=True"
    return f"await ptc_retry.replay({arguments})"


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


def _offers_resume(notice: str) -> bool:
    """A failure's notice offers ``resume=True``; a stopped program's, ``ptc_retry.resume``."""
    return "resume=True" in notice or "ptc_retry.resume(" in notice


class _Arm:
    """One backend and how its scripted model answers a failure."""

    def __init__(
        self, name: str, backend: KernelBackend, tokens: Tokenizer, cwd: Path, shape: IdShape
    ) -> None:
        self.name = name
        self.backend = backend
        self.tokens = tokens
        self.cwd = cwd
        self.shape = shape

    async def call(
        self,
        code: str,
        call_id: str,
        timeout: float | None,
        *,
        role: str,
        step: int,
        extra_keys: dict[str, str] | None = None,
    ) -> Call:
        arguments = json.dumps({"code": code, **(extra_keys or {})}, ensure_ascii=False)
        text = await self.backend.handle_tool_call(
            "run_code", arguments, call_id, step=step, timeout=timeout or _CALL_TIMEOUT
        )
        result = self.backend.last_result
        assert isinstance(result, RunResult)
        notice = result.notice if self.backend.extension else None
        return Call(
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

        async def send(code: str, role: str, step: int, **extra: Any) -> Call:
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
        last: dict[int, Call] = {}  # each program's latest fix
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

    def fixes(self, program: _Program, failed: Call, outcome: ArmOutcome) -> list[tuple[str, str]]:
        """What the scripted model sends to fix ``program`` after reading its failure, in
        order, as ``(role, code)``: one re-send, or one replay (two when its first try's
        fragment does not match)."""
        notice = failed.notice
        if not self.backend.extension or notice is None or program.rewrite:
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
    tokens: Tokenizer,
    work: Path,
    progress: bool,
    shapes: Sequence[IdShape],
) -> list[ShapeRun]:
    common: dict[str, Any] = {
        "root": work,
        "extra_arguments": _KERNEL_ARGS,
        "env": _KERNEL_ENV,
    }
    (work / "off").mkdir()
    off_backend = KernelBackend(
        kernel_name="python3", extension=False, cwd=work / "off", time_limit_margin=0, **common
    )
    on_backends = []
    for index, shape in enumerate(shapes):
        cwd = work / f"on-{shape.name}"
        cwd.mkdir()
        # One session per shape, each named like a default one, so their prompt sections
        # are as long as a default install's and as each other's.
        session = f"{EVAL_SESSION[:-1]}{index:x}"
        on_backends.append(KernelBackend(cwd=cwd, session_id=session, **common))
    backends = [off_backend, *on_backends]
    runs = [
        ShapeRun(shape, [], backend.system_prompt(), str(backend.session_dir))
        for shape, backend in zip(shapes, on_backends)
    ]
    try:
        started = await asyncio.gather(*(b.start() for b in backends), return_exceptions=True)
        for failure in started:
            if isinstance(failure, BaseException):
                raise failure
        # The stock kernel never shows the model a call id: one OFF play serves every shape.
        off = _Arm("off", off_backend, tokens, work / "off", shapes[0])
        ons = [
            _Arm("on", backend, tokens, work / f"on-{shape.name}", shape)
            for shape, backend in zip(shapes, on_backends)
        ]
        for number, scenario in enumerate(scenarios, 1):
            if progress:
                print(f"[{number}/{len(scenarios)}] {scenario.name} ...", end=" ", flush=True)
            played = await off.play(scenario)
            # The ON kernels are independent: play the shapes at once (two cores).
            replayed = await asyncio.gather(*(on.play(scenario) for on in ons))
            said = []
            for run, on_outcome in zip(runs, replayed):
                outcome = Outcome(scenario, played, on_outcome, run.shape.name)
                run.outcomes.append(outcome)
                verdict = "ok" if outcome.agree else "FAILED"
                saved = outcome.off.fix_bytes - outcome.on.fix_bytes
                said.append(f"{run.shape.name} {verdict} ({outcome.on.action}; {saved:+,} B)")
            if progress:
                print("; ".join(said))
    finally:
        await asyncio.gather(*(backend.shutdown() for backend in backends))
    return runs


def run_eval(
    scenarios: Sequence[Scenario] | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    progress: bool = False,
    shapes: Sequence[IdShape] = ID_SHAPES,
) -> tuple[list[ShapeRun], Tokenizer]:
    """Play ``scenarios`` (default: the whole corpus) once per id shape; return one
    ``ShapeRun`` per shape and the tokenizer that counted."""
    from jupyter_core.utils import run_sync

    tokens = tokenizer or load_tokenizer()
    chosen = list(SCENARIOS if scenarios is None else scenarios)
    work = _work_dir()
    try:
        runs = run_sync(_play_all)(chosen, tokens, work, progress, list(shapes))
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

    out_dir = Path(out)
    scenarios = by_name(QUICK) if quick else list(SCENARIOS)
    # Old ipykernels import debugpy, which warns on stderr unless this is set.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    tokens = load_tokenizer()
    if tokens.problem:
        print(f"ptc-retry eval: {tokens.problem}; reporting bytes only.", file=sys.stderr)
    shapes = ", ".join(shape.label for shape in ID_SHAPES)
    print(
        f"ptc-retry eval: {len(scenarios)} scenarios, two arms (stock python3 kernel, "
        f"ptc-retry kernel), once with each id shape ({shapes}); tokens: {tokens.name}"
    )
    started = time.monotonic()
    runs, tokens = run_eval(scenarios, tokenizer=tokens, progress=True)
    elapsed = time.monotonic() - started
    paths, headline = write_report(out_dir, runs, tokens, quick=quick, elapsed=elapsed)
    print(f"\n{headline}\n")
    for path in paths:
        print(f"wrote {path}")
    failed = sorted(
        {
            f"{o.scenario.name} ({run.shape.name})"
            for run in runs
            for o in run.outcomes
            if not o.agree
        }
    )
    if failed:
        print(
            f"ptc-retry eval: the arms did not both reach the expected result in: "
            f"{', '.join(failed)} (see the report)",
            file=sys.stderr,
        )
        return 1
    return 0
