"""The repeated-failure guard, end to end in one shared ptc-retry kernel.

Each test starts the guard fresh with a ``%config`` of its mode (a configuration
change resets the guard) and uses its own turn number.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from traitlets import TraitError

from ptc_retry.core.guard import RepeatedFailureGuard, canonical_arguments, failure_key
from ptc_retry.core.notice import parse_notice
from ptc_retry.kernel.config import PtcRetry

from .helpers import Execution, Kernel, StartKernel, latest_line_of

# Over notice_min_bytes, so failures get the full notice. Its error message holds an
# address that differs from run to run.
FAILING = """\
rows = [
    {"name": "alpha", "qty": 1, "unit": "kg"},
    {"name": "beta", "qty": 2, "unit": "kg"},
    {"name": "gamma", "qty": -4, "unit": "kg"},
]


def check(row):
    if row["qty"] < 0:
        return f"{row['name']}: negative quantity"
    return None


problems = [problem for problem in map(check, rows) if problem]
total = sum(row["qty"] for row in rows)
if problems:
    raise ValueError(f"bad input: {total} in {len(rows)} rows at {object()!r}: {problems}")
"""
SENTENCE = "3 identical failures in a row: change the program, do not repeat it."


@pytest.fixture(scope="module")
def shared(start_shared_kernel: StartKernel) -> Kernel:
    return start_shared_kernel("guard")


@pytest.fixture
def kernel(shared: Kernel) -> Kernel:
    # A new instruction lifts any pause a previous test left; then a fresh observe guard.
    shared.execute("pass", {"new_instruction": True})
    shared.execute('%config PtcRetry.guard_mode = "observe"')
    shared.execute("%config PtcRetry.guard_exclude = []")
    return shared


_turns = iter(range(100, 10_000))


def fail(kernel: Kernel, turn: int, code: str = FAILING, **metadata: Any) -> Execution:
    executed = kernel.execute_call(code, turn=turn, **metadata)
    assert executed.status == "error", executed.stdout
    return executed


def test_reported_exactly_at_the_limit_and_once_per_streak(kernel: Kernel) -> None:
    turn = next(_turns)
    runs = [fail(kernel, turn) for _ in range(4)]

    assert [SENTENCE in (r.ptc["notice"] or "") for r in runs] == [False, False, True, False]
    assert [parse_notice(r.ptc["notice"]) for r in runs] == [r.ptc["reference"] for r in runs]
    assert runs[2].error["traceback"][-1] == runs[2].ptc["notice"]
    assert [r.ptc["guard"] is not None for r in runs] == [False, False, True, True]
    report = runs[2].ptc["guard"]
    assert report["count"] == 3 and report["reached"] is True
    assert report["tool"] == "run_code" and report["ename"] == "ValueError"
    assert report["first_id"] == runs[0].ptc["call_id"]
    assert report["last_id"] == runs[2].ptc["call_id"]
    assert runs[3].ptc["guard"]["count"] == 4 and runs[3].ptc["guard"]["reached"] is False
    assert all(r.error["ename"] == "ValueError" for r in runs)  # ename/evalue untouched


def test_a_short_program_still_gets_the_guard_sentence(kernel: Kernel) -> None:
    turn = next(_turns)
    runs = [fail(kernel, turn, "1/0") for _ in range(3)]

    assert runs[1].ptc["notice"] is None
    assert runs[2].ptc["notice"] == f"[ptc-retry] {SENTENCE}"
    assert runs[2].error["traceback"][-1] == runs[2].ptc["notice"]


def arguments(code: str, options: list[int], *, spaced: bool) -> str:
    if spaced:  # other key order, other whitespace between tokens
        return json.dumps({"options": options, "code": code}, indent=2)
    return json.dumps({"code": code, "options": options}, separators=(",", ":"))


def test_key_ignores_key_order_and_json_spacing(kernel: Kernel) -> None:
    turn = next(_turns)
    runs = [
        fail(kernel, turn, arguments=arguments(FAILING, [1, 2], spaced=spaced))
        for spaced in (False, True, False)
    ]
    assert runs[2].ptc["guard"] is not None and runs[2].ptc["guard"]["count"] == 3


@pytest.mark.parametrize(
    "different",
    [
        pytest.param(arguments(FAILING, [2, 1], spaced=False), id="array order"),
        pytest.param(arguments(FAILING + " ", [1, 2], spaced=False), id="program whitespace"),
    ],
)
def test_key_keeps_array_order_and_program_whitespace(kernel: Kernel, different: str) -> None:
    turn = next(_turns)
    same = arguments(FAILING, [1, 2], spaced=False)
    code = json.loads(different)["code"]
    fail(kernel, turn, arguments=same)
    fail(kernel, turn, arguments=same)
    third = fail(kernel, turn, code, arguments=different)
    assert third.ptc["guard"] is None


BREAKERS = {
    "a success": lambda kernel, turn: kernel.execute_call("x = 1", turn=turn),
    "stderr output": lambda kernel, turn: kernel.execute_call(
        "import sys; print('warning', file=sys.stderr)", turn=turn
    ),
    "another error": lambda kernel, turn: fail(kernel, turn, FAILING.replace("Value", "Type")),
    "an excluded tool": lambda kernel, turn: fail(kernel, turn, tool="shell"),
    "a new turn": lambda kernel, turn: fail(kernel, turn + 1),
}


@pytest.mark.parametrize("breaker", list(BREAKERS))
def test_streak_breakers(kernel: Kernel, breaker: str) -> None:
    kernel.execute('%config PtcRetry.guard_exclude = ["shell"]')
    turn = next(_turns)
    next(_turns)  # turn + 1 is used by "a new turn"
    fail(kernel, turn)
    fail(kernel, turn)
    BREAKERS[breaker](kernel, turn)
    after = fail(kernel, turn + 1 if breaker == "a new turn" else turn)
    assert after.ptc["guard"] is None
    assert SENTENCE not in (after.ptc["notice"] or "")


def test_excluded_tool_is_never_counted(kernel: Kernel) -> None:
    kernel.execute('%config PtcRetry.guard_exclude = ["shell"]')
    turn = next(_turns)
    runs = [fail(kernel, turn, tool="shell") for _ in range(4)]
    assert all(r.ptc["guard"] is None for r in runs)


def test_observe_runs_every_program(kernel: Kernel) -> None:
    turn = next(_turns)
    for _ in range(4):
        fail(kernel, turn)
    executed = kernel.execute_call("print('still running')", turn=turn)
    assert executed.status == "ok" and executed.stdout == "still running\n"


def pause_after_three(kernel: Kernel, code: str = FAILING) -> tuple[int, list[Execution]]:
    kernel.execute('%config PtcRetry.guard_mode = "pause"')
    turn = next(_turns)
    runs = [fail(kernel, turn, code) for _ in range(3)]
    return turn, runs


def test_pause_refuses_the_next_program_until_a_new_instruction(kernel: Kernel) -> None:
    turn, runs = pause_after_three(kernel)
    assert runs[2].ptc["guard"]["paused"] is True
    assert "programs pause until the user's next instruction" in runs[2].ptc["notice"]

    refused = kernel.execute_call("print('must not run')", turn=turn, call_id="refused_1")

    assert refused.stdout == ""
    assert refused.status == "error"
    assert refused.error["ename"] == "RetryGuardPaused"
    assert refused.reply["content"]["ename"] == "RetryGuardPaused"
    message = refused.error["evalue"]
    first, last = runs[0].ptc["call_id"], runs[2].ptc["call_id"]
    assert "run_code failed 3 times in a row" in message
    # The programs by the names their notices gave them, not by call id.
    named = f"({runs[0].ptc['reference']} at "
    assert named in message and f" to {runs[2].ptc['reference']} at " in message
    assert first not in message and last not in message and "ValueError" in message
    assert "%ptc_guard reset" in message and "next instruction" in message
    assert refused.ptc["status"] == "refused" and refused.ptc["notice"] is None
    report = refused.ptc["guard"]
    assert report["paused"] is True and report["refused"] == 1
    assert (report["first_id"], report["last_id"], report["count"]) == (first, last, 3)
    displays = [o for o in refused.outputs if o["msg_type"] == "display_data"]
    assert [d["content"]["data"] for d in displays] == [{"application/json": report}]
    history = (kernel.session_dir / "history.jsonl").read_text().splitlines()
    assert json.loads(history[-1])["status"] == "refused"
    assert json.loads(history[-1])["id"] == "refused_1"
    saved = json.loads((kernel.session_dir / "by-id" / "refused_1.json").read_text())
    assert saved == {"code": "print('must not run')"}

    lifted = kernel.execute_call("print('runs again')", turn=turn, new_instruction=True)

    assert lifted.status == "ok" and lifted.stdout == "runs again\n"
    assert lifted.ptc["guard"] is None


def test_pause_refuses_a_syntax_error_as_a_refusal(kernel: Kernel) -> None:
    turn, _ = pause_after_three(kernel)
    refused = kernel.execute_call("print('unclosed'", turn=turn)
    assert refused.error["ename"] == "RetryGuardPaused"
    assert refused.reply["content"]["ename"] == "RetryGuardPaused"
    assert refused.ptc["status"] == "refused"


@pytest.mark.parametrize(
    ("code", "metadata"),
    [
        pytest.param('get_ipython().run_line_magic("ptc_guard", "reset")', {}, id="python call"),
        pytest.param("%ptc_guard reset\nprint('then this')", {}, id="inside a program"),
        pytest.param("%ptc_guard reset", {"call_id": "model_1"}, id="sent by a backend"),
        # A fresh extension would start a fresh guard: from a backend, these are programs.
        pytest.param("%reload_ext ptc_retry", {}, id="reload the extension"),
        pytest.param("%unload_ext ptc_retry\n%load_ext ptc_retry", {}, id="unload and load"),
        # IPython runs what a magic's arguments expand: that cell is a program too.
        pytest.param("%ptc_history {print('ran')}", {}, id="an expansion in a magic"),
    ],
)
def test_a_models_program_cannot_lift_the_pause(
    kernel: Kernel, code: str, metadata: dict[str, Any]
) -> None:
    turn, _ = pause_after_three(kernel)
    attempt = kernel.execute_call(code, turn=turn, **metadata)
    if code == "%ptc_guard reset":  # only our magic: not a program, so not refused either
        assert attempt.status == "ok" and "nothing was reset" in attempt.stderr
        assert attempt.ptc["call_id"] is None
    else:
        assert attempt.error["ename"] == "RetryGuardPaused"
    still = kernel.execute_call("print('x')", turn=turn)
    assert still.error["ename"] == "RetryGuardPaused"


def test_a_persons_reset_cell_lifts_the_pause(kernel: Kernel) -> None:
    turn, _ = pause_after_three(kernel)
    reset = kernel.execute("%ptc_guard reset")  # no ptc_retry metadata: a person's cell
    assert reset.status == "ok", reset.error
    assert "starts fresh" in reset.stdout
    after = kernel.execute_call("print('runs again')", turn=turn)
    assert after.status == "ok" and after.stdout == "runs again\n"


def test_a_program_cannot_reset_the_streak_before_the_pause(kernel: Kernel) -> None:
    turn = next(_turns)
    program = "%ptc_guard reset\n" + FAILING
    runs = [fail(kernel, turn, program) for _ in range(3)]
    assert "nothing was reset" in runs[0].stderr
    assert runs[2].ptc["guard"] is not None


def test_the_report_holds_no_program_or_error_text(kernel: Kernel) -> None:
    program = (  # over notice_min_bytes
        "secret_value = 'hunter2-in-the-program'\n"
        "accounts = {\n"
        "    'ops': {'user': 'ops-bot', 'scopes': ['read', 'deploy']},\n"
        "    'billing': {'user': 'billing-bot', 'scopes': ['read', 'invoice']},\n"
        "    'audit': {'user': 'audit-bot', 'scopes': ['read']},\n"
        "}\n"
        "\n"
        "\n"
        "def token_for(name):\n"
        "    account = accounts[name]\n"
        "    return f\"{account['user']}:{secret_value}:{','.join(account['scopes'])}\"\n"
        "\n"
        "\n"
        "tokens = {name: token_for(name) for name in accounts}\n"
        "print('tokens for', sorted(tokens))\n"
        "raise KeyError('hunter2-in-the-error')\n"
    )
    turn, runs = pause_after_three(kernel, program)
    refused = kernel.execute_call("print(secret_value)", turn=turn)
    texts = [json.dumps(runs[2].ptc["guard"]), json.dumps(refused.ptc["guard"])]
    texts += [refused.error["evalue"], *refused.error["traceback"]]
    texts += [json.dumps(o["content"]) for o in refused.outputs if o["msg_type"] != "error"]
    assert not any("hunter2" in text or "secret_value" in text for text in texts)


def test_changing_the_configuration_starts_the_guard_fresh(kernel: Kernel) -> None:
    turn = next(_turns)
    fail(kernel, turn)
    fail(kernel, turn)
    kernel.execute("%config PtcRetry.failure_limit = 4")
    kernel.execute("%config PtcRetry.failure_limit = 3")
    assert fail(kernel, turn).ptc["guard"] is None


def test_status_magic_describes_the_streak(kernel: Kernel) -> None:
    turn = next(_turns)
    first = fail(kernel, turn)
    fail(kernel, turn)
    status = kernel.execute("%ptc_guard")
    assert "mode observe, limit 3" in status.stdout
    # A person reads the programs by the names the notices gave them, and no tool name.
    assert "2 identical failure(s) (ValueError)" in status.stdout
    assert "run_code" not in status.stdout
    first_n = latest_line_of(kernel.session_dir, first.ptc["call_id"])["n"]
    assert f"#{first_n} at " in status.stdout


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%config PtcRetry.failure_limit = 1", "failure_limit must be an integer >= 2"),
        ("%config PtcRetry.guard_mode = 'stop'", "'off', 'observe', 'pause'"),
    ],
)
def test_bad_configuration_is_rejected_clearly(kernel: Kernel, line: str, message: str) -> None:
    attempt = kernel.execute(line)
    assert message in attempt.stderr  # IPython's %config reports the TraitError on stderr
    assert "mode observe, limit 3" in kernel.execute("%ptc_guard").stdout  # unchanged


@pytest.mark.parametrize("limit", [1, 0, -3, True, 2.5, "3"])
def test_failure_limit_below_two_or_not_an_integer_is_a_configuration_error(limit: Any) -> None:
    with pytest.raises(TraitError):
        PtcRetry(failure_limit=limit)
    with pytest.raises(ValueError):
        RepeatedFailureGuard(limit=limit)


def test_canonical_arguments_sorts_keys_at_every_level_and_keeps_arrays() -> None:
    one = '{"b": {"y": 1, "x": [3, 1]}, "a": "t  x"}'
    two = '{"a":"t  x","b":{"x":[3,1],"y":1}}'
    assert canonical_arguments(one) == canonical_arguments(two) == two
    assert canonical_arguments("not json") == "not json"


def test_failure_key_masks_addresses_and_keeps_only_the_first_line() -> None:
    one = ValueError("<object at 0x7f3a12>\ndetail one")
    two = ValueError("<object at 0x55aa01>\ndetail two")
    assert failure_key("run_code", '{"code": "x"}', one) == failure_key(
        "run_code", '{"code":"x"}', two
    )
    assert failure_key("run_code", "x", one) != failure_key("run_code", "x", TypeError(str(one)))
