"""The history table a person reads: ``%ptc_history`` in the kernel and ``ptc-retry history``.

Most tests format hand-written history lines; the last ones read a real kernel's session.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.cli import main
from ptc_retry.core.history_table import format_history, history_html, restarts

from .helpers import DYING, Kernel

START = 1_700_000_000.0
MARKER = re.compile(r"-- kernel restarted( \(somewhere after \S+\))? -+")


def line(n: int | None, status: str = "ok", **fields: Any) -> dict[str, Any]:
    """A history line as the kernel extension writes it (no backend metadata)."""
    record: dict[str, Any] = {"id": f"c{n}", "n": n, "tool": "run_code", "turn": 0}
    record.update(step=None, ordinal=1, status=status, time=START + (n or 0), duration=0.1)
    record.update(bytes=40, code_bytes=12, kernel="100-aaaa")
    if n is None:
        del record["n"]
    record.update(fields)
    return record


def unfinished(n: int | None) -> dict[str, Any]:
    """The line the store writes at reopen for a program during which the kernel died."""
    record = {"id": f"c{n}", "n": n, "tool": None, "turn": None, "step": None, "ordinal": None}
    record.update(status="unfinished", time=START + (n or 0), duration=None, bytes=55)
    return record


def old(n: int, status: str = "ok", **fields: Any) -> dict[str, Any]:
    """A line of an older version: no ``n``, no ``code_bytes``, a kernel token on failures only."""
    record = line(None, status, id=f"c{n}", bytes=30 + n, **fields)
    del record["code_bytes"]
    if status == "ok":
        del record["kernel"]
    return record


def rows(table: str) -> list[list[str]]:
    """The header and rows split into words; a restart marker is ``["RESTART"]``."""
    return [["RESTART"] if MARKER.fullmatch(text) else text.split() for text in table.splitlines()]


# -- columns -----------------------------------------------------------------------------------


def test_each_row_starts_with_the_reference_to_replay_it_by() -> None:
    table = format_history([line(1), line(2, "error", ename="KeyError")])
    assert rows(table)[0][:3] == ["ref", "id", "status"]
    assert [row[:3] for row in rows(table)[1:]] == [["#1", "c1", "ok"], ["#2", "c2", "error"]]


def test_without_steps_turn_step_and_ordinal_are_left_out() -> None:
    table = format_history([line(1), line(2)])
    assert rows(table)[0] == ["ref", "id", "status", "code_bytes", "ename", "when"]


def test_a_call_that_completes_a_cut_off_one_shows_it_in_extend_of() -> None:
    table = format_history([line(1, "partial", ename="CallCutOff"), line(2, extend_of="c1")])
    assert rows(table)[0] == [
        "ref", "id", "status", "code_bytes", "ename", "extend_of", "when"
    ]  # fmt: skip
    assert rows(table)[1][:5] == ["#1", "c1", "partial", "12", "CallCutOff"]
    assert rows(table)[2][:5] == ["#2", "c2", "ok", "12", "#1"]


def test_a_replay_names_the_program_it_ran_again_by_its_reference_and_where_it_resumed() -> None:
    lines = [line(1, "error", ename="KeyError"), line(2), line(3, replay_of="c1", resumed_from=4)]
    table = rows(format_history(lines, last=2))
    assert table[0] == [
        "ref", "id", "status", "code_bytes", "ename", "replay_of", "resumed_from", "when"
    ]  # fmt: skip
    # #1 is not among the rows shown, and still named as its notice named it.
    assert table[2][:6] == ["#3", "c3", "ok", "12", "#1", "4"]


def test_a_replay_of_a_program_without_a_number_names_its_id() -> None:
    table = rows(format_history([old(1, "error", ename="KeyError"), line(2, replay_of="c1")]))
    assert table[2][-2] == "c1"  # replay_of, before when (ename is blank)


def test_with_steps_the_table_shows_turn_step_and_ordinal() -> None:
    lines = [
        line(1, turn=3, step=1, ordinal=1),
        line(2, turn=3, step=1, ordinal=2),
        line(3, turn=3, step=2, ordinal=1),
        line(4),  # a person's cell between the agent's calls: a step of its own
    ]
    table = rows(format_history(lines))
    assert table[0][:6] == ["ref", "id", "status", "turn", "step", "ordinal"]
    assert [row[3:6] for row in table[1:]] == [
        ["3", "1", "1"], ["3", "1", "2"], ["3", "2", "1"], ["0", "-", "1"]
    ]  # fmt: skip


def test_turns_without_steps_show_only_the_turn() -> None:
    table = rows(format_history([line(1, turn=1), line(2, turn=2)]))
    assert table[0][:5] == ["ref", "id", "status", "turn", "code_bytes"]


def test_code_bytes_is_the_size_of_the_program_not_of_its_saved_arguments() -> None:
    table = rows(format_history([line(1, bytes=812, code_bytes=790)]))
    assert table[1][table[0].index("code_bytes")] == "790"
    assert "bytes" not in table[0]  # the saved arguments' size is history.jsonl's own


def test_lines_of_older_versions_show_what_they_have() -> None:
    table = rows(format_history([old(1), old(2, "error", ename="NameError", kernel="k1")]))
    assert table[0] == ["ref", "id", "status", "code_bytes", "ename", "when"]
    # No reference and no program size to show: the first word is the id, then the status.
    assert [row[:3] for row in table[1:]] == [
        ["c1", "ok", time.strftime("%H:%M:%S", time.localtime(START))],
        ["c2", "error", "NameError"],
    ]


def test_the_table_is_plain_fixed_width_text() -> None:
    lines = [line(1, turn=1, step=1), unfinished(2), line(3, "error", ename="ZeroDivisionError")]
    text = format_history(lines, session_dir="/somewhere/s")
    assert "\x1b" not in text and "\t" not in text
    header, *table = text.splitlines()[1:]
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    for row in table:
        if not MARKER.fullmatch(row):
            assert all(row[i - 1] == " " for i in starts[1:] if i < len(row)), row


def test_the_html_table_has_the_same_cells_each_kept_whole() -> None:
    lines = [line(1, "error", ename="<Err>"), line(2, kernel="200-bbbb", replay_of="c1")]
    html = history_html(lines, session_dir="/somewhere/s", last=2)
    text = rows(format_history(lines))
    assert html.startswith("<p>session: <code>/somewhere/s</code></p><table>")
    cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", html)
    assert cells[: len(text[0])] == text[0]  # the header
    assert "&lt;Err&gt;" in cells and "#1" in cells  # escaped; replay_of by its reference
    assert '<td colspan="7">-- kernel restarted --</td>' in html
    assert html.count('style="white-space: nowrap"') == len(cells) - 1  # all but the mark


def test_no_lines_says_no_calls_yet() -> None:
    assert format_history([], session_dir="/somewhere/s") == "no calls yet in /somewhere/s"


# -- restarts ----------------------------------------------------------------------------------


def test_a_new_kernel_token_marks_a_restart_between_the_two_rows() -> None:
    lines = [line(1), line(2), line(3, kernel="200-bbbb"), line(4, kernel="200-bbbb")]
    table = rows(format_history(lines))
    assert [row[0] for row in table[1:]] == ["#1", "#2", "RESTART", "#3", "#4"]


def test_the_marker_follows_the_program_during_which_the_kernel_died() -> None:
    lines = [line(1), unfinished(2), line(3, kernel="200-bbbb")]
    table = rows(format_history(lines))
    assert [row[:3] for row in table[1:]] == [
        ["#1", "c1", "ok"], ["#2", "c2", "unfinished"], ["RESTART"], ["#3", "c3", "ok"]
    ]  # fmt: skip


def test_a_program_still_running_gets_no_marker() -> None:
    assert restarts([line(1), line(2), unfinished(3)]) == []


def test_one_kernel_gets_no_marker() -> None:
    assert "restarted" not in format_history([line(n) for n in range(1, 6)])


def test_in_older_sessions_the_marker_says_how_far_back_the_restart_may_be() -> None:
    # Only failures carried the token: the restart happened after c1, before c3.
    lines = [old(1, "error", kernel="k1"), old(2), old(3, "error", kernel="k2")]
    table = format_history(lines).splitlines()
    assert [text.split()[0] for text in table[1:]] == ["c1", "c2", "--", "c3"]
    assert table[3].startswith("-- kernel restarted (somewhere after c1) --")


# -- in a real kernel --------------------------------------------------------------------------


def test_ptc_history_marks_a_kernel_restart(kernel: Kernel) -> None:
    kernel.execute("before = 1")
    kernel.restart()
    kernel.execute("after = 2")
    table = rows(kernel.execute("%ptc_history").displayed)
    assert table[0] == ["session:", str(Path(table[0][1]))]
    assert [row[:3] for row in table[2:]] == [["#1", "c1", "ok"], ["RESTART"], ["#2", "c2", "ok"]]


def test_history_command_marks_the_kernel_death_after_the_program_that_died(
    kernel: Kernel, checkpoint_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel.execute("ready = True")
    kernel.client.execute(DYING)  # no reply will come
    kernel.wait_for_end()
    kernel.restart()
    kernel.execute("print('back')")
    assert main(["history", "--root", str(checkpoint_root), "--session", "test"]) == 0
    table = rows(capsys.readouterr().out)
    assert [row[:3] for row in table[2:5]] == [
        ["#1", "c1", "ok"], ["#2", "c2", "unfinished"], ["RESTART"]
    ]  # fmt: skip
    assert table[5][:3] == ["#3", "c3", "ok"]
    size = table[1].index("code_bytes")
    assert table[2][size] == str(len(b"ready = True"))  # the program's size, from code_bytes
    assert json.loads((checkpoint_root / "test" / "by-id" / "c2.json").read_text()) == {
        "code": DYING
    }
