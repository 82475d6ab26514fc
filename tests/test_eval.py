"""``ptc-retry eval``: the corpus is sound, and a quick run on real kernels writes a report
in which both arms reach the expected result and replay sends less for long programs."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.eval.chart import Canvas, savings_chart
from ptc_retry.eval.report import analyse, render_markdown
from ptc_retry.eval.runner import ArmOutcome, Call, Outcome, replay_line, same_value
from ptc_retry.eval.scenarios import QUICK, SCENARIOS, SIZES, by_name
from ptc_retry.eval.tokens import Tokenizer, load_tokenizer

LONG = ("5 KB", "20 KB")
# The arguments' size range of each size class, in bytes.
RANGES = {"150 B": (80, 400), "1 KB": (700, 2000), "5 KB": (2500, 6500), "20 KB": (15000, 26000)}


# -- the corpus (no kernel) -------------------------------------------------------------------


def test_the_corpus_has_at_least_sixteen_scenarios_of_every_size() -> None:
    assert len(SCENARIOS) >= 16
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)
    for size in SIZES:
        assert sum(s.size == size for s in SCENARIOS) >= 3, size


def test_every_program_is_as_big_as_its_size_class_says() -> None:
    for scenario in SCENARIOS:
        size = len(json.dumps({"code": scenario.program}).encode())
        low, high = RANGES[scenario.size]
        assert low <= size <= high, (scenario.name, size)


def test_every_fix_applies_exactly_once_and_changes_the_program() -> None:
    for scenario in SCENARIOS:
        # apply_edits raises ReplayError unless each fragment occurs exactly once.
        assert scenario.corrected != scenario.program, scenario.name
        assert scenario.expected, scenario.name


def test_the_corpus_covers_every_shape_the_issue_names() -> None:
    shapes = " | ".join(s.shape for s in SCENARIOS)
    for shape in (
        "wrong literal",
        "wrong key",
        "wrong type",
        "stale fragment",
        "wrong function name",
        "syntax error",
        "indentation slip",
        "two places",
        "slow step",
        "time limit",
        "under the notice threshold",
        "rewrite",
    ):
        assert shape in shapes, shape
    assert any(s.resume and s.timeout for s in SCENARIOS)
    assert any(len(s.edits) > 1 for s in SCENARIOS)
    assert any(s.rewrite is not None for s in SCENARIOS)


def test_the_under_threshold_program_is_below_the_default_notice_size() -> None:
    (scenario,) = by_name(["150b-under-threshold"])
    assert len(json.dumps({"code": scenario.program}).encode()) < 150


def test_unknown_scenario_names_are_refused_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match="1k-wrong-key"):
        by_name(["no-such-scenario"])


def test_the_replay_line_is_what_the_notice_teaches() -> None:
    assert (
        replay_line("call_7", [("retries=3", "retries=5")])
        == "await ptc_retry.replay(\"call_7\", 'retries=3', 'retries=5')"
    )
    assert replay_line("c1", [("a", "b"), ("c", "d")], resume=True) == (
        "await ptc_retry.replay(\"c1\", edits=[('a', 'b'), ('c', 'd')], resume=True)"
    )


def test_a_pretty_printed_value_matches_its_repr() -> None:
    assert same_value("{'a': 1,\n 'b': 2}", "{'a': 1, 'b': 2}")
    assert not same_value("{'a': 1}", "{'a': 2}")
    assert not same_value(None, "1")


def test_the_tokenizer_is_cl100k_base_and_works_offline() -> None:
    tokens = load_tokenizer()
    assert tokens.available, tokens.problem
    assert "cl100k_base" in tokens.name
    assert tokens.count("hello world") == 2


def test_without_a_tokenizer_the_report_is_in_bytes_and_says_so() -> None:
    bytes_only = Tokenizer(None, "none (bytes only)", "no tokenizer (ModuleNotFoundError)")
    figures = analyse([_outcome()], "the prompt section", bytes_only)
    figures["run"] = _run_info()
    figures["headline"] = "headline"
    assert figures["unit"] == "bytes"
    assert figures["scenarios"][0]["off_fix"] == figures["scenarios"][0]["off_fix_bytes"]
    text = render_markdown(figures, [_outcome()])
    assert "Every figure below is in bytes" in text


def test_the_chart_is_a_valid_png_of_the_stated_size() -> None:
    figures = analyse([_outcome()], "prompt", load_tokenizer())
    data = savings_chart(figures)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1000, 560)
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4 : idat])
    raw = zlib.decompress(data[idat + 4 : idat + 4 + length])
    assert len(raw) == height * (1 + width * 3)


def test_the_canvas_draws_text_inside_its_box() -> None:
    canvas = Canvas(40, 20)
    canvas.text(1, 1, "A1%", scale=1)
    assert canvas.text_width("A1%", scale=1) == 17
    inked = {i // 3 for i in range(0, len(canvas.pixels), 3) if canvas.pixels[i] != 255}
    assert inked and all((p % 40) < 18 and (p // 40) < 8 for p in inked)


def _call(code: str, status: str, value: str | None, notice: str | None = None) -> Call:
    arguments = json.dumps({"code": code})
    return Call(
        arguments=arguments,
        bytes=len(arguments.encode()),
        tokens=None,
        status=status,
        duration=0.01,
        notice=notice,
        notice_tokens=None,
        result_tokens=None,
        result_bytes=100,
        value=value,
        ename=None if status == "ok" else "KeyError",
    )


def _outcome() -> Outcome:
    (scenario,) = by_name(["1k-wrong-key"])
    notice = (
        "[ptc-retry] Saved as /tmp/x/by-id/call_1.json. Small fix? Send only: "
        'await ptc_retry.replay("call_1", "<old>", "<new>")'
    )
    failed = _call(scenario.program, "error", None, notice)
    off = ArmOutcome("off", "re-send", [failed, _call(scenario.corrected, "ok", scenario.expected)])
    line = replay_line("call_1", scenario.edits)
    on = ArmOutcome("on", "replay", [failed, _call(line, "ok", scenario.expected)])
    return Outcome(scenario, off, on)


def _run_info() -> dict[str, Any]:
    return {
        "date": "today",
        "quick": True,
        "seconds": 1.0,
        "python": "3",
        "ipykernel": "x",
        "ipython": "x",
        "platform": "x",
    }


# -- a quick run on real kernels --------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_run(
    jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """``ptc-retry eval --quick --out <tmp>/report``, run once for the module."""
    work = tmp_path_factory.mktemp("eval")
    bindir = Path(sys.executable).parent
    script = next((p for p in (bindir / "ptc-retry", bindir / "ptc-retry.exe") if p.exists()), None)
    command = (
        [str(script)]
        if script is not None
        else [sys.executable, "-c", "import sys; from ptc_retry.cli import main; sys.exit(main())"]
    )
    result = subprocess.run(
        [*command, "eval", "--quick", "--out", "report"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    yield result, work / "report"


@pytest.fixture(scope="module")
def report(quick_run: Any) -> dict[str, Any]:
    result, out = quick_run
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((out / "report.json").read_text("utf-8"))


def test_quick_eval_writes_the_markdown_json_and_chart(quick_run: Any) -> None:
    result, out = quick_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "report.md").read_text("utf-8").startswith("# ptc-retry evaluation")
    assert (out / "savings.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote report/report.md" in result.stdout


def test_the_table_has_a_row_for_every_quick_scenario(quick_run: Any) -> None:
    _, out = quick_run
    rows = [
        line for line in (out / "report.md").read_text("utf-8").splitlines() if line[:2] == "| "
    ]
    for name in QUICK:
        assert any(row.startswith(f"| {name} |") for row in rows), name


def test_both_arms_reach_the_expected_value_in_every_scenario(report: dict[str, Any]) -> None:
    assert report["all_agree"]
    for name in QUICK:
        for arm in ("off", "on"):
            played = report["calls"][name][arm]
            assert played["problem"] is None, (name, arm, played["problem"])
            assert played["calls"][0]["status"] in ("error", "timeout")
            assert played["calls"][-1]["status"] == "ok"


def test_replay_sends_far_fewer_bytes_than_a_resend_for_long_programs(
    report: dict[str, Any],
) -> None:
    long = [row for row in report["scenarios"] if row["size"] in LONG]
    assert long
    for row in long:
        assert row["on_action"].startswith("replay"), row["name"]
        assert row["on_fix_bytes"] * 10 < row["off_fix_bytes"], row["name"]


def test_a_program_under_the_threshold_gets_no_notice_and_is_re_sent(
    report: dict[str, Any],
) -> None:
    (row,) = [r for r in report["scenarios"] if r["name"] == "150b-under-threshold"]
    assert row["on_action"] == "re-send"
    assert row["on_notice"] == 0
    assert row["on_fix_bytes"] == row["off_fix_bytes"]


def test_resume_does_not_run_the_slow_step_again(report: dict[str, Any]) -> None:
    (row,) = [r for r in report["scenarios"] if r["name"] == "5k-resume-last-statement"]
    assert row["on_action"] == "replay + resume"
    assert row["on_fix_seconds"] < row["off_fix_seconds"] / 2


def test_the_report_states_the_overheads_and_the_break_even(report: dict[str, Any]) -> None:
    assert report["unit"] == "tokens"
    assert 100 < report["prompt_section"]["tokens"] < 250
    assert report["break_even"]["available"]
    assert report["break_even"]["recommended_notice_min_bytes"] % 50 == 0
    assert report["reference"]["published"]["loader_tokens"] == 526
