"""The in-kernel time limit, in one shared ptc-retry kernel."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .helpers import Execution, Kernel, StartKernel

# Queues three batches, prints, then waits for a worker that never answers: only the
# time limit ends it. Over notice_min_bytes, so the notice is the full one. Four
# statements complete before the loop.
LOOPING = """\
batches = [
    {"name": "invoices-2024-05", "rows": 1200, "priority": "high"},
    {"name": "invoices-2024-06", "rows": 980, "priority": "normal"},
    {"name": "refunds-2024-06", "rows": 75, "priority": "low"},
]
steps = []
for batch in batches:
    steps.append({"batch": batch["name"], "state": "queued", "rows": batch["rows"]})
print("working on it", flush=True)
while True:
    pass  # stands for polling a worker that never reports the batches done
"""


@pytest.fixture(scope="module")
def kernel(start_shared_kernel: StartKernel) -> Kernel:
    return start_shared_kernel("limit")


def timed(kernel: Kernel, code: str, **metadata: Any) -> tuple[Execution, float]:
    started = time.monotonic()
    execution = kernel.execute_call(code, **metadata)
    return execution, time.monotonic() - started


def test_a_looping_program_stops_at_the_limit_with_its_output(kernel: Kernel) -> None:
    stopped, seconds = timed(kernel, LOOPING, call_id="loop1", time_limit=0.5)

    assert 0.5 <= seconds < 5
    assert stopped.stdout == "working on it\n"
    assert stopped.error["ename"] == "KeyboardInterrupt"
    assert stopped.error["evalue"] == "time limit of 0.5 s reached"
    assert stopped.ptc["status"] == "interrupted" and stopped.ptc["time_limit"] == 0.5
    reference = stopped.ptc["reference"]
    assert stopped.ptc["notice"] == (
        f"[ptc-retry] Stopped by the time limit (0.5 s); saved as {reference}. "
        f'To go on:\nawait ptc_retry.resume("{reference}")'
    )

    following, seconds = timed(kernel, "print('next')")
    assert following.status == "ok" and following.stdout == "next\n"
    assert "time_limit" not in following.ptc
    assert seconds < 2


@pytest.mark.parametrize(
    ("program", "ename"),
    [
        pytest.param("import asyncio\nawait asyncio.sleep(60)", "CancelledError", id="awaiting"),
        pytest.param(
            "import asyncio\nawait asyncio.sleep(0)\nwhile True:\n    pass",
            "KeyboardInterrupt",
            id="async cell computing",
        ),
        pytest.param("import time\ntime.sleep(60)", "KeyboardInterrupt", id="blocking call"),
    ],
)
def test_every_kind_of_program_is_stopped(kernel: Kernel, program: str, ename: str) -> None:
    stopped, seconds = timed(kernel, "print('before')\n" + program, time_limit=0.5)

    assert seconds < 5
    assert stopped.stdout == "before\n"
    assert (stopped.error["ename"], stopped.error["evalue"]) == (
        ename,
        "time limit of 0.5 s reached",
    )
    assert stopped.ptc["status"] == "interrupted"
    assert kernel.execute_call("print('next')").stdout == "next\n"


def test_a_replay_is_stopped_too(kernel: Kernel) -> None:
    kernel.execute_call("import time\nprint('saved')", call_id="quick")
    stopped, seconds = timed(
        kernel,
        "await ptc_retry.replay('quick', \"print('saved')\", 'while True: time.sleep(0.01)')",
        time_limit=0.5,
    )
    assert seconds < 5
    assert stopped.error["evalue"] == "time limit of 0.5 s reached"
    assert stopped.ptc["status"] == "interrupted"


def test_the_trait_limits_every_program(kernel: Kernel) -> None:
    kernel.execute_call("%config PtcRetry.time_limit = 0.5")
    try:
        stopped, seconds = timed(kernel, "while True:\n    pass")
        assert stopped.error["evalue"] == "time limit of 0.5 s reached"
        assert seconds < 5
        assert "[ptc-retry] Stopped by the time limit (0.5 s)." == stopped.ptc["notice"]
    finally:
        kernel.execute_call("%config PtcRetry.time_limit = None")


def test_a_stopped_program_resumes_after_its_completed_statements(kernel: Kernel) -> None:
    kernel.execute_call(LOOPING, call_id="loop2", time_limit=0.5)

    resumed = kernel.execute_call(
        "await ptc_retry.replay('loop2', 'while True:\\n    pass', 'len(steps)', resume=True)",
    )

    assert resumed.status == "ok", resumed.error
    assert resumed.result == "3"  # the loop that filled `steps` did not run again
    assert resumed.stdout == ""


def test_no_interrupt_leaks_into_the_next_program(kernel: Kernel) -> None:
    # A limit that passes just as the program ends, again and again.
    for _ in range(15):
        racing = kernel.execute_call("import time\ntime.sleep(0.05)", time_limit=0.05)
        assert racing.ptc["status"] in ("ok", "interrupted")
        following = kernel.execute_call("x = sum(range(100000))")
        assert following.status == "ok", following.error


def test_a_thread_runs_only_while_a_limited_program_runs(kernel: Kernel) -> None:
    names = (
        "import threading\n"
        "print(sum(t.name == 'ptc-retry time limit' for t in threading.enumerate()))"
    )
    assert kernel.execute_call(names).stdout == "0\n"
    assert kernel.execute_call(names, time_limit=30).stdout == "1\n"
    time.sleep(0.1)
    assert kernel.execute_call(names).stdout == "0\n"


def test_a_persons_interrupt_still_works_under_a_limit(kernel: Kernel) -> None:
    msg_id = kernel.send("print('long', flush=True)\nwhile True:\n    pass", {"time_limit": 30})
    kernel.wait_for_output(msg_id, "long")
    kernel.manager.interrupt_kernel()
    interrupted = kernel.collect(msg_id, timeout=10)

    assert interrupted.error["ename"] == "KeyboardInterrupt"
    assert interrupted.error["evalue"] == ""  # the person's interrupt, not the limit
    assert interrupted.ptc["status"] == "interrupted"
    assert kernel.execute_call("print('next')").stdout == "next\n"


@pytest.mark.parametrize("value", ["0", "-1", "float('nan')"])
def test_a_bad_limit_is_rejected_in_one_clear_line(kernel: Kernel, value: str) -> None:
    attempt = kernel.execute_call(f"%config PtcRetry.time_limit = {value}")
    assert attempt.stderr.count("\n") == 1
    assert (
        "PtcRetry.time_limit must be a number of seconds > 0, or None (or inf) for no limit, "
        "not float"
    ) in attempt.stderr
