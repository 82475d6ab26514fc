"""OpenTelemetry on the backend's side (the ``otel`` extra): one ``execute_tool`` span per
program the backend sends, the trace context that goes into the kernel with it, a span for
each host tool call the kernel asks for, and the counters of docs/operators.md.

This is the one module of the backend that touches OpenTelemetry. Whether it reports is
decided once, when a ``KernelBackend`` is made (``Tracing``): with no provider given and
none configured in the process (``opentelemetry`` not even imported, or only its no-op
defaults), every call goes through ``NO_TRACE`` and ``NO_HOST_SPAN``, which do nothing,
and no request carries a ``traceparent``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.contained import Contained
from ..core.protocol import TRACE_FIELDS
from ..core.status import Refusal, ResultStatus
from .trace_facts import (
    BYTES_PER_TOKEN,
    DESCRIBED,
    EXECUTE_TOOL,
    SCOPE,
    Metrics,
    Operation,
    described,
    facts_of,
    failed,
)
from .trace_facts import linked as linked_span

if TYPE_CHECKING:
    from .results import RunResult

__all__ = [
    "BYTES_PER_TOKEN",
    "NO_HOST_SPAN",
    "NO_TRACE",
    "CallTrace",
    "HostSpan",
    "Operation",
    "Telemetry",
    "Tracing",
    "described",
]

#: How many recent programs' spans a later replay can link to.
_LINKABLE = 256
#: Every call into OpenTelemetry goes through it: an SDK or exporter that raises is logged
#: and fails no call of the backend.
_otel = Contained(logging.getLogger(__name__))


@dataclass(frozen=True)
class Telemetry:
    """How a ``KernelBackend`` reports to OpenTelemetry (``KernelBackend(telemetry=...)``).

    ``tracer_provider`` / ``meter_provider``: where spans and metrics go; None (the default)
    means the process's global providers, as the application configured them before the
    backend was made. ``record_program``: also put each program's arguments (its text) on
    its span as ``gen_ai.tool.call.arguments``, and exception messages on failed spans. Off
    by default: programs and tool arguments may hold anything a model wrote or read.
    """

    tracer_provider: Any = None
    meter_provider: Any = None
    record_program: bool = False


@_otel.method(default=None)
def _configured(module_name: str, provider: Any, getter: str, no_ops: tuple[str, ...]) -> Any:
    """``provider``, else the global one of ``module_name`` when the application set one;
    None when it set none. Nothing is imported: an application that configured an SDK has
    imported the API's module already."""
    if provider is not None:
        return provider
    module = sys.modules.get(module_name)
    if module is None:
        return None
    found = getattr(module, getter)()
    # The API's defaults (a proxy until an SDK is set, or a no-op) record nothing.
    return None if type(found).__name__ in no_ops else found


class Tracing:
    """A backend's spans and metrics, decided once from ``telemetry`` (see the module)."""

    def __init__(self, telemetry: Telemetry | None) -> None:
        telemetry = telemetry or Telemetry()
        self.record_program = telemetry.record_program
        tracers = _configured(
            "opentelemetry.trace",
            telemetry.tracer_provider,
            "get_tracer_provider",
            ("ProxyTracerProvider", "NoOpTracerProvider"),
        )
        meters = _configured(
            "opentelemetry.metrics",
            telemetry.meter_provider,
            "get_meter_provider",
            ("_ProxyMeterProvider", "NoOpMeterProvider"),
        )
        self._tracer = _otel.call(tracers.get_tracer, SCOPE) if tracers is not None else None
        self._metrics = _otel.call(Metrics, meters) if meters is not None else None
        #: The span context of each recent program, by checkpoint id, for a replay's link.
        self._spans: OrderedDict[str, Any] = OrderedDict()

    @property
    def active(self) -> bool:
        """Whether anything is reported at all."""
        return self._tracer is not None or self._metrics is not None

    def call(self, request: dict[str, Any], code: str) -> CallTrace:
        """The trace of one program sent with ``metadata["ptc_retry"] = request``:
        ``NO_TRACE`` when nothing is reported."""
        if not self.active:
            return NO_TRACE
        return _CallTrace(self, request, code)

    def host_call(self, call: dict[str, Any]) -> HostSpan:
        """The span of one host tool call the kernel asked for (``call``, an entry of its
        tool request): beneath the kernel's span of the call when the kernel sent its
        trace context, else beneath the program's span (the current one)."""
        if self._tracer is None:
            return NO_HOST_SPAN
        return _HostSpan(self._tracer, call)

    def refused(self, tool: str, call_id: str | None, refusal: Refusal) -> None:
        """The backend refused a call of the model's (``refusal`` says why): nothing ran. Its
        span, of no length, fails with the refusal as its type; ``ptc_retry.calls`` counts it."""
        if self._tracer is not None:
            _otel.call(_refused_span, self._tracer, tool, call_id, refusal)
        if self._metrics is not None:
            _otel.call(self._metrics.refused, refusal)

    @contextmanager
    def native_tool(
        self,
        tool: str,
        call_id: str | None,
        arguments: dict[str, Any],
        operation: Operation | None = None,
    ) -> Iterator[None]:
        """One call of a tool registered on ``kb.native`` (``run_code``'s programs have
        their own spans): an ``execute_tool <tool>`` span, current while the tool runs and
        failed with the type of what it raised; for an edit's re-run (``operation``), the
        edit's span, linked to the call it fixes. Its points go to the counters."""
        if not self.active:
            yield
            return
        started = time.monotonic()
        span = _otel.call(self._start_native, tool, call_id, arguments, operation)
        used = _otel.call(_made_current, span) if span is not None else None
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            if used is not None:
                _otel.call(used.__exit__, None, None, None)
            facts = _native_facts(call_id, error, operation)
            if span is not None:
                _otel.call(self._end_native, span, call_id, facts, error, operation)
            if self._metrics is not None:
                ename = None if error is None else _ename(error)
                duration = time.monotonic() - started
                _otel.call(self._metrics.record_facts, facts, tool, duration, ename)

    def cut_off(self, tool: str, call_id: str) -> None:
        """A native call cut off mid-stream was saved (nothing ran): a span of no length with
        status ``partial``, which the completion's span links to; ``ptc_retry.calls`` counts it."""
        facts = {
            "ptc_retry.status": ResultStatus.PARTIAL.value,
            "ptc_retry.operation": "partial",
            "ptc_retry.call_id": call_id,
        }
        if self._tracer is not None:
            span = _otel.call(self._start_native, tool, call_id, {}, None)
            if span is not None:
                _otel.call(self._end_native, span, call_id, facts, None, None)
        if self._metrics is not None:
            _otel.call(self._metrics.record_facts, facts, None, 0.0, None)

    def _start_native(
        self, tool: str, call_id: str | None, arguments: dict[str, Any], operation: Operation | None
    ) -> Any:
        if self._tracer is None:
            return None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": EXECUTE_TOOL,
            "gen_ai.tool.name": tool if operation is None else operation.tool,
            "gen_ai.tool.type": "function",
        }
        if call_id is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        if operation is not None:
            attributes |= operation.attributes
        if self.record_program and arguments:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(
                arguments, ensure_ascii=False, default=str
            )
        name = f"{EXECUTE_TOOL} {tool}" if operation is None else operation.span_name
        return self._tracer.start_span(name, attributes=attributes)

    def _end_native(
        self,
        span: Any,
        call_id: str | None,
        facts: dict[str, Any],
        error: BaseException | None,
        operation: Operation | None,
    ) -> None:
        span.set_attributes(facts)
        earlier = self._spans.get(operation.of) if operation is not None else None
        if operation is not None and earlier is not None:
            span.add_link(earlier, {"ptc_retry.link": operation.link})
        if error is not None:
            message = str(error) if self.record_program else None
            _set_error(span, _ename(error), message)
        span.end()
        self._remember(call_id, span)

    @_otel.method()
    def _remember(self, call_id: str | None, span: Any) -> None:
        if call_id is None:
            return
        self._spans[call_id] = span.get_span_context()
        self._spans.move_to_end(call_id)
        while len(self._spans) > _LINKABLE:
            self._spans.popitem(last=False)


class CallTrace:
    """What the backend does with one program's trace; this base does nothing."""

    def __enter__(self) -> CallTrace:
        return self

    def __exit__(self, etype: Any, error: Any, tb: Any) -> None:
        return None

    def context(self) -> dict[str, str]:
        """The fields that carry the trace context into the kernel (``traceparent``, and
        ``tracestate`` when there is one); empty when no span records."""
        return {}

    def ended(self, result: RunResult) -> None:
        """The program gave ``result``."""


#: The trace of a call while nothing is reported.
NO_TRACE = CallTrace()


class _CallTrace(CallTrace):
    """One program's ``execute_tool`` span (made current while it runs, so that the host
    tool calls it makes come beneath it) and its measurements."""

    def __init__(self, tracing: Tracing, request: dict[str, Any], code: str) -> None:
        self._tracing = tracing
        self._request = request
        self._span: Any = None
        self._used: Any = None
        self._operation = operation = DESCRIBED.get()
        # What the model sent for this call: the measure of what a replay saved against it.
        self._sent_bytes: int | None
        if operation is not None:
            self._sent_bytes = operation.sent_bytes
        else:
            self._sent_bytes = len((request.get("arguments") or _as_call(code)).encode("utf-8"))
        self._tool = tool = request.get("tool", "run_code") if operation is None else operation.tool
        tracer = tracing._tracer
        if tracer is not None:
            self._span = _otel.call(
                tracer.start_span,
                f"{EXECUTE_TOOL} {tool}" if operation is None else operation.span_name,
                attributes=self._start_attributes(code, tool),
            )

    def _start_attributes(self, code: str, tool: str | None) -> dict[str, Any]:
        request = self._request
        attributes: dict[str, Any] = {"ptc_retry.turn": request.get("turn", 0)}
        if tool is not None:  # a call of the model's tool
            attributes |= {
                "gen_ai.operation.name": EXECUTE_TOOL,
                "gen_ai.tool.name": tool,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": request["call_id"],
            }
        if self._operation is not None:
            attributes |= self._operation.attributes
        if isinstance(request.get("step"), int):
            attributes["ptc_retry.step"] = request["step"]
        if self._tracing.record_program:
            attributes["gen_ai.tool.call.arguments"] = request.get("arguments") or _as_call(code)
        return attributes

    def __enter__(self) -> CallTrace:
        self._make_current()
        return self

    @_otel.method()
    def _make_current(self) -> None:
        if self._span is not None:
            from opentelemetry import trace

            used = trace.use_span(self._span, end_on_exit=False)
            used.__enter__()
            self._used = used

    @_otel.method()
    def __exit__(self, etype: Any, error: Any, tb: Any) -> None:
        if self._used is not None:
            used, self._used = self._used, None
            used.__exit__(None, None, None)
        span = self._span
        if span is None:
            return
        if error is not None:  # the call raised (BackendError, a cancellation): no result
            _set_error(span, type(error).__name__, self._message(str(error)))
        span.end()

    @_otel.method(default={})
    def context(self) -> dict[str, str]:
        if self._span is None:
            return {}
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        scope = trace.set_span_in_context(self._span, context.get_current())
        TraceContextTextMapPropagator().inject(carrier, scope)
        return {key: value for key, value in carrier.items() if key in TRACE_FIELDS}

    def ended(self, result: RunResult) -> None:
        facts = facts_of(result, self._sent_bytes, self._operation)
        metrics = self._tracing._metrics
        if metrics is not None:
            _otel.call(metrics.record, result, facts, self._tool)
        self._annotate(result, facts)

    @_otel.method()
    def _annotate(self, result: RunResult, facts: dict[str, Any]) -> None:
        span = self._span
        if span is None:
            return
        span.set_attributes(facts)
        kind, linked = linked_span(facts, self._operation)
        earlier = self._tracing._spans.get(linked) if isinstance(linked, str) else None
        if earlier is not None:
            span.add_link(earlier, {"ptc_retry.link": kind})
        if failed(result):
            ename = result.ename or result.status.value
            _set_error(span, ename, self._message(result.evalue))
        self._tracing._remember(result.call_id, span)

    def _message(self, text: str | None) -> str | None:
        return text if self._tracing.record_program else None


def _made_current(span: Any) -> Any:
    """``span`` made the current one: the context manager that stops that."""
    from opentelemetry import trace

    used = trace.use_span(span, end_on_exit=False)
    used.__enter__()
    return used


def _ename(error: BaseException) -> str:
    """The error type a span names: a ToolFailure's own (the model reads it), else the class's."""
    ename = getattr(error, "ename", None)
    return ename if isinstance(ename, str) and ename else type(error).__name__


def _native_facts(
    call_id: str | None, error: BaseException | None, operation: Operation | None
) -> dict[str, Any]:
    """The ``ptc_retry.*`` attributes of one call of a ``kb.native`` tool (see ``facts_of``)."""
    status = ResultStatus.OK if error is None else ResultStatus.ERROR
    facts: dict[str, Any] = {
        "ptc_retry.status": status.value,
        "ptc_retry.operation": "native_tool" if operation is None else operation.operation,
    }
    if call_id is not None:
        facts["ptc_retry.call_id"] = call_id
    if operation is not None:
        facts[f"ptc_retry.{operation.link}"] = operation.of
        if operation.whole_bytes is not None and operation.sent_bytes is not None:
            facts["ptc_retry.bytes_sent"] = operation.sent_bytes
            saved = max(0, operation.whole_bytes - operation.sent_bytes)
            facts["ptc_retry.bytes_saved"] = saved
            facts["ptc_retry.tokens_saved"] = round(saved / BYTES_PER_TOKEN)
    return facts


def _refused_span(tracer: Any, tool: str, call_id: str | None, refusal: Refusal) -> None:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": EXECUTE_TOOL,
        "gen_ai.tool.name": tool,
        "gen_ai.tool.type": "function",
        "ptc_retry.status": ResultStatus.REFUSED.value,
        "ptc_retry.refusal": refusal.value,
    }
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    span = tracer.start_span(f"{EXECUTE_TOOL} {tool}", attributes=attributes)
    _set_error(span, refusal.value, None)
    span.end()


def _set_error(span: Any, ename: str, message: str | None) -> None:
    """The span failed with an error of type ``ename``: its status, ``error.type`` and an
    ``exception`` event (its message only when the option records program text)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, ename))
    span.set_attribute("error.type", ename)
    event = {"exception.type": ename}
    if message:
        event["exception.message"] = message
    span.add_event("exception", event)


def _as_call(code: str) -> str:
    import json

    return json.dumps({"code": code}, ensure_ascii=False)


class HostSpan:
    """The span of one host tool call; this base records nothing."""

    @contextmanager
    def running(self) -> Iterator[None]:
        """While the tool runs; an exception it raises marks the span failed."""
        yield

    def failed(self, ename: str) -> None:
        """The call failed: the tool raised ``ename``, or was refused (``ToolError``)."""


#: The span of a host tool call while no span is recorded.
NO_HOST_SPAN = HostSpan()


class _HostSpan(HostSpan):
    def __init__(self, tracer: Any, call: dict[str, Any]) -> None:
        self._tracer = tracer
        self._call = call
        self._span: Any = None

    @contextmanager
    def running(self) -> Iterator[None]:
        # The tool's own exceptions go through as they came; the span's, nowhere.
        used = _otel.call(self._start)
        try:
            yield
        finally:
            if used is not None:
                _otel.call(used.__exit__, None, None, None)

    def _start(self) -> Any:
        """The span, started and made current: the context manager that ends it."""
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        call = self._call
        carrier = {key: call[key] for key in TRACE_FIELDS if isinstance(call.get(key), str)}
        parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
        tool = str(call.get("tool"))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": EXECUTE_TOOL,
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
        }
        if isinstance(call.get("program"), str) and isinstance(call.get("k"), int):
            attributes["gen_ai.tool.call.id"] = f"{call['program']}:{call['k']}"
            attributes["ptc_retry.program"] = call["program"]
            attributes["ptc_retry.tool_call.k"] = call["k"]
        used = self._tracer.start_as_current_span(
            f"{EXECUTE_TOOL} {tool}",
            context=parent,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = used.__enter__()
        return used

    @_otel.method()
    def failed(self, ename: str) -> None:
        if self._span is not None:
            _set_error(self._span, ename, None)  # never the tool's arguments or message
