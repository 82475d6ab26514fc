"""``report.md``'s closing sections, one function each from the figures
(:func:`.figures.analyse`) and the id shapes' figures: what a retry costs besides its fix
(the input overhead), from which program size a replay pays (the break-even), the figures
beside the published reference's, and how they were measured (the method)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .figures import for_each_shape, short_label
from .scenarios import QUICK, QUICK_CUT_OFFS
from .tables import count_cell, fmt_pct

__all__ = ["break_even_section", "method_section", "overhead_section", "reference_section"]


def overhead_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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


def break_even_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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


def reference_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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
        f"**{for_each_shape(refs, lambda r: fmt_pct(r['tool_call_saved']))} fewer** here, "
        f"against {pub['tool_call_tokens_saved']:.0%}.",
        f"- Total {unit} of the retry step (what the model reads: the prompt section, the "
        "failed program, the tool result with the notice; and what it writes; the rest of "
        "the context is the same in both arms and left out): "
        f"{for_each_shape(refs, count_cell('retry_step_total_off'))} re-sending, "
        f"{for_each_shape(refs, count_cell('retry_step_total_on'))} replaying, "
        f"**{for_each_shape(refs, lambda r: fmt_pct(r['retry_step_total_saved']))} fewer**, "
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


def method_section(figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> list[str]:
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
