"""OpenTelemetry in the kernel: the spans of a program whose request carried a W3C
``traceparent`` (``KernelBackend`` sends one while it records spans), beneath the backend's
span of the call: ``ptc_retry.save`` (the checkpoint written before the program runs),
``ptc_retry.run`` (the program, to its end) and, beneath that, one ``ptc_retry.tool_call``
for each host tool call and each ``@ptc_retry.recorded`` call, reused or made live.

This is the one module of the kernel side that touches OpenTelemetry. The kernel exports
only through a tracer provider configured in its own process (docs/operators.md: a startup
file that sets up the SDK and an exporter). Whether there is one is decided once, at the
first request that brings a trace context (``program_trace``); without a trace context, or
without a configured provider, nothing is imported and a program has no ``ProgramTrace``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from ..core.contained import Contained
from ..core.protocol import TRACE_FIELDS, TRACEPARENT
from ..core.status import HistoryStatus

if TYPE_CHECKING:
    from ..core.store import Call
    from .call_lines import CallRecord
    from .requests import Request

__all__ = ["ProgramTrace", "program_trace"]

#: The instrumentation scope of the kernel's spans.
SCOPE = "ptc_retry.kernel"
#: The kernel's tracer once decided: [] before the first traced request, [None] without one.
_TRACER: list[Any] = []
#: Every call into OpenTelemetry goes through it: what a tracer provider, span processor or
#: exporter raises is logged (at INFO: never into a cell's output, which the model reads)
#: and fails no program or tool call.
_otel = Contained(logging.getLogger(__name__), logging.INFO)


@_otel.method(default=None)
def program_trace(request: Request) -> ProgramTrace | None:
    """The trace of the program ``request`` runs; None when it brought no trace context or
    this kernel has no tracer provider configured."""
    if request.fields.get(TRACEPARENT) is None:
        return None
    tracer = _tracer()
    if tracer is None:
        return None
    carrier = {key: request.fields[key] for key in TRACE_FIELDS if key in request.fields}
    program = ProgramTrace(tracer, carrier)
    # A context that names no span (a malformed traceparent) would start traces of their
    # own, which no trace of the agent's holds: none is made.
    return program if program.has_parent else None


def _tracer() -> Any:
    """The kernel's tracer, decided once: None unless an SDK's provider was set in this
    process (the API's module is then imported already; nothing is imported here)."""
    if not _TRACER:
        module = sys.modules.get("opentelemetry.trace")
        provider = module.get_tracer_provider() if module is not None else None
        # The API's defaults (a proxy until an SDK is set, or a no-op) record nothing.
        no_op = type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider")
        _TRACER.append(None if provider is None or no_op else provider.get_tracer(SCOPE))
        if _TRACER[0] is not None:
            _log_outside_cells()
    return _TRACER[0]


def _log_outside_cells() -> None:
    """Keep OpenTelemetry's own log records (an exporter whose collector is down, a
    tracestate it drops) out of the cells' output, which the model reads: with no handler of
    its own, a record would reach Python's last-resort handler, ``sys.stderr``, which in a
    kernel is the running cell's. They go to the kernel process's own stderr instead, its
    log (or nowhere, where that cannot be had), unless the kernel's environment gave the
    logger a handler."""
    import io
    import logging
    import os

    logger = logging.getLogger("opentelemetry")
    if logger.handlers:
        return
    try:
        # In ipykernel, sys.stderr's file descriptor is a copy of the process's own stderr,
        # which no cell captures.
        stream: Any = open(os.dup(sys.stderr.fileno()), "w", buffering=1, errors="replace")
    except (OSError, ValueError, io.UnsupportedOperation):
        stream = None
    logger.addHandler(logging.StreamHandler(stream) if stream else logging.NullHandler())
    logger.propagate = False


class ProgramTrace:
    """The spans of one program (the outermost program of a traced request)."""

    def __init__(self, tracer: Any, carrier: dict[str, str]) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()
        self._parent = self._propagator.extract(carrier)
        self._run: Any = None
        self._calls: dict[int, Any] = {}  # the live tool calls' spans, by their k

    @property
    def has_parent(self) -> bool:
        """Whether the trace context names a span: the parent of the program's spans."""
        from opentelemetry import trace

        return bool(trace.get_current_span(self._parent).get_span_context().is_valid)

    @_otel.method()
    def saved(self, started_ns: int, call: Call | None) -> None:
        """The program was saved (``call``; None: it could not be) since ``started_ns``."""
        span = self._tracer.start_span(
            "ptc_retry.save", context=self._parent, start_time=started_ns
        )
        span.set_attribute("ptc_retry.saved", call is not None)
        if call is not None:
            span.set_attributes(_call_attributes(call))
            span.set_attribute("ptc_retry.bytes", call.bytes)
        span.end()

    @_otel.method()
    def run_started(self, call: Call | None) -> None:
        """The program starts to run: the span its tool calls come beneath."""
        self._run = self._tracer.start_span("ptc_retry.run", context=self._parent)
        if call is not None:
            self._run.set_attributes(_call_attributes(call))

    @_otel.method()
    def run_ended(
        self,
        call: Call | None,
        status: HistoryStatus,
        error: BaseException | None,
        tool_calls: dict[str, int] | None,
    ) -> None:
        """The program ended with ``status`` (``error``: what stopped it, if anything)."""
        span = self._run
        if span is None:
            return
        self._run = None
        if call is not None:
            span.set_attributes(_call_attributes(call))
            for key in ("replay_of", "extend_of"):
                if getattr(call, key) is not None:
                    span.set_attribute(f"ptc_retry.{key}", getattr(call, key))
        span.set_attribute("ptc_retry.status", status.value)
        for key, count in (tool_calls or {}).items():
            span.set_attribute(f"ptc_retry.tool_calls.{key}", count)
        # A pause for a person's approval stops the program with an exception, and fails not.
        if error is not None and status not in (HistoryStatus.OK, HistoryStatus.PAUSED):
            _failed(span, type(error).__name__)
        span.end()

    @_otel.method()
    def tool_call_started(self, record: CallRecord) -> None:
        """A live call starts (its span ends with ``tool_call_ended``)."""
        self._calls[record.k] = self._tool_span(record, reused=False)

    @_otel.method()
    def tool_call_reused(self, record: CallRecord) -> None:
        """A call given its recorded result: a span of no length, marked reused."""
        span = self._tool_span(record, reused=True)
        span.set_attribute("ptc_retry.tool_call.reused_from", str(record.reused_from))
        span.end()

    @_otel.method()
    def tool_call_ended(self, record: CallRecord, ename: str | None) -> None:
        """A live call ended: ok, or failed with ``ename``."""
        span = self._calls.pop(record.k, None)
        if span is None:
            return
        if record.reused_from is not None:  # the host gave it an earlier call's outcome
            span.set_attribute("ptc_retry.tool_call.reused", True)
            span.set_attribute("ptc_retry.tool_call.reused_from", str(record.reused_from))
        if record.ok is False:
            _failed(span, ename or "ToolError")
        span.end()

    @_otel.method(default={})
    def tool_call_context(self, record: CallRecord) -> dict[str, str]:
        """The trace context of a live call's span, for its entry in the tool request: the
        host's span of the call comes beneath it."""
        span = self._calls.get(record.k)
        if span is None:
            return {}
        from opentelemetry import trace

        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, trace.set_span_in_context(span))
        return carrier

    def _tool_span(self, record: CallRecord, *, reused: bool) -> Any:
        from opentelemetry import trace

        parent = trace.set_span_in_context(self._run) if self._run is not None else self._parent
        return self._tracer.start_span(
            f"ptc_retry.tool_call {record.tool}",
            context=parent,
            attributes={
                "gen_ai.tool.name": record.tool,
                "ptc_retry.tool_call.k": record.k,
                "ptc_retry.tool_call.reused": reused,
            },
        )


def _call_attributes(call: Call) -> dict[str, Any]:
    return {"ptc_retry.call_id": call.id, "ptc_retry.reference": call.reference}


def _failed(span: Any, ename: str) -> None:
    """Status, ``error.type`` and an ``exception`` event with the type only: the message may
    quote the program's data."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, ename))
    span.set_attribute("error.type", ename)
    span.add_event("exception", {"exception.type": ename})


def now_ns() -> int:
    """The clock the SDK stamps spans with, for a span that starts before it is made."""
    return time.time_ns()
