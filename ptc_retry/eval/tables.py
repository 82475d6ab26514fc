"""``report.md``'s sections of measurements, one function each from the figures
(:func:`.figures.analyse`) and the id shapes' figures: the header, the targets, a row per
scenario, by program size, resume, the tool calls, the cut-off calls; and the cell formats
every section uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .figures import for_each_shape, short_label

__all__ = [
    "by_size_section",
    "count_cell",
    "cut_off_section",
    "fmt_pct",
    "header_section",
    "resume_section",
    "scenarios_section",
    "targets_section",
    "tools_section",
]


def fmt_pct(value: float | None) -> str:
    """A share as a percentage: ``42%``, ``4.2%`` below 10 %, ``n/a`` for None."""
    return "n/a" if value is None else f"{value:.0%}" if abs(value) >= 0.1 else f"{value:.1%}"


def count_cell(key: str) -> Any:
    """A cell of ``for_each_shape``: the row's ``key`` as a count, ``12,345``."""
    return lambda row: f"{row[key]:,}"


def header_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    """The title, the headline, the run's environment and what the two arms do."""
    run = figures["run"]
    labels = " and ".join(f"{s['label']}, such as `{s['example_id']}`" for s in shapes)
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
    return [
        *lines,
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


def scenarios_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    """A row per scenario and a total: the fix each arm sent, the notices, the saving."""
    unit = figures["unit"]
    u = "tok" if unit == "tokens" else "B"
    names = list(figures["id_shapes"])
    order = " / ".join(short_label(s) for s in shapes)
    lines = [
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
            f"{for_each_shape(rows, count_cell('off_fix'))} | "
            f"{for_each_shape(rows, count_cell('on_fix'))} | "
            f"{for_each_shape(rows, count_cell('on_notice'))} | "
            f"{for_each_shape(rows, lambda x: fmt_pct(x['saved_with_notice']))} | "
            f"{r['off_executions']}/{r['on_executions']} | "
            f"{r['off_fix_seconds']:.2f}/{r['on_fix_seconds']:.2f} | "
            f"{for_each_shape(rows, lambda x: x['on_action'])} | {result} |"
        )
    totals = [s["total"] for s in shapes]
    t = totals[0]
    lines.append(
        f"| **total** | | | **{for_each_shape(totals, count_cell('off_fix'))}** "
        f"| **{for_each_shape(totals, count_cell('on_fix'))}** "
        f"| **{for_each_shape(totals, count_cell('on_notice'))}** "
        f"| **{for_each_shape(totals, lambda x: fmt_pct(x['saved_with_notice']))}** "
        f"| {t['off_executions']}/{t['on_executions']} "
        f"| {t['off_fix_seconds']:.2f}/{t['on_fix_seconds']:.2f} | | |"
    )
    return lines


def by_size_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    """A row per program size and id shape, the totals, and the chart."""
    u = "tok" if figures["unit"] == "tokens" else "B"
    lines = [
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
                f"{b['on_fix']:,} | {b['on_notice']:,} | {fmt_pct(b['saved_output'])} | "
                f"{fmt_pct(b['saved_with_notice'])} | {b['off_fix_bytes']:,} | "
                f"{b['on_fix_bytes']:,} |"
            )
    for shape in shapes:
        b = shape["total"]
        lines.append(
            f"| **all** | {short_label(shape)} | {b['scenarios']} | {b['off_fix']:,} | "
            f"{b['on_fix']:,} | {b['on_notice']:,} | {fmt_pct(b['saved_output'])} | "
            f"**{fmt_pct(b['saved_with_notice'])}** | {b['off_fix_bytes']:,} | "
            f"{b['on_fix_bytes']:,} |"
        )
    return [*lines, "", "![savings by program size; time saved by resume](savings.png)", ""]


def resume_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
    """The scenarios that fail after a slow step: the fixes' wall time in each arm."""
    resumes = [(s, s["resume"]) for s in shapes if s["resume"]]
    if not resumes:
        return []
    first = resumes[0][1]
    times = "; ".join(
        f"{r['off_fix_seconds']:.2f} s re-sending, {r['on_fix_seconds']:.2f} s with resume "
        f"({s['label']})"
        for s, r in resumes
    )
    limited = sum("time limit" in r["shape"] for r in shapes[0]["scenarios"] if r["resume"])
    which = f" ({limited} of them on the time limit)" if limited else ""
    return [
        "## Resume",
        "",
        f"Scenarios that fail after a slow step: {first['scenarios']}{which}. Re-sending "
        "runs the slow step again; `resume=True` starts at the statement that failed. "
        f"Wall time of the fixes: {times}.",
        "",
    ]


def tools_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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
            f"{for_each_shape(group, count_cell('on_tool_calls'))} | "
            f"{for_each_shape(group, count_cell('on_tools_reused'))} | "
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


def cut_off_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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
            f"{for_each_shape(group, count_cell('regenerate'))} | "
            f"{for_each_shape(group, count_cell('extend'))} | "
            f"{for_each_shape(group, count_cell('notice'))} | "
            f"{for_each_shape(group, lambda x: fmt_pct(x['saved']))} | "
            f"{for_each_shape(group, lambda x: fmt_pct(x['saved_priced']))} |"
        )

    names = list(figures["id_shapes"])
    for index, r in enumerate(shapes[0]["cut_off"]["scenarios"]):
        rows = [s["cut_off"]["scenarios"][index] for s in shapes]
        problems = [f"{name}: {p}" for name, row in zip(names, rows) for p in row["problems"]]
        result = "both ok" if not problems else "FAILED: " + "; ".join(problems)
        lines.append(
            f"| {r['name']} | {r['program_bytes']:,} B | {r['at']:.0%} | "
            f"{for_each_shape(rows, count_cell('arrived'))} | {cells(rows)} {result} |"
        )
    totals = [s["cut_off"]["total"] for s in shapes]
    lines.append(f"| **all {totals[0]['scenarios']}** | | | | {cells(totals)} |")
    example = shapes[0]["cut_off"]["scenarios"][0]["notice_text"]
    if example:
        # One code span: the notice's lines with " / " between them, as the other tables show.
        shown = " / ".join(example.splitlines()).replace("|", "\\|")
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


def targets_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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
