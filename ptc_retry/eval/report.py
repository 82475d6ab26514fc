"""The evaluation's figures and files: ``report.md``, ``report.json``, ``savings.png``.

Every figure is computed here from the measured outcomes (:mod:`.runner`), so the
markdown, the JSON and the chart always agree. Tokens are cl100k_base counts when
the tokenizer is installed (:mod:`.tokens`); otherwise the same figures are given
in bytes, and the report says so.
"""

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

from .chart import savings_chart
from .runner import ArmOutcome, Outcome, ShapeRun, replay_line
from .scenarios import QUICK, SIZES
from .tokens import Tokenizer

__all__ = ["TARGETS", "analyse", "write_report"]

#: A published plugin for the same idea, measured with a real model: tool-call tokens and
#: total tokens saved per long-argument retry, and its scripted code-mode retry (the model
#: writes a loader program) against re-sending the program, in tokens.
REFERENCE = {
    "tool_call_tokens_saved": 0.74,
    "total_tokens_saved": 0.42,
    "loader_tokens": 526,
    "resend_tokens": 243,
}

#: What the issue asks of every id shape: (key, what, comparison, bound, unit of the bound).
TARGETS = (
    ("notice_tokens", "notice, the largest read", "<=", 40, "tokens"),
    ("fixed_part_tokens", "replay line, fixed part", "<=", 20, "tokens"),
    ("break_even_bytes", "break-even, every noticed failure replayed", "<=", 200, "bytes"),
    ("saved_1kb", "1 KB programs saved, notices included", ">=", 0.75, "share"),
    ("saved_total", "all scenarios saved, notices included", ">=", 0.96, "share"),
)

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

_LONG = ("5 KB", "20 KB")


def _percent(saved: float, whole: float) -> float | None:
    return saved / whole if whole else None


def _fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}" if abs(value) >= 0.1 else f"{value:.1%}"


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def analyse(runs: Sequence[ShapeRun], tokens: Tokenizer) -> dict[str, Any]:
    """Every figure of the report, as plain data (the JSON report holds it as is): the
    figures of each id shape under ``id_shapes``, and what they say together."""
    counted = all(
        arm.fix_tokens is not None and arm.calls[0].tokens is not None
        for run in runs
        for o in run.outcomes
        for arm in (o.off, o.on)
    )
    unit = "tokens" if tokens.available and counted else "bytes"

    def size_of(text: str) -> int:
        counted = tokens.count(text) if unit == "tokens" else None
        return counted if counted is not None else len(text.encode("utf-8"))

    shapes = {run.shape.name: _analyse_shape(run, size_of, unit) for run in runs}
    recommended = [
        s["break_even"]["recommended_notice_min_bytes"]
        for s in shapes.values()
        if s["break_even"].get("available")
    ]
    return {
        "unit": unit,
        "tokenizer": tokens.name,
        "tokenizer_problem": tokens.problem,
        "id_shapes": shapes,
        # The kernel cannot tell which provider's model reads its notice: the larger wins.
        "recommended_notice_min_bytes": max(recommended) if recommended else None,
        "targets": _targets(shapes, unit),
        "all_agree": all(s["all_agree"] for s in shapes.values()),
    }


def _analyse_shape(run: ShapeRun, size_of: Any, unit: str) -> dict[str, Any]:
    """The figures of one id shape's run."""
    outcomes = run.outcomes

    def fix(arm: ArmOutcome) -> int:
        return arm.fix_tokens if unit == "tokens" and arm.fix_tokens is not None else arm.fix_bytes

    def notices(arm: ArmOutcome) -> int:
        return sum(size_of(c.notice) for c in arm.calls if c.notice)

    rows = []
    for o in outcomes:
        off_fix, on_fix, on_notice = fix(o.off), fix(o.on), notices(o.on)
        rows.append(
            {
                "name": o.scenario.name,
                "size": o.scenario.size,
                "shape": o.scenario.shape,
                "programs": len(o.off.failed),
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
                "off_action": o.off.action,
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
    texts = [c.notice for o in outcomes for c in o.on.calls if c.notice]
    read = [size_of(text) for text in texts]
    kinds: dict[str, dict[str, Any]] = {}
    for text, size in zip(texts, read):
        kind = kinds.setdefault(_notice_kind(text), {"count": 0, "max": 0, "example": text})
        kind["count"] += 1
        if size > kind["max"]:
            kind["max"], kind["example"] = size, text
    return {
        "label": run.shape.label,
        "example_id": run.shape.example,
        "scenarios": rows,
        "total": total(rows),
        "long": total([r for r in rows if r["size"] in _LONG]),
        "by_size": by_size,
        "resume": total(resumed) if resumed else None,
        "prompt_section": {"bytes": len(run.prompt.encode()), unit: size_of(run.prompt)},
        "notice": {
            "count": len(read),
            "median": _median(read),
            "min": min(read, default=None),
            "max": max(read, default=None),
            "kinds": kinds,
        },
        "replay_fixed_part": _fixed_part(outcomes, size_of, unit),
        "break_even": _break_even(outcomes, run.prompt, size_of, unit),
        "reference": _reference(outcomes, rows, run, size_of, unit),
        "all_agree": all(r["agree"] for r in rows),
    }


def _notice_kind(text: str) -> str:
    """What a notice offers: ``fix`` (the replay template), ``fix + resume`` (and the line
    that offers ``resume=True``), or ``go on`` (a stopped program's ``ptc_retry.resume``)."""
    if "To go on" in text:
        return "go on"
    return "fix + resume" if "resume=True" in text else "fix"


def _fixed_part(outcomes: Sequence[Outcome], size_of: Any, unit: str) -> dict[str, Any] | None:
    """The replay line's fixed part: the tool call's JSON arguments with empty fragments,
    ``{"code": "await ptc_retry.replay(\"#7\", \"\", \"\")"}``, for the longest
    reference a notice gave (what the model writes beside the old and new text)."""
    references = {c.reference for o in outcomes for c in o.on.calls if c.reference}
    if not references:
        return None
    costs = []
    for ref in sorted(references):
        arguments = json.dumps({"code": replay_line(ref, [("", "")])})
        costs.append((size_of(arguments), len(arguments.encode()), ref, arguments))
    cost, size, ref, arguments = max(costs)
    return {unit: cost, "bytes": size, "reference": ref, "arguments": arguments}


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
    ``S > R + N / w``. R is the median of the replays that fixed their program at the
    first try, N the median of the notices read. Sizes convert to bytes at the
    tokens-per-byte ratio of the corpus's programs near the break-even (up to
    ``_NEAR_BYTES``). The prompt section is read once per conversation (and cached); one
    replayed failure of a program with ``S > R + N + P`` pays it back.
    """
    programs = [c for o in outcomes for c in o.off.failed]
    chosen = [c for c in programs if c.bytes <= _NEAR_BYTES] or programs
    total_bytes = sum(c.bytes for c in chosen)
    if unit == "tokens":
        ratio = sum(c.tokens or 0 for c in chosen) / max(1, total_bytes)
    else:
        ratio = 1.0
    replays = [
        c
        for o in outcomes
        if o.agree and "tries" not in o.on.action
        for c in o.on.replays
        if c.status == "ok"
    ]
    notices = [c.notice for o in outcomes for c in o.on.failed if c.notice is not None]
    if not replays or not notices or ratio <= 0:
        return {"available": False}
    line = _median([float(c.tokens if unit == "tokens" else c.bytes) for c in replays])
    notice = _median([float(size_of(text)) for text in notices])
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
        "replays": len(replays),
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


def _targets(shapes: dict[str, dict[str, Any]], unit: str) -> list[dict[str, Any]]:
    """Each of TARGETS with every shape's measured value and whether all of them meet it.
    Token bounds are not measured without the tokenizer (value and verdict None)."""
    out = []
    for key, what, comparison, bound, bound_unit in TARGETS:
        values: dict[str, float | None] = {}
        for name, s in shapes.items():
            values[name] = _target_value(key, s, unit)
        measured = [v for v in values.values() if v is not None]
        met = None
        if measured and len(measured) == len(values):
            met = all(v <= bound if comparison == "<=" else v >= bound for v in measured)
        out.append(
            {
                "key": key,
                "what": what,
                "comparison": comparison,
                "bound": bound,
                "unit": bound_unit,
                "values": values,
                "met": met,
            }
        )
    return out


def _target_value(key: str, s: dict[str, Any], unit: str) -> float | None:
    if key == "notice_tokens":
        return s["notice"]["max"] if unit == "tokens" else None
    if key == "fixed_part_tokens":
        fixed = s["replay_fixed_part"]
        return fixed[unit] if fixed is not None and unit == "tokens" else None
    if key == "break_even_bytes":
        be = s["break_even"]
        return be["every_failure_replayed"]["bytes"] if be.get("available") else None
    if key == "saved_1kb":
        bucket = s["by_size"].get("1 KB")
        return bucket["saved_with_notice"] if bucket else None
    if key == "saved_total":
        return s["total"]["saved_with_notice"]
    raise KeyError(key)


def _reference(
    outcomes: Sequence[Outcome],
    rows: Sequence[dict[str, Any]],
    run: ShapeRun,
    size_of: Any,
    unit: str,
) -> dict[str, Any]:
    """Our figures beside the published plugin's (see REFERENCE)."""
    long = [
        (o, r) for o, r in zip(outcomes, rows) if r["size"] in _LONG and o.on.replays and r["agree"]
    ]
    tool_off = sum(r["off_fix"] for _, r in long)
    tool_on = sum(r["on_fix"] for _, r in long)
    # The retry step's total: what the model reads (the prompt section in ON, the failed
    # program it wrote, the tool result with the notice in ON) plus what it writes. The
    # rest of the context (system prompt, task) is the same in both arms and left out, so
    # this is an upper bound of the saving; a long context dilutes it.
    prompt_size = size_of(run.prompt)
    total_off = total_on = 0
    for o, r in long:
        program = o.program_tokens if unit == "tokens" else o.program_bytes
        read_off = _result_size(o.off.calls[0], unit)
        read_on = _result_size(o.on.calls[0], unit)
        total_off += (program or 0) + read_off + r["off_fix"]
        total_on += prompt_size + (program or 0) + read_on + r["on_fix"]
    return {
        "published": REFERENCE,
        "long_scenarios": len(long),
        "tool_call_saved": _percent(tool_off - tool_on, tool_off),
        "retry_step_total_off": total_off,
        "retry_step_total_on": total_on,
        "retry_step_total_saved": _percent(total_off - total_on, total_off),
        "loader": _loader(outcomes, run.session_dir, size_of),
    }


def _result_size(call: Any, unit: str) -> int:
    """The tool result the model read after its failed program, in the unit."""
    if unit == "tokens" and call.result_tokens is not None:
        return int(call.result_tokens)
    return int(call.result_bytes)


def _loader(outcomes: Sequence[Outcome], session_dir: str, size_of: Any) -> dict[str, Any] | None:
    """The hand-written loader for the first replayed 1 KB scenario, against its helper
    line. Without the helper the model finds the file from the reference and the prompt
    section: ``<session dir>/calls/<n>.json``."""
    for o in outcomes:
        if o.scenario.size != "1 KB" or o.on.action != "replay" or len(o.on.fixes) != 1:
            continue
        reference = o.on.calls[0].reference
        if reference is None:
            continue
        path = str(Path(session_dir) / "calls" / f"{reference.lstrip('#')}.json")
        old, new = o.scenario.edits[0]
        text = LOADER.format(path=path, old=old, new=new)
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


def _each(rows: Sequence[dict[str, Any]], show: Any) -> str:
    """One cell for every id shape's ``row``: ``a / b``, or one value when they agree."""
    shown = [show(row) for row in rows]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def _count(key: str) -> Any:
    """A cell of ``_each``: the row's ``key`` as a count, ``12,345``."""
    return lambda row: f"{row[key]:,}"


def _short_label(shape: dict[str, Any]) -> str:
    """``OpenAI ids (call_ + 24)`` -> ``OpenAI``."""
    return str(shape["label"]).split()[0]


def render_markdown(figures: dict[str, Any]) -> str:
    unit = figures["unit"]
    u = "tok" if unit == "tokens" else "B"
    run = figures["run"]
    names = list(figures["id_shapes"])
    shapes = [figures["id_shapes"][name] for name in names]
    labels = " and ".join(f"{s['label']}, such as `{s['example_id']}`" for s in shapes)
    order = " / ".join(_short_label(s) for s in shapes)
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
            f"{_each(rows, _count('off_fix'))} | "
            f"{_each(rows, _count('on_fix'))} | "
            f"{_each(rows, _count('on_notice'))} | "
            f"{_each(rows, lambda x: _fmt_pct(x['saved_with_notice']))} | "
            f"{r['off_executions']}/{r['on_executions']} | "
            f"{r['off_fix_seconds']:.2f}/{r['on_fix_seconds']:.2f} | "
            f"{_each(rows, lambda x: x['on_action'])} | {result} |"
        )
    totals = [s["total"] for s in shapes]
    t = totals[0]
    lines.append(
        f"| **total** | | | **{_each(totals, _count('off_fix'))}** "
        f"| **{_each(totals, _count('on_fix'))}** "
        f"| **{_each(totals, _count('on_notice'))}** "
        f"| **{_each(totals, lambda x: _fmt_pct(x['saved_with_notice']))}** "
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
                f"| {size} | {_short_label(shape)} | {b['scenarios']} | {b['off_fix']:,} | "
                f"{b['on_fix']:,} | {b['on_notice']:,} | {_fmt_pct(b['saved_output'])} | "
                f"{_fmt_pct(b['saved_with_notice'])} | {b['off_fix_bytes']:,} | "
                f"{b['on_fix_bytes']:,} |"
            )
    for shape in shapes:
        b = shape["total"]
        lines.append(
            f"| **all** | {_short_label(shape)} | {b['scenarios']} | {b['off_fix']:,} | "
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
    lines += _overhead_section(figures, shapes)
    lines += _break_even_section(figures, shapes)
    lines += _reference_section(figures, shapes)
    lines += _method_section(figures, shapes)
    return "\n".join(lines) + "\n"


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
                        over.setdefault(said, []).append(_short_label(shape))
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
    order = " / ".join(_short_label(s) for s in shapes)
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
        f"**{_each(refs, lambda r: _fmt_pct(r['tool_call_saved']))} fewer** here, against "
        f"{pub['tool_call_tokens_saved']:.0%}.",
        f"- Total {unit} of the retry step (what the model reads: the prompt section, the "
        "failed program, the tool result with the notice; and what it writes; the rest of "
        "the context is the same in both arms and left out): "
        f"{_each(refs, _count('retry_step_total_off'))} re-sending, "
        f"{_each(refs, _count('retry_step_total_on'))} replaying, "
        f"**{_each(refs, lambda r: _fmt_pct(r['retry_step_total_saved']))} fewer**, against "
        f"{pub['total_tokens_saved']:.0%}. Both arms read the failed program, so a retry "
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
        '- Sizes are of the tool call\'s JSON arguments (`{"code": ...}`), as the model '
        "writes them; the 5 KB and 20 KB programs are generated from seeds as agents write "
        "them: pipelines with many helpers and pasted data, a report template, config blobs, "
        "an API response.",
        f"- Tokens: {figures['tokenizer']}; bytes are UTF-8.",
        "- Re-run: `ptc-retry eval --out DIR` (about 40 s on two cores; `--quick` runs "
        f"{len(QUICK)} of the scenarios).",
        "",
    ]
