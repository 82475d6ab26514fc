"""OpenTelemetry traces and metrics (docs/operators.md), on real kernels, local and through a
real Kernel Gateway: the backend's spans go to the SDK's in-memory exporter, the kernel's (set
up by tests/otel_kernel_startup.py, an IPython startup file) to a file the tests read."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "opentelemetry.sdk", reason="the trace tests need opentelemetry-sdk (the test extra)"
)

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from ptc_retry.backend import KernelBackend, RunResult, Telemetry  # noqa: E402
from ptc_retry.backend.tracing import BYTES_PER_TOKEN, NO_TRACE, Tracing  # noqa: E402
from ptc_retry.core.protocol import (  # noqa: E402
    METADATA_KEY,
    TRACEPARENT,
    TRACESTATE,
    execute_request,
)

from .gateway_server import KERNEL_GATEWAY, Gateway, gateway_of, start_gateway  # noqa: E402
from .helpers import OnLoop, StartBackend, follow, raw  # noqa: E402

TRANSPORTS = ["local", KERNEL_GATEWAY]
#: Seconds within which each exchange of these tests must end.
BOUND = 40
#: Texts that only the program (and its tool call's arguments) hold.
PROGRAM_TEXT, ARGUMENT = "SECRET-PROGRAM-TEXT", "SECRET-ARGUMENT"
PROGRAM = f"""\
# {PROGRAM_TEXT}: a checkout whose tool call has a side effect on the host.
# It is long enough to be saved with a notice that offers the one-line replay.
@ptc_retry.recorded
def doubled(price):
    return price * 2

order = await tools.lookup(item="{ARGUMENT}")
total = doubled(order["price"])
print("per unit", total / 0)
"""
FIX = ("total / 0", "total / 1")
STARTUP = Path(__file__).with_name("otel_kernel_startup.py")


class Shop:
    """The agent's side: a tool whose every call is counted on the host."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def lookup(self, item: str) -> dict[str, Any]:
        """Look an item up (a paid API)."""
        self.calls["lookup"] += 1
        return {"item": item, "price": 7}

    def restock(self, item: str) -> str:
        """Order more of an item (its supplier's API is down)."""
        self.calls["restock"] += 1
        raise ConnectionError("the supplier did not answer")


@dataclass
class Telemetered:
    """A backend's telemetry and where it lands."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider

    def telemetry(self, **options: Any) -> Telemetry:
        meter_provider = MeterProvider(metric_readers=[self.metrics])
        return Telemetry(self.tracer_provider, meter_provider, **options)


def telemetered() -> Telemetered:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return Telemetered(spans, InMemoryMetricReader(), provider)


def traced_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An IPython directory whose startup file makes a kernel trace into ``spans.jsonl``."""
    directory = tmp_path_factory.mktemp("traced-ipython")
    startup = directory / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(STARTUP, startup / "00-otel.py")
    return directory


@pytest.fixture(scope="module")
def traced_ipython(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return traced_directory(tmp_path_factory)


@pytest.fixture(scope="module")
def kernel_gateway(
    roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, traced_ipython: Path
) -> Any:
    """A real Kernel Gateway whose kernels trace (their IPython directory is ``traced_ipython``)."""
    kind = KERNEL_GATEWAY
    workdir = tmp_path_factory.mktemp(kind)
    gateway = start_gateway(kind, roots[kind], workdir, env={"IPYTHONDIR": str(traced_ipython)})
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def options(
    transport: str, roots: dict[str, Path], traced_ipython: Path, request: pytest.FixtureRequest
) -> dict[str, Any]:
    if transport != "local":
        gateway: Gateway = gateway_of(transport, request)
        return gateway.backend_options()
    return {"root": roots["local"], "env": {"IPYTHONDIR": str(traced_ipython)}}


@pytest.fixture(scope="module")
def shop(transport: str) -> Shop:
    return Shop()


@pytest.fixture(scope="module")
def telemetry(transport: str) -> Telemetered:
    return telemetered()


@pytest.fixture(scope="module")
def backend(
    start_backend: StartBackend, shop: Shop, telemetry: Telemetered, options: dict[str, Any]
) -> KernelBackend:
    return start_backend(
        tools=[shop.lookup, shop.restock], telemetry=telemetry.telemetry(), **options
    )


@dataclass
class Fixed:
    """A failed program and its replay, sent within one span of the agent's turn."""

    failed: RunResult
    fixed: RunResult
    fix_call: str
    spans: list[dict[str, Any]]  # every span of the turn's trace: backend, kernel and host

    def named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]

    def children(self, parent: dict[str, Any], name: str | None = None) -> list[dict[str, Any]]:
        found = [s for s in self.spans if s["parent_id"] == parent["context"]["span_id"]]
        found.sort(key=lambda span: span["start_time"])
        return [span for span in found if name is None or span["name"] == name]

    def below(self, parent: dict[str, Any]) -> list[dict[str, Any]]:
        """Every span beneath ``parent``, at any depth."""
        found = self.children(parent)
        return [*found, *(span for child in found for span in self.below(child))]


def as_dicts(spans: Any) -> list[dict[str, Any]]:
    """Spans as the SDK writes them as JSON (the kernel's file holds the same)."""
    return [json.loads(span.to_json(indent=None)) for span in spans]


def kernel_spans(ipython: Path) -> list[dict[str, Any]]:
    path = ipython / "spans.jsonl"
    text = path.read_text("utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def fixed(
    backend: KernelBackend,
    telemetry: Telemetered,
    traced_ipython: Path,
    transport: str,
    on_loop: OnLoop[Any],
) -> Fixed:
    """The path the notice tells the model to take: the failed program, then its replay."""
    tracer = telemetry.tracer_provider.get_tracer("the agent")

    async def turn() -> tuple[RunResult, RunResult, str, str]:
        with tracer.start_as_current_span("agent turn") as span:
            await backend.handle_tool_call("run_code", raw(PROGRAM), f"{transport}-fail")
            failed = backend.last_result
            assert failed is not None and failed.notice is not None
            fix_call = follow(failed.notice, old=FIX[0], new=FIX[1])
            await backend.handle_tool_call("run_code", raw(fix_call), f"{transport}-fix")
            assert backend.last_result is not None
            trace_id = f"0x{span.get_span_context().trace_id:032x}"
            return failed, backend.last_result, fix_call, trace_id

    failed, fixed, fix_call, trace_id = on_loop(asyncio.wait_for(turn(), BOUND))
    everything = as_dicts(telemetry.spans.get_finished_spans()) + kernel_spans(traced_ipython)
    spans = [span for span in everything if span["context"]["trace_id"] == trace_id]
    return Fixed(failed, fixed, fix_call, spans)


def program_spans(fixed: Fixed) -> list[dict[str, Any]]:
    """The backend's spans of the two programs, beneath the agent's turn, in order."""
    (turn,) = fixed.named("agent turn")
    return fixed.children(turn, "execute_tool run_code")


def test_a_failed_program_and_its_replay_give_backend_kernel_and_host_tool_spans(
    fixed: Fixed,
) -> None:
    assert fixed.failed.status == "error" and fixed.fixed.status == "ok"
    assert "per unit 14.0" in fixed.fixed.text
    failed, replay = program_spans(fixed)
    for program in (failed, replay):
        assert [span["name"] for span in fixed.children(program)] == [
            "ptc_retry.save",
            "ptc_retry.run",
        ]
    (run,) = fixed.children(failed, "ptc_retry.run")
    calls = fixed.children(run)
    assert [span["name"] for span in calls] == [
        "ptc_retry.tool_call lookup",
        "ptc_retry.tool_call recorded:__main__.doubled",
    ]
    # The host's span of the call it made, beneath the kernel's span of that call.
    (host,) = fixed.children(calls[0])
    assert host["name"] == "execute_tool lookup"
    assert host["attributes"]["gen_ai.tool.name"] == "lookup"
    assert fixed.children(calls[1]) == []  # a function of the kernel: no host side


def test_the_replays_span_links_to_the_span_of_the_program_it_fixed(fixed: Fixed) -> None:
    failed, replay = program_spans(fixed)
    (link,) = replay["links"]
    assert link["context"]["span_id"] == failed["context"]["span_id"]
    assert link["attributes"] == {"ptc_retry.link": "replay_of"}
    assert failed["links"] == []


def test_the_spans_carry_the_genai_and_ptc_retry_attributes(fixed: Fixed, transport: str) -> None:
    failed, replay = program_spans(fixed)
    convention = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "run_code",
        "gen_ai.tool.type": "function",
    }
    assert failed["attributes"] | convention == failed["attributes"]
    assert failed["attributes"]["gen_ai.tool.call.id"] == f"{transport}-fail"
    assert replay["attributes"]["gen_ai.tool.call.id"] == f"{transport}-fix"
    assert {key: failed["attributes"].get(f"ptc_retry.{key}") for key in KEYS} == {
        "status": "error",
        "operation": "run_code",
        "call_id": fixed.failed.call_id,
        "reference": fixed.failed.reference,
        "replay_of": None,
        "tool_calls.live": 2,
        "tool_calls.reused": 0,
        "bytes_saved": None,
    }
    corrected = PROGRAM.replace(*FIX)
    saved = len(raw(corrected).encode()) - len(raw(fixed.fix_call).encode())
    assert {key: replay["attributes"].get(f"ptc_retry.{key}") for key in KEYS} == {
        "status": "ok",
        "operation": "replay",
        "call_id": fixed.fixed.call_id,
        "reference": fixed.fixed.reference,
        "replay_of": fixed.failed.call_id,
        "tool_calls.live": 0,
        "tool_calls.reused": 2,
        "bytes_saved": saved,
    }
    assert replay["attributes"]["ptc_retry.tokens_saved"] == round(saved / BYTES_PER_TOKEN)
    (run,) = fixed.children(replay, "ptc_retry.run")
    assert run["attributes"]["ptc_retry.replay_of"] == fixed.failed.call_id
    assert run["attributes"]["ptc_retry.status"] == "ok"


#: The ``ptc_retry.*`` attributes compared for each program's span.
KEYS = [
    "status",
    "operation",
    "call_id",
    "reference",
    "replay_of",
    "tool_calls.live",
    "tool_calls.reused",
    "bytes_saved",
]


def test_no_span_holds_the_program_or_the_tools_arguments(fixed: Fixed) -> None:
    assert len(fixed.spans) >= 12  # the turn, 2 programs, their saves, runs and calls, a host's
    for span in fixed.spans:
        written = json.dumps(span)
        assert PROGRAM_TEXT not in written and ARGUMENT not in written, span["name"]


def test_a_failure_sets_the_spans_status_to_the_exceptions_type(fixed: Fixed) -> None:
    failed, _ = program_spans(fixed)
    (run,) = fixed.children(failed, "ptc_retry.run")
    for span in (failed, run):
        assert span["status"] == {"status_code": "ERROR", "description": "ZeroDivisionError"}
        assert span["attributes"]["error.type"] == "ZeroDivisionError"
        (event,) = span["events"]
        assert event["name"] == "exception"
        assert event["attributes"] == {"exception.type": "ZeroDivisionError"}
    (save,) = fixed.children(failed, "ptc_retry.save")
    assert save["status"]["status_code"] == "UNSET"
    assert save["attributes"]["ptc_retry.saved"] is True


def test_a_tool_call_the_replay_reuses_is_marked_reused_and_not_made_on_the_host(
    fixed: Fixed, shop: Shop
) -> None:
    _, replay = program_spans(fixed)
    (run,) = fixed.children(replay, "ptc_retry.run")
    calls = fixed.children(run)
    assert [span["name"] for span in calls] == [
        "ptc_retry.tool_call lookup",
        "ptc_retry.tool_call recorded:__main__.doubled",
    ]
    for span in calls:
        assert span["attributes"]["ptc_retry.tool_call.reused"] is True
        assert span["attributes"]["ptc_retry.tool_call.reused_from"] == fixed.failed.call_id
    assert not [span for span in fixed.below(replay) if span["name"].startswith("execute_tool")]
    assert shop.calls["lookup"] == 1  # made once, by the program that failed


def test_the_metrics_count_calls_replays_bytes_saved_and_reused_tool_calls(
    fixed: Fixed, telemetry: Telemetered
) -> None:
    data = telemetry.metrics.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)

    def counts(name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        return {tuple(sorted(p.attributes.items())): p.value for p in points[name]}

    assert counts("ptc_retry.calls") == {
        (("ptc_retry.operation", "run_code"), ("ptc_retry.status", "error")): 1,
        (("ptc_retry.operation", "replay"), ("ptc_retry.status", "ok")): 1,
    }
    assert counts("ptc_retry.replays") == {(("ptc_retry.operation", "replay"),): 1}
    saved = program_spans(fixed)[1]["attributes"]["ptc_retry.bytes_saved"]
    assert counts("ptc_retry.bytes_saved") == {(): saved}
    assert counts("ptc_retry.tokens_saved") == {(): round(saved / BYTES_PER_TOKEN)}
    assert counts("ptc_retry.tool_calls") == {
        (("ptc_retry.tool_call.reused", False),): 2,
        (("ptc_retry.tool_call.reused", True),): 2,
    }
    # The failed call's points carry error.type besides the operation and the tool.
    ok, failed = sorted(points["gen_ai.execute_tool.duration"], key=lambda p: len(p.attributes))
    assert (ok.count, failed.count) == (1, 1)
    assert failed.attributes["error.type"] == "ZeroDivisionError"


def test_a_cut_off_call_and_its_extend_are_traced_as_such(
    backend: KernelBackend,
    telemetry: Telemetered,
    traced_ipython: Path,
    transport: str,
    on_loop: OnLoop[Any],
) -> None:
    whole = raw("total = sum([3, 4, 5])\nprint('total', total)\n")
    cut = whole[: whole.rindex("total)") + 3]  # the model's output stopped inside a name

    async def cut_then_extend() -> str:
        text = await backend.handle_partial_tool_call("run_code", cut, f"{transport}-cut")
        extend = follow(text, rest="al)\n")
        return await backend.handle_tool_call("run_code", raw(extend), f"{transport}-extend")

    assert "total 12" in on_loop(asyncio.wait_for(cut_then_extend(), BOUND))
    spans = as_dicts(telemetry.spans.get_finished_spans()) + kernel_spans(traced_ipython)

    def program(call_id: str) -> dict[str, Any]:
        (found,) = [s for s in spans if s["attributes"].get("gen_ai.tool.call.id") == call_id]
        return found

    partial, extend = program(f"{transport}-cut"), program(f"{transport}-extend")
    assert partial["attributes"]["ptc_retry.operation"] == "partial"
    assert partial["status"]["status_code"] == "UNSET"  # it ran nothing, and failed not
    below = [s for s in spans if s["parent_id"] == partial["context"]["span_id"]]
    assert [span["name"] for span in below] == ["ptc_retry.save"]  # saved, not run
    assert extend["attributes"]["ptc_retry.operation"] == "extend"
    assert extend["attributes"]["ptc_retry.extend_of"] == partial["attributes"]["ptc_retry.call_id"]
    (link,) = extend["links"]
    assert link["context"]["span_id"] == partial["context"]["span_id"]
    assert link["attributes"] == {"ptc_retry.link": "extend_of"}


#: A trace context whose traceparent names a span and whose tracestate OpenTelemetry drops,
#: saying so in a log record (more than 32 members).
CROWDED_STATE = ("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", ",".join(f"k{n}=v" for n in range(40)))


@pytest.mark.parametrize(
    ("traceparent", "tracestate", "traced"),
    [("00-not-a-trace", "=;=", False), (*CROWDED_STATE, True)],
    ids=["malformed", "crowded tracestate"],
)
def test_an_odd_trace_context_changes_nothing_the_program_prints(
    backend: KernelBackend,
    fixed: Fixed,
    traced_ipython: Path,
    transport: str,
    on_loop: OnLoop[Any],
    traceparent: str,
    tracestate: str,
    traced: bool,
) -> None:
    call_id = f"{transport}-odd-trace-{traced}"
    fields = {"call_id": call_id, TRACEPARENT: traceparent, TRACESTATE: tracestate}

    async def send() -> tuple[list[str], dict[str, Any]]:
        msg_id = await backend.transport.send_execute(
            execute_request("print(6 * 7)"), {METADATA_KEY: fields}
        )
        printed: list[str] = []
        reply, idle = None, False
        while reply is None or not idle:  # iopub and shell are not ordered with each other
            message = await backend.transport.receive(msg_id, BOUND)
            assert message is not None, "no reply"
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            elif message["msg_type"] == "execute_reply":
                reply = message
            elif message["msg_type"] == "status":
                idle = message["content"]["execution_state"] == "idle"
        assert reply is not None
        return printed, reply

    printed, reply = on_loop(asyncio.wait_for(send(), BOUND))
    assert reply["content"]["status"] == "ok" and printed == ["42\n"]
    assert reply["metadata"][METADATA_KEY]["status"] == "ok"
    spans = kernel_spans(traced_ipython)
    assert [s for s in spans if s["name"] == "ptc_retry.run"]  # this kernel traces
    mine = [s for s in spans if s["attributes"].get("ptc_retry.call_id") == call_id]
    assert bool(mine) is traced  # a context that names no span makes none


# -- local kernels of their own --------------------------------------------------------------


@pytest.fixture(scope="module")
def plain(
    start_backend: StartBackend, roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[KernelBackend, Telemetered]:
    """A backend that records program text, on a kernel with OpenTelemetry installed and no
    tracer provider set up (no startup file)."""
    ipython = tmp_path_factory.mktemp("plain-ipython")
    found = telemetered()
    backend = start_backend(
        root=roots["local"],
        env={"IPYTHONDIR": str(ipython)},
        telemetry=found.telemetry(record_program=True),
    )
    return backend, found


def test_the_option_records_the_program_and_the_exception_message(
    plain: tuple[KernelBackend, Telemetered], on_loop: OnLoop[Any]
) -> None:
    backend, found = plain
    code = f"print('{PROGRAM_TEXT}')\n1 / 0"
    on_loop(asyncio.wait_for(backend.handle_tool_call("run_code", raw(code), "opt-in"), BOUND))
    (span,) = [s for s in as_dicts(found.spans.get_finished_spans()) if "opt-in" in json.dumps(s)]
    assert span["attributes"]["gen_ai.tool.call.arguments"] == raw(code)
    (event,) = span["events"]
    assert event["attributes"] == {
        "exception.type": "ZeroDivisionError",
        "exception.message": "division by zero",
    }


def test_a_kernel_with_no_tracer_provider_imports_no_opentelemetry(
    plain: tuple[KernelBackend, Telemetered], on_loop: OnLoop[Any]
) -> None:
    backend, _ = plain
    code = "import sys\nprint(sorted(name for name in sys.modules if 'opentelemetry' in name))"
    on_loop(asyncio.wait_for(backend.run_code(code, call_id="imports"), BOUND))
    result = backend.last_result
    assert result is not None and result.status == "ok", result
    assert result.text == "[]"


def test_a_kernel_without_opentelemetry_runs_traced_programs_unchanged(
    start_backend: StartBackend,
    roots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    on_loop: OnLoop[Any],
) -> None:
    # A regular package named opentelemetry, first on the kernel's path, hides the installed
    # namespace package: every import of opentelemetry fails there, as where it is absent.
    hidden = tmp_path_factory.mktemp("no-otel")
    (hidden / "opentelemetry").mkdir()
    (hidden / "opentelemetry" / "__init__.py").write_text(
        "raise ImportError('OpenTelemetry is not installed in this kernel')\n"
    )
    shop, found = Shop(), telemetered()
    backend = start_backend(
        root=roots["local"],
        env={"PYTHONPATH": str(hidden), "IPYTHONDIR": str(tmp_path_factory.mktemp("ipython"))},
        tools=[shop.lookup],
        telemetry=found.telemetry(),
    )

    async def fail_and_fix() -> tuple[RunResult, RunResult]:
        await backend.handle_tool_call("run_code", raw(PROGRAM), "bare-fail")
        failed = backend.last_result
        assert failed is not None and failed.notice is not None
        fix_call = follow(failed.notice, old=FIX[0], new=FIX[1])
        await backend.handle_tool_call("run_code", raw(fix_call), "bare-fix")
        assert backend.last_result is not None
        return failed, backend.last_result

    failed, fixed = on_loop(asyncio.wait_for(fail_and_fix(), BOUND))
    assert (failed.status, failed.ename) == ("error", "ZeroDivisionError")
    assert fixed.status == "ok" and "per unit 14.0" in fixed.text
    assert fixed.metadata is not None and fixed.metadata["tool_calls"] == {"reused": 2, "live": 0}
    assert shop.calls["lookup"] == 1
    spans = as_dicts(found.spans.get_finished_spans())
    (program, _) = [span for span in spans if span["name"] == "execute_tool run_code"]
    # No kernel span came between: the host's span of the call is beneath the program's.
    (host,) = [span for span in spans if span["name"] == "execute_tool lookup"]
    assert host["parent_id"] == program["context"]["span_id"]
    on_loop(
        asyncio.wait_for(backend.run_code("import opentelemetry", call_id="bare-import"), BOUND)
    )
    assert backend.last_result is not None and backend.last_result.ename == "ImportError"


def test_nothing_is_traced_without_a_configured_provider() -> None:
    # This process has the API imported and no global provider set: the API's proxy.
    tracing = Tracing(None)
    assert not tracing.active
    assert tracing.call({"call_id": "c1", "tool": "run_code"}, "x = 1") is NO_TRACE
    assert NO_TRACE.context() == {}


def test_a_host_tool_that_raises_marks_its_host_span_failed_with_the_type(
    backend: KernelBackend, telemetry: Telemetered, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    program = (
        "try:\n    await tools.restock(item='tea')\n"
        "except ptc_retry.ToolError as exc:\n    print('refused', type(exc).__name__)\n"
    )
    result = on_loop(asyncio.wait_for(backend.run_code(program), BOUND))
    assert "refused ToolError" in result.text and shop.calls["restock"] == 1
    spans = as_dicts(telemetry.spans.get_finished_spans())
    host = [span for span in spans if span["name"] == "execute_tool restock"][-1]
    assert host["status"] == {"status_code": "ERROR", "description": "ConnectionError"}
    assert host["attributes"]["error.type"] == "ConnectionError"
