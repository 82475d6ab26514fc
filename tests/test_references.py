"""Short references ("#n") on real kernels: they name the failed program whatever ran since,
and a stale or ambiguous one is refused, never resolved to another program."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ptc_retry.core.notice import parse_notice

from .helpers import Kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Over notice_min_bytes: a price list whose last line asks for a fruit it does not have.
PROGRAM = """\
prices = {"apple": 1.25, "pear": 0.80, "plum": 2.10, "fig": 3.40, "kiwi": 0.55}
basket = ["apple", "pear", "plum", "fig"]
counts = {"apple": 4, "pear": 2, "plum": 6, "fig": 1}
subtotal = sum(prices[item] * counts[item] for item in basket)
discount = 0.1 if subtotal > 10 else 0.0
total = round(subtotal * (1 - discount), 2)
print(f"{len(basket)} kinds, total {total}")
prices["mango"]
"""
FIX = ('prices["mango"]', "total")


def call(kernel: Kernel, code: str, call_id: str, **metadata: Any) -> Any:
    arguments = json.dumps({"code": code})
    return kernel.execute(code, {"call_id": call_id, "arguments": arguments, **metadata})


def fail(kernel: Kernel, call_id: str, program: str = PROGRAM, **metadata: Any) -> str:
    """Run a failing program; the reference its notice gives."""
    failed = call(kernel, program, call_id, **metadata)
    reference = parse_notice(failed.error["traceback"][-1])
    assert reference is not None and reference == failed.ptc["reference"]
    return reference


def replay(reference: str, fix: tuple[str, str] = FIX) -> str:
    return f"await ptc_retry.replay({reference!r}, {fix[0]!r}, {fix[1]!r})"


def model_text(execution: Any) -> str:
    """What a model reads of a failed execution: its traceback, without colours."""
    return ANSI.sub("", "\n".join(execution.error["traceback"]))


def test_the_reference_names_the_failed_program_after_an_inspection_call(
    kernel: Kernel,
) -> None:
    reference = fail(kernel, "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z", turn=1, step=1)
    looked = call(kernel, "print(sorted(prices))", "call_inspect", turn=1, step=2)
    assert looked.status == "ok"

    fixed = call(kernel, replay(reference), "call_fix", turn=1, step=3)

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "20.34"


def test_two_failing_calls_of_one_message_are_fixed_each_by_its_own(kernel: Kernel) -> None:
    other = PROGRAM.replace("kiwi", "lime").replace('prices["mango"]', 'counts["kiwi"]')
    first = fail(kernel, "toolu_01A", turn=2, step=1)
    second = fail(kernel, "toolu_01B", program=other, turn=2, step=1)
    assert first != second

    fixed_second = call(kernel, replay(second, ('counts["kiwi"]', "subtotal")), "t2", step=2)
    fixed_first = call(kernel, replay(first), "t3", turn=2, step=2)

    assert (fixed_second.result, fixed_first.result) == ("22.6", "20.34")


def test_a_reference_outlives_a_kernel_restart(kernel: Kernel) -> None:
    reference = fail(kernel, "call_before_restart")
    kernel.restart()

    fixed = call(kernel, replay(reference), "call_after_restart")

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "20.34"


def test_a_chained_replay_is_fixed_through_the_replays_own_reference(kernel: Kernel) -> None:
    first = fail(kernel, "c_chain_1")
    # The first fix is incomplete: the replay fails too, and its notice names the replay.
    half = call(kernel, replay(first, ("kiwi", "lime")), "c_chain_2")
    second = parse_notice(half.error["traceback"][-1]) if half.error else None
    assert half.status == "error" and second is not None and second != first

    fixed = call(kernel, replay(second), "c_chain_3")

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "20.34"


def test_an_unknown_reference_is_refused_with_the_numbers_the_session_has(
    kernel: Kernel,
) -> None:
    fail(kernel, "u1")
    refused = call(kernel, replay("#41"), "u2")

    assert refused.error["ename"] == "ReplayError"
    assert "no program #41 in this session" in refused.error["evalue"]
    assert "its programs are #1 to #2" in refused.error["evalue"]


def test_a_reference_that_is_also_a_sent_call_id_is_refused_as_ambiguous(
    kernel: Kernel,
) -> None:
    fail(kernel, "plain_id")  # program #1
    kernel.execute("shadow = 1", {"call_id": "#1"})  # program #2, sent as the id "#1"

    refused = call(kernel, replay("#1"), "after")

    assert refused.error["ename"] == "ReplayError"
    assert "#1 is ambiguous" in refused.error["evalue"]


def test_a_number_that_names_two_calls_in_a_damaged_history_is_refused(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    fail(kernel, "d1")
    history = checkpoint_root / "test" / "history.jsonl"
    (line,) = [json.loads(text) for text in history.read_text().splitlines()]
    forged = dict(line, id="d2")  # a second call claiming number 1
    (checkpoint_root / "test" / "by-id" / "d2.json").write_text('{"code": "x = 2"}')
    with history.open("a") as file:
        file.write(json.dumps(forged) + "\n")
    kernel.restart()

    refused = call(kernel, replay("#1"), "d3")

    assert refused.error["ename"] == "ReplayError"
    assert "#1 is ambiguous" in refused.error["evalue"]
    assert call(kernel, replay("d1"), "d4").result == "20.34"  # the call id still works


def test_our_errors_show_their_message_and_no_frames_of_ptc_retry(kernel: Kernel) -> None:
    fail(kernel, "f1")
    missed = call(kernel, replay("#1", ("prices['mango']", "total")), "f2")

    text = model_text(missed)
    assert text.startswith("ReplayError: old not found in the program")
    assert 'line 8: prices["mango"]' in text  # the nearest lines: enough to fix it at once
    assert "ptc_retry/" not in text and "Traceback" not in text


def test_a_replayed_program_that_fails_again_shows_its_own_frames_only(kernel: Kernel) -> None:
    fail(kernel, "g1")
    again = call(kernel, replay("#1", ('prices["mango"]', 'prices["grape"]')), "g2")

    text = model_text(again)
    assert again.error["ename"] == "KeyError" and 'prices["grape"]' in text
    assert "ptc_retry/" not in text and "replay.py" not in text


def test_a_replay_not_awaited_says_so_once_without_frames(kernel: Kernel) -> None:
    fail(kernel, "n1")
    forgot = call(kernel, "ptc_retry.replay('#1', 'a', 'b')", "n2")

    assert forgot.status == "ok"
    assert forgot.stderr == (
        "ptc_retry.replay('#1', ...) did not run: it must be awaited. "
        "Write: await ptc_retry.replay('#1', ...)\n"
    )
    assert forgot.result == "<ptc_retry replay of '#1', not awaited>"


def test_each_helper_not_awaited_names_itself_in_the_line_to_write(kernel: Kernel) -> None:
    fail(kernel, "w1")
    helpers = {
        "ptc_retry.resume('#1')": ("resume('#1')", "replay"),
        "ptc_retry.replay('#1', 'a', 'b', resume=True)": ("replay('#1', ...)", "replay"),
        "ptc_retry.extend('#1', 'rest')": ("extend('#1', ...)", "extend"),
    }
    for n, (line, (written, action)) in enumerate(helpers.items(), 2):
        forgot = call(kernel, line, f"w{n}")
        assert forgot.stderr == (
            f"ptc_retry.{written} did not run: it must be awaited. "
            f"Write: await ptc_retry.{written}\n"
        )
        assert forgot.result == f"<ptc_retry {action} of '#1', not awaited>"


def test_cells_of_our_magics_are_not_calls(kernel: Kernel, checkpoint_root: Path) -> None:
    reference = fail(kernel, "m1")
    for magic in ("%ptc_history", f"%ptc_show {reference}", "%ptc_guard"):
        shown = kernel.execute(magic)
        assert shown.status == "ok" and shown.ptc["call_id"] is None

    session = checkpoint_root / "test"
    assert [line["id"] for line in map(json.loads, session.joinpath("history.jsonl").open())] == [
        "m1"
    ]
    assert sorted(p.name for p in (session / "by-id").iterdir()) == ["m1.json"]
    # previous/ did not move: 1 is still the failed program, and the next call is #2.
    fixed = kernel.execute("await ptc_retry.replay(1, 'prices[\"mango\"]', 'total')")
    assert fixed.result == "20.34" and fixed.ptc["reference"] == "#2"


def test_a_cell_run_by_a_program_is_part_of_that_program(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    ran = kernel.execute("get_ipython().run_cell('inner = 6 * 7')\ninner")

    assert ran.result == "42"
    history = (checkpoint_root / "test" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in history] == ["c1"]


def test_a_model_without_the_helper_finds_the_program_from_its_reference(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    reference = fail(kernel, "call_no_helper")
    number = reference.removeprefix("#")

    # The recipe of the prompt section: read the file, json.loads it, replace, run it.
    recipe = (
        "import json, pathlib\n"
        f"path = pathlib.Path({str(checkpoint_root / 'test')!r}) / 'calls' / '{number}.json'\n"
        "code = json.loads(path.read_text())['code']\n"
        f"exec(compile(code.replace({FIX[0]!r}, {FIX[1]!r}), 'fixed', 'exec'))\n"
        "total"
    )
    assert kernel.execute(recipe).result == "20.34"


def test_a_replay_that_does_not_compile_shows_the_line_not_ptc_retrys_frames(
    kernel: Kernel,
) -> None:
    fail(kernel, "s1")
    broken = call(kernel, replay("#1", ('prices["mango"]', "prices[")), "s2")

    text = model_text(broken)
    assert broken.error["ename"] == "SyntaxError"
    assert f"<ptc-retry {broken.ptc['reference']}>" in text and "prices[" in text
    assert "replay.py" not in text and "program.py" not in text and "interactiveshell" not in text


def test_a_program_that_replays_and_does_more_keeps_its_own_checkpoint(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    fail(kernel, "w1")
    program = (
        "fixed = " + replay("#1") + "\nprint('fixed', fixed)\nraise RuntimeError('BADLITERAL')\n"
    )
    failed = call(kernel, program, "w2")

    assert failed.stdout == "4 kinds, total 20.34\nfixed 20.34\n"
    saved = json.loads((checkpoint_root / "test" / "by-id" / "w2.json").read_text())
    assert saved == {"code": program}  # its own program, byte for byte, not the replayed one
    second = failed.ptc["reference"]  # short: no notice, the reference is still there
    fixed = call(kernel, replay(second, ("raise RuntimeError('BADLITERAL')", "fixed")), "w3")
    assert fixed.status == "ok", fixed.error
    assert fixed.result == "20.34"


def test_a_call_id_sent_twice_is_refused_everywhere_with_both_programs(kernel: Kernel) -> None:
    # A framework that numbers its calls from 1 again (smolagents after reset=True).
    first = fail(kernel, "call_1", turn=1)
    other = PROGRAM.replace('prices["mango"]', 'prices["lime"]')
    again = call(kernel, other, "call_1", turn=2)
    second = parse_notice(again.error["traceback"][-1])
    assert (first, second, again.ptc["call_id"]) == ("#1", "#2", "call_1.2")

    both = '#1 (call_1), #2 (call_1.2); give the reference of the one you mean instead, like "#2"'
    for n, attempt in enumerate(
        [
            replay("call_1"),
            replay("call_1", ('prices["lime"]', "total")),
            'await ptc_retry.resume("call_1")',
            'await ptc_retry.extend("call_1", "\\nprint(1)")',
        ]
    ):
        refused = call(kernel, attempt, f"try_{n}")
        assert refused.error["ename"] == "ReplayError", attempt
        assert refused.error["evalue"] == (
            f"call id 'call_1' names 2 programs in this session (it was sent again): {both}."
        )
    shown = kernel.execute("%ptc_show call_1")
    assert shown.stdout == "" and both in shown.stderr

    fixed = call(kernel, replay(second, ('prices["lime"]', "total")), "call_fix")
    assert fixed.status == "ok", fixed.error
    assert fixed.result == "20.34"
    assert call(kernel, replay("call_1.2", ('prices["lime"]', "total")), "c_2").result == "20.34"


def test_a_call_id_sent_twice_stays_refused_after_a_kernel_restart(kernel: Kernel) -> None:
    fail(kernel, "call_1")
    fail(kernel, "call_1", program=PROGRAM.replace("mango", "lime"))
    kernel.restart()

    refused = call(kernel, replay("call_1"), "after_restart")

    assert refused.error["ename"] == "ReplayError"
    assert "names 2 programs" in refused.error["evalue"]
    assert "#1 (call_1), #2 (call_1.2)" in refused.error["evalue"]
