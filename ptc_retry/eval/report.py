"""The evaluation's figures and files: ``report.md``, ``report.json``, ``savings.png``.

Every figure is computed here from the measured outcomes (:mod:`.runner`), so the
markdown, the JSON and the chart always agree. Tokens are cl100k_base counts when
the tokenizer is installed (:mod:`.tokens`); otherwise the same figures are given
in bytes, and the report says so.
"""

from __future__ import annotations

import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .chart import savings_chart
from .runner import Outcome
from .scenarios import SIZES
from .tokens import Tokenizer

__all__ = ["analyse", "write_report"]

#: A published plugin for the same idea, measured with a real model: tool-call tokens and
#: total tokens saved per long-argument retry, and its scripted code-mode retry (the model
#: writes a loader program) against re-sending the program, in tokens.
REFERENCE = {
    "tool_call_tokens_saved": 0.74,
    "total_tokens_saved": 0.42,
    "loader_tokens": 526,
    "resend_tokens": 243,
}

#: Share of noticed failures assumed to need a rewrite (the notice is read, not used).
REWRITE_SHARE = 0.25
#: Price of an output token in input tokens, for the priced break-even (most providers: 3-5).
OUTPUT_WEIGHT = 4
#: Programs up to this size give the tokens-per-byte ratio of the break-even.
_NEAR_BYTES = 2000

#: The loader a model writes when it has no helper: the prompt section's recipe (read the
#: file, json.loads it, replace the text, run it as an async function), spelled out.
LOADER = """\
import json, textwrap
from pathlib import Path

code = json.loads(Path({path!r}).read_text())["code"]
assert code.count({old!r}) == 1, "fragment must occur once"
code = code.replace({old!r}, {new!r})
ns = get_ipython().user_ns
exec("async def _fixed():\\n" + textwrap.indent(code, "    ") + "\\n    return locals()", ns)
ns.update(await ns["_fixed"]())
"""

_PATH = re.compile(r'checkpoint "[^"]+" \((?P<path>[^)]+)\)')
_LONG = ("5 KB", "20 KB")


def _percent(saved: float, whole: float) -> float | None:
    return saved / whole if whole else None


def _fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}" if abs(value) >= 0.1 else f"{value:.1%}"


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def analyse(outcomes: Sequence[Outcome], prompt: str, tokens: Tokenizer) -> dict[str, Any]:
    """Every figure of the report, as plain data (the JSON report holds it as is)."""
    counted = all(
        arm.fix_tokens is not None and arm.calls[0].tokens is not None
        for o in outcomes
        for arm in (o.off, o.on)
    )
    unit = "tokens" if tokens.available and counted else "bytes"

    def size_of(text: str) -> int:
        counted = tokens.count(text)
        return counted if counted is not None else len(text.encode("utf-8"))

    def fix(arm: Any) -> int:
        return arm.fix_tokens if unit == "tokens" else arm.fix_bytes

    def notices(arm: Any) -> int:
        if unit == "tokens":
            return arm.notice_tokens
        return sum(len(c.notice.encode()) for c in arm.calls if c.notice)

    rows = []
    for o in outcomes:
        off_fix, on_fix, on_notice = fix(o.off), fix(o.on), notices(o.on)
        rows.append(
            {
                "name": o.scenario.name,
                "size": o.scenario.size,
                "shape": o.scenario.shape,
                "program_bytes": o.program_bytes,
                "program_tokens": o.program_tokens,
                "off_fix": off_fix,
                "on_fix": on_fix,
                "on_notice": on_notice,
                "off_fix_bytes": o.off.fix_bytes,
                "on_fix_bytes": o.on.fix_bytes,
                "saved_output": _percent(off_fix - on_fix, off_fix),
                "saved_with_notice": _percent(off_fix - on_fix - on_notice, off_fix),
                "off_executions": o.off.executions,
                "on_executions": o.on.executions,
                "off_fix_seconds": round(o.off.fix_seconds, 3),
                "on_fix_seconds": round(o.on.fix_seconds, 3),
                "on_action": o.on.action,
                "resume": o.scenario.resume,
                "agree": o.agree,
                "problems": [p for p in (o.off.problem, o.on.problem) if p],
                "expected": o.scenario.expected,
            }
        )

    def total(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        off = sum(r["off_fix"] for r in chosen)
        on = sum(r["on_fix"] for r in chosen)
        notice = sum(r["on_notice"] for r in chosen)
        return {
            "scenarios": len(chosen),
            "off_fix": off,
            "on_fix": on,
            "on_notice": notice,
            "off_fix_bytes": sum(r["off_fix_bytes"] for r in chosen),
            "on_fix_bytes": sum(r["on_fix_bytes"] for r in chosen),
            "saved_output": _percent(off - on, off),
            "saved_with_notice": _percent(off - on - notice, off),
            "off_executions": sum(r["off_executions"] for r in chosen),
            "on_executions": sum(r["on_executions"] for r in chosen),
            "off_fix_seconds": round(sum(r["off_fix_seconds"] for r in chosen), 3),
            "on_fix_seconds": round(sum(r["on_fix_seconds"] for r in chosen), 3),
        }

    by_size = {
        size: total([r for r in rows if r["size"] == size])
        for size in SIZES
        if any(r["size"] == size for r in rows)
    }
    resumed = [r for r in rows if r["resume"]]
    return {
        "unit": unit,
        "tokenizer": tokens.name,
        "tokenizer_problem": tokens.problem,
        "scenarios": rows,
        "total": total(rows),
        "long": total([r for r in rows if r["size"] in _LONG]),
        "by_size": by_size,
        "resume": total(resumed) if resumed else None,
        "prompt_section": {"bytes": len(prompt.encode()), unit: size_of(prompt)},
        "break_even": _break_even(outcomes, prompt, size_of, unit),
        "reference": _reference(outcomes, rows, prompt, size_of, unit),
        "all_agree": all(r["agree"] for r in rows),
    }


def _break_even(
    outcomes: Sequence[Outcome], prompt: str, size_of: Any, unit: str
) -> dict[str, Any]:
    """From which program size a replay costs less than a re-send, notice included.

    Cost of one failure: re-sending costs the program's size S; a replay costs the
    replay line R plus the notice N the model read. So a replay is cheaper when
    ``S > R + N``. The notice is read on every failure of a noticed program, also
    when the fix is a rewrite and the model re-sends anyway (a share ``r`` of them):
    then the notice pays when ``(1 - r) * (S - R) > N``, i.e. ``S > R + N / (1 - r)``.
    Priced, with output tokens ``w`` times input tokens: ``w * S > w * R + N``, i.e.
    ``S > R + N / w``. Sizes convert to bytes at the tokens-per-byte ratio of the
    corpus's programs near the break-even (up to ``_NEAR_BYTES``). The prompt
    section is read once per conversation (and cached); one replayed failure of a
    program with ``S > R + N + P`` pays it back.
    """
    played = [o for o in outcomes if o.off.calls]
    chosen = [o for o in played if o.program_bytes <= _NEAR_BYTES] or played
    total_bytes = sum(o.program_bytes for o in chosen)
    if unit == "tokens":
        ratio = sum(o.program_tokens or 0 for o in chosen) / max(1, total_bytes)
    else:
        ratio = 1.0
    replays = [
        o
        for o in outcomes
        if o.on.action.startswith("replay") and "tries" not in o.on.action and o.agree
    ]
    if not replays or ratio <= 0:
        return {"available": False}
    line = _median(
        [float(o.on.fix_tokens if unit == "tokens" else o.on.fix_bytes) for o in replays]
    )
    notice = _median(
        [float(size_of(o.on.calls[0].notice)) for o in replays if o.on.calls[0].notice is not None]
    )
    prompt_size = float(size_of(prompt))

    def point(threshold: float) -> dict[str, Any]:
        return {unit: round(threshold, 1), "bytes": round(threshold / ratio)}

    every = point(line + notice)
    return {
        "available": True,
        "unit": unit,
        "per_byte": round(ratio, 4),
        "near_bytes": _NEAR_BYTES,
        "programs": len(chosen),
        "replay_line": line,
        "notice": notice,
        "prompt_section": prompt_size,
        "rewrite_share": REWRITE_SHARE,
        "output_weight": OUTPUT_WEIGHT,
        "every_failure_replayed": every,
        "with_rewrites": point(line + notice / (1 - REWRITE_SHARE)),
        "priced": point(line + notice / OUTPUT_WEIGHT),
        "prompt_payback": point(line + notice + prompt_size),
        "recommended_notice_min_bytes": 50 * -(-every["bytes"] // 50),  # up to 50 bytes
    }


def _reference(
    outcomes: Sequence[Outcome],
    rows: Sequence[dict[str, Any]],
    prompt: str,
    size_of: Any,
    unit: str,
) -> dict[str, Any]:
    """Our figures beside the published plugin's (see REFERENCE)."""
    long = [
        (o, r)
        for o, r in zip(outcomes, rows)
        if r["size"] in _LONG and r["on_action"].startswith("replay") and r["agree"]
    ]
    tool_off = sum(r["off_fix"] for _, r in long)
    tool_on = sum(r["on_fix"] for _, r in long)
    # The retry step's total: what the model reads (the prompt section in ON, the failed
    # program it wrote, the tool result with the notice in ON) plus what it writes. The
    # rest of the context (system prompt, task) is the same in both arms and left out, so
    # this is an upper bound of the saving; a long context dilutes it.
    prompt_size = size_of(prompt)
    total_off = total_on = 0
    for o, r in long:
        program = o.program_tokens if unit == "tokens" else o.program_bytes
        read_off = _result_size(o.off.calls[0], unit)
        read_on = _result_size(o.on.calls[0], unit)
        total_off += program + read_off + r["off_fix"]
        total_on += prompt_size + program + read_on + r["on_fix"]
    loader = _loader(outcomes, size_of)
    return {
        "published": REFERENCE,
        "long_scenarios": len(long),
        "tool_call_saved": _percent(tool_off - tool_on, tool_off),
        "retry_step_total_off": total_off,
        "retry_step_total_on": total_on,
        "retry_step_total_saved": _percent(total_off - total_on, total_off),
        "loader": loader,
    }


def _result_size(call: Any, unit: str) -> int:
    """The tool result the model read after its failed program, in the unit."""
    if unit == "tokens" and call.result_tokens is not None:
        return int(call.result_tokens)
    return int(call.result_bytes)


def _loader(outcomes: Sequence[Outcome], size_of: Any) -> dict[str, Any] | None:
    """The hand-written loader for the first replayed 1 KB scenario, against its helper line."""
    for o in outcomes:
        first = o.on.calls[0] if o.on.calls else None
        if (
            o.scenario.size != "1 KB"
            or not o.on.action == "replay"
            or first is None
            or first.notice is None
        ):
            continue
        match = _PATH.search(first.notice)
        if match is None:
            continue
        old, new = o.scenario.edits[0]
        text = LOADER.format(path=match.group("path"), old=old, new=new)
        arguments = json.dumps({"code": text})
        return {
            "scenario": o.scenario.name,
            "loader": size_of(arguments),
            "helper_line": size_of(o.on.fixes[0].arguments),
            "resend": size_of(o.off.fixes[0].arguments),
            "code": text,
        }
    return None


# -- writing -----------------------------------------------------------------------------------


def write_report(
    out: Path,
    outcomes: Sequence[Outcome],
    prompt: str,
    tokens: Tokenizer,
    *,
    quick: bool = False,
    elapsed: float = 0.0,
) -> tuple[list[Path], str]:
    """Write the three files to ``out`` (created if needed); return their paths and the
    headline sentence."""
    figures = analyse(outcomes, prompt, tokens)
    figures["run"] = _environment(quick, elapsed)
    figures["headline"] = headline(figures)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    markdown.write_text(render_markdown(figures, outcomes), encoding="utf-8")
    data = out / "report.json"
    detail = dict(figures)
    detail["calls"] = {
        o.scenario.name: {"off": o.off.as_dict(), "on": o.on.as_dict()} for o in outcomes
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
    t, long = figures["total"], figures["long"]
    text = (
        f"Over {t['scenarios']} failures, the fixes cost {t['off_fix']:,} {unit} of tool-call "
        f"arguments by re-sending and {t['on_fix']:,} with ptc-retry "
        f"({_fmt_pct(t['saved_output'])} fewer; {_fmt_pct(t['saved_with_notice'])} fewer "
        f"counting the {t['on_notice']:,} {unit} of notices read)."
    )
    if long["scenarios"]:
        text += (
            f" For programs of 5 KB and more: {_fmt_pct(long['saved_with_notice'])} fewer, "
            "notices included."
        )
    resume = figures["resume"]
    if resume:
        text += (
            f" Resume cut the fixes' wall time from {resume['off_fix_seconds']:.1f} s to "
            f"{resume['on_fix_seconds']:.1f} s."
        )
    return text


def render_markdown(figures: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    unit = figures["unit"]
    u = "tok" if unit == "tokens" else "B"
    run = figures["run"]
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
        "Each scenario is a program a code-mode agent sends as one `run_code` call, with the "
        "mistake a model makes in it, played in two arms on real kernels. **OFF**: the stock "
        "`python3` kernel; the scripted model re-sends the whole corrected program. **ON**: "
        "the `ptc-retry` kernel; the scripted model does what the notice and the prompt "
        "section teach (a one-line `ptc_retry.replay`, `resume=True` when the notice offers "
        "it; a re-send when there is no notice or the fix is a rewrite). Both arms must end "
        "with the scenario's known value.",
        "",
        "## Per scenario",
        "",
        f"Fix: the tool-call arguments sent after the failure ({unit}). Notice: the {unit} "
        "of ptc-retry notices the ON model read. Saved: OFF fix against ON fix plus notices. "
        "Runs: kernel executions (the failure and the fixes). Time: wall time of the fix.",
        "",
        f"| scenario | shape | program | OFF fix {u} | ON fix {u} | notice {u} | saved "
        "| runs OFF/ON | fix s OFF/ON | ON action | result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in figures["scenarios"]:
        program = f"{r['program_bytes']:,} B"
        if r["program_tokens"] is not None:
            program += f" / {r['program_tokens']:,} tok"
        result = "both ok" if r["agree"] else "FAILED: " + "; ".join(r["problems"])
        lines.append(
            f"| {r['name']} | {r['shape']} | {program} | {r['off_fix']:,} | {r['on_fix']:,} | "
            f"{r['on_notice']:,} | {_fmt_pct(r['saved_with_notice'])} | "
            f"{r['off_executions']}/{r['on_executions']} | "
            f"{r['off_fix_seconds']:.2f}/{r['on_fix_seconds']:.2f} | {r['on_action']} | "
            f"{result} |"
        )
    t = figures["total"]
    lines.append(
        f"| **total** | | | **{t['off_fix']:,}** | **{t['on_fix']:,}** | **{t['on_notice']:,}** "
        f"| **{_fmt_pct(t['saved_with_notice'])}** | {t['off_executions']}/{t['on_executions']} "
        f"| {t['off_fix_seconds']:.2f}/{t['on_fix_seconds']:.2f} | | |"
    )
    lines += [
        "",
        "## By program size",
        "",
        f"| size | scenarios | OFF fix {u} | ON fix {u} | + notices {u} | saved (fix only) "
        "| saved (with notices) | OFF fix bytes | ON fix bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, s in figures["by_size"].items():
        lines.append(
            f"| {size} | {s['scenarios']} | {s['off_fix']:,} | {s['on_fix']:,} | "
            f"{s['on_notice']:,} | {_fmt_pct(s['saved_output'])} | "
            f"{_fmt_pct(s['saved_with_notice'])} | {s['off_fix_bytes']:,} | "
            f"{s['on_fix_bytes']:,} |"
        )
    lines += ["", "![savings by program size; time saved by resume](savings.png)", ""]
    resume = figures["resume"]
    if resume:
        lines += [
            "## Resume",
            "",
            f"{resume['scenarios']} scenarios fail after a slow step (one of them on the time "
            "limit). Re-sending runs the slow step again; `resume=True` starts at the "
            f"statement that failed. Wall time of the fixes: {resume['off_fix_seconds']:.2f} s "
            f"re-sending, {resume['on_fix_seconds']:.2f} s with resume.",
            "",
        ]
    lines += _overhead_section(figures)
    lines += _break_even_section(figures)
    lines += _reference_section(figures)
    lines += _method_section(figures)
    return "\n".join(lines) + "\n"


def _overhead_section(figures: dict[str, Any]) -> list[str]:
    unit = figures["unit"]
    prompt = figures["prompt_section"]
    be = figures["break_even"]
    notice = f"{be['notice']:.0f} {unit} (median)" if be.get("available") else "see the table"
    return [
        "## Input overhead",
        "",
        f"- The prompt section: {prompt[unit]:,} {unit} ({prompt['bytes']:,} bytes), once per "
        "conversation; it is byte-identical for a session, so a prompt cache keeps it.",
        f"- The notice: {notice}, read after each failure of a program of at least "
        "`notice_min_bytes`, whether or not the model then replays.",
        "",
    ]


def _break_even_section(figures: dict[str, Any]) -> list[str]:
    be = figures["break_even"]
    if not be.get("available"):
        return ["## Break-even", "", "No scenario was replayed: no break-even to compute.", ""]
    unit = be["unit"]
    every, rewrites, priced = be["every_failure_replayed"], be["with_rewrites"], be["priced"]
    payback = be["prompt_payback"]
    share = f"{be['rewrite_share']:.0%}"
    return [
        "## Break-even",
        "",
        f"A replay costs the replay line ({be['replay_line']:.0f} {unit}, the median of the "
        f"replays here) plus the notice the model reads ({be['notice']:.0f} {unit}); a "
        f"re-send costs the program. Programs up to {be['near_bytes']:,} bytes cost "
        f"{be['per_byte']:.3f} {unit} per byte here ({be['programs']} programs), which turns "
        f"{unit} into bytes.",
        "",
        f"- **Every noticed failure replayed: a replay is cheaper from {every[unit]:.0f} "
        f"{unit}, a program of {every['bytes']:,} bytes.**",
        f"- If {share} of noticed failures need a rewrite (the notice is read, then the "
        f"program is re-sent anyway): from {rewrites[unit]:.0f} {unit}, "
        f"{rewrites['bytes']:,} bytes.",
        f"- Priced, with an output token at {be['output_weight']} input tokens (the notice is "
        f"read, the replay and the re-send are written): from {priced[unit]:.0f} {unit}, "
        f"{priced['bytes']:,} bytes.",
        f"- The prompt section ({be['prompt_section']:.0f} {unit}, read once per conversation "
        f"and cached) is paid back by one replayed failure of a program of "
        f"{payback['bytes']:,} bytes or more, or by several smaller ones.",
        "",
        f"Recommended `notice_min_bytes`: **{be['recommended_notice_min_bytes']}**, the "
        "first break-even rounded up to 50 bytes. Rewrites push the break-even up and "
        "output pricing pulls it down by about as much; below it a replay saves a few "
        f"dozen {unit} at best, while an unused notice costs {be['notice']:.0f}. A re-sent "
        "program also stays in the context and is read again at every later step, as the "
        "notice and the replay line are; that scales both sides alike.",
        "",
    ]


def _reference_section(figures: dict[str, Any]) -> list[str]:
    ref = figures["reference"]
    pub = ref["published"]
    unit = figures["unit"]
    lines = [
        "## Against the published reference",
        "",
        f"A published plugin for the same idea reports, with a real model, "
        f"{pub['tool_call_tokens_saved']:.0%} fewer tool-call tokens and "
        f"{pub['total_tokens_saved']:.0%} fewer total tokens per long-argument retry, while "
        f"its scripted code-mode retry, a loader program the model writes out, cost more than "
        f"re-sending the program ({pub['loader_tokens']} vs {pub['resend_tokens']} tokens).",
        "",
        f"- Tool-call {unit} per long retry (programs of 5 KB and 20 KB, "
        f"{ref['long_scenarios']} replayed): **{_fmt_pct(ref['tool_call_saved'])} fewer** "
        f"here, against {pub['tool_call_tokens_saved']:.0%}.",
        f"- Total {unit} of the retry step (what the model reads: the prompt section, the "
        "failed program, the tool result with the notice; and what it writes; the rest of "
        f"the context is the same in both arms and left out): {ref['retry_step_total_off']:,}"
        f" re-sending, {ref['retry_step_total_on']:,} replaying, "
        f"**{_fmt_pct(ref['retry_step_total_saved'])} fewer**, against "
        f"{pub['total_tokens_saved']:.0%}. Both arms read the failed program, so a retry "
        "cannot save much more than half of this total; a longer context lowers the share.",
    ]
    loader = ref["loader"]
    if loader is not None:
        be = figures["break_even"]
        crossing = ""
        if be.get("available"):
            below = round(loader["loader"] / be["per_byte"])
            crossing = f" it costs more than re-sending any program under {below:,} bytes, and"
        lines.append(
            f"- Code-mode replay without a helper: the prompt section's recipe (read the file, "
            f"`json.loads`, replace, run as an async function) spelled out as a loader for "
            f"`{loader['scenario']}` costs {loader['loader']} {unit} against "
            f"{loader['resend']} for re-sending that program;{crossing} the one-line helper "
            f"costs {loader['helper_line']}. The helper is what keeps a code-mode replay "
            "below the re-send that the reference's loader did not beat."
        )
    lines += [
        "",
        "These are a scripted model's calls, not a real model's: they measure what a retry "
        "costs when the model does what the notice says, not how often a model does so.",
        "",
    ]
    return lines


def _method_section(figures: dict[str, Any]) -> list[str]:
    return [
        "## Method",
        "",
        "- Kernels: one stock `python3` kernel (OFF, no ptc-retry) and one `ptc-retry` kernel "
        "(ON), each driven by `ptc_retry.backend.KernelBackend`; one new turn per scenario. "
        "Calls carry OpenAI-shaped ids (`call_` and 24 characters): the id is part of the "
        "notice and of the replay line.",
        '- Sizes are of the tool call\'s JSON arguments (`{"code": ...}`), as the model '
        "writes them; the 5 KB and 20 KB programs are generated from seeds as agents write "
        "them: pipelines with many helpers and pasted data, a report template, config blobs.",
        f"- Tokens: {figures['tokenizer']}; bytes are UTF-8.",
        "- Re-run: `ptc-retry eval --out DIR` (about a minute; `--quick` runs five scenarios).",
        "",
    ]
