"""Reading a session's history for a person: a compact table."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

COLUMNS = ("id", "status", "turn", "step", "ordinal", "bytes", "ename", "replay_of", "when")


def format_history(
    lines: Iterable[dict[str, Any]], *, session_dir: str | Path | None = None
) -> str:
    """One row per history line, oldest first, in fixed-width columns."""
    rows = [[_cell(line, column) for column in COLUMNS] for line in lines]
    if not rows:
        return f"no calls yet in {session_dir}" if session_dir else "no calls yet"
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(COLUMNS)]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [list(COLUMNS), *rows]
    ]
    if session_dir:
        text.insert(0, f"session: {session_dir}")
    return "\n".join(text)


def _cell(line: dict[str, Any], column: str) -> str:
    if column == "when":
        stamp = line.get("time")
        return time.strftime("%H:%M:%S", time.localtime(stamp)) if stamp else ""
    value = line.get(column)
    return "" if value is None else str(value)
