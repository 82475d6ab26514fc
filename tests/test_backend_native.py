"""KernelBackend(mode="native") end to end: run_code and editPreviousToolCalling on a real kernel.

The model calls ``run_code`` as a plain tool; a failed long program gets the native notice
(never the code-mode ``ptc_retry.replay`` one) and an ``editPreviousToolCalling`` patch on
``code`` re-runs the corrected program in the same kernel. Tests that leave the kernel
usable share one backend and use distinct call ids.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import BackendError, KernelBackend, KernelSetup
from ptc_retry.backend.results import NATIVE_RUN_CODE_DESCRIPTION
from ptc_retry.core.notice import native_failure_notice, prompt_section
from ptc_retry.native import EDIT_TOOL

from .helpers import OnLoop, history, line_of, raw

SETUP = """\
orders = [
    {"id": 1, "region": "north", "amount": 120, "items": 3},
    {"id": 2, "region": "south", "amount": 80, "items": 1},
    {"id": 3, "region": "north", "amount": 40, "items": 2},
    {"id": 4, "region": "east", "amount": 310, "items": 7},
]
tax_rate = 0.25
"""

# Over 500 bytes (the default notice threshold), one wrong literal: "regoin" for "region".
# It uses what SETUP left in the kernel's namespace.
PROGRAM = """\
import statistics
from collections import defaultdict


def by_region(rows, rate):
    \"\"\"Total order amount per region, tax included.\"\"\"
    totals = defaultdict(list)
    for row in rows:
        totals[row["regoin"]].append(row["amount"] * (1 + rate))
    return {name: sum(values) for name, values in sorted(totals.items())}


def busiest(rows):
    \"\"\"The region that sold the most items.\"\"\"
    counts = defaultdict(int)
    for row in rows:
        counts[row["region"]] += row["items"]
    return max(counts, key=counts.get)


summary = by_region(orders, tax_rate)
print("regions:", list(summary))
print("busiest:", busiest(orders))
print(f"mean order: {statistics.mean(row['amount'] for row in orders):.2f}")
summary
"""
OUTPUT = (
    "regions: ['east', 'north', 'south']\nbusiest: east\nmean order: 137.50\n"
    "{'east': 387.5, 'north': 200.0, 'south': 100.0}"
)
TYPO = {"path": "code", "old_string": 'row["regoin"]', "new_string": 'row["region"]'}


def edit(target: str | int, *entries: dict[str, Any]) -> str:
    """The raw arguments of an editPreviousToolCalling call."""
    locator = "call_id" if isinstance(target, str) else "previous_ordinal"
    return json.dumps({locator: target, "patch": list(entries)})


@pytest.fixture(scope="module")
def options(options: dict[str, Any]) -> dict[str, Any]:
    return {**options, "mode": "native"}


@pytest.fixture(scope="module")
def backend(backend: KernelBackend, on_loop: OnLoop[Any]) -> KernelBackend:
    """The module's native-mode backend, with ``SETUP`` run."""
    assert on_loop(backend.handle_tool_call("run_code", raw(SETUP), "call_setup")) == "[no output]"
    return backend


def test_program_is_over_the_notice_threshold() -> None:
    assert len(PROGRAM.encode()) >= 500 and len(raw(PROGRAM).encode()) >= 500


# -- what the model is given ------------------------------------------------------------------


def test_native_mode_offers_run_code_and_the_edit_tool(
    backend: KernelBackend, options: dict[str, Any]
) -> None:
    openai = backend.tool_schemas("openai")
    anthropic = backend.tool_schemas("anthropic")

    assert [t["function"]["name"] for t in openai] == ["run_code", EDIT_TOOL]
    assert [t["name"] for t in anthropic] == ["run_code", EDIT_TOOL]
    assert anthropic[0]["input_schema"]["required"] == ["code"]
    assert "patch" in anthropic[1]["input_schema"]["properties"]
    assert openai[0]["function"]["description"] == NATIVE_RUN_CODE_DESCRIPTION
    assert "ptc_retry.replay" not in json.dumps(openai)
    assert backend.tool_schema("anthropic", EDIT_TOOL) == anthropic[1]
    # The same before start(), when no journal exists yet (nothing is written to disk).
    fresh = KernelBackend(**options)
    assert fresh.tool_schemas("openai") == openai
    assert fresh.tool_schemas("anthropic") == anthropic
    assert not fresh.session_dir.exists()


def test_system_prompt_teaches_the_edit_tool(backend: KernelBackend) -> None:
    prompt = backend.system_prompt()
    assert prompt == prompt_section("native", session_dir=backend.session_dir)
    assert EDIT_TOOL in prompt and "ptc_retry.replay" not in prompt


def test_kernel_checkpoints_live_apart_from_the_journal(backend: KernelBackend) -> None:
    assert backend.native is not None
    assert backend.native.journal.session_dir == backend.session_dir
    assert backend.kernel_session_dir == backend.session_dir / "kernel" / backend.session_id
    journal = backend.session_dir / "by-id" / "call_setup.json"
    kernel = backend.kernel_session_dir / "by-id" / "call_setup.json"
    assert journal.read_bytes() == raw(SETUP).encode()  # the journal: byte for byte
    assert json.loads(kernel.read_text()) == {"code": SETUP}  # the kernel's own record
    for directory in (backend.session_dir, backend.kernel_session_dir):
        assert directory.stat().st_mode & 0o777 == 0o700  # the journal made it, not makedirs


# -- fail, notice, edit, success --------------------------------------------------------------


def test_a_failed_program_is_fixed_by_an_edit_that_reruns_it_in_the_kernel(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    first = on_loop(backend.handle_tool_call("run_code", raw(PROGRAM), "call_n1"))

    assert "KeyError: 'regoin'" in first and "\x1b[" not in first
    assert first.splitlines()[-1] == native_failure_notice("call_n1", field="code")
    assert "ptc_retry.replay" not in first and first.count("[ptc-retry]") == 1
    assert backend.last_result.notice is None  # the kernel added none of its own
    assert backend.last_tool_result.status == "error"

    second = on_loop(backend.handle_tool_call(EDIT_TOOL, edit("call_n1", TYPO), "call_n2"))

    assert second == f"replayed call_n1 (run_code) with 1 patch entry: {OUTPUT}"
    assert backend.last_tool_result.replay_of == "call_n1"
    # The corrected program ran in the same kernel: SETUP's names were there, its own stay.
    after = on_loop(
        backend.handle_tool_call("run_code", raw("summary['north'], tax_rate"), "call_n3")
    )
    assert after == "(200.0, 0.25)"
    # The journal: the failure, then the replay with its patched program as its own arguments.
    assert line_of(backend.session_dir, "call_n1")["status"] == "error"
    replay = line_of(backend.session_dir, "call_n2")
    assert (replay["tool"], replay["status"], replay["replay_of"]) == ("run_code", "ok", "call_n1")
    patched = json.loads((backend.session_dir / "by-id" / "call_n2.json").read_text())
    assert patched == {"code": PROGRAM.replace("regoin", "region")}
    # The kernel ran both programs under the journal's ids.
    kernel = backend.kernel_session_dir
    assert line_of(kernel, "call_n1")["status"] == "error"
    assert line_of(kernel, "call_n2")["status"] == "ok"
    assert json.loads((kernel / "by-id" / "call_n2.json").read_text()) == patched


def test_a_failing_edit_then_a_corrected_one_accumulates_the_fixes(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    on_loop(backend.handle_tool_call("run_code", raw(PROGRAM), "call_f1"))
    kernel_calls = len(history(backend.kernel_session_dir))

    missing = {"path": "code", "old_string": "row['regoin']", "new_string": "row['region']"}
    refused = on_loop(backend.handle_tool_call(EDIT_TOOL, edit("call_f1", missing), "call_f2"))
    assert refused.startswith(
        f"{EDIT_TOOL} failed, nothing ran, call_f1 (run_code) is unchanged: patch[0]"
    )
    assert len(history(backend.kernel_session_dir)) == kernel_calls  # nothing reached the kernel

    wrong = {"path": "code", "old_string": "regoin", "new_string": "regio"}
    failed = on_loop(backend.handle_tool_call(EDIT_TOOL, edit("call_f1", wrong), "call_f3"))
    assert failed.startswith("replayed call_f1 (run_code) with 1 patch entry; it failed: ")
    assert "KeyError: 'regio'" in failed
    # The notice points at the failed replay, whose checkpoint holds the patched program.
    assert failed.splitlines()[-1] == native_failure_notice("call_f3", field="code")

    fix = {"path": "code", "old_string": 'row["regio"]', "new_string": 'row["region"]'}
    fixed = on_loop(backend.handle_tool_call(EDIT_TOOL, edit("call_f3", fix), "call_f4"))
    assert fixed == f"replayed call_f3 (run_code) with 1 patch entry: {OUTPUT}"
    assert line_of(backend.session_dir, "call_f4")["replay_of"] == "call_f3"
    assert line_of(backend.kernel_session_dir, "call_f4")["status"] == "ok"


def test_previous_ordinal_names_a_call_of_the_previous_message(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    async def message(calls: list[tuple[str, str, str]]) -> list[str]:
        step = backend.next_step()
        return await asyncio.gather(
            *(backend.handle_tool_call(n, a, i, step=step) for n, a, i in calls)
        )

    first = on_loop(
        message(
            [
                ("run_code", raw("region_names = sorted({o['region'] for o in orders})"), "p1"),
                ("run_code", raw(PROGRAM), "p2"),
            ]
        )
    )
    assert first[0] == "[no output]" and "KeyError: 'regoin'" in first[1]
    lines = line_of(backend.session_dir, "p1"), line_of(backend.session_dir, "p2")
    assert lines[0]["step"] == lines[1]["step"] and [x["ordinal"] for x in lines] == [1, 2]

    # The edit is the second call of its message: previous_ordinal still means the one before.
    second = on_loop(
        message(
            [
                ("run_code", raw("len(region_names)"), "p3"),
                (EDIT_TOOL, edit(2, TYPO), "p4"),
            ]
        )
    )
    assert second == ["3", f"replayed p2 (run_code) with 1 patch entry: {OUTPUT}"]
    assert line_of(backend.session_dir, "p4")["replay_of"] == "p2"


def test_without_step_the_call_just_before_is_previous_ordinal_1(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    on_loop(backend.handle_tool_call("run_code", raw(PROGRAM), "call_s1"))
    text = on_loop(backend.handle_tool_call(EDIT_TOOL, edit(1, TYPO), "call_s2"))
    assert text == f"replayed call_s1 (run_code) with 1 patch entry: {OUTPUT}"


# -- what the kernel still says, what it never says -------------------------------------------


def test_short_failures_get_no_notice_but_the_guard_still_speaks(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    texts = [
        on_loop(backend.handle_tool_call("run_code", raw("1 / 0"), f"call_g{n}")) for n in (1, 2, 3)
    ]
    assert all("ZeroDivisionError" in t for t in texts)
    assert "[ptc-retry]" not in texts[0] + texts[1]  # below the threshold: nothing to add
    assert texts[2].splitlines()[-1] == (
        "[ptc-retry] 3 identical failures in a row: change the program, do not repeat it."
    )


def test_a_time_limit_stop_keeps_the_kernels_sentence_and_gets_the_native_notice(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    code = "import time\n" + "# waiting for the slow service to answer\n" * 12 + "time.sleep(30)"
    text = on_loop(backend.handle_tool_call("run_code", raw(code), "call_t1", timeout=1))

    assert "[ptc-retry] Stopped by the time limit (1 s)." in text
    assert text.splitlines()[-1] == native_failure_notice("call_t1", field="code")
    assert "ptc_retry.replay" not in text
    assert backend.last_result.status == "timeout" and not backend.last_result.restarted
    assert line_of(backend.session_dir, "call_t1")["status"] == "error"


def test_malformed_calls_are_journaled_and_never_reach_the_kernel(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    kernel_calls = len(history(backend.kernel_session_dir))

    not_json = on_loop(backend.handle_tool_call("run_code", '{"code": "print(1)"', "call_m1"))
    wrong_key = on_loop(backend.handle_tool_call("run_code", '{"cod": "print(1)"}', "call_m2"))
    unknown = on_loop(backend.handle_tool_call("write_file", "{}", "call_m3"))
    decoded = on_loop(backend.handle_tool_call("run_code", {"code": "print('mapped')"}, "call_m4"))

    assert "not valid JSON" in not_json
    assert (
        wrong_key == 'Error: run_code needs "code": a string holding the Python program; it '
        "got 'cod'. Nothing ran."
    )
    assert unknown == "unknown tool 'write_file'; the tools are: run_code, editPreviousToolCalling"
    assert decoded == "mapped"
    for call_id in ("call_m1", "call_m2", "call_m3"):
        assert line_of(backend.session_dir, call_id)["status"] == "error"
    assert len(history(backend.kernel_session_dir)) == kernel_calls + 1  # only call_m4 ran


# -- lifecycle --------------------------------------------------------------------------------


def test_shutdown_removes_the_journal_and_the_kernels_checkpoints(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    async def session(keep: bool) -> KernelBackend:
        async with KernelBackend(**options) as kb:
            await kb.handle_tool_call("run_code", raw(PROGRAM), "call_x1")
            assert (kb.session_dir / "by-id" / "call_x1.json").exists()
            assert (kb.kernel_session_dir / "by-id" / "call_x1.json").exists()
            if keep:
                await kb.shutdown(keep=True)
        return kb

    gone = on_loop(session(keep=False))
    assert not gone.session_dir.exists()
    kept = on_loop(session(keep=True))
    assert line_of(kept.session_dir, "call_x1")["status"] == "error"
    assert line_of(kept.kernel_session_dir, "call_x1")["status"] == "error"


def test_a_kernel_death_is_told_in_native_words_also_after_the_restart(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    dies = "import os\n" + "# flush the write-ahead log before the process goes\n" * 10
    dies += "os._exit(3)"

    async def session() -> list[str]:
        async with KernelBackend(**options) as kb:
            died = await kb.handle_tool_call("run_code", raw(dies), "call_d1")
            assert kb.last_result.status == "died"
            # The restarted kernel has the same command line: still no code-mode notice.
            again = await kb.handle_tool_call("run_code", raw(PROGRAM), "call_d2")
            return [died, again]

    died, again = on_loop(session())
    assert "[ptc-retry] The kernel died while running this program (exit code 3)" in died
    assert died.splitlines()[-1] == native_failure_notice("call_d1", field="code")
    assert "NameError: name 'orders' is not defined" in again  # the state went with the kernel
    assert again.splitlines()[-1] == native_failure_notice("call_d2", field="code")
    assert "ptc_retry.replay" not in died + again


def test_calls_before_start_raise(options: dict[str, Any], on_loop: OnLoop[Any]) -> None:
    kb = KernelBackend(**options)
    with pytest.raises(BackendError, match="not running"):
        on_loop(kb.handle_tool_call("run_code", raw("1"), "call_z1"))


def test_native_mode_through_a_gateway_is_refused() -> None:
    with pytest.raises(ValueError, match="mode='native' does not work through a gateway"):
        KernelBackend(mode="native", gateway_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="unknown mode 'tools'"):
        KernelBackend(mode="tools")


class DeadKernel:
    """A transport whose kernel is dead and cannot be restarted (no process is started)."""

    kernel_name = "ptc-retry"
    extension = True
    url = None
    checkpoints_here = True

    async def start(self, setup: KernelSetup) -> Path:
        assert setup.root is not None
        return setup.root / setup.session_id

    async def send_execute(self, content: dict[str, Any], metadata: dict[str, Any]) -> str:
        raise AssertionError("nothing may be sent to a dead kernel")

    async def receive(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        return None

    async def interrupt(self) -> None:
        pass

    async def restart(self) -> None:
        raise RuntimeError("no such process")

    async def is_alive(self) -> bool:
        return False

    async def exit_description(self) -> str:
        return "exit code 1"

    async def shutdown(self, remove: str | None) -> None:
        pass


def test_a_kernel_that_cannot_restart_is_journaled_and_raised_to_the_caller(
    tmp_path: Path,
) -> None:
    async def session() -> tuple[Any, dict[str, Any]]:
        kb = KernelBackend(mode="native", transport=DeadKernel(), root=tmp_path)
        await kb.start()
        try:
            with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
                await kb.handle_tool_call("run_code", raw("1"), "call_t0", timeout=0)
            with pytest.raises(BackendError, match="could not be restarted .no such process"):
                await kb.handle_tool_call("run_code", raw("1"), "call_dead")
            assert "call_t0" not in {h["id"] for h in history(kb.session_dir)}  # never journaled
            return kb.last_tool_result, line_of(kb.session_dir, "call_dead")
        finally:
            await kb.shutdown()

    result, line = asyncio.run(session())

    assert (result.status, result.ename) == ("error", "BackendError")
    assert result.text.startswith("Error: the 'ptc-retry' kernel could not be restarted")
    assert (line["status"], line["ename"]) == ("error", "BackendError")
