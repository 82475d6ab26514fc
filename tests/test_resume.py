"""Resume a program from the statement where it failed, in one shared ptc-retry kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ptc_retry.core.notice import parse_notice
from ptc_retry.core.program import compile_program, statement_spans
from ptc_retry.kernel.resume import edited_statement

from .helpers import Execution, Kernel, StartKernel, latest_line_of

# Four top-level statements (the first is a magic): the third is slow and counts
# its runs in `slow_runs`, the fourth fails on a misspelt name. Over notice_min_bytes.
PROGRAM = """\
%time prices = {"apple": 1.25, "pear": 0.80, "plum": 2.10}

def slow_total(items):
    \"\"\"Stands for an expensive step: a download, a model call, a big query.\"\"\"
    global slow_runs
    import time
    slow_runs = globals().get("slow_runs", 0) + 1
    time.sleep(0.3)
    missing = [item for item in items if item not in prices]
    if missing:
        raise KeyError(f"no price for {missing}")
    return sum(prices[item] for item in items)

total = slow_total(["apple", "pear", "plum"])
print(f"total: {totl:.2f}")
"""
FIX = ("totl", "total")


@pytest.fixture(scope="module")
def kernel(start_shared_kernel: StartKernel) -> Kernel:
    # The slow statement takes 0.3 s: enough, here, for the notice to offer skipping it.
    return start_shared_kernel("resume", args=("--PtcRetry.resume_min_seconds=0.2",))


_turns = iter(range(1, 10_000))


def failed_program(kernel: Kernel, call_id: str, turn: int, program: str = PROGRAM) -> Execution:
    kernel.execute_call("slow_runs = 0")
    failed = kernel.execute_call(program, call_id=call_id, turn=turn)
    assert failed.error["ename"] == "NameError"
    return failed


def slow_runs(kernel: Kernel) -> str:
    return kernel.execute_call("print(slow_runs)").stdout.strip()


def test_the_failed_statement_is_recorded_and_noticed(kernel: Kernel, module_root: Path) -> None:
    failed = failed_program(kernel, "r1", next(_turns))

    line = latest_line_of(module_root / "resume", "r1")
    assert line["failed_statement"] == {"index": 3, "lines": [15, 15]}
    assert line["completed"] == 3
    assert parse_notice(failed.ptc["notice"]) == failed.ptc["reference"]
    reference = failed.ptc["reference"]
    assert failed.ptc["notice"].endswith(
        f'Send only:\nawait ptc_retry.replay("{reference}", "<old>", "<new>", resume=True)'
    )


def test_resume_runs_only_the_failed_statement(kernel: Kernel, module_root: Path) -> None:
    turn = next(_turns)
    failed_program(kernel, "r2", turn)

    fixed = kernel.execute_call(
        f"await ptc_retry.replay('r2', {FIX[0]!r}, {FIX[1]!r}, resume=True)", turn=turn
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "total: 4.15\n"  # no %time output: the first statement did not run
    reference = latest_line_of(module_root / "resume", "r2")["n"]
    started = '(print(f"total: {total:.2f}"))'
    assert fixed.stderr == f"ptc-retry: resuming #{reference} at line 15 {started}.\n"
    assert slow_runs(kernel) == "1"
    assert latest_line_of(module_root / "resume", fixed.ptc["call_id"])["resumed_from"] == 3


def test_an_edit_in_an_earlier_statement_starts_there(kernel: Kernel) -> None:
    turn = next(_turns)
    failed_program(kernel, "r3", turn)

    fixed = kernel.execute_call(
        f"await ptc_retry.replay('r3', edits=[('0.3', '0.2'), {FIX!r}], resume=True)",
        turn=turn,
    )

    assert fixed.status == "ok", fixed.error
    assert "Wall time" not in fixed.stdout  # started at the second statement, not the first
    assert slow_runs(kernel) == "2"


def test_a_failure_inside_a_function_is_located_at_its_top_level_call(
    kernel: Kernel, module_root: Path
) -> None:
    program = PROGRAM.replace("prices[item]", "prices[item.upper()]")
    kernel.execute_call(program, call_id="r4", turn=next(_turns))
    assert latest_line_of(module_root / "resume", "r4")["failed_statement"] == {
        "index": 2,
        "lines": [14, 14],
    }


def test_a_resumed_program_that_fails_again_can_be_resumed_again(
    kernel: Kernel, module_root: Path
) -> None:
    turn = next(_turns)
    failed_program(kernel, "r5", turn)
    again = kernel.execute_call("await ptc_retry.resume('r5')", call_id="r5b", turn=turn)
    assert again.error["ename"] == "NameError"
    assert latest_line_of(module_root / "resume", "r5b")["failed_statement"]["index"] == 3
    fixed = kernel.execute_call(
        f"await ptc_retry.replay('r5b', {FIX[0]!r}, {FIX[1]!r}, resume=True)"
    )
    assert fixed.stdout == "total: 4.15\n"
    assert slow_runs(kernel) == "1"


def test_a_target_that_did_not_fail_runs_whole_and_says_so(kernel: Kernel) -> None:
    kernel.execute_call("slow_runs = 0")
    ran = kernel.execute_call(PROGRAM.replace(*FIX), call_id="r6")
    again = kernel.execute_call("await ptc_retry.resume('r6')")
    ref = ran.ptc["reference"]  # a person's and the model's name for it, not the call id
    assert again.stderr == (
        f"ptc-retry: {ref} did not fail, so there is nothing to skip: running the whole program.\n"
    )
    assert slow_runs(kernel) == "2"


def test_the_budget_ends_in_a_full_run(kernel: Kernel) -> None:
    turn = next(_turns)
    kernel.execute_call("%config PtcRetry.max_resumes_per_turn = 2")
    try:
        failed_program(kernel, "r7", turn)
        resumes = [kernel.execute_call("await ptc_retry.resume('r7')", turn=turn) for _ in range(3)]
        assert [r.error["ename"] for r in resumes] == ["NameError"] * 3
        assert all(r.stderr.startswith("ptc-retry: resuming #") for r in resumes[:2])
        assert "used its 2 resumes (PtcRetry.max_resumes_per_turn): running the whole" in (
            resumes[2].stderr
        )
        assert slow_runs(kernel) == "2"  # only the last resume ran the slow step again
        fresh = kernel.execute_call("await ptc_retry.resume('r7')", turn=next(_turns))
        assert fresh.stderr.startswith("ptc-retry: resuming #")  # a new turn, a new budget
    finally:
        kernel.execute_call("%config PtcRetry.max_resumes_per_turn = 3")


def test_after_a_restart_everything_runs_and_it_says_so(kernel: Kernel) -> None:
    ref = failed_program(kernel, "r8", next(_turns)).ptc["reference"]
    kernel.restart()

    fixed = kernel.execute_call(
        f"await ptc_retry.replay('r8', {FIX[0]!r}, {FIX[1]!r}, resume=True)"
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stderr.startswith(
        f"ptc-retry: the kernel restarted after {ref} ran, so what it computed is gone: "
        "running the whole program.\n"
    )
    assert "total: 4.15" in fixed.stdout
    assert slow_runs(kernel) == "1"


# -- the statement split, without a kernel ----------------------------------------------


def test_statement_spans_count_decorators_and_multiline_statements() -> None:
    text = "import os\n@staticmethod\ndef f():\n    return 1\nx = (1,\n     2)\nx\n"
    assert statement_spans(text) == [(1, 1), (2, 4), (5, 6), (7, 7)]


@pytest.mark.parametrize(
    ("corrected", "touched"),
    [
        ("a = 1\nb = 2\nc = 3\n", None),
        ("a = 1\nb = 22\nc = 3\n", 1),
        ("a = 1\nb = 2\n\nc = 3\n", 2),
        ("a = 1\nb = 2\nc = 3\n# done\n", None),
        ("a = 10\nb = 2\nc = 3\n", 0),
    ],
)
def test_edited_statement_is_the_first_statement_an_edit_touches(
    corrected: str, touched: int | None
) -> None:
    assert edited_statement("a = 1\nb = 2\nc = 3\n", corrected, corrected) == touched


def test_compile_program_from_a_statement_keeps_line_numbers_and_futures() -> None:
    source = "from __future__ import annotations\nx = 1\ndef f(a: Undefined): pass\n1 / 0\n"
    program = compile_program(source, "<resume-test>", start=2)
    namespace: dict[str, Any] = {}
    with pytest.raises(ZeroDivisionError) as caught:
        import asyncio

        asyncio.run(program.run(namespace))
    assert "x" not in namespace and "f" in namespace  # annotations stay unevaluated
    assert caught.traceback[-1].lineno + 1 == 4
