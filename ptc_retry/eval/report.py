"""The evaluation's files: ``report.md``, ``report.json`` and ``savings.png``, written from
the figures :mod:`.figures` computes; ``report.md``'s sections are :mod:`.tables`' and
:mod:`.discussion`'s."""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..tokens import Tokenizer
from .approvals import ApprovalOutcome, approvals_section
from .chart import savings_chart
from .discussion import break_even_section, method_section, overhead_section, reference_section
from .figures import analyse
from .outcomes import ShapeRun
from .tables import (
    by_size_section,
    cut_off_section,
    fmt_pct,
    header_section,
    resume_section,
    scenarios_section,
    targets_section,
    tools_section,
)

__all__ = ["headline", "render_markdown", "write_report"]


def write_report(
    out: Path,
    runs: Sequence[ShapeRun],
    tokens: Tokenizer,
    *,
    quick: bool = False,
    elapsed: float = 0.0,
    approvals: Sequence[ApprovalOutcome] = (),
) -> tuple[list[Path], str]:
    """Write the three files to ``out`` (created if needed); return their paths and the
    headline sentence. ``approvals``: the approval scenarios' outcomes, a section of their
    own after the rest."""
    figures = analyse(runs, tokens)
    figures["run"] = _environment(quick, elapsed)
    figures["headline"] = headline(figures)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    text = render_markdown(figures) + "\n".join(["", *approvals_section(approvals)])
    markdown.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    data = out / "report.json"
    detail = dict(figures)
    detail["calls"] = {
        run.shape.name: {
            o.scenario.name: {"off": o.off.as_dict(), "on": o.on.as_dict()} for o in run.outcomes
        }
        for run in runs
    }
    detail["approvals"] = [outcome.as_dict() for outcome in approvals]
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
        f"with ptc-retry ({fmt_pct(t['saved_output'])} fewer; "
        f"{fmt_pct(t['saved_with_notice'])} fewer counting the {t['on_notice']:,} {unit} "
        f"of notices read) with {first['label']}"
    )
    others = [
        f"{fmt_pct(s['total']['saved_with_notice'])} fewer, notices included, with {s['label']}"
        for s in shapes[1:]
    ]
    text += f"; {'; '.join(others)}." if others else "."
    if long["scenarios"]:
        text += (
            f" For programs of 5 KB and more: {fmt_pct(long['saved_with_notice'])} fewer, "
            "notices included."
        )
    resume = first["resume"]
    if resume:
        text += (
            f" Resume cut the fixes' wall time from {resume['off_fix_seconds']:.1f} s to "
            f"{resume['on_fix_seconds']:.1f} s."
        )
    return text


def render_markdown(figures: dict[str, Any]) -> str:
    """``report.md``: the figures of :func:`.figures.analyse` (with ``run`` and ``headline``
    added) as sections of sentences and tables."""
    shapes = [figures["id_shapes"][name] for name in figures["id_shapes"]]
    lines = header_section(figures, shapes)
    lines += targets_section(figures, shapes)
    lines += scenarios_section(figures, shapes)
    lines += by_size_section(figures, shapes)
    lines += resume_section(figures, shapes)
    lines += tools_section(figures, shapes)
    lines += cut_off_section(figures, shapes)
    lines += overhead_section(figures, shapes)
    lines += break_even_section(figures, shapes)
    lines += reference_section(figures, shapes)
    lines += method_section(figures, shapes)
    return "\n".join(lines) + "\n"
