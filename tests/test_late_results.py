"""Tool calls the host completed after the kernel stopped waiting for them (a time limit, an
interrupt, its caller giving up, the kernel's death): the next request carries their results
to the kernel, so that the resume the model is offered makes none of them again.

Each backend test follows the model's path: the program is a ``run_code`` call, the next
call is exactly the one its text offers, and the host's tools count their calls. They run on
a local kernel; those whose kernel dies or whose program is stopped, behind a real Kernel
Gateway too. The kernel's own rules (what it appends, and
what it leaves out) are pinned on a kernel the test answers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend
from ptc_retry.core.history_table import format_tool_calls
from ptc_retry.core.notice import read_notice
from ptc_retry.core.protocol import TOOL_RESULTS
from ptc_retry.kernel.call_lines import CallRecord, in_order
from ptc_retry.kernel.recording import Reuse

from .gateway_server import KERNEL_GATEWAY
from .helpers import (
    Kernel,
    OnLoop,
    StartBackend,
    latest_line_of,
    long_program,
    raw,
    tool_call_lines,
)
from .test_reuse_chains import Notifier
from .test_tools_kernel import Host as Answering

#: Each backend test runs on a local kernel. Those whose kernel dies or whose program is
#: stopped run behind a real Kernel Gateway too, where the gateway's code differs (its
#: websocket closes, it interrupts and restarts). Through it, all of them together ran one
#: line of the gateway's code that its own tests, test_backend_transports.py,
#: test_host_tools.py and test_approvals.py do not (a websocket closed while a kernel died),
#: for a minute and a half of sleeping tools (coverage.py, measured).
TRANSPORTS = ["local"]
THROUGH_A_GATEWAY_TOO = pytest.mark.transports("local", KERNEL_GATEWAY)

#: Seconds within which each call of these tests must end (hang tests fail on this bound).
BOUND = 40


class Shop:
    """The agent's side: tools with side effects, counted on the host."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.orders: Counter[int] = Counter()  # charges, by order
        self.kernel_pid: int | None = None
        self.first_slow: set[str] = set()  # tools whose next call is slow (and maybe fails)
        self.let_go = threading.Event()
        self.hold_payment: threading.Event | None = None  # set: pay returns (else: seconds)

    def note(self, text: str) -> str:
        """Write a line to the audit log."""
        self.calls["note"] += 1
        return f"noted {text}"

    def charge(self, order: int, seconds: float) -> str:
        """Charge an order (a slow payment API)."""
        self.calls["charge"] += 1
        self.orders[order] += 1
        time.sleep(seconds)
        return f"receipt {order}"

    def pay(self, order: int, seconds: float = 0) -> str:
        """Pay an order; the kernel dies, ``seconds`` before the result goes back."""
        self.calls["pay"] += 1
        assert self.kernel_pid is not None
        os.kill(self.kernel_pid, signal.SIGKILL)
        if self.hold_payment is not None:
            self.hold_payment.wait(BOUND)
        else:
            time.sleep(seconds)
        return f"paid {order}"

    async def reserve(self, item: str) -> str:
        """Reserve an item (async); slow the first time."""
        self.calls["reserve"] += 1
        if "reserve" in self.first_slow:
            self.first_slow.discard("reserve")
            await asyncio.sleep(30)
        return f"reserved {item}"

    def refund(self, order: int) -> str:
        """Refund an order (sync); the first time it fails, after a while."""
        self.calls["refund"] += 1
        if "refund" in self.first_slow:
            self.first_slow.discard("refund")
            time.sleep(1.5)
            raise ConnectionError("the bank is down")
        return f"refunded {order}"

    def decline(self, order: int, seconds: float) -> str:
        """Charge a card the bank declines, after a while."""
        self.calls["decline"] += 1
        time.sleep(seconds)
        raise ConnectionError(f"the bank declined order {order}")

    def stall(self) -> str:
        """Hang (a sync API that never answers) until the test lets it go."""
        self.calls["stall"] += 1
        self.let_go.wait(BOUND)
        return "answered at last"

    def quote(self, seconds: float) -> str:
        """A review, slowly, cut inside an emoji by the API it comes from."""
        self.calls["quote"] += 1
        time.sleep(seconds)
        return "Great job \ud83d"

    def tools(self) -> list[Any]:
        return [
            self.note,
            self.charge,
            self.pay,
            self.reserve,
            self.refund,
            self.decline,
            self.stall,
            self.quote,
        ]


@pytest.fixture(scope="module")
def shop(transport: str) -> Shop:
    return Shop()


@pytest.fixture(scope="module")
def backend(start_backend: StartBackend, shop: Shop, options: dict[str, Any]) -> KernelBackend:
    return start_backend(tools=shop.tools(), interrupt_grace=2, **options)


async def call(kb: KernelBackend, code: str, call_id: str, **options: Any) -> str:
    """One ``run_code`` call of the model, bounded."""
    return await asyncio.wait_for(kb.handle_tool_call("run_code", code, call_id, **options), BOUND)


def offered(text: str) -> str:
    """The one call the text of a stopped program tells the model to send: a resume."""
    found = read_notice(text)
    assert found is not None and found.helper == "resume", text
    return found.call


def late_lines(kb: KernelBackend, call_id: str) -> list[dict[str, Any]]:
    assert kb.session_dir is not None
    path = kb.session_dir / "tool-calls" / f"{call_id}.jsonl"
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    return [line for line in lines if line.get("late")]


def test_a_sync_tool_that_outlives_the_time_limit_is_not_made_again_by_the_resume(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        "logged = await tools.note(text='checkout 7')",
        "receipt = await tools.charge(order=7, seconds=3)",
        "print(logged, receipt)",
    )
    started = time.monotonic()

    stopped = on_loop(call(backend, raw(code), "call_t1", timeout=1))

    assert backend.last_result is not None and backend.last_result.status == "timeout", stopped
    assert time.monotonic() - started < 3  # the kernel stopped waiting; the charge went on
    resumed = on_loop(call(backend, raw(offered(stopped)), "call_t2", timeout=20))

    assert resumed.startswith("noted checkout 7 receipt 7"), resumed
    assert "1 tool result reused" in resumed
    assert shop.calls == {"note": 1, "charge": 1}
    (line,) = late_lines(backend, "call_t1")
    assert (line["k"], line["tool"], line["arguments"]) == (2, "charge", {"order": 7, "seconds": 3})
    assert (line["ok"], line["result"], line["statement"]) == (True, "receipt 7", 1)


def test_resumes_each_shorter_than_a_running_sync_call_make_it_once(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    # Every call of the model has the same short limit: each resume starts before the
    # charge has returned, so it matches the charge's failed line and must be given the
    # outcome of the call still running on the host, not make it again.
    shop.calls.clear()
    code = long_program(
        "logged = await tools.note(text='checkout 12')",
        "receipt = await tools.charge(order=12, seconds=8)",
        "print(logged, receipt)",
    )
    text = on_loop(call(backend, raw(code), "call_s0", timeout=1))

    *statuses, text = resumed_until_ok(backend, text, on_loop, "call_s")

    assert "noted checkout 12 receipt 12" in text.splitlines(), (statuses, text)
    assert statuses[:2] == ["timeout", "timeout"]  # the first resume did start too soon
    assert shop.calls == {"note": 1, "charge": 1}
    # Whether the last one resumed or ran the whole program (max_resumes_per_turn), it made
    # no call live: the charge's outcome was the earlier call's.
    assert "tool result" in text and "reused" in text and "0 calls made live" in text, text


def resumed_until_ok(kb: KernelBackend, text: str, on_loop: OnLoop[Any], name: str) -> list[str]:
    """Send the resume each stopped program's text offers, every one with a 1 s limit, until
    one runs to its end; the statuses on the way, the last text last."""
    statuses = []
    for attempt in range(1, 12):
        assert kb.last_result is not None
        statuses.append(kb.last_result.status)
        if kb.last_result.status == "ok":
            return [*statuses, text]
        text = on_loop(call(kb, raw(offered(text)), f"{name}_{attempt}", timeout=1))
    raise AssertionError(f"no resume ran to its end: {statuses}")


def test_a_gather_of_more_slow_calls_than_are_kept_makes_each_once(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    # More calls still running (or queued for a worker thread) than the host keeps of
    # those that returned (32).
    shop.calls.clear()
    shop.orders.clear()
    code = long_program(
        "import asyncio",
        "receipts = await asyncio.gather(*[tools.charge(order=i, seconds=1) for i in range(48)])",
        "print(len(set(receipts)))",
    )
    text = on_loop(call(backend, raw(code), "call_m0", timeout=1))

    *statuses, text = resumed_until_ok(backend, text, on_loop, "call_m")

    assert "48" in text.splitlines(), (statuses, text)
    assert shop.calls == {"charge": 48}
    assert shop.orders == {i: 1 for i in range(48)}


def test_a_replay_of_a_resume_that_skipped_a_failed_call_gets_its_late_result(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    # #1 gives up on a slow charge and fails later; the fix resumes it (#2), which skips the
    # charge's statement and carries its failed line; the charge then returns on the host.
    # A fix of #2 must not charge again, and must say that nothing was made live.
    shop.calls.clear()
    code = long_program(
        "import asyncio, time",
        "try:",
        "    receipt = await asyncio.wait_for(tools.charge(order=13, seconds=4), 0.3)",
        "except asyncio.TimeoutError:",
        "    receipt = 'pending'",
        "time.sleep(0.5)",
        "print(receipt, undefined_a)",
        "print(undefined_b)",
    )
    on_loop(call(backend, raw(code), "call_c1"))
    fix = (
        'await ptc_retry.replay("call_c1", "print(receipt, undefined_a)", "print(receipt)",'
        " resume=True)"
    )
    # A short limit: the resume starts before the charge has returned (it waits at most 1 s).
    on_loop(call(backend, raw(fix), "call_c2", timeout=1))
    assert shop.calls == {"charge": 1}
    on_loop(asyncio.sleep(4))  # the charge has returned by now

    fixed = on_loop(
        call(
            backend,
            raw('await ptc_retry.replay("call_c2", "print(undefined_b)", "print(1)")'),
            "call_c3",
        )
    )

    assert backend.last_result is not None and backend.last_result.status == "ok", fixed
    assert "receipt 13" in fixed and "0 calls made live" in fixed, fixed
    assert shop.calls == {"charge": 1}


def test_a_fix_that_reorders_calls_still_running_gets_each_ones_outcome(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    # The fix starts while the three charges run, swaps two of them and adds a note first:
    # each charge is the same call of the stopped program, wherever it now stands.
    shop.calls.clear()
    shop.orders.clear()
    code = long_program(
        "import asyncio",
        "paid = await asyncio.gather(*(tools.charge(order=i, seconds=8) for i in (1, 2, 3)))",
        "print(paid)",
    )
    on_loop(call(backend, raw(code), "call_o1", timeout=1))
    fix = (
        'await ptc_retry.replay("call_o1", edits=['
        """("import asyncio", "import asyncio\\nawait tools.note(text='retry')"), """
        '("for i in (1, 2, 3)", "for i in (2, 1, 3)")])'
    )

    # Its own limit is short too: it runs while the charges do, and is stopped in turn.
    fixed = on_loop(call(backend, raw(fix), "call_o2", timeout=2))
    text = on_loop(call(backend, raw(offered(fixed)), "call_o3", timeout=20))

    assert "['receipt 2', 'receipt 1', 'receipt 3']" in text, (fixed, text)
    assert shop.orders == {1: 1, 2: 1, 3: 1}
    assert shop.calls == {"charge": 3, "note": 1}


def test_a_call_still_running_that_then_raises_gives_the_resume_its_error(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    shop.calls.clear()
    code = long_program(
        "import asyncio",
        "done = await asyncio.gather(tools.note(text='o14'), tools.decline(order=14, seconds=6),"
        " return_exceptions=True)",
        "print(done)",
    )
    stopped = on_loop(call(backend, raw(code), "call_e1", timeout=1))

    # The resume waits at most its own 3 s for the call, then starts while it still runs.
    resumed = on_loop(call(backend, raw(offered(stopped)), "call_e2", timeout=3))

    assert "the bank declined order 14" in resumed, resumed
    assert shop.calls == {"note": 1, "decline": 1}
    # The note's result is reused; the declined charge was neither reused nor made again.
    assert "1 tool result reused" in resumed and "0 calls made live" in resumed, resumed


def test_a_resume_given_up_while_it_waits_leaves_the_wait_to_the_next_one(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    shop.calls.clear()
    code = long_program("receipt = await tools.charge(order=9, seconds=3)", "print(receipt)")
    stopped = on_loop(call(backend, raw(code), "call_g1", timeout=1))
    line = offered(stopped)

    async def give_up() -> None:  # the host cancels the resume while the backend waits
        waiting = asyncio.ensure_future(call(backend, raw(line), "call_g2", timeout=20))
        await asyncio.sleep(0.5)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting

    on_loop(give_up())
    resumed = on_loop(call(backend, raw(line), "call_g3", timeout=20))

    assert resumed.startswith("receipt 9"), resumed
    assert shop.calls == {"charge": 1}


@THROUGH_A_GATEWAY_TOO
@pytest.mark.parametrize("stop", ["interrupt", "cancel"])
def test_a_sync_tool_running_when_the_program_is_stopped_is_not_made_again(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any], stop: str
) -> None:
    shop.calls.clear()
    code = long_program(
        "receipt = await tools.charge(order=8, seconds=1.5)",
        "logged = await tools.note(text=receipt)",
        "print(logged)",
    )
    call_id = f"call_{stop}"

    async def stop_while_charging() -> str | None:
        running = asyncio.ensure_future(call(backend, raw(code), call_id))
        while not shop.calls["charge"]:  # the charge runs in its thread
            await asyncio.sleep(0.05)
        if stop == "cancel":  # the agent's loop gives up on the call
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            return None
        await backend.transport.interrupt()  # a person presses stop
        return await running

    stopped = on_loop(asyncio.wait_for(stop_while_charging(), BOUND))
    # Cancelled, the loop never read a text: it goes on with the program by its call id.
    line = offered(stopped) if stopped is not None else f'await ptc_retry.resume("{call_id}")'
    resumed = on_loop(call(backend, raw(line), f"{call_id}_resumed", timeout=20))

    assert resumed.startswith("noted receipt 8"), resumed
    assert shop.calls == {"charge": 1, "note": 1}
    assert [line["tool"] for line in late_lines(backend, call_id)] == ["charge"]


def test_what_the_host_did_not_complete_is_made_again(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    shop.calls.clear()
    shop.first_slow.update({"reserve", "refund"})
    code = long_program(
        "import asyncio",
        "done = await asyncio.gather(tools.reserve(item='lamp'), tools.refund(order=9))",
        "print(done)",
    )

    stopped = on_loop(call(backend, raw(code), "call_n1", timeout=1))
    # The async reserve was cancelled; the sync refund raised after the program stopped.
    resumed = on_loop(call(backend, raw(offered(stopped)), "call_n2", timeout=20))

    assert resumed.startswith("['reserved lamp', 'refunded 9']"), resumed
    assert shop.calls == {"reserve": 2, "refund": 2}
    assert "reused" not in resumed
    assert late_lines(backend, "call_n1") == []


def test_a_sync_tool_that_never_returns_holds_the_next_program_back_only_its_timeout(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    shop.calls.clear()
    stopped = on_loop(call(backend, raw("await tools.stall()"), "call_h1", timeout=1))
    assert backend.last_result is not None and backend.last_result.status == "timeout", stopped
    started = time.monotonic()
    try:
        after = on_loop(backend.run_code("'next'", call_id="call_h2", timeout=2))
        waited = time.monotonic() - started
        then = on_loop(backend.run_code("'then'", call_id="call_h3", timeout=6))
        waited_then = time.monotonic() - started - waited
    finally:
        shop.let_go.set()

    assert (after.value, then.value) == ("'next'", "'then'")
    assert 1.5 < waited < 10  # it waited for the stalled call, then went on without it
    assert waited_then < 4  # once: a call that never returns holds back one program, not 6 s
    assert shop.calls == {"stall": 1}


def test_a_late_result_no_message_can_carry_never_stops_the_next_program(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    stopped = on_loop(call(backend, raw("await tools.quote(seconds=1.5)"), "call_q1", timeout=1))
    assert backend.last_result is not None and backend.last_result.status == "timeout", stopped

    after = on_loop(backend.run_code("'next'", call_id="call_q2", timeout=20))
    again = on_loop(backend.run_code("'and the next'", call_id="call_q3", timeout=20))

    assert (after.value, again.value) == ("'next'", "'and the next'")


@THROUGH_A_GATEWAY_TOO
def test_a_result_in_flight_when_the_kernel_dies_is_reused_by_the_whole_program(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    """Last: it kills the kernel (the backend restarts it)."""
    shop.calls.clear()
    pid = on_loop(backend.run_code("import os\nos.getpid()", call_id="call_pid")).value
    shop.kernel_pid = int(pid or 0)
    code = long_program(
        "logged = await tools.note(text='order 10')",
        "paid = await tools.pay(order=10)",
        "print(logged, paid)",
    )

    died = on_loop(call(backend, raw(code), "call_k1"))

    assert backend.last_result is not None and backend.last_result.status == "died", died
    shop.kernel_pid = None  # the kernel is another one now: pay must not run again
    resumed = on_loop(call(backend, raw(offered(died)), "call_k2", timeout=20))

    # The whole program runs, and the line says so by the program's #n.
    assert backend.session_dir is not None
    ref = f"#{latest_line_of(backend.session_dir, 'call_k1')['n']}"
    assert f"the kernel restarted after {ref} ran" in resumed
    assert "noted order 10 paid 10" in resumed
    assert "2 tool results reused" in resumed
    assert shop.calls == {"note": 1, "pay": 1}
    (line,) = late_lines(backend, "call_k1")
    assert (line["k"], line["tool"], line["statement"]) == (2, "pay", None)


def died_paying(
    kb: KernelBackend, shop: Shop, on_loop: OnLoop[Any], code: str, call_id: str
) -> str:
    """Run ``code``, whose ``pay`` kills the kernel: the text the model reads. The host's
    counts start from zero, and ``pay`` kills no later kernel."""
    shop.calls.clear()
    pid = on_loop(kb.run_code("import os\nos.getpid()", call_id=f"{call_id}_pid")).value
    shop.kernel_pid = int(pid or 0)
    died = on_loop(call(kb, raw(code), call_id))
    assert kb.last_result is not None and kb.last_result.status == "died", died
    shop.kernel_pid = None
    return died


@THROUGH_A_GATEWAY_TOO
def test_a_slow_call_running_when_the_kernel_dies_is_made_once_by_short_resumes(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    """Also kills the kernel. The call's line was never written (the kernel died while it
    ran), so the resume knows it only by its place after the recorded calls."""
    code = long_program(
        "logged = await tools.note(text='order 11')",
        "paid = await tools.pay(order=11)",
        "print(logged, paid)",
    )
    shop.hold_payment = threading.Event()  # the payment runs until the first resume stopped
    try:
        died = died_paying(backend, shop, on_loop, code, "call_d0")
        text = on_loop(call(backend, raw(offered(died)), "call_d1", timeout=1))
    finally:
        shop.hold_payment.set()
        shop.hold_payment = None

    *statuses, text = resumed_until_ok(backend, text, on_loop, "call_d")

    assert "noted order 11 paid 11" in text, (statuses, text)
    assert statuses[0] == "timeout"  # the first resume started while the payment ran
    assert shop.calls == {"note": 1, "pay": 1}


@THROUGH_A_GATEWAY_TOO
def test_a_kernel_that_dies_inside_a_recorded_function_is_resumed_paying_once(
    backend: KernelBackend, shop: Shop, on_loop: OnLoop[Any]
) -> None:
    """Also kills the kernel, while a recorded function waits for a slow payment: the
    function's own line is written as it starts, so the resume follows its calls."""
    code = long_program(
        "@ptc_retry.recorded",
        "async def checkout(order):",
        "    await tools.note(text=f'start {order}')",
        "    return await tools.pay(order=order, seconds=3)",
        "logged = await tools.note(text='top')",
        "print(logged, await checkout(15))",
    )
    died = died_paying(backend, shop, on_loop, code, "call_r0")

    resumed = on_loop(call(backend, raw(offered(died)), "call_r1", timeout=20))

    assert "noted top paid 15" in resumed, resumed
    assert shop.calls == {"note": 2, "pay": 1}


# -- the kernel's rules ----------------------------------------------------------------------


def test_a_calls_last_line_counts_for_reuse_and_the_listing() -> None:
    interrupted = {
        "k": 1, "tool": "charge", "arguments": {"order": 7}, "ok": False,
        "error": "interrupted while it ran", "duration": 1.0, "reused": False, "statement": 0,
    }  # fmt: skip
    noted = {"k": 2, "tool": "note", "arguments": {}, "ok": True, "result": "n", "statement": 0}
    late = {**interrupted, "ok": True, "result": "receipt 7", "late": True}
    del late["error"]
    records = [interrupted, noted, late]

    reuse = Reuse(in_order(records).lines, call_id="c1", source="#1")

    assert reuse.take(CallRecord(1, "charge", {"order": 7}, 0)) is late
    assert reuse.take(CallRecord(2, "note", {}, 0)) is noted
    listing = format_tool_calls(records, "c1").splitlines()
    assert listing[0].startswith("# tool calls: 2 ")
    assert [row.split()[1:4] for row in listing[2:]] == [["1", "charge", "ok"], ["2", "note", "ok"]]


def test_the_kernel_appends_only_what_its_recording_lacks(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    host = Answering()
    host.failing.add("db")
    code = (
        "a = await tools.double(x=1)\n"
        "try:\n    await tools.flaky(key='db')\nexcept ptc_retry.ToolError:\n    pass"
    )
    assert host.run(kernel, code, call_id="p1").status == "ok"
    before = tool_call_lines(checkpoint_root / "test", "p1")
    entries: list[Any] = [
        {"program": "p1", "k": 1, "tool": "double", "arguments": {"x": 1}, "result": 99},
        {"program": "p1", "k": 2, "tool": "flaky", "arguments": {"key": "other"}, "result": 1},
        {"program": "nowhere", "k": 1, "tool": "double", "arguments": {"x": 1}, "result": 2},
        {"program": "p1", "k": 2, "tool": "flaky"},
        "not an entry",
        {"program": "p1", "k": 3, "tool": "recorded:__main__.f", "arguments": {}, "result": 1},
        {"program": "p1", "k": 2, "tool": "flaky", "arguments": {"key": "db"}, "result": "up"},
    ]

    after = host.run(kernel, "'ran'", **{TOOL_RESULTS: entries})

    assert (after.status, after.result, after.stderr) == ("ok", "'ran'", "")
    lines = tool_call_lines(checkpoint_root / "test", "p1")
    assert lines[: len(before)] == before
    # Only the last entry: k 1 had succeeded, the others were of another call, of no
    # program, malformed, or of a function the kernel runs.
    (late,) = lines[len(before) :]
    assert (late["k"], late["tool"], late["arguments"]) == (2, "flaky", {"key": "db"})
    assert (late["ok"], late["result"], late["late"]) == (True, "up", True)
    assert late["statement"] == before[1]["statement"] == 1
    again = host.run(kernel, "'again'", **{TOOL_RESULTS: entries})
    assert again.result == "'again'" and tool_call_lines(checkpoint_root / "test", "p1") == lines


def test_a_late_line_keeps_the_defaults_its_call_was_compared_with(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    host = Notifier()
    host.answer = lambda call: {"id": call["id"], "ok": False, "error": "TimeoutError: slow"}
    code = "try:\n    await tools.notify('ops')\nexcept ptc_retry.ToolError:\n    pass"
    assert host.run(kernel, code, call_id="d1").status == "ok"
    (failed,) = tool_call_lines(checkpoint_root / "test", "d1")
    entry = {"program": "d1", "k": 1, "tool": "notify", "arguments": {"to": "ops"}, "result": 1}

    host.run(kernel, "'ran'", **{TOOL_RESULTS: [entry]})

    late = tool_call_lines(checkpoint_root / "test", "d1")[-1]
    assert late["late"] is True
    # A fix that followed this program compares the call as it was made: urgent=False.
    assert (late["schema"], late["defaults"]) == (failed["schema"], {"urgent": False})
