"""``ptc-retry eval``: the corpus is sound, and a quick run on real kernels, once with each
provider's call-id shape, writes a report in which both arms reach the expected result,
replay sends less for long programs, and the replay by reference survives an inspection,
a second failure in the same message, a kernel restart and a stray key beside "code", and
a fix of a program that called the host's tools repeats none of its calls by replay. A call
cut off mid-stream is extended and gives the whole program's output."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ptc_retry.core.notice import NOTICE_MIN_BYTES, failure_notice, partial_notice
from ptc_retry.core.partial import cut_arguments
from ptc_retry.eval.chart import HEIGHT, WIDTH, savings_chart
from ptc_retry.eval.figures import TARGETS, analyse
from ptc_retry.eval.host import TOOL_NAMES, EvalTools
from ptc_retry.eval.outcomes import (
    ID_SHAPES,
    ArmOutcome,
    CutOutcome,
    ModelCall,
    Outcome,
    ShapeRun,
    extend_line,
    literal,
    replay_line,
    rest_literal,
    same_value,
)
from ptc_retry.eval.report import render_markdown
from ptc_retry.eval.scenarios import (
    APPROVALS,
    CUT_OFFS,
    QUICK,
    QUICK_CUT_OFFS,
    SCENARIOS,
    SIZES,
    CutOff,
    by_name,
)
from ptc_retry.tokens import Tokenizer, load_tokenizer

LONG = ("5 KB", "20 KB")
SHAPES = [shape.name for shape in ID_SHAPES]
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
        if scenario.parallel is not None:
            assert scenario.parallel.corrected != scenario.parallel.program, scenario.name


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


def test_the_corpus_covers_what_happens_around_a_failure_and_quick_plays_it() -> None:
    quick = by_name(QUICK)
    for chosen in (SCENARIOS, quick):
        assert any(s.inspect for s in chosen)
        assert any(s.parallel is not None for s in chosen)
        assert any(s.restart and not s.resume for s in chosen)
        assert any(s.extra_keys for s in chosen)
        assert any(s.tools for s in chosen)


async def _run_here(code: str, host: EvalTools) -> Any:
    """Run a program as the kernel would (top-level await, the last expression's value),
    in this process, with ``tools`` calling ``host`` directly."""
    namespace: dict[str, Any] = {
        "tools": SimpleNamespace(**{f.__name__: f for f in host.functions()})
    }
    module = ast.parse(code)
    last = module.body.pop()
    assert isinstance(last, ast.Expr)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for tree, mode in ((module, "exec"), (ast.Expression(last.value), "eval")):
        value = eval(compile(tree, "<program>", mode, flags=flags), namespace)
        if asyncio.iscoroutine(value):
            value = await value
    return value


def test_the_tool_scenarios_call_the_hosts_tools_then_fail_after_the_last_call() -> None:
    tooled = [s for s in SCENARIOS if s.tools]
    assert len({s.size for s in tooled}) >= 2
    assert any("asyncio.gather(" in s.program for s in tooled)
    for scenario in tooled:
        called = set(re.findall(r"\btools\.(\w+)\(", scenario.program))
        assert called and called <= set(TOOL_NAMES), (scenario.name, called)
        last_call = scenario.program.rindex("await tools.")
        for old, _ in scenario.edits:
            assert scenario.program.index(old) > last_call, scenario.name
        failing, fixed = EvalTools(delay=0), EvalTools(delay=0)
        with pytest.raises(KeyError):  # the scenario's mistake: a wrong key or literal
            asyncio.run(_run_here(scenario.program, failing))
        value = asyncio.run(_run_here(scenario.corrected, fixed))
        assert same_value(repr(value), scenario.expected), (scenario.name, value)
        # Every call was made before the failure: a re-send makes all of them again.
        assert failing.calls == fixed.calls and failing.total >= 2, scenario.name


def _rest(cut: CutOff) -> str:
    """What follows the start of the program that arrived before the cut."""
    arguments = json.dumps({"code": cut.program}, ensure_ascii=False)
    found = cut_arguments(arguments[: int(len(arguments) * cut.at)]).string("code")
    assert found is not None and not found[1], cut.name  # the cut falls inside the program
    return cut.program[len(found[0]) :]


def test_the_cut_off_calls_cut_long_programs_at_half_and_nine_tenths() -> None:
    assert {(c.size, c.at) for c in CUT_OFFS} == {(size, at) for size in LONG for at in (0.5, 0.9)}
    names = [c.name for c in CUT_OFFS]
    assert len(set(names)) == len(names) and not set(names) & {s.name for s in SCENARIOS}
    for cut in CUT_OFFS:
        size = len(json.dumps({"code": cut.program}).encode())
        low, high = RANGES[cut.size]
        assert low <= size <= high, (cut.name, size)
        compile(cut.program, cut.name, "exec")  # a whole program, with no mistake
        share = len(_rest(cut)) / len(cut.program)
        assert abs(share - (1 - cut.at)) < 0.1, (cut.name, share)
    quick = [c for c in CUT_OFFS if c.name in QUICK_CUT_OFFS]
    assert len(quick) == len(QUICK_CUT_OFFS)
    assert {c.size for c in quick} == set(LONG) and {c.at for c in quick} == {0.5, 0.9}


def test_the_rest_is_written_as_a_literal_that_reads_back_exactly() -> None:
    for cut in CUT_OFFS:
        rest = _rest(cut)
        assert rest_literal(rest).startswith("r'''"), cut.name  # code as it reads
        assert ast.literal_eval(rest_literal(rest)) == rest, cut.name
    both = "a = '''x'''\nb = \"\"\"y\"\"\"\n"
    for text in ("x = '''one'''\n", both, "path = 'C:\\\\'", "ends in a quote'", "tab\there\\"):
        assert ast.literal_eval(rest_literal(text)) == text, text
    assert rest_literal(both) == literal(both)  # no triple quotes can hold it: escaped
    assert extend_line("#4", "x = 1\n") == "await ptc_retry.extend(\"#4\", r'''x = 1\n''')"


def test_the_under_threshold_program_is_below_the_default_notice_size() -> None:
    (scenario,) = by_name(["150b-under-threshold"])
    assert len(json.dumps({"code": scenario.program}).encode()) < NOTICE_MIN_BYTES


def test_unknown_scenario_names_are_refused_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match="1k-wrong-key"):
        by_name(["no-such-scenario"])


def test_the_replay_line_is_what_the_notice_teaches() -> None:
    assert replay_line("#7", [("retries=3", "retries=5")]) == (
        'await ptc_retry.replay("#7", "retries=3", "retries=5")'
    )
    assert replay_line("#12", [("a", "b"), ("c", "d")], resume=True) == (
        'await ptc_retry.replay("#12", edits=[("a", "b"), ("c", "d")], resume=True)'
    )
    # The fixed part the report counts: the template with empty fragments.
    assert replay_line("#7", [("", "")]) == 'await ptc_retry.replay("#7", "", "")'


def test_fragments_are_written_as_the_python_literals_a_model_copies() -> None:
    assert literal("retries=3") == '"retries=3"'
    assert literal('item["lead_day"]') == "'item[\"lead_day\"]'"
    assert literal("a\nb") == '"a\\nb"'
    fragments = [text for s in SCENARIOS for pair in (*s.edits, *s.first_try) for text in pair]
    for text in fragments:
        assert ast.literal_eval(literal(text)) == text, text


def test_call_ids_have_the_shapes_openai_and_anthropic_send() -> None:
    shapes = {shape.name: shape for shape in ID_SHAPES}
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", shapes["openai"].call_id("x", 1))
    assert re.fullmatch(r"toolu_01[A-Za-z0-9]{22}", shapes["anthropic"].call_id("x", 1))
    assert shapes["openai"].call_id("x", 1) == shapes["openai"].call_id("x", 1)
    assert shapes["openai"].call_id("x", 1) != shapes["openai"].call_id("x", 2)


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
    figures = analyse(_runs(), bytes_only)
    figures["run"] = _run_info()
    figures["headline"] = "headline"
    assert figures["unit"] == "bytes"
    for shape in SHAPES:
        (row,) = figures["id_shapes"][shape]["scenarios"]
        assert row["off_fix"] == row["off_fix_bytes"]
    assert all(t["met"] is None for t in figures["targets"] if t["unit"] == "tokens")
    text = render_markdown(figures)
    assert "Every figure below is in bytes" in text


def test_the_report_gives_every_target_for_every_id_shape() -> None:
    figures = analyse(_runs(), load_tokenizer())
    assert [t["key"] for t in figures["targets"]] == [key for key, *_ in TARGETS]
    for target in figures["targets"]:
        assert set(target["values"]) == set(SHAPES), target["key"]
    for shape in SHAPES:
        fixed = figures["id_shapes"][shape]["replay_fixed_part"]
        assert fixed["arguments"] == json.dumps({"code": 'await ptc_retry.replay("#1", "", "")'})
    assert figures["recommended_notice_min_bytes"] % 50 == 0


def test_the_report_prices_what_a_cut_off_call_writes_in_each_arm() -> None:
    (cut,) = [c for c in CUT_OFFS if c.name == "5k-cut-at-90"]
    arguments = json.dumps({"code": cut.program}, ensure_ascii=False)
    arrived = arguments[: int(len(arguments) * cut.at)]
    notice = partial_notice("#1", "print(1)")
    whole = _call(cut.program, "ok", cut.expected, role="regenerate")
    line = _call(extend_line("#1", _rest(cut)), "ok", cut.expected, role="extend")
    runs = _runs()
    for run in runs:
        regenerate = ArmOutcome("off", "regenerate", [_cut(arrived, "dropped"), whole])
        extend = ArmOutcome("on", "extend", [_cut(arrived, "partial", notice), line])
        run.cut_outcomes.append(CutOutcome(cut, regenerate, extend, run.shape.name))
    figures = analyse(runs, load_tokenizer())
    assert figures["unit"] == "bytes"  # the made-up calls carry no token counts
    (row,) = figures["id_shapes"]["openai"]["cut_off"]["scenarios"]
    written, extended, read = whole.bytes, line.bytes, len(notice.encode())
    assert (row["regenerate"], row["extend"], row["notice"]) == (written, extended, read)
    assert row["saved"] == pytest.approx((written - extended - read) / written)
    assert row["saved_priced"] == pytest.approx((4 * written - 4 * extended - read) / written / 4)
    assert row["arrived"] == len(arrived.encode()) and row["agree"]
    figures["run"], figures["headline"] = _run_info(), "headline"
    text = render_markdown(figures)
    assert "## Cut-off calls" in text
    assert f"| 5k-cut-at-90 | {whole.bytes:,} B | 90% | {row['arrived']:,} | {written:,} | " in text
    # The scenarios' figures do not count the cut-off calls.
    assert figures["id_shapes"]["openai"]["total"]["scenarios"] == 1


def test_the_chart_is_a_valid_png_of_the_stated_size() -> None:
    data = savings_chart(analyse(_runs(), load_tokenizer()))
    assert _png_size(data) == (WIDTH, HEIGHT)


def test_the_chart_carries_no_software_tag_or_date() -> None:
    data = savings_chart(analyse(_runs(), load_tokenizer()))
    kinds = [kind for kind, _ in _png_chunks(data)]
    assert not {b"tEXt", b"iTXt", b"zTXt", b"tIME"} & set(kinds), kinds


def test_two_renders_of_the_same_figures_are_byte_identical() -> None:
    figures = analyse(_runs(), load_tokenizer())
    assert savings_chart(figures) == savings_chart(figures)


def test_the_chart_renders_from_the_committed_report_json() -> None:
    committed = Path(__file__).parent.parent / "docs" / "eval-report" / "report.json"
    figures = json.loads(committed.read_text("utf-8"))
    assert _png_size(savings_chart(figures)) == (WIDTH, HEIGHT)


def test_the_chart_ignores_and_keeps_the_callers_matplotlib_settings() -> None:
    import matplotlib

    figures = analyse(_runs(), load_tokenizer())
    plain = savings_chart(figures)
    with matplotlib.rc_context({"font.size": 30.0, "axes.facecolor": "black"}):
        assert savings_chart(figures) == plain
        assert matplotlib.rcParams["font.size"] == 30.0
        assert matplotlib.rcParams["axes.facecolor"] == "black"


def test_without_matplotlib_the_chart_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    figures = analyse(_runs(), load_tokenizer())
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'ptc-retry\[eval\]'"):
        savings_chart(figures)


def test_without_matplotlib_the_eval_stops_before_it_runs_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from ptc_retry.eval import runner

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert runner.main(tmp_path / "report") == 2
    assert "pip install 'ptc-retry[eval]'" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


def test_the_eval_imports_and_its_help_runs_without_matplotlib() -> None:
    script = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import ptc_retry.eval.report\n"
        "from ptc_retry.cli import main\n"
        "main(['eval', '--help'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "savings.png" in result.stdout


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """The PNG's chunks as (kind, body), each checked against its CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        chunks.append((kind, body))
        at += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    return chunks


def _png_size(data: bytes) -> tuple[int, int]:
    """The PNG's width and height, once its pixels decompress to what its header says."""
    chunks = _png_chunks(data)
    width, height, depth, color = struct.unpack(">IIBB", chunks[0][1][:10])
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert depth == 8 and len(pixels) == height * (1 + width * channels)
    return width, height


def _call(
    code: str, status: str, value: str | None, notice: str | None = None, role: str = "failed"
) -> ModelCall:
    arguments = json.dumps({"code": code})
    return ModelCall(
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
        role=role,
        reference="#1" if notice else None,
    )


def _cut(arrived: str, status: str, notice: str | None = None) -> ModelCall:
    """A cut-off call as far as it arrived."""
    return ModelCall(
        arguments=arrived,
        bytes=len(arrived.encode()),
        tokens=None,
        status=status,
        duration=0.0,
        notice=notice,
        notice_tokens=None,
        result_tokens=None,
        result_bytes=0,
        value=None,
        ename=None,
        role="cut",
        reference="#1" if notice else None,
    )


def _runs() -> list[ShapeRun]:
    """One made-up replayed scenario per id shape, with no kernel."""
    (scenario,) = by_name(["1k-wrong-key"])
    notice = failure_notice("#1")
    runs = []
    for shape in ID_SHAPES:
        failed = _call(scenario.program, "error", None, notice)
        resend = _call(scenario.corrected, "ok", scenario.expected, role="re-send")
        off = ArmOutcome("off", "re-send", [failed, resend])
        line = replay_line("#1", scenario.edits)
        on = ArmOutcome(
            "on", "replay", [failed, _call(line, "ok", scenario.expected, role="replay")]
        )
        outcome = Outcome(scenario, off, on, shape.name)
        runs.append(ShapeRun(shape, [outcome], "the prompt section", "/tmp/s0e7a1c20"))
    return runs


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
        timeout=240,
        check=False,
    )
    yield result, work / "report"


@pytest.fixture(scope="module")
def report(quick_run: Any) -> dict[str, Any]:
    result, out = quick_run
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((out / "report.json").read_text("utf-8"))


def test_the_approval_scenarios_repeat_every_earlier_call_by_a_rerun_and_none_by_ptc_retry(
    report: dict[str, Any], quick_run: Any
) -> None:
    approvals = {entry["scenario"]: entry for entry in report["approvals"]}
    assert set(approvals) == {scenario.name for scenario in APPROVALS}
    for entry in approvals.values():
        assert entry["agree"], entry
        assert entry["calls_before_pause"] > 0
        assert entry["repeated_by_rerun"] == entry["calls_before_pause"]
        assert entry["repeated_by_ptc_retry"] == 0
    assert approvals["5k-approve-after-gather"]["calls_before_pause"] == 5
    markdown = (quick_run[1] / "report.md").read_text("utf-8")
    assert "| 1k-approve-email | 1 | 1 | 0 | yes |" in markdown


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


def _calls(report: dict[str, Any], shape: str, name: str, arm: str) -> list[dict[str, Any]]:
    return report["calls"][shape][name][arm]["calls"]


def _row(report: dict[str, Any], shape: str, name: str) -> dict[str, Any]:
    (row,) = [r for r in report["id_shapes"][shape]["scenarios"] if r["name"] == name]
    return row


def test_every_scenario_is_played_with_openai_and_anthropic_ids(report: dict[str, Any]) -> None:
    assert list(report["id_shapes"]) == SHAPES
    prefixes = {"openai": "call_", "anthropic": "toolu_01"}
    for shape in SHAPES:
        assert [r["name"] for r in report["id_shapes"][shape]["scenarios"]] == list(QUICK)
        for name in QUICK:
            for call in _calls(report, shape, name, "on"):
                assert call["call_id"].startswith(prefixes[shape])
                # The notice names the program by reference, never by the long call id.
                assert call["notice"] is None or call["call_id"] not in call["notice"]


def test_both_arms_reach_the_expected_value_in_every_scenario(report: dict[str, Any]) -> None:
    assert report["all_agree"]
    for shape in SHAPES:
        for name in QUICK:
            for arm in ("off", "on"):
                played = report["calls"][shape][name][arm]
                assert played["problem"] is None, (shape, name, arm, played["problem"])
                assert played["calls"][0]["status"] in ("error", "timeout")
                assert played["calls"][-1]["status"] == "ok"


def test_replay_sends_far_fewer_bytes_than_a_resend_for_long_programs(
    report: dict[str, Any],
) -> None:
    for shape in SHAPES:
        long = [row for row in report["id_shapes"][shape]["scenarios"] if row["size"] in LONG]
        assert long
        for row in long:
            assert "replay" in row["on_action"], row["name"]
            assert row["on_fix_bytes"] * 10 < row["off_fix_bytes"], row["name"]


def test_a_program_under_the_threshold_gets_no_notice_and_is_re_sent(
    report: dict[str, Any],
) -> None:
    for shape in SHAPES:
        row = _row(report, shape, "150b-under-threshold")
        assert row["on_action"] == "re-send"
        assert row["on_notice"] == 0
        assert row["on_fix_bytes"] == row["off_fix_bytes"]


def test_resume_does_not_run_the_slow_step_again(report: dict[str, Any]) -> None:
    for shape in SHAPES:
        row = _row(report, shape, "5k-resume-last-statement")
        assert row["on_action"] == "replay + resume"
        assert row["on_fix_seconds"] < row["off_fix_seconds"] / 2


def test_an_inspection_before_the_fix_leaves_the_reference_on_the_failed_program(
    report: dict[str, Any],
) -> None:
    for shape in SHAPES:
        failed, look, fix = _calls(report, shape, "5k-inspect-then-fix", "on")
        assert [failed["role"], look["role"], fix["role"]] == ["failed", "inspect", "replay"]
        assert look["status"] == "ok" and look["notice"] is None
        assert fix["code"].startswith(f'await ptc_retry.replay("{failed["reference"]}", ')
        assert fix["status"] == "ok"
        off = _calls(report, shape, "5k-inspect-then-fix", "off")
        assert [c["role"] for c in off] == ["failed", "inspect", "re-send"]


def test_two_failures_of_one_message_are_fixed_by_two_replays_by_their_own_references(
    report: dict[str, Any],
) -> None:
    for shape in SHAPES:
        first, second, fix_first, fix_second = _calls(report, shape, "1k-two-in-one-message", "on")
        assert first["step"] == second["step"] and first["status"] == second["status"] == "error"
        assert first["reference"] != second["reference"]
        assert fix_first["step"] == fix_second["step"] > first["step"]
        for failed, fix in ((first, fix_first), (second, fix_second)):
            assert fix["role"] == "replay" and fix["status"] == "ok"
            assert fix["code"].startswith(f'await ptc_retry.replay("{failed["reference"]}", ')
        assert _row(report, shape, "1k-two-in-one-message")["on_action"] == "2 replays"


def test_a_replay_after_a_kernel_restart_runs_the_whole_program(report: dict[str, Any]) -> None:
    for shape in SHAPES:
        played = report["calls"][shape]["5k-fix-after-restart"]
        assert played["off"]["restarted"] and played["on"]["restarted"]
        failed, fix = played["on"]["calls"]
        assert fix["code"].startswith(f'await ptc_retry.replay("{failed["reference"]}", ')
        assert "resume=True" not in fix["code"]
        assert fix["status"] == "ok"


def test_a_stray_key_beside_code_runs_in_both_arms_and_the_replay_fixes_it(
    report: dict[str, Any],
) -> None:
    for shape in SHAPES:
        for arm in ("off", "on"):
            failed, fix = _calls(report, shape, "1k-stray-key", arm)
            assert failed["status"] == "error" and failed["ename"] == "TypeError"
            assert failed["other_keys"] == ["description"]
            assert failed["said_first"].startswith('[ptc-retry] Ignored "description"')
            assert fix["other_keys"] == [] and fix["status"] == "ok"
        failed, fix = _calls(report, shape, "1k-stray-key", "on")
        assert failed["notice"] is not None and fix["role"] == "replay"


def test_a_tool_scenarios_replay_repeats_no_call_and_its_resend_repeats_all(
    quick_run: Any, report: dict[str, Any]
) -> None:
    name = "1k-tools-wrong-key"
    for shape in SHAPES:
        row = _row(report, shape, name)
        assert row["tools"] and row["on_action"] == "replay" and row["off_action"] == "re-send"
        made = row["failed_tool_calls"]
        assert made == 2
        assert row["off_tool_calls"] == made  # the re-send called every tool again
        assert row["on_tool_calls"] == 0  # the replay called none
        assert row["on_tools_reused"] == made  # it got the recorded results instead
        assert row["on_fix_seconds"] < row["off_fix_seconds"]
        (failed_on, fix), (failed_off, resend) = (
            _calls(report, shape, name, "on"),
            _calls(report, shape, name, "off"),
        )
        assert failed_on["tool_calls"] == failed_off["tool_calls"] == made
        assert failed_off["notice"] is None and resend["role"] == "re-send"
        assert fix["code"].startswith(f'await ptc_retry.replay("{failed_on["reference"]}", ')
        assert report["id_shapes"][shape]["tools"]["off_tool_calls"] == made
    _, out = quick_run
    assert f"| {name} | 1,010 B | 2 | 2 | 0 | 2 |" in (out / "report.md").read_text("utf-8")


def test_the_report_states_the_overheads_and_the_break_even(report: dict[str, Any]) -> None:
    assert report["unit"] == "tokens"
    notices = []
    for shape in SHAPES:
        figures = report["id_shapes"][shape]
        assert 100 < figures["prompt_section"]["tokens"] < 250
        assert figures["break_even"]["available"]
        assert figures["break_even"]["recommended_notice_min_bytes"] % 50 == 0
        assert figures["reference"]["published"]["loader_tokens"] == 526
        assert figures["replay_fixed_part"]["tokens"] <= 20
        assert figures["notice"]["kinds"]["fix"]["max"] <= 40
        notices.append(figures["notice"]["kinds"]["fix"]["max"])
    # The notice names programs by reference: the id shape does not change what it costs.
    assert len(set(notices)) == 1
    assert report["recommended_notice_min_bytes"] == max(
        report["id_shapes"][shape]["break_even"]["recommended_notice_min_bytes"] for shape in SHAPES
    )
    assert [t["key"] for t in report["targets"]] == [key for key, *_ in TARGETS]


def test_every_quick_cut_off_call_is_extended_and_prints_what_the_whole_program_prints(
    quick_run: Any, report: dict[str, Any]
) -> None:
    _, out = quick_run
    markdown = (out / "report.md").read_text("utf-8")
    cuts = {cut.name: cut for cut in CUT_OFFS}
    for shape in SHAPES:
        rows = report["id_shapes"][shape]["cut_off"]["scenarios"]
        assert [row["name"] for row in rows] == list(QUICK_CUT_OFFS)
        for row in rows:
            cut = cuts[row["name"]]
            played = report["cut_off_calls"][shape][cut.name]
            dropped, whole = played["regenerate"]["calls"]
            assert [dropped["role"], dropped["status"]] == ["cut", "dropped"]
            assert [whole["role"], whole["status"]] == ["regenerate", "ok"]
            saved, extend = played["extend"]["calls"]
            assert [saved["role"], saved["status"]] == ["cut", "partial"]
            assert saved["notice"].startswith("[ptc-retry] Cut off ")
            assert f'extend("{saved["reference"]}", "<rest>")' in saved["notice"]
            line = extend_line(saved["reference"], _rest(cut))
            assert extend["role"] == "extend" and extend["status"] == "ok"
            assert extend["code_sha256"] == hashlib.sha256(line.encode()).hexdigest()
            # The kernel ran the whole program: what it printed, and its value.
            assert extend["result_sha256"] == whole["result_sha256"]
            assert same_value(extend["value"], cut.expected)
            assert row["agree"] and row["extend"] + row["notice"] < row["regenerate"]
            assert f"| {cut.name} | {whole['bytes']:,} B | {cut.at:.0%} |" in markdown


def test_an_extended_program_that_prints_something_else_fails_the_check(
    jupyter_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ptc_retry.eval import arms, runner

    printed = 'print(f"{len(orders)} orders kept'

    def without_a_print(target: str, rest: str) -> str:
        assert printed in rest
        return extend_line(target, rest.replace(printed, printed.removeprefix("print")))

    monkeypatch.setattr(arms, "extend_line", without_a_print)
    (cut,) = [c for c in CUT_OFFS if c.name == "5k-cut-at-50"]
    runs, _ = runner.run_eval([], cut_offs=[cut], shapes=ID_SHAPES[:1])
    (outcome,) = runs[0].cut_outcomes
    extended = outcome.extend.calls[-1]
    assert extended.status == "ok" and same_value(extended.value, cut.expected)
    assert outcome.regenerate.problem is None and not outcome.agree
    assert outcome.extend.problem == "the extended program's output differs from the whole one's"
