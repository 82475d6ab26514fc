"""The history table (one row per history line, as ``%ptc_history`` and ``ptc-retry history``
show it) and the listing of one program's tool calls (``%ptc_show``, ``ptc-retry show``)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from .layout import TOOL_CALLS, reference, tool_calls_name
from .session_files import latest_calls
from .status import HistoryStatus

RESTART = "kernel restarted"


def format_history(
    lines: Iterable[dict[str, Any]],
    *,
    session_dir: str | Path | None = None,
    last: int | None = None,
) -> str:
    """One row per history line, oldest first, in fixed-width plain-text columns (no ANSI):
    the ``last`` lines (all when None) of ``lines``, a session's history in file order.

    Columns: ``ref`` (``#n``, what ``replay`` and ``ptc-retry show`` take; blank on lines of
    older versions), ``id``, ``status``; ``turn`` when some call has a turn other than 0;
    ``step`` and ``ordinal`` (the call's position in its step, its ``previous/<n>.json``)
    only when some call belongs to a backend's step, ``-`` in ``step`` for a call that was a
    step of its own; ``code_bytes``, the program's UTF-8 size (blank where the line does not
    know it: lines of older versions, unfinished lines); ``ename``; ``replay_of`` and
    ``extend_of`` (the program a call ran again, or the cut-off call it completed, by its
    ``#n``), ``resumed_from`` (the top-level statement a resume started at, from 0), each
    only when some call has one; and ``when``. A line ``-- kernel restarted ---...``
    separates the rows between which the kernel restarted: see ``restarts``.
    """
    table = _table(lines, last)
    if table is None:
        return _no_calls(session_dir)
    columns, rows, marks = table
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
    text = [_row(columns, widths)] + [_row(row, widths) for row in rows]
    width = max(len(row) for row in text)
    for index, mark in reversed(marks):  # row i is text[i + 1], under the header
        text.insert(index + 2, f"-- {mark} ".ljust(width, "-"))
    if session_dir:
        text.insert(0, f"session: {session_dir}")
    return "\n".join(text)


def history_html(
    lines: Iterable[dict[str, Any]],
    *,
    session_dir: str | Path | None = None,
    last: int | None = None,
) -> str:
    """The same table as ``format_history``, as HTML for a notebook: a front end that is too
    narrow for it scrolls it, or wraps it between cells, never inside one."""
    table = _table(lines, last)
    if table is None:
        return f"<p>{escape(_no_calls(session_dir))}</p>"
    columns, rows, marks = table
    body = [_html_row("th", columns)] + [_html_row("td", row) for row in rows]
    for index, mark in reversed(marks):
        body.insert(index + 2, f'<tr><td colspan="{len(columns)}">-- {escape(mark)} --</td></tr>')
    where = f"<p>session: <code>{escape(str(session_dir))}</code></p>" if session_dir else ""
    return f"{where}<table>{''.join(body)}</table>"


def _html_row(tag: str, cells: list[str]) -> str:
    # No break inside a cell: a row wraps, if it must, between its cells.
    style = ' style="white-space: nowrap"'
    return "<tr>" + "".join(f"<{tag}{style}>{escape(cell)}</{tag}>" for cell in cells) + "</tr>"


def _no_calls(session_dir: str | Path | None) -> str:
    return f"no calls yet in {session_dir}" if session_dir else "no calls yet"


def _table(
    lines: Iterable[dict[str, Any]], last: int | None
) -> tuple[list[str], list[list[str]], list[tuple[int, str]]] | None:
    """``(columns, rows, restart marks)`` of the last ``last`` of ``lines``; None for none.
    A mark ``(i, text)`` goes after row i."""
    every = list(lines)
    shown = every[-last:] if last else every
    if not shown:
        return None
    names = {line.get("id"): _reference_of(line) for line in every if _reference_of(line)}
    columns = _columns(shown)
    rows = [[_cell(line, column, names) for column in columns] for line in shown]
    marks = [
        (index, RESTART + (f" (somewhere after {after})" if after else ""))
        for index, after in restarts(shown)
    ]
    return columns, rows, marks


def restarts(lines: Sequence[dict[str, Any]]) -> list[tuple[int, str | None]]:
    """Where the kernel restarted: ``(i, None)`` means between ``lines[i]`` and ``lines[i + 1]``.

    Two signs, never counted twice for one restart: a run of ``unfinished`` lines (programs
    during which the kernel died) followed by other lines; and a change of the ``kernel`` token
    that the extension writes on every line. Lines of older versions carry the token only on
    failures; when lines without it lie between the two tokens, ``(i, ref)`` says the restart
    happened somewhere between ``ref`` (the old kernel's last line, by its ``#n``, else its id)
    and ``lines[i + 1]``, the new kernel's first line.
    """
    found: list[tuple[int, str | None]] = []
    token: str | None = None  # the kernel of the latest line that names one
    token_at = -1  # index of that line
    marked = False  # a restart is marked since that line
    unfinished = HistoryStatus.UNFINISHED
    for i, line in enumerate(lines):
        if i and lines[i - 1].get("status") == unfinished and line.get("status") != unfinished:
            found.append((i - 1, None))
            marked = True
        kernel = line.get("kernel")
        if not isinstance(kernel, str):
            continue
        if token is not None and kernel != token and not marked:
            exact = token_at == i - 1
            found.append((i - 1, None if exact else _name(lines[token_at])))
        token, token_at, marked = kernel, i, False
    return found


def _name(line: dict[str, Any]) -> str:
    return _reference_of(line) or str(line.get("id"))


def _reference_of(line: dict[str, Any]) -> str:
    n = line.get("n")
    return reference(n) if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else ""


#: Columns shown only when some line has the key.
_WHERE_PRESENT = ("replay_of", "extend_of", "resumed_from")


def _columns(lines: list[dict[str, Any]]) -> list[str]:
    stepped = any(_is_int(line.get("step")) for line in lines)
    turns = stepped or any(line.get("turn") not in (None, 0) for line in lines)
    columns = ["ref", "id", "status"]
    columns += ["turn"] if turns else []
    columns += ["step", "ordinal"] if stepped else []
    columns += ["code_bytes", "ename"]
    columns += [key for key in _WHERE_PRESENT if any(key in line for line in lines)]
    return columns + ["when"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()


def _cell(line: dict[str, Any], column: str, names: dict[Any, str]) -> str:
    if column == "ref":
        return _reference_of(line)
    if column == "when":
        stamp = line.get("time")
        try:
            return time.strftime("%H:%M:%S", time.localtime(stamp)) if _is_real(stamp) else ""
        except (OverflowError, OSError, ValueError):  # a damaged line: 1e300, nan
            return ""
    if column == "step" and line.get("step") is None and line.get("turn") is not None:
        return "-"  # a step of its own (the unfinished lines of a dead kernel know no turn)
    value = line.get(column)
    if column in ("replay_of", "extend_of") and isinstance(value, str):
        return names.get(value, value)  # the name the notice gave that program
    return "" if value is None else str(value)


def format_tool_calls(records: Sequence[dict[str, Any]], call_id: str) -> str:
    """The compact listing of the tool calls of ``call_id``, as ``%ptc_show`` and ``ptc-retry
    show`` print it after the program: Python comments, one row a call in order."""
    where = f"{TOOL_CALLS}/{tool_calls_name(call_id)}"
    rows = [["k", "tool", "status", "seconds", "reused"]]
    numbered = latest_calls(records)
    for line in numbered:
        duration = line.get("duration")
        seconds = f"{duration:.3f}" if isinstance(duration, (int, float)) else "?"
        reused = line.get("reused_from") if line.get("reused") else ""
        status = "ok" if line.get("ok") is True else "paused" if line.get("paused") else "error"
        rows.append([str(line["k"]), str(line.get("tool")), status, seconds, str(reused or "")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    text = [f"# tool calls: {len(numbered)} ({where})"]
    for row in rows:
        cells = [row[0].rjust(widths[0]), *(c.ljust(w) for c, w in zip(row[1:3], widths[1:3]))]
        cells += [row[3].rjust(widths[3]), row[4]]
        text.append("#   " + "  ".join(cells).rstrip())
    return "\n".join(text)
