"""The evaluation's figures, computed from the measured outcomes (:mod:`.outcomes`) as plain
data, so that the markdown, the JSON and the chart always agree. Tokens are cl100k_base
counts when the tokenizer is installed (:mod:`ptc_retry.tokens`); otherwise the same
figures are given in bytes."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from ..core.layout import calls_path
from ..tokens import Tokenizer
from .outcomes import ArmOutcome, CutOutcome, ModelCall, Outcome, ShapeRun, replay_line
from .scenarios import SIZES

__all__ = ["LOADER", "REFERENCE", "TARGETS", "analyse", "for_each_shape", "short_label"]

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


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def short_label(shape: dict[str, Any]) -> str:
    """An id shape's name for a table cell or a chart: ``OpenAI ids (call_ + 24)`` ->
    ``OpenAI``."""
    return str(shape["label"]).split()[0]


def for_each_shape(rows: Sequence[Any], show: Any) -> str:
    """One label for every id shape's ``row``: ``a / b``, or one value when they agree
    (the report's cells, the chart's labels)."""
    shown = [show(row) for row in rows]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def analyse(runs: Sequence[ShapeRun], tokens: Tokenizer) -> dict[str, Any]:
    """Every figure of the report, as plain data (the JSON report holds it as is): the
    figures of each id shape under ``id_shapes``, and what they say together."""
    counted = all(
        arm.fix_tokens is not None and arm.calls[0].tokens is not None
        for run in runs
        for arm in [
            *(a for o in run.outcomes for a in (o.off, o.on)),
            *(a for c in run.cut_outcomes for a in (c.regenerate, c.extend)),
        ]
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
    rows = [_scenario_row(o, size_of, unit) for o in outcomes]
    by_size = {
        size: _total([r for r in rows if r["size"] == size])
        for size in SIZES
        if any(r["size"] == size for r in rows)
    }
    resumed = [r for r in rows if r["resume"]]
    tooled = [r for r in rows if r["tools"]]
    return {
        "label": run.shape.label,
        "example_id": run.shape.example,
        "scenarios": rows,
        "total": _total(rows),
        "long": _total([r for r in rows if r["size"] in _LONG]),
        "by_size": by_size,
        "resume": _total(resumed) if resumed else None,
        "tools": _tools(tooled, run.tools_prompt, size_of, unit) if tooled else None,
        "prompt_section": {"bytes": len(run.prompt.encode()), unit: size_of(run.prompt)},
        "notice": _notices(outcomes, size_of),
        "replay_fixed_part": _fixed_part(outcomes, size_of, unit),
        "break_even": _break_even(outcomes, run.prompt, size_of, unit),
        "reference": _reference(outcomes, rows, run, size_of, unit),
        "cut_off": _cut_offs(run.cut_outcomes, size_of, unit) if run.cut_outcomes else None,
        "all_agree": all(r["agree"] for r in rows) and all(c.agree for c in run.cut_outcomes),
    }


def _fix(arm: ArmOutcome, unit: str) -> int:
    """What an arm's model sent after the failure (or the cut), in the unit."""
    return arm.fix_tokens if unit == "tokens" and arm.fix_tokens is not None else arm.fix_bytes


def _scenario_row(o: Outcome, size_of: Any, unit: str) -> dict[str, Any]:
    """One scenario's figures: both arms' fixes, the notices the ON model read, the
    saving, the runs, the time, the tool calls and whether both arms reached the value."""
    off_fix, on_fix = _fix(o.off, unit), _fix(o.on, unit)
    on_notice = sum(size_of(c.notice) for c in o.on.calls if c.notice)
    return {
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
        "tools": o.scenario.tools,
        "failed_tool_calls": o.off.failed_tool_calls,
        "off_tool_calls": o.off.fix_tool_calls,
        "on_tool_calls": o.on.fix_tool_calls,
        "on_tools_reused": o.on.fix_tools_reused,
        "agree": o.agree,
        "problems": [p for p in (o.off.problem, o.on.problem) if p],
        "expected": o.scenario.expected,
    }


def _total(chosen: list[dict[str, Any]]) -> dict[str, Any]:
    """The sums of scenario rows, and their savings."""
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


def _notices(outcomes: Sequence[Outcome], size_of: Any) -> dict[str, Any]:
    """The notices the ON model read: how many, their sizes, and by what they offer the
    count and the longest."""
    texts = [c.notice for o in outcomes for c in o.on.calls if c.notice]
    read = [size_of(text) for text in texts]
    kinds: dict[str, dict[str, Any]] = {}
    for text, size in zip(texts, read):
        kind = kinds.setdefault(_notice_kind(text), {"count": 0, "max": 0, "example": text})
        kind["count"] += 1
        if size > kind["max"]:
            kind["max"], kind["example"] = size, text
    return {
        "count": len(read),
        "median": _median(read),
        "min": min(read, default=None),
        "max": max(read, default=None),
        "kinds": kinds,
    }


def _cut_offs(outcomes: Sequence[CutOutcome], size_of: Any, unit: str) -> dict[str, Any]:
    """What the model writes after a cut, per cut-off call: the whole call again
    (regenerate) against the extend line, with the notice the extend arm reads. Saved:
    ``(R - E - N) / R``; priced, with an output token at ``OUTPUT_WEIGHT`` input tokens:
    ``(w * R - w * E - N) / (w * R)``."""

    def saving(regenerate: int, extend: int, notice: int) -> dict[str, Any]:
        weight = OUTPUT_WEIGHT
        return {
            "regenerate": regenerate,
            "extend": extend,
            "notice": notice,
            "saved": _percent(regenerate - extend - notice, regenerate),
            "saved_priced": _percent(weight * (regenerate - extend) - notice, weight * regenerate),
        }

    rows = []
    for o in outcomes:
        arrived = o.arrived
        notices = [c.notice for c in o.extend.calls if c.notice]
        rows.append(
            {
                "name": o.cut.name,
                "size": o.cut.size,
                "at": o.cut.at,
                "program_bytes": o.regenerate.fix_bytes,  # the whole call's arguments
                "arrived_bytes": arrived.bytes if arrived else None,
                "arrived": None if arrived is None else _sent(arrived, unit),
                **saving(
                    _fix(o.regenerate, unit),
                    _fix(o.extend, unit),
                    sum(size_of(text) for text in notices),
                ),
                "extend_bytes": o.extend.fix_bytes,
                "regenerate_seconds": round(o.regenerate.fix_seconds, 3),
                "extend_seconds": round(o.extend.fix_seconds, 3),
                "notice_text": notices[0] if notices else None,
                "agree": o.agree,
                "problems": [p for p in (o.regenerate.problem, o.extend.problem) if p],
                "expected": o.cut.expected,
            }
        )
    return {
        "output_weight": OUTPUT_WEIGHT,
        "scenarios": rows,
        "total": {
            "scenarios": len(rows),
            **saving(*(sum(r[key] for r in rows) for key in ("regenerate", "extend", "notice"))),
            "regenerate_bytes": sum(r["program_bytes"] for r in rows),
            "extend_bytes": sum(r["extend_bytes"] for r in rows),
        },
    }


def _tools(
    rows: list[dict[str, Any]], prompt: str | None, size_of: Any, unit: str
) -> dict[str, Any]:
    """The tool scenarios' totals: the calls of the failed messages, the calls each arm's
    fixes made again, the results the replays reused, and the prompt section that lists
    the tools."""
    counts = ("failed_tool_calls", "off_tool_calls", "on_tool_calls", "on_tools_reused")
    listed = {"bytes": len(prompt.encode()), unit: size_of(prompt)} if prompt else None
    return {
        **_total(rows),
        **{key: sum(r[key] for r in rows) for key in counts},
        "prompt_section": listed,
    }


def _sent(call: ModelCall, unit: str) -> int:
    """A call's arguments in the unit."""
    return int(call.tokens) if unit == "tokens" and call.tokens is not None else int(call.bytes)


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
    # In tokens, every fix was counted (``analyse`` falls back to bytes otherwise).
    sizes = [c.tokens if unit == "tokens" and c.tokens is not None else c.bytes for c in replays]
    line = _median([float(size) for size in sizes])
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
        path = str(calls_path(session_dir, int(reference.lstrip("#"))))
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
