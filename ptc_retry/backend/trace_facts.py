"""What a program's trace reports (docs/operators.md): the ``ptc_retry.*`` attributes of its
span, what a call that is not the model's ``run_code`` as sent is (``Operation``), and the
backend's instruments. ``tracing.py`` makes the spans and calls everything here that touches
OpenTelemetry (``Metrics``) through its containment."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.status import Refusal, ResultStatus

if TYPE_CHECKING:
    from .results import RunResult

__all__ = [
    "BYTES_PER_TOKEN",
    "COUNTERS",
    "EXECUTE_TOOL",
    "SCOPE",
    "Operation",
    "described",
]

#: The instrumentation scope of every span and metric the backend makes.
SCOPE = "ptc_retry"
#: The GenAI conventions' operation name of a tool execution.
EXECUTE_TOOL = "execute_tool"
#: UTF-8 bytes per cl100k_base token of a ``run_code`` call's arguments, measured on the 26
#: programs of the evaluation's scenarios (154,844 bytes, 54,489 tokens): the estimate behind
#: ``ptc_retry.tokens_saved``, made without a tokenizer.
BYTES_PER_TOKEN = 2.84


@dataclass(frozen=True)
class Operation:
    """What the backend runs a program for when it is not the model's ``run_code`` call as
    sent (see ``described``): a person's decision on a paused program, a native-mode edit."""

    operation: str  # its ptc_retry.operation
    span_name: str
    link: str  # the attribute naming ``of`` (``ptc_retry.<link>``), and its link's kind
    of: str  # the call it goes on from, or fixes: its span is linked
    tool: str | None = None  # the model's tool it is a call of; None: no call of the model's
    sent_bytes: int | None = None  # the bytes the model sent for it; None: it sent nothing
    whole_bytes: int | None = None  # the bytes re-sending the whole call would have taken
    attributes: Mapping[str, Any] = field(default_factory=dict)


DESCRIBED: ContextVar[Operation | None] = ContextVar("ptc_retry_operation", default=None)


@contextmanager
def described(operation: Operation) -> Iterator[None]:
    """The program the backend's ``run_code`` runs in this context is ``operation``."""
    token = DESCRIBED.set(operation)
    try:
        yield
    finally:
        DESCRIBED.reset(token)


def failed(result: RunResult) -> bool:
    """Whether the program failed: a call cut off mid-stream ran nothing, and one paused for
    a person's approval waits; neither failed."""
    return result.status not in (ResultStatus.OK, ResultStatus.PARTIAL, ResultStatus.PAUSED)


def linked(facts: dict[str, Any], operation: Operation | None) -> tuple[str, Any]:
    """The kind of the link a program's span has, and the call id of the span it links to."""
    if operation is not None:
        return operation.link, operation.of
    if "ptc_retry.replay_of" in facts:
        return "replay_of", facts["ptc_retry.replay_of"]
    return "extend_of", facts.get("ptc_retry.extend_of")


def facts_of(
    result: RunResult, sent_bytes: int | None, operation: Operation | None = None
) -> dict[str, Any]:
    """The ``ptc_retry.*`` attributes of a program's result (docs/operators.md)."""
    metadata = result.metadata or {}
    facts: dict[str, Any] = {
        "ptc_retry.status": result.status.value,
        "ptc_retry.operation": _operation(result, metadata, operation),
        "ptc_retry.restarted": result.restarted,
    }
    if result.status == ResultStatus.REFUSED:  # the kernel's repeated-failure guard
        facts["ptc_retry.refusal"] = Refusal.GUARD.value
    if sent_bytes is not None:
        facts["ptc_retry.bytes_sent"] = sent_bytes
    for key, value in (("call_id", result.call_id), ("reference", result.reference)):
        if value is not None:
            facts[f"ptc_retry.{key}"] = value
    for key in ("replay_of", "extend_of", "resumed_from"):
        if isinstance(metadata.get(key), (str, int)):
            facts[f"ptc_retry.{key}"] = metadata[key]
    if operation is not None:
        facts[f"ptc_retry.{operation.link}"] = operation.of
        saved_bytes, saving = operation.whole_bytes, operation.whole_bytes is not None
    else:
        saved_bytes = metadata.get("bytes")
        saving = "replay_of" in metadata or "extend_of" in metadata
    if isinstance(saved_bytes, int) and isinstance(sent_bytes, int) and saving:
        saved = max(0, saved_bytes - sent_bytes)  # what a re-send of the whole call would cost
        facts["ptc_retry.bytes_saved"] = saved
        facts["ptc_retry.tokens_saved"] = round(saved / BYTES_PER_TOKEN)
    tool_calls = metadata.get("tool_calls")
    if isinstance(tool_calls, dict):
        for key in ("reused", "live"):
            if isinstance(tool_calls.get(key), int):
                facts[f"ptc_retry.tool_calls.{key}"] = tool_calls[key]
    guard = metadata.get("guard")
    if isinstance(guard, dict):
        facts["ptc_retry.guard.paused"] = bool(guard.get("paused"))
        if isinstance(guard.get("count"), int):
            facts["ptc_retry.guard.count"] = guard["count"]
    return facts


def _operation(
    result: RunResult, metadata: dict[str, Any], operation: Operation | None = None
) -> str:
    """What the call was: ``run_code``, ``replay``, ``resume``, ``extend`` or ``partial``,
    else what ``operation`` says it is."""
    if operation is not None:
        return operation.operation
    if result.status == ResultStatus.PARTIAL:
        return "partial"
    if "extend_of" in metadata:
        return "extend"
    if "replay_of" in metadata:
        return "resume" if metadata.get("resumed_from") else "replay"
    return "run_code"


#: The backend's counters (docs/operators.md, Metrics): name -> (unit, description).
COUNTERS = {
    "ptc_retry.calls": ("{call}", "Calls run or refused, by status and operation or refusal."),
    "ptc_retry.replays": ("{call}", "Replays, resumes, extends and edits: programs not re-sent."),
    "ptc_retry.bytes_saved": ("By", "Bytes the model did not re-send."),
    "ptc_retry.tokens_saved": ("{token}", "Tokens the model did not re-send (estimated)."),
    "ptc_retry.tool_calls": ("{call}", "Tool calls of programs, reused or made live."),
}


class Metrics:
    """The backend's instruments: ``COUNTERS`` and the GenAI conventions' duration."""

    def __init__(self, meters: Any) -> None:
        meter = meters.get_meter(SCOPE)
        self.duration = meter.create_histogram(
            "gen_ai.execute_tool.duration", unit="s", description="Duration of tool executions."
        )
        self.counters = {
            name: meter.create_counter(name, unit=unit, description=description)
            for name, (unit, description) in COUNTERS.items()
        }

    def record(self, result: RunResult, facts: dict[str, Any], tool: str | None) -> None:
        """One program's points; ``tool``: the model's tool it was a call of (None: none)."""
        error_type = (result.ename or result.status.value) if failed(result) else None
        self.record_facts(facts, tool, result.duration, error_type)

    def record_facts(
        self, facts: dict[str, Any], tool: str | None, duration: float, error_type: str | None
    ) -> None:
        """One call's points from its ``facts`` (``facts_of``): ``tool`` as for :meth:`record`,
        ``duration`` in seconds, ``error_type`` when it failed."""
        add = {name: counter.add for name, counter in self.counters.items()}
        operation = facts["ptc_retry.operation"]
        labels = {"ptc_retry.status": facts["ptc_retry.status"], "ptc_retry.operation": operation}
        if "ptc_retry.refusal" in facts:
            labels["ptc_retry.refusal"] = facts["ptc_retry.refusal"]
        add["ptc_retry.calls"](1, labels)
        if tool is not None:  # a tool execution of the model's (an approval's is not)
            timing = {"gen_ai.operation.name": EXECUTE_TOOL, "gen_ai.tool.name": tool}
            if error_type is not None:
                timing["error.type"] = error_type
            self.duration.record(duration, timing)
        if operation in ("replay", "resume", "extend", "edit"):
            add["ptc_retry.replays"](1, {"ptc_retry.operation": operation})
        if "ptc_retry.bytes_saved" in facts:
            add["ptc_retry.bytes_saved"](facts["ptc_retry.bytes_saved"])
            add["ptc_retry.tokens_saved"](facts["ptc_retry.tokens_saved"])
        for how in ("reused", "live"):
            count = facts.get(f"ptc_retry.tool_calls.{how}")
            if count:
                add["ptc_retry.tool_calls"](count, {"ptc_retry.tool_call.reused": how == "reused"})

    def refused(self, refusal: Refusal) -> None:
        """A call of the model's the backend refused: nothing ran."""
        labels = {
            "ptc_retry.status": ResultStatus.REFUSED.value,
            "ptc_retry.refusal": refusal.value,
        }
        self.counters["ptc_retry.calls"].add(1, labels)
