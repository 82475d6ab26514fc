"""The evaluation's files: ``report.md``, ``report.json`` and ``savings.png``, written from
the figures :mod:`.figures` computes."""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..tokens import Tokenizer
from .chart import savings_chart
from .figures import analyse, for_each_shape, short_label
from .outcomes import ShapeRun
from .scenarios import QUICK, QUICK_CUT_OFFS

__all__ = ["headline", "render_markdown", "write_report"]


def _fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}" if abs(value) >= 0.1 else f"{value:.1%}"


# -- writing -----------------------------------------------------------------------------------


def write_report(
    out: Path,
    runs: Sequence[ShapeRun],
    tokens: Tokenizer,
    *,
    quick: bool = False,
    elapsed: float = 0.0,
) -> tuple[list[Path], str]:
    """Write the three files to ``out`` (created if needed); return their paths and the
    headline sentence."""
    figures = analyse(runs, tokens)
    figures["run"] = _environment(quick, elapsed)
    figures["headline"] = headline(figures)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    markdown.write_text(render_markdown(figures), encoding="utf-8")
    data = out / "report.json"
    detail = dict(figures)
    detail["calls"] = {
        run.shape.name: {
            o.scenario.name: {"off": o.off.as_dict(), "on": o.on.as_dict()} for o in run.outcomes
        }
        for run in runs
    }
    detail["cut_off_calls"] = {
        run.shape.name: {
            o.cut.name: {"regenerate": o.regenerate.as_dict(), "extend": o.extend.as_dict()}
            for o in run.cut_outcomes
        }
        for run in runs
    }
    data.write_text(json.dumps(detail, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    chart = out / "savings.png"
    chart.write_bytes(savings_chart(figures))
    return [markdown, data, chart], figures["headline"]


def _environment(quick: bool, elapsed: float) -> dict[str, Any]:
    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "date": time.strftime("%Y-%m-%d"),
        "quick": quick,
        "seconds": round(elapsed, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(terse=True),
        "ipykernel": installed("ipykernel"),
        "ipython": installed("ipython"),
        "jupyter_client": installed("jupyter_client"),
        "ptc_retry": installed("ptc-retry"),
    }


def headline(figures: dict[str, Any]) -> str:
    unit = figures["unit"]
    shapes = list(figures["id_shapes"].values())
    first = shapes[0]
    t, long = first["total"], first["long"]
    programs = sum(r["programs"] for r in first["scenarios"])
    text = (
        f"Over {t['scenarios']} failed messages ({programs} programs), the fixes cost "
        f"{t['off_fix']:,} {unit} of tool-call arguments by re-sending and {t['on_fix']:,} "
        f"with ptc-retry ({_fmt_pct(t['saved_output'])} fewer; "
        f"{_fmt_pct(t['saved_with_notice'])} fewer counting the {t['on_notice']:,} {unit} "
        f"of notices read) with {first['label']}"
    )
    others = [
        f"{_fmt_pct(s['total']['saved_with_notice'])} fewer, notices included, with {s['label']}"
        for s in shapes[1:]
    ]
    text += f"; {'; '.join(others)}." if others else "."
    if long["scenarios"]:
        text += (
            f" For programs of 5 KB and more: {_fmt_pct(long['saved_with_notice'])} fewer, "
            "notices included."
        )
    resume = first["resume"]
    if resume:
        text += (
            f" Resume cut the fixes' wall time from {resume['off_fix_seconds']:.1f} s to "
            f"{resume['on_fix_seconds']:.1f} s."
        )
    return text


def _count(key: str) -> Any:
    """A cell of ``for_each_shape``: the row's ``key`` as a count, ``12,345``."""
    return lambda row: f"{row[key]:,}"


def render_markdown(figures: dict[str, Any]) -> str:
    unit = figures["unit"]
    u = "tok" if unit == "tokens" else "B"
    run = figures["run"]
    names = list(figures["id_shapes"])
    shapes = [figures["id_shapes"][name] for name in names]
    labels = " and ".join(f"{s['label']}, such as `{s['example_id']}`" for s in shapes)
    order = " / ".join(short_label(s) for s in shapes)
    lines = [
        "# ptc-retry evaluation",
        "",
        f"**{figures['headline']}**",
        "",
        f"Run {run['date']}{' (quick subset)' if run['quick'] else ''}: Python {run['python']}, "
        f"ipykernel {run['ipykernel']}, IPython {run['ipython']}, {run['platform']}; "
        f"{run['seconds']:.0f} s in all. Tokens: {figures['tokenizer']}.",
    ]
    if figures["tokenizer_problem"]:
        lines += ["", f"> {figures['tokenizer_problem']}. Every figure below is in bytes."]
    lines += [
        "",
        "Each scenario is a model message of one or two `run_code` calls that fails, with "
        "the mistake a model makes, played in two arms on real kernels. **OFF**: the stock "
        "`python3` kernel; the scripted model re-sends the whole corrected program. **ON**: "
        "the `ptc-retry` kernel; the scripted model does what the notice and the prompt "
        "section teach (a one-line `ptc_retry.replay` by the reference the notice gives, "
        "`resume=True` when the notice offers it; a re-send when there is no notice or the "
        "fix is a rewrite). Both arms must end with the scenario's known value. Every "
        f"scenario is played once with each call-id shape: {labels}.",
        "",
    ]
    lines += _targets_section(figures, shapes)
    lines += [
        "## Per scenario",
        "",
        f"Fix: the tool-call arguments sent after the failure ({unit}; an inspection program "
        f"counts in both arms). Notice: the {unit} of ptc-retry notices the ON model read. "
        "Saved: OFF fix against ON fix plus notices. Where the id shapes differ, a cell "
        f"shows {order}. Runs (kernel executions: the failure, any inspection, the fixes) "
        f"and the wall time of the fix are from the run with {shapes[0]['label']}.",
        "",
        f"| scenario | shape | program | OFF fix {u} | ON fix {u} | notice {u} | saved "
        "| runs OFF/ON | fix s OFF/ON | ON action | result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for index, r in enumerate(shapes[0]["scenarios"]):
        rows = [s["scenarios"][index] for s in shapes]
        program = f"{r['program_bytes']:,} B"
        if r["program_tokens"] is not None:
            program += f" / {r['program_tokens']:,} tok"
        if r["programs"] > 1:
            program += f" (and {r['programs'] - 1} more)"
        problems = [f"{name}: {p}" for name, row in zip(names, rows) for p in row["problems"]]
        result = "both ok" if not problems else "FAILED: " + "; ".join(problems)
        lines.append(
            f"| {r['name']} | {r['shape']} | {program} | "
            f"{for_each_shape(rows, _count('off_fix'))} | "
            f"{for_each_shape(rows, _count('on_fix'))} | "
            f"{for_each_shape(rows, _count('on_notice'))} | "
            f"{for_each_shape(rows, lambda x: _fmt_pct(x['saved_with_notice']))} | "
            f"{r['off_executions']}/{r['on_executions']} | "
            f"{r['off_fix_seconds']:.2f}/{r['on_fix_seconds']:.2f} | "
            f"{for_each_shape(rows, lambda x: x['on_action'])} | {result} |"
        )
    totals = [s["total"] for s in shapes]
    t = totals[0]
    lines.append(
        f"| **total** | | | **{for_each_shape(totals, _count('off_fix'))}** "
        f"| **{for_each_shape(totals, _count('on_fix'))}** "
        f"| **{for_each_shape(totals, _count('on_notice'))}** "
        f"| **{for_each_shape(totals, lambda x: _fmt_pct(x['saved_with_notice']))}** "
        f"| {t['off_executions']}/{t['on_executions']} "
        f"| {t['off_fix_seconds']:.2f}/{t['on_fix_seconds']:.2f} | | |"
    )
    lines += [
        "",
        "## By program size",
        "",
        f"| size | call ids | scenarios | OFF fix {u} | ON fix {u} | + notices {u} "
        "| saved (fix only) | saved (with notices) | OFF fix bytes | ON fix bytes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in shapes[0]["by_size"]:
        for shape in shapes:
            b = shape["by_size"][size]
            lines.append(
                f"| {size} | {short_label(shape)} | {b['scenarios']} | {b['off_fix']:,} | "
                f"{b['on_fix']:,} | {b['on_notice']:,} | {_fmt_pct(b['saved_output'])} | "
                f"{_fmt_pct(b['saved_with_notice'])} | {b['off_fix_bytes']:,} | "
                f"{b['on_fix_bytes']:,} |"
            )
    for shape in shapes:
        b = shape["total"]
        lines.append(
            f"| **all** | {short_label(shape)} | {b['scenarios']} | {b['off_fix']:,} | "
            f"{b['on_fix']:,} | {b['on_notice']:,} | {_fmt_pct(b['saved_output'])} | "
            f"**{_fmt_pct(b['saved_with_notice'])}** | {b['off_fix_bytes']:,} | "
            f"{b['on_fix_bytes']:,} |"
        )
    lines += ["", "![savings by program size; time saved by resume](savings.png)", ""]
    resumes = [(s, s["resume"]) for s in shapes if s["resume"]]
    if resumes:
        first = resumes[0][1]
        times = "; ".join(
            f"{r['off_fix_seconds']:.2f} s re-sending, {r['on_fix_seconds']:.2f} s with resume "
            f"({s['label']})"
            for s, r in resumes
        )
        limited = sum("time limit" in r["shape"] for r in shapes[0]["scenarios"] if r["resume"])
        which = f" ({limited} of them on the time limit)" if limited else ""
        lines += [
            "## Resume",
            "",
            f"Scenarios that fail after a slow step: {first['scenarios']}{which}. Re-sending "
            "runs the slow step again; `resume=True` starts at the statement that failed. "
            f"Wall time of the fixes: {times}.",
            "",
        ]
    lines += _tools_section(figures, shapes)
    lines += _cut_off_section(figures, shapes)
    lines += _overhead_section(figures, shapes)
    lines += _break_even_section(figures, shapes)
    lines += _reference_section(figures, shapes)
    lines += _method_section(figures, shapes)
    return "\n".join(lines) + "\n"


def _tools_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    """The tool scenarios: the calls a fix made again in each arm, and its wall time."""
    if not shapes[0].get("tools"):
        return []
    unit = figures["unit"]
    order = " / ".join(short_label(s) for s in shapes)
    lines = [
        "## Tool calls",
        "",
        "Scenarios whose program calls the host's tools (`await tools.fetch_orders(...)`, "
        "`tools.send_email(...)`; each call waits 0.2 to 0.4 s and the host counts it) and "
        "then fails after its last call. A re-send makes every call again (the email is sent "
        "twice); the replay gets the recorded results of the calls that succeeded. Repeated: "
        "the calls the host counted during the fix. Where the id shapes differ, a cell shows "
        f"{order}.",
        "",
        "| scenario | program | tool calls before the failure | repeated by the fix OFF "
        "| repeated ON | reused ON | fix s OFF | fix s ON |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cells(group: Sequence[dict[str, Any]]) -> str:
        first = group[0]
        return (
            f"{first['failed_tool_calls']} | {first['off_tool_calls']} | "
            f"{for_each_shape(group, _count('on_tool_calls'))} | "
            f"{for_each_shape(group, _count('on_tools_reused'))} | "
            f"{first['off_fix_seconds']:.2f} | "
            f"{for_each_shape(group, lambda x: format(x['on_fix_seconds'], '.2f'))} |"
        )

    for index, r in enumerate(shapes[0]["scenarios"]):
        if r["tools"]:
            rows = [s["scenarios"][index] for s in shapes]
            lines.append(f"| {r['name']} | {r['program_bytes']:,} B | {cells(rows)}")
    totals = [s["tools"] for s in shapes]
    t = totals[0]
    lines.append(f"| all {t['scenarios']} | | {cells(totals)}")
    listed = t["prompt_section"]
    if listed is not None:
        plain = shapes[0]["prompt_section"]
        lines += [
            "",
            f"These scenarios' ON kernels list the host's tools in the prompt section: "
            f"{listed[unit]:,} {unit} ({listed['bytes']:,} bytes), against {plain[unit]:,} "
            f"{unit} without tools (the figure the other sections use).",
        ]
    return [*lines, ""]


def _cut_off_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    """The cut-off calls: what the model writes after the cut, regenerating against
    extending, with the notice read and the saving, also priced."""
    if not shapes[0].get("cut_off"):
        return []
    unit = figures["unit"]
    u = "tok" if unit == "tokens" else "B"
    order = " / ".join(short_label(s) for s in shapes)
    weight = shapes[0]["cut_off"]["output_weight"]
    lines = [
        "## Cut-off calls",
        "",
        "A `run_code` call whose stream stopped part-way (an output-token limit, a dropped "
        "connection), cut at a share of its JSON arguments; its program has no mistake. "
        "**Regenerate**, what agent loops do today: the loop drops the cut call and the model "
        "writes the whole call again (stock kernel). **Extend**: the backend saves what "
        "arrived (`handle_partial_tool_call`, nothing runs), the model reads the notice and "
        'writes only `await ptc_retry.extend("#n", <rest>)`, the rest of the program as a '
        "string literal, and the kernel runs the whole program; it must print what the "
        f"whole program prints and end with its value. Written: the tool-call arguments "
        f"after the cut ({unit}); read: the notice, counted as input. Saved: regenerate "
        f"against extend plus the notice; priced: with an output token at {weight} input "
        f"tokens. Where the id shapes differ, a cell shows {order}.",
        "",
        f"| call | program | cut at | arrived {u} | regenerate writes {u} | extend writes {u} "
        f"| notice read {u} | saved | saved, output at {weight}x | result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def cells(group: Sequence[dict[str, Any]]) -> str:
        return (
            f"{for_each_shape(group, _count('regenerate'))} | "
            f"{for_each_shape(group, _count('extend'))} | "
            f"{for_each_shape(group, _count('notice'))} | "
            f"{for_each_shape(group, lambda x: _fmt_pct(x['saved']))} | "
            f"{for_each_shape(group, lambda x: _fmt_pct(x['saved_priced']))} |"
        )

    names = list(figures["id_shapes"])
    for index, r in enumerate(shapes[0]["cut_off"]["scenarios"]):
        rows = [s["cut_off"]["scenarios"][index] for s in shapes]
        problems = [f"{name}: {p}" for name, row in zip(names, rows) for p in row["problems"]]
        result = "both ok" if not problems else "FAILED: " + "; ".join(problems)
        lines.append(
            f"| {r['name']} | {r['program_bytes']:,} B | {r['at']:.0%} | "
            f"{for_each_shape(rows, _count('arrived'))} | {cells(rows)} {result} |"
        )
    totals = [s["cut_off"]["total"] for s in shapes]
    lines.append(f"| **all {totals[0]['scenarios']}** | | | | {cells(totals)} |")
    example = shapes[0]["cut_off"]["scenarios"][0]["notice_text"]
    if example:
        shown = example.replace("|", "\\|")
        lines += ["", f"The notice the first extend arm read: `{shown}`"]
    return [*lines, ""]


def _fmt_target(value: float | None, bound_unit: str, unit: str) -> str:
    if value is None:
        return "n/a"
    if bound_unit == "share":
        return f"{value:.1%}"  # a bound such as 96 % must not be met by rounding
    if bound_unit == "tokens":
        return f"{value:g} tok" if unit == "tokens" else "n/a"
    return f"{value:,.0f} B"


def _targets_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    unit = figures["unit"]
    names = list(figures["id_shapes"])
    header = " | ".join(s["label"] for s in shapes)
    lines = [
        "## Targets",
        "",
        f"| target | {header} | met |",
        "|---|" + "---:|" * len(shapes) + "---|",
    ]
    for t in figures["targets"]:
        bound = _fmt_target(t["bound"], t["unit"], "tokens")
        cells = " | ".join(_fmt_target(t["values"][name], t["unit"], unit) for name in names)
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['what']} {t['comparison']} {bound} | {cells} | {met} |")
    for t in figures["targets"]:
        if t["key"] == "notice_tokens" and t["met"] is False:
            over: dict[str, list[str]] = {}  # the same finding for several shapes, said once
            for shape in shapes:
                read = shape["notice"]["count"]
                for kind, k in shape["notice"]["kinds"].items():
                    if k["max"] > t["bound"]:
                        said = f"{kind}, {k['max']} {unit} ({k['count']} of the {read} read"
                        over.setdefault(said, []).append(short_label(shape))
            found = [f"{said}; {' and '.join(who)} ids)" for said, who in over.items()]
            lines += ["", f"Notices over {t['bound']} {unit}: {'; '.join(found)}."]
    recommended = figures["recommended_notice_min_bytes"]
    if recommended is not None:
        lines += [
            "",
            f"Recommended `notice_min_bytes`: **{recommended}** (the break-even rounded up to "
            "50 bytes, the larger of the id shapes': the kernel cannot tell whose model reads "
            "its notice). See [Break-even](#break-even).",
        ]
    return [*lines, ""]


def _overhead_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    unit = figures["unit"]
    lines = ["## Input overhead and the replay line", ""]
    for s in shapes:
        prompt, notice, fixed = s["prompt_section"], s["notice"], s["replay_fixed_part"]
        lines.append(f"{s['label']}:")
        lines.append("")
        lines.append(
            f"- The prompt section: {prompt[unit]:,} {unit} ({prompt['bytes']:,} bytes), once "
            "per conversation; it is byte-identical for a session, so a prompt cache keeps it."
        )
        if notice["count"]:
            lines.append(
                f"- The notice: {notice['median']:.0f} {unit} (median of {notice['count']}; "
                f"{notice['min']} to {notice['max']}), read after each failure of a program of "
                "at least `notice_min_bytes`, whether or not the model then replays. By what "
                "it offers, the longest of each kind:"
            )
            lines += ["", f"  | offers | read | {unit} | the longest |", "  |---|---:|---:|---|"]
            for kind, k in notice["kinds"].items():
                example = " / ".join(k["example"].splitlines()).replace("|", "\\|")
                lines.append(f"  | {kind} | {k['count']} | {k['max']} | `{example}` |")
            lines.append("")
        if fixed is not None:
            lines.append(
                f"- The replay line's fixed part: {fixed[unit]} {unit} ({fixed['bytes']} "
                f"bytes), the tool call's arguments `{fixed['arguments']}` with the longest "
                "reference a notice gave; the model adds the old and the new text."
            )
        lines.append("")
    return lines


def _break_even_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["## Break-even", ""]
    for s in shapes:
        be = s["break_even"]
        lines += [f"### {s['label']}", ""]
        if not be.get("available"):
            lines += ["No scenario was replayed: no break-even to compute.", ""]
            continue
        unit = be["unit"]
        every, rewrites, priced = be["every_failure_replayed"], be["with_rewrites"], be["priced"]
        payback = be["prompt_payback"]
        share = f"{be['rewrite_share']:.0%}"
        lines += [
            f"A replay costs the replay line ({be['replay_line']:.0f} {unit}, the median of "
            f"the {be['replays']} replays that fixed their program at the first try) plus "
            f"the notice the model reads ({be['notice']:.0f} {unit}, the median); a re-send "
            f"costs the program. Programs up to {be['near_bytes']:,} bytes cost "
            f"{be['per_byte']:.3f} {unit} per byte here ({be['programs']} programs), which "
            f"turns {unit} into bytes.",
            "",
            f"- **Every noticed failure replayed: a replay is cheaper from {every[unit]:.0f} "
            f"{unit}, a program of {every['bytes']:,} bytes.**",
            f"- If {share} of noticed failures need a rewrite (the notice is read, then the "
            f"program is re-sent anyway): from {rewrites[unit]:.0f} {unit}, "
            f"{rewrites['bytes']:,} bytes.",
            f"- Priced, with an output token at {be['output_weight']} input tokens (the "
            "notice is read, the replay and the re-send are written): from "
            f"{priced[unit]:.0f} {unit}, {priced['bytes']:,} bytes.",
            f"- The prompt section ({be['prompt_section']:.0f} {unit}, read once per "
            "conversation and cached) is paid back by one replayed failure of a program of "
            f"{payback['bytes']:,} bytes or more, or by several smaller ones.",
            "",
            f"Break-even rounded up to 50 bytes: **{be['recommended_notice_min_bytes']}**.",
            "",
        ]
    recommended = figures["recommended_notice_min_bytes"]
    if recommended is not None:
        notice = statistics.median(
            [s["break_even"]["notice"] for s in shapes if s["break_even"].get("available")]
        )
        lines += [
            f"Recommended `notice_min_bytes`: **{recommended}**, the larger of the id shapes' "
            "break-evens rounded up to 50 bytes. Rewrites push the break-even up and output "
            "pricing pulls it down by about as much; below it a replay saves a few "
            f"{figures['unit']} at best, while an unused notice costs {notice:.0f}. A re-sent "
            "program also stays in the context and is read again at every later step, as the "
            "notice and the replay line are; that scales both sides alike.",
            "",
        ]
    return lines


def _reference_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    unit = figures["unit"]
    pub = shapes[0]["reference"]["published"]
    refs = [s["reference"] for s in shapes]
    order = " / ".join(short_label(s) for s in shapes)
    lines = [
        "## Against the published reference",
        "",
        f"A published plugin for the same idea reports, with a real model, "
        f"{pub['tool_call_tokens_saved']:.0%} fewer tool-call tokens and "
        f"{pub['total_tokens_saved']:.0%} fewer total tokens per long-argument retry, while "
        f"its scripted code-mode retry, a loader program the model writes out, cost more than "
        f"re-sending the program ({pub['loader_tokens']} vs {pub['resend_tokens']} tokens). "
        f"Where the id shapes differ, figures are {order}.",
        "",
        f"- Tool-call {unit} per long retry (programs of 5 KB and 20 KB, "
        f"{refs[0]['long_scenarios']} replayed): "
        f"**{for_each_shape(refs, lambda r: _fmt_pct(r['tool_call_saved']))} fewer** here, "
        f"against {pub['tool_call_tokens_saved']:.0%}.",
        f"- Total {unit} of the retry step (what the model reads: the prompt section, the "
        "failed program, the tool result with the notice; and what it writes; the rest of "
        "the context is the same in both arms and left out): "
        f"{for_each_shape(refs, _count('retry_step_total_off'))} re-sending, "
        f"{for_each_shape(refs, _count('retry_step_total_on'))} replaying, "
        f"**{for_each_shape(refs, lambda r: _fmt_pct(r['retry_step_total_saved']))} fewer**, "
        f"against {pub['total_tokens_saved']:.0%}. Both arms read the failed program, so a retry "
        "cannot save much more than half of this total; a longer context lowers the share.",
    ]
    loader = refs[0]["loader"]
    if loader is not None:
        be = shapes[0]["break_even"]
        crossing = ""
        if be.get("available"):
            below = round(loader["loader"] / be["per_byte"])
            crossing = f" it costs more than re-sending any program under {below:,} bytes, and"
        lines.append(
            f"- Code-mode replay without a helper: the prompt section's recipe (read the file "
            f"the reference names, `json.loads`, replace, run as an async function) spelled "
            f"out as a loader for `{loader['scenario']}` costs {loader['loader']} {unit} "
            f"against {loader['resend']} for re-sending that program;{crossing} the one-line "
            f"helper costs {loader['helper_line']}. The helper is what keeps a code-mode replay "
            "below the re-send that the reference's loader did not beat."
        )
    lines += [
        "",
        "These are a scripted model's calls, not a real model's: they measure what a retry "
        "costs when the model does what the notice says, not how often a model does so.",
        "",
    ]
    return lines


def _method_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    ids = ", ".join(f"{s['label']}, such as `{s['example_id']}`" for s in shapes)
    return [
        "## Method",
        "",
        "- Kernels: one stock `python3` kernel (OFF, no ptc-retry) and one `ptc-retry` kernel "
        "(ON) per call-id shape, each driven by `ptc_retry.backend.KernelBackend`, through "
        "`handle_tool_call` as an agent loop calls it; one new turn per scenario. Both arms "
        'get the backend\'s handling of the call (a key beside `"code"` runs and is named in '
        "the result), so they differ only by ptc-retry in the kernel.",
        f"- Call ids: every scenario is played with {ids}. The notice names a program by its "
        "short reference (`#n`), so the id shape should not change what the model reads or "
        "writes; playing both checks it. The stock kernel never shows the model an id, so "
        "one OFF play serves both shapes; the shapes' ON plays run at the same time.",
        "- Around the failure, some scenarios add what happens in a real loop: a small "
        "program that prints the data before the fix (it counts in both arms), two failing "
        "programs in one message (one step) fixed by the next message, a kernel restart "
        "before the fix (the replay runs the whole program again), a stray key beside "
        '`"code"` (the fix leaves it out, in both arms).',
        "- Tool scenarios: the stock kernel cannot give a program the host's tools (`tools` "
        "comes with ptc-retry), so their OFF arm runs on a `ptc-retry` kernel with the same "
        "tools that gives no notice (`notice_min_bytes` out of reach): its model reads the "
        "traceback and re-sends, as on the stock kernel. Their ON arm runs on a `ptc-retry` "
        "kernel of its own with the tools, so only their prompt section lists them; each "
        "arm's host counts the calls.",
        "- Cut-off calls: played after the scenarios, on the same kernels (the references the "
        "scenarios' notices give stay as they were). The arguments are cut at a share of their "
        "characters; the extend arm's model goes on from the end of what it sent (the notice "
        "quotes it) and writes the rest as a raw triple-quoted string (`r'''...'''`), which "
        "holds code as it reads, or an escaped one when that cannot hold it. The regenerate "
        "arm reads nothing counted here (what a loop says to ask for the call again would "
        "only add to it).",
        '- Sizes are of the tool call\'s JSON arguments (`{"code": ...}`), as the model '
        "writes them; the 5 KB and 20 KB programs are generated from seeds as agents write "
        "them: pipelines with many helpers and pasted data, a report template, config blobs, "
        "an API response.",
        f"- Tokens: {figures['tokenizer']}; bytes are UTF-8.",
        "- Re-run: `ptc-retry eval --out DIR` (about 50 s on two cores; `--quick` runs "
        f"{len(QUICK)} of the scenarios and {len(QUICK_CUT_OFFS)} of the cut-off calls).",
        "",
    ]
