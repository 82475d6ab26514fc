"""What the evaluation measured: the call-id shapes, each call the scripted model sent and
what came back, and the outcome of each arm of each scenario and cut-off call. The runner
fills these in; the report computes its figures from them."""

from __future__ import annotations

import ast
import hashlib
import json
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.partial import cut_arguments
from .scenarios import CutOff, Scenario

__all__ = [
    "ID_SHAPES",
    "ArmOutcome",
    "CutOutcome",
    "IdShape",
    "ModelCall",
    "Outcome",
    "ShapeRun",
    "extend_line",
    "literal",
    "replay_line",
    "rest_literal",
    "same_value",
]

# Calls whose program is longer are stored in report.json by hash only.
_KEEP_CODE = 2000
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
class ModelCall:
    """One tool call of the scripted model and what came back.

    Measured per call: the bytes and tokens of the tool-call arguments the model sent,
    the tokens of the notice it read, and the wall time; an arm adds them up over the
    calls after the failure (``ArmOutcome``).

    ``role``: ``"failed"`` (the message that failed), ``"inspect"`` (a look at the data
    before the fix), ``"re-send"`` or ``"replay"`` (a fix); for a cut-off call, ``"cut"``
    (the arguments as far as they arrived), then ``"regenerate"`` or ``"extend"``.
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
    tool_calls: int = 0  # host tool calls the program made live (the host counted them)
    tools_reused: int = 0  # recorded tool results a replay reused instead (the kernel's count)
    result_sha256: str = ""  # of the text the model read back

    def as_dict(self) -> dict[str, Any]:
        if self.role == "cut":  # the arguments stop part-way: the start of the program
            found = cut_arguments(self.arguments)
            code, keys = (found.string("code") or ("", False))[0], set(found.values)
        else:
            arguments = json.loads(self.arguments)
            code, keys = arguments["code"], set(arguments)
        return {
            "role": self.role,
            "other_keys": sorted(keys - {"code"}),
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
            "result_sha256": self.result_sha256,
            "value": self.value,
            "ename": self.ename,
            "tool_calls": self.tool_calls,
            "tools_reused": self.tools_reused,
        }


@dataclass
class ArmOutcome:
    """One arm of one scenario: the failed message's calls, then the calls after it."""

    arm: str  # "off" or "on"
    action: str  # e.g. "re-send", "replay + resume", "inspect, replay", "2 replays"
    calls: list[ModelCall] = field(default_factory=list)
    problem: str | None = None  # why this arm did not reach the expected value
    restarted: bool = False  # the kernel was restarted between the failure and the fix

    @property
    def failed(self) -> list[ModelCall]:
        return [call for call in self.calls if call.role == "failed"]

    @property
    def fixes(self) -> list[ModelCall]:
        """Every call sent after the failure or the cut: fixes, and an inspection before
        them."""
        return [call for call in self.calls if call.role not in ("failed", "cut")]

    @property
    def replays(self) -> list[ModelCall]:
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
    def fix_tool_calls(self) -> int:
        """Host tool calls the fixes made again (live)."""
        return sum(call.tool_calls for call in self.fixes)

    @property
    def fix_tools_reused(self) -> int:
        return sum(call.tools_reused for call in self.fixes)

    @property
    def failed_tool_calls(self) -> int:
        """Host tool calls of the failed message, before its programs failed."""
        return sum(call.tool_calls for call in self.failed)

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
            "failed_tool_calls": self.failed_tool_calls,
            "fix_tool_calls": self.fix_tool_calls,
            "fix_tools_reused": self.fix_tools_reused,
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
class CutOutcome:
    """Both arms of one cut-off call, played with one id shape: ``regenerate`` (the loop
    drops the cut call and the model writes it whole again) and ``extend`` (the model
    sends the rest of the program after the part the backend saved)."""

    cut: CutOff
    regenerate: ArmOutcome
    extend: ArmOutcome
    id_shape: str = ID_SHAPES[0].name

    @property
    def agree(self) -> bool:
        """Both arms ran the whole program and it gave the same output and value."""
        return self.regenerate.problem is None and self.extend.problem is None

    @property
    def arrived(self) -> ModelCall | None:
        """The call as far as it arrived."""
        cut = [call for call in self.extend.calls if call.role == "cut"]
        return cut[0] if cut else None


@dataclass
class ShapeRun:
    """Every scenario played with one id shape, and what the ON model was told once."""

    shape: IdShape
    outcomes: list[Outcome]
    prompt: str  # the prompt section the ON model was given
    session_dir: str  # where the ON kernel saved the programs (gone after the run)
    tools_prompt: str | None = None  # the prompt section with the host tools, if played
    cut_outcomes: list[CutOutcome] = field(default_factory=list)


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


def rest_literal(text: str) -> str:
    """The rest of a cut-off program as the Python string literal a model writes code in: a
    raw triple-quoted string, which holds the code as it reads (``r'''...'''``, or the
    same in double quotes when the code holds three single quotes); an escaped one-line
    ``literal`` when neither can hold it."""
    for quotes in ("'''", '"""'):
        shown = f"r{quotes}{text}{quotes}"
        try:
            if ast.literal_eval(shown) == text:
                return shown
        except (SyntaxError, ValueError):
            pass
    return literal(text)


def extend_line(target: str, rest: str) -> str:
    """The one call a cut-off call's notice teaches, with the rest of the program."""
    return f"await ptc_retry.extend({json.dumps(target)}, {rest_literal(rest)})"
