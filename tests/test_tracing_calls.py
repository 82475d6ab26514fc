"""OpenTelemetry spans of the calls beside a program and its replay (docs/operators.md), on
real local kernels that trace (tests/otel_kernel_startup.py): a pause for a person's approval
and its continuation, a native-mode edit, calls the backend refuses, and an SDK that raises."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "opentelemetry.sdk", reason="the trace tests need opentelemetry-sdk (the test extra)"
)

from ptc_retry.backend import KernelBackend, RunResult, Telemetry  # noqa: E402
from ptc_retry.core.sentences import EDIT_TOOL  # noqa: E402
from ptc_retry.core.status import Refusal, ResultStatus  # noqa: E402

from .helpers import OnLoop, StartBackend, raw  # noqa: E402
from .test_tracing import (  # noqa: E402
    Telemetered,
    as_dicts,
    kernel_spans,
    telemetered,
    traced_directory,
)

#: Seconds within which each exchange of these tests must end.
BOUND = 40
#: A program that looks an order up, then pauses before the e-mail until a person decides.
CHASE = """\
order = await tools.lookup(item="tea")
sent = await tools.send_email(to="owner@example.com", body=f"{order['item']} is late")
print("done:", sent)
"""


class Office:
    """The agent's side: a lookup, and an e-mail that needs a person's approval."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def lookup(self, item: str) -> dict[str, Any]:
        """Look an order up."""
        return {"item": item}

    def send_email(self, to: str, body: str) -> str:
        """Send an e-mail."""
        self.sent.append(to)
        return f"sent to {to}"


@pytest.fixture(scope="module")
def traced_ipython(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return traced_directory(tmp_path_factory)


@pytest.fixture(scope="module")
def telemetry() -> Telemetered:
    return telemetered()


@pytest.fixture(scope="module")
def office() -> Office:
    return Office()


@pytest.fixture(scope="module")
def backend(
    start_backend: StartBackend,
    roots: dict[str, Path],
    traced_ipython: Path,
    telemetry: Telemetered,
    office: Office,
) -> KernelBackend:
    kb = start_backend(
        root=roots["local"],
        env={"IPYTHONDIR": str(traced_ipython)},
        telemetry=telemetry.telemetry(),
    )
    kb.register_tool(office.lookup)
    kb.register_tool(office.send_email, approval=True)
    return kb


def spans_of(telemetry: Telemetered, traced_ipython: Path) -> list[dict[str, Any]]:
    """Every span so far: the backend's and the kernel's."""
    return as_dicts(telemetry.spans.get_finished_spans()) + kernel_spans(traced_ipython)


def called(spans: list[dict[str, Any]], call_id: str, name: str | None = None) -> dict[str, Any]:
    """The one backend span of the call ``call_id`` (named ``name``, when given)."""
    (found,) = [
        span
        for span in spans
        if span["attributes"].get("gen_ai.tool.call.id") == call_id
        and (name is None or span["name"] == name)
    ]
    return found


def beneath(spans: list[dict[str, Any]], parent: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [
        span
        for span in spans
        if span["parent_id"] == parent["context"]["span_id"] and span["name"] == name
    ]
    return found


def pause(backend: KernelBackend, call_id: str, on_loop: OnLoop[Any]) -> RunResult:
    on_loop(asyncio.wait_for(backend.handle_tool_call("run_code", raw(CHASE), call_id), BOUND))
    paused = backend.last_result
    assert paused is not None and paused.status == ResultStatus.PAUSED, paused
    return paused


# -- a pause for approval, and its continuation -----------------------------------------------


def test_a_pause_for_approval_is_no_error_on_the_backend_or_kernel_span(
    backend: KernelBackend, telemetry: Telemetered, traced_ipython: Path, on_loop: OnLoop[Any]
) -> None:
    paused = pause(backend, "pause-no-error", on_loop)
    spans = spans_of(telemetry, traced_ipython)
    program = called(spans, "pause-no-error", "execute_tool run_code")
    run = beneath(spans, program, "ptc_retry.run")
    for span in (program, run):
        assert span["attributes"]["ptc_retry.status"] == "paused"
        assert span["status"]["status_code"] == "UNSET", span["name"]
        assert "error.type" not in span["attributes"] and span["events"] == []
    on_loop(asyncio.wait_for(backend.deny(paused.reference or ""), BOUND))


def points(telemetry: Telemetered, name: str) -> list[Any]:
    """The data points of the metric ``name`` so far."""
    data = telemetry.metrics.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data is not None else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def test_an_approvals_continuation_is_a_span_of_its_own_that_saved_nothing(
    backend: KernelBackend, telemetry: Telemetered, traced_ipython: Path, on_loop: OnLoop[Any]
) -> None:
    paused = pause(backend, "pause-approved", on_loop)
    saved_before = sum(point.value for point in points(telemetry, "ptc_retry.bytes_saved"))
    went_on = on_loop(asyncio.wait_for(backend.approve(paused.reference or ""), BOUND))
    assert went_on is not None and went_on.status == ResultStatus.OK, went_on
    spans = spans_of(telemetry, traced_ipython)
    program = called(spans, "pause-approved")
    (approval,) = [
        span
        for span in spans
        if span["name"] == "ptc_retry.approval"
        and span["attributes"]["ptc_retry.approval_of"] == paused.call_id
    ]
    attributes = approval["attributes"]
    assert attributes["ptc_retry.operation"] == "approval"
    assert attributes["ptc_retry.call_id"] == went_on.call_id
    assert (attributes["ptc_retry.approval.approved"], attributes["ptc_retry.approval.denied"]) == (
        1,
        0,
    )
    assert "gen_ai.tool.call.id" not in attributes  # the model made no call for it
    for key in ("bytes_sent", "bytes_saved", "tokens_saved"):
        assert f"ptc_retry.{key}" not in attributes
    (link,) = approval["links"]
    assert link["context"]["span_id"] == program["context"]["span_id"]
    assert link["attributes"] == {"ptc_retry.link": "approval_of"}
    beneath(spans, approval, "ptc_retry.run")  # the kernel's spans come beneath it
    # Nothing saved, no replay: the counters did not move for it.
    assert sum(point.value for point in points(telemetry, "ptc_retry.bytes_saved")) == saved_before
    assert not [
        point
        for point in points(telemetry, "ptc_retry.replays")
        if point.attributes["ptc_retry.operation"] in ("resume", "approval")
    ]
    counted = {
        point.attributes["ptc_retry.status"]: point.value
        for point in points(telemetry, "ptc_retry.calls")
        if point.attributes["ptc_retry.operation"] == "approval"
    }
    assert counted["ok"] == 1


def test_a_denials_continuation_counts_the_denied_calls(
    backend: KernelBackend, telemetry: Telemetered, on_loop: OnLoop[Any]
) -> None:
    paused = pause(backend, "pause-denied", on_loop)
    on_loop(asyncio.wait_for(backend.deny(paused.reference or "", "not today"), BOUND))
    (approval,) = [
        span
        for span in as_dicts(telemetry.spans.get_finished_spans())
        if span["name"] == "ptc_retry.approval"
        and span["attributes"]["ptc_retry.approval_of"] == paused.call_id
    ]
    assert approval["attributes"]["ptc_retry.approval.denied"] == 1
    assert approval["attributes"]["ptc_retry.approval.approved"] == 0


# -- a native-mode edit -----------------------------------------------------------------------

#: A native-mode program with a typo, long enough for the native notice, and its edit.
TYPO = "rows = [3, 4, 5]\nprint('total', sum(rows[:9]) + totl)\n" + "# padding\n" * 60
EDIT = json.dumps(
    {"call_id": "native-fail", "patch": [{"path": "code", "old_string": "totl", "new_string": "0"}]}
)


@pytest.fixture(scope="module")
def native(
    start_backend: StartBackend, roots: dict[str, Path], traced_ipython: Path
) -> tuple[KernelBackend, Telemetered]:
    """A native-mode backend on a traced kernel, and its telemetry."""
    found = telemetered()
    kb = start_backend(
        root=roots["local"],
        mode="native",
        env={"IPYTHONDIR": str(traced_ipython)},
        telemetry=found.telemetry(),
    )
    assert kb.native is not None
    kb.native.register(lookup_order)
    return kb, found


def lookup_order(order_id: str, note: str = "") -> dict[str, Any]:
    """A tool of the agent's own on ``kb.native``: the order ``order_id``."""
    return {"A-1": {"item": "tea", "qty": 2}}[order_id]


def test_a_native_edit_is_an_edit_span_linked_to_the_call_it_fixes(
    native: tuple[KernelBackend, Telemetered], traced_ipython: Path, on_loop: OnLoop[Any]
) -> None:
    kb, found = native

    async def fail_then_edit() -> str:
        await kb.handle_tool_call("run_code", raw(TYPO), "native-fail")
        return await kb.handle_tool_call(EDIT_TOOL, EDIT, "native-edit")

    assert "total 12" in on_loop(asyncio.wait_for(fail_then_edit(), BOUND))
    spans = spans_of(found, traced_ipython)
    failed = called(spans, "native-fail")
    edit = called(spans, "native-edit")
    assert edit["name"] == f"execute_tool {EDIT_TOOL}"
    attributes = edit["attributes"]
    assert attributes["gen_ai.tool.name"] == EDIT_TOOL
    assert attributes["ptc_retry.operation"] == "edit"
    assert attributes["ptc_retry.replay_of"] == "native-fail"
    assert attributes["ptc_retry.status"] == "ok" and edit["status"]["status_code"] == "UNSET"
    assert attributes["ptc_retry.bytes_sent"] == len(EDIT.encode())
    patched = raw(TYPO.replace("totl", "0"))
    assert attributes["ptc_retry.bytes_saved"] == len(patched.encode()) - len(EDIT.encode())
    (link,) = edit["links"]
    assert link["context"]["span_id"] == failed["context"]["span_id"]
    assert link["attributes"] == {"ptc_retry.link": "replay_of"}
    beneath(spans, edit, "ptc_retry.run")  # the kernel ran the patched program beneath it
    replays = {
        p.attributes["ptc_retry.operation"]: p.value for p in points(found, "ptc_retry.replays")
    }
    assert replays == {"edit": 1}


def test_a_call_of_a_native_tool_is_a_span_and_its_edit_an_edit_span_linked_to_it(
    native: tuple[KernelBackend, Telemetered], on_loop: OnLoop[Any]
) -> None:
    kb, found = native
    wrong = json.dumps({"order_id": "A-7", "note": "the weekly delivery run, " * 8})
    fix = {
        "call_id": "native-order",
        "patch": [{"path": "order_id", "old_string": "7", "new_string": "1"}],
    }
    edits_before = edits(found)

    async def fail_then_edit() -> tuple[str, str]:
        failed = await kb.handle_tool_call("lookup_order", wrong, "native-order")
        return failed, await kb.handle_tool_call(EDIT_TOOL, json.dumps(fix), "native-order-fix")

    failed_text, fixed_text = on_loop(asyncio.wait_for(fail_then_edit(), BOUND))
    assert "KeyError" in failed_text and '"item": "tea"' in fixed_text
    spans = as_dicts(found.spans.get_finished_spans())
    failed = called(spans, "native-order")
    assert failed["name"] == "execute_tool lookup_order"
    assert failed["attributes"]["gen_ai.tool.name"] == "lookup_order"
    assert failed["attributes"]["ptc_retry.operation"] == "native_tool"
    assert failed["status"] == {"status_code": "ERROR", "description": "KeyError"}
    assert failed["attributes"]["error.type"] == "KeyError"
    assert "gen_ai.tool.call.arguments" not in failed["attributes"]  # off by default
    edit = called(spans, "native-order-fix")
    assert edit["name"] == f"execute_tool {EDIT_TOOL}"
    attributes = edit["attributes"]
    assert (attributes["ptc_retry.operation"], attributes["ptc_retry.status"]) == ("edit", "ok")
    assert attributes["ptc_retry.replay_of"] == "native-order"
    assert attributes["ptc_retry.bytes_sent"] == len(json.dumps(fix).encode())
    patched = len(wrong.replace("A-7", "A-1").encode())
    assert attributes["ptc_retry.bytes_saved"] == patched - len(json.dumps(fix).encode())
    (link,) = edit["links"]
    assert link["context"]["span_id"] == failed["context"]["span_id"]
    assert edits(found) == edits_before + 1


def test_a_native_call_cut_off_is_a_partial_span_its_completion_links_to(
    native: tuple[KernelBackend, Telemetered], on_loop: OnLoop[Any]
) -> None:
    kb, found = native
    completion = json.dumps({"call_id": "native-cut", "append": "2)\n"})

    async def cut_then_complete() -> str:
        await kb.handle_partial_tool_call("run_code", '{"code": "print(40 + ', "native-cut")
        return await kb.handle_tool_call(EDIT_TOOL, completion, "native-cut-rest")

    assert "42" in on_loop(asyncio.wait_for(cut_then_complete(), BOUND))
    spans = as_dicts(found.spans.get_finished_spans())
    cut = called(spans, "native-cut")
    assert cut["attributes"]["ptc_retry.status"] == "partial"
    assert cut["status"]["status_code"] == "UNSET"  # nothing failed: it waits for the rest
    rest = called(spans, "native-cut-rest")
    assert rest["attributes"]["ptc_retry.extend_of"] == "native-cut"
    (link,) = rest["links"]
    assert link["context"]["span_id"] == cut["context"]["span_id"]
    assert link["attributes"] == {"ptc_retry.link": "extend_of"}


def test_a_native_tool_s_arguments_and_error_message_are_on_its_span_only_by_the_option(
    start_backend: StartBackend, roots: dict[str, Path], on_loop: OnLoop[Any]
) -> None:
    found = telemetered()
    kb = start_backend(
        root=roots["local"], mode="native", telemetry=found.telemetry(record_program=True)
    )
    assert kb.native is not None
    kb.native.register(lookup_order)
    sent = on_loop(kb.handle_tool_call("lookup_order", '{"order_id": "Z-9"}', "opted-in"))
    assert "KeyError" in sent
    span = called(as_dicts(found.spans.get_finished_spans()), "opted-in")
    assert json.loads(span["attributes"]["gen_ai.tool.call.arguments"]) == {"order_id": "Z-9"}
    (event,) = span["events"]
    assert event["attributes"] == {"exception.type": "KeyError", "exception.message": "'Z-9'"}


def edits(telemetry: Telemetered) -> int:
    """How many native-mode edits the counters have seen so far."""
    counted = points(telemetry, "ptc_retry.replays")
    return sum(p.value for p in counted if p.attributes["ptc_retry.operation"] == "edit")


# -- calls the backend refuses ----------------------------------------------------------------


def refusals(telemetry: Telemetered) -> dict[str, str]:
    """The refusal of each refused call's span, by its call id."""
    return {
        span["attributes"]["gen_ai.tool.call.id"]: span["attributes"]["ptc_retry.refusal"]
        for span in as_dicts(telemetry.spans.get_finished_spans())
        if "ptc_retry.refusal" in span["attributes"] and "gen_ai.tool.call.id" in span["attributes"]
    }


def test_each_call_the_backend_refuses_has_a_span_naming_the_refusal(
    backend: KernelBackend, telemetry: Telemetered, on_loop: OnLoop[Any]
) -> None:
    calls = {
        "refused-tool": ("write_file", "{}"),
        "refused-json": ("run_code", '{"code": "print(1)"'),
        "refused-no-code": ("run_code", '{"program": "print(1)"}'),
        "refused-bytes": ("run_code", b'{"code": "\xff"}'),
    }

    async def send() -> None:
        for call_id, (name, arguments) in calls.items():
            await backend.handle_tool_call(name, arguments, call_id)  # type: ignore[arg-type]
        await backend.handle_partial_tool_call("run_code", '{"pro', "refused-cut")

    on_loop(asyncio.wait_for(send(), BOUND))
    found = refusals(telemetry)
    assert {call_id: found.get(call_id) for call_id in [*calls, "refused-cut"]} == {
        "refused-tool": Refusal.UNKNOWN_TOOL,
        "refused-json": Refusal.BAD_ARGUMENTS,
        "refused-no-code": Refusal.BAD_ARGUMENTS,
        "refused-bytes": Refusal.BAD_ARGUMENTS,
        "refused-cut": Refusal.CUT_OFF,
    }
    span = called(as_dicts(telemetry.spans.get_finished_spans()), "refused-tool")
    assert span["name"] == "execute_tool write_file"
    assert span["attributes"]["ptc_retry.status"] == "refused"
    assert span["status"] == {"status_code": "ERROR", "description": "unknown_tool"}
    counted = {
        point.attributes.get("ptc_retry.refusal"): point.value
        for point in points(telemetry, "ptc_retry.calls")
        if point.attributes["ptc_retry.status"] == "refused"
    }
    assert counted == {"unknown_tool": 1, "bad_arguments": 3, "cut_off": 1}


def test_a_native_edit_the_journal_refuses_has_a_span_naming_the_refusal(
    native: tuple[KernelBackend, Telemetered], on_loop: OnLoop[Any]
) -> None:
    kb, found = native
    entry = {"path": "code", "old_string": "print", "new_string": "len"}
    unknown = json.dumps({"call_id": "never-made", "patch": [entry]})
    unmatched = json.dumps(
        {"call_id": "native-ok", "patch": [{"path": "code", "old_string": "x", "new_string": "y"}]}
    )

    async def send() -> None:
        await kb.handle_tool_call("run_code", raw("print(2 + 2)"), "native-ok")
        await kb.handle_tool_call(EDIT_TOOL, unknown, "native-unknown")
        await kb.handle_tool_call(EDIT_TOOL, unmatched, "native-unmatched")
        await kb.handle_tool_call("run_code", "[1]", "native-array")
        await kb.handle_tool_call("read_file", "{}", "native-tool")
        await kb.handle_tool_call("lookup_order", '{"order_id": "A-1"', "native-own-json")
        await kb.handle_partial_tool_call("run_code", '{"co', "native-cut-early")
        await kb.handle_partial_tool_call("read_file", '{"path": "a', "native-cut-tool")

    on_loop(asyncio.wait_for(send(), BOUND))
    assert refusals(found) == {
        "native-unknown": Refusal.UNKNOWN_REFERENCE,
        "native-unmatched": Refusal.BAD_PATCH,
        "native-array": Refusal.BAD_ARGUMENTS,
        "native-tool": Refusal.UNKNOWN_TOOL,
        "native-own-json": Refusal.BAD_ARGUMENTS,
        "native-cut-early": Refusal.CUT_OFF,
        "native-cut-tool": Refusal.UNKNOWN_TOOL,
    }


def test_a_program_the_guard_refuses_carries_the_guard_refusal(
    start_backend: StartBackend,
    roots: dict[str, Path],
    traced_ipython: Path,
    on_loop: OnLoop[Any],
) -> None:
    found = telemetered()
    kb = start_backend(
        root=roots["local"], env={"IPYTHONDIR": str(traced_ipython)}, telemetry=found.telemetry()
    )

    async def trip() -> RunResult:
        await kb.run_code(
            '%config PtcRetry.guard_mode = "pause"\n%config PtcRetry.failure_limit = 2'
        )
        for n in range(2):
            await kb.run_code("1 / 0", call_id=f"guard-fail-{n}")
        return await kb.run_code("print('after')", call_id="guard-refused")

    refused = on_loop(asyncio.wait_for(trip(), BOUND))
    assert refused.status == ResultStatus.REFUSED, refused
    span = called(as_dicts(found.spans.get_finished_spans()), "guard-refused")
    assert span["attributes"]["ptc_retry.refusal"] == Refusal.GUARD
    assert span["attributes"]["ptc_retry.status"] == "refused"


# -- an SDK that raises -----------------------------------------------------------------------

#: A kernel startup file whose tracer provider's span processor raises at every span.
RAISING_STARTUP = """
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider


class Raising(SpanProcessor):
    def on_start(self, span, parent_context=None):
        raise RuntimeError("the span processor broke at the start")

    def on_end(self, span):
        raise RuntimeError("the span processor broke at the end")


provider = TracerProvider()
provider.add_span_processor(Raising())
trace.set_tracer_provider(provider)
del provider
"""


class RaisingProcessor:
    """A span processor that raises at each span's end, and at the start of each but a
    program's (whose trace context then still reaches the kernel)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if span.name != "execute_tool run_code":
            raise RuntimeError("the span processor broke at the start")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("the span processor broke at the end")

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class RaisingMeters:
    """A meter provider whose meters raise at every instrument."""

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return self

    def create_histogram(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the meter broke")

    create_counter = create_histogram


def test_a_span_processor_or_meter_that_raises_fails_no_program_or_tool_call(
    start_backend: StartBackend,
    roots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    on_loop: OnLoop[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    caplog.set_level(logging.WARNING, "ptc_retry.backend.tracing")
    ipython = tmp_path_factory.mktemp("raising-ipython")
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-otel.py").write_text(RAISING_STARTUP)
    provider = TracerProvider()
    provider.add_span_processor(RaisingProcessor())  # type: ignore[arg-type]
    office = Office()
    kb = start_backend(
        root=roots["local"],
        env={"IPYTHONDIR": str(ipython)},
        telemetry=Telemetry(provider, RaisingMeters()),
    )
    kb.register_tool(office.lookup)
    kb.register_tool(office.send_email, approval=True)

    paused = pause(kb, "raising-pause", on_loop)
    went_on = on_loop(asyncio.wait_for(kb.approve(paused.reference or ""), BOUND))
    assert went_on is not None and went_on.status == ResultStatus.OK, went_on
    assert "done: sent to owner@example.com" in went_on.text
    assert office.sent == ["owner@example.com"]
    text = on_loop(
        asyncio.wait_for(kb.handle_tool_call("run_code", raw("1 / 0"), "raising-fail"), BOUND)
    )
    assert "ZeroDivisionError" in text
    printed = on_loop(asyncio.wait_for(kb.run_code("print(6 * 7)"), BOUND))
    assert printed.status == ResultStatus.OK and printed.text == "42"
    again = on_loop(asyncio.wait_for(kb.run_code(CHASE.split("\n")[0] + "\nprint(order)"), BOUND))
    assert again.status == ResultStatus.OK and "tea" in again.text
    # Each problem is logged once, though every program met it again, and in turn with others.
    logged = [r.getMessage() for r in caplog.records if r.name == "ptc_retry.backend.tracing"]
    assert logged and len(logged) == len(set(logged)), logged
