"""``ptc-retry eval``: play every scenario in two arms on real kernels and measure the fix.

Arms. OFF: the stock ``python3`` kernel, without ptc-retry (``KernelBackend(
kernel_name="python3", extension=False)``); the scripted model reads the error and
re-sends the whole corrected program. ON: the ``ptc-retry`` kernel; the scripted
model reads the tool result and does what the notice and the prompt section teach:
no notice (a program under ``notice_min_bytes``) or a fix that is a rewrite, it
re-sends; otherwise it sends the one-line ``ptc_retry.replay`` with the fragments,
adding ``resume=True`` when the notice offers it. Both arms run on one backend each,
one turn per scenario, alternating per scenario so both see the same machine load.

A scenario passes when both arms end with the expected value; any other outcome
fails the evaluation (exit status 1), with the reason in the report.

What is measured, per arm: the bytes and tokens of the tool-call arguments the
model sends after the failure (its output cost), the tokens of the notices it
reads, the number of kernel executions, and the wall time of the fix (from sending
the first fix call to its result). The prompt section's tokens are counted once.
"""

from __future__ import annotations

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
from ..notice import parse_notice
from .scenarios import QUICK, SCENARIOS, Scenario, by_name
from .tokens import Tokenizer, load_tokenizer

__all__ = ["ArmOutcome", "Call", "Outcome", "main", "replay_line", "run_eval", "same_value"]

# Quiet kernels: their startup warnings are not part of what the model reads.
_KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
_KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
# Generous: only a hung kernel reaches it (the timeout scenario sets its own).
_CALL_TIMEOUT = 300.0
# Calls whose program is longer are stored in report.json by hash only.
_KEEP_CODE = 2000
# The ON kernel's session, named like a default one ("s" and 8 hex digits), so that the
# path in the notice and the prompt section is as long as a default install's.
EVAL_SESSION = "s0e7a1c2d"


@dataclass
class Call:
    """One tool call of the scripted model and what came back."""

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

    def as_dict(self) -> dict[str, Any]:
        code = json.loads(self.arguments)["code"]
        return {
            # Short calls (replays, small programs) as sent; long programs are in the corpus.
            "code": code if len(code) <= _KEEP_CODE else None,
            "code_sha256": hashlib.sha256(code.encode("utf-8")).hexdigest(),
            "bytes": self.bytes,
            "tokens": self.tokens,
            "status": self.status,
            "duration_s": round(self.duration, 3),
            "notice": self.notice,
            "notice_tokens": self.notice_tokens,
            "result_tokens": self.result_tokens,
            "result_bytes": self.result_bytes,
            "value": self.value,
            "ename": self.ename,
        }


@dataclass
class ArmOutcome:
    """One arm of one scenario: the failing call, then the calls that fixed it."""

    arm: str  # "off" or "on"
    action: str  # "re-send", "replay", "replay + resume"; "+ retry" when a replay missed
    calls: list[Call] = field(default_factory=list)
    problem: str | None = None  # why this arm did not reach the expected value

    @property
    def fixes(self) -> list[Call]:
        return self.calls[1:]

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
            "calls": [call.as_dict() for call in self.calls],
        }


@dataclass
class Outcome:
    """Both arms of one scenario."""

    scenario: Scenario
    off: ArmOutcome
    on: ArmOutcome

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


def call_id(scenario: str, n: int) -> str:
    """A tool-call id shaped like OpenAI's (``call_`` and 24 characters), stable per scenario.

    Its length matters: the id is in the notice and in the replay line.
    """
    rng = random.Random(f"{scenario}/{n}")
    return "call_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


def same_value(shown: str | None, expected: str) -> bool:
    """Whether the kernel's ``text/plain`` is the expected ``repr``: IPython's pretty
    printer breaks long values over lines, so whitespace runs count as one space."""
    return shown is not None and " ".join(shown.split()) == " ".join(expected.split())


def replay_line(target: str, edits: Sequence[tuple[str, str]], *, resume: bool = False) -> str:
    """The one line the notice teaches, with the fragments as Python literals."""
    if len(edits) == 1:
        ((old, new),) = edits
        arguments = f"{json.dumps(target)}, {old!r}, {new!r}"
    else:
        pairs = ", ".join(f"({old!r}, {new!r})" for old, new in edits)
        arguments = f"{json.dumps(target)}, edits=[{pairs}]"
    if resume:
        arguments += ", resume=True"
    return f"await ptc_retry.replay({arguments})"


class _Arm:
    """One backend and how its scripted model answers a failure."""

    def __init__(self, name: str, backend: KernelBackend, tokens: Tokenizer, cwd: Path) -> None:
        self.name = name
        self.backend = backend
        self.tokens = tokens
        self.cwd = cwd

    async def call(self, code: str, call_id: str, timeout: float | None) -> Call:
        arguments = json.dumps({"code": code}, ensure_ascii=False)
        text = await self.backend.handle_tool_call(
            "run_code", arguments, call_id, timeout=timeout or _CALL_TIMEOUT
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
        )

    async def play(self, scenario: Scenario) -> ArmOutcome:
        self.backend.new_turn()  # each scenario is a new instruction from the user
        for relative, text in scenario.files.items():
            path = self.cwd / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        ids = (call_id(scenario.name, n) for n in range(1, 10))
        first = await self.call(scenario.program, next(ids), scenario.timeout)
        outcome = ArmOutcome(self.name, "re-send", [first])
        if first.status == "ok":
            outcome.problem = "the program did not fail"
            return outcome
        for code in self.fixes(scenario, first, outcome):
            fix = await self.call(code, next(ids), scenario.timeout)
            outcome.calls.append(fix)
            if fix.status == "ok":
                break
        last = outcome.calls[-1]
        if last.status != "ok":
            outcome.problem = f"the fix ended with {last.status} ({last.ename})"
        elif not same_value(last.value, scenario.expected):
            outcome.problem = f"the fix returned {last.value!r}, expected {scenario.expected!r}"
        return outcome

    def fixes(self, scenario: Scenario, first: Call, outcome: ArmOutcome) -> list[str]:
        """What the scripted model sends after reading the failure, in order."""
        notice = first.notice
        if not self.backend.extension or notice is None or scenario.rewrite is not None:
            return [scenario.corrected]
        found = parse_notice(notice)
        if found is None:
            outcome.problem = f"the notice names no checkpoint: {notice!r}"
            return []
        target = found[0]
        resume = scenario.resume and "resume=True" in notice
        if scenario.resume and not resume:
            outcome.problem = "the notice did not offer resume=True"
        outcome.action = "replay + resume" if resume else "replay"
        lines = []
        if scenario.first_try:
            outcome.action += " (2 tries)"
            lines.append(replay_line(target, scenario.first_try, resume=resume))
        lines.append(replay_line(target, scenario.edits, resume=resume))
        return lines


async def _play_all(
    scenarios: Sequence[Scenario], tokens: Tokenizer, work: Path, progress: bool
) -> tuple[list[Outcome], str]:
    common: dict[str, Any] = {
        "root": work,
        "extra_arguments": _KERNEL_ARGS,
        "env": _KERNEL_ENV,
    }
    (work / "off").mkdir()
    (work / "on").mkdir()
    off_backend = KernelBackend(
        kernel_name="python3", extension=False, cwd=work / "off", time_limit_margin=0, **common
    )
    on_backend = KernelBackend(cwd=work / "on", session_id=EVAL_SESSION, **common)
    outcomes: list[Outcome] = []
    async with off_backend, on_backend:
        off = _Arm("off", off_backend, tokens, work / "off")
        on = _Arm("on", on_backend, tokens, work / "on")
        prompt = on_backend.system_prompt()
        for number, scenario in enumerate(scenarios, 1):
            if progress:
                print(f"[{number}/{len(scenarios)}] {scenario.name} ...", end=" ", flush=True)
            outcome = Outcome(scenario, await off.play(scenario), await on.play(scenario))
            outcomes.append(outcome)
            if progress:
                verdict = "ok" if outcome.agree else "FAILED"
                saved = outcome.off.fix_bytes - outcome.on.fix_bytes
                print(f"{verdict} ({outcome.on.action}; {saved:+,} bytes not re-sent)")
    return outcomes, prompt


def run_eval(
    scenarios: Sequence[Scenario] | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    progress: bool = False,
) -> tuple[list[Outcome], str, Tokenizer]:
    """Play ``scenarios`` (default: the whole corpus); return the outcomes, the prompt
    section the ON arm's model was given, and the tokenizer that counted."""
    from jupyter_core.utils import run_sync

    tokens = tokenizer or load_tokenizer()
    chosen = list(SCENARIOS if scenarios is None else scenarios)
    work = _work_dir()
    try:
        outcomes, prompt = run_sync(_play_all)(chosen, tokens, work, progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return outcomes, prompt, tokens


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
    print(
        f"ptc-retry eval: {len(scenarios)} scenarios, two arms (stock python3 kernel, "
        f"ptc-retry kernel); tokens: {tokens.name}"
    )
    started = time.monotonic()
    outcomes, prompt, tokens = run_eval(scenarios, tokenizer=tokens, progress=True)
    elapsed = time.monotonic() - started
    paths, headline = write_report(out_dir, outcomes, prompt, tokens, quick=quick, elapsed=elapsed)
    print(f"\n{headline}\n")
    for path in paths:
        print(f"wrote {path}")
    failed = [o.scenario.name for o in outcomes if not o.agree]
    if failed:
        print(
            f"ptc-retry eval: the arms did not both reach the expected result in: "
            f"{', '.join(failed)} (see the report)",
            file=sys.stderr,
        )
        return 1
    return 0
