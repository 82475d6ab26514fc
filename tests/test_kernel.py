"""The ptc-retry kernel end to end, through jupyter_client with request metadata."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ptc_retry.core.notice import NOTICE_MIN_BYTES, parse_notice
from ptc_retry.core.version import __version__
from ptc_retry.kernel.remote import APIS, connect

from .helpers import ORDERS, ORDERS_FIX, Kernel

PROGRAM, FIX = ORDERS, ORDERS_FIX  # a realistic program of about 700 bytes, one wrong literal
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def arguments_of(code: str) -> str:
    # Spaced and key-ordered the way a model's raw tool-call string may be.
    return json.dumps({"code": code}, indent=1, ensure_ascii=False)


def test_failure_is_saved_byte_for_byte_and_noticed(kernel: Kernel, checkpoint_root: Path) -> None:
    raw = arguments_of(PROGRAM)
    assert len(PROGRAM.encode()) > 600

    executed = kernel.execute(
        PROGRAM, {"call_id": "call_7", "arguments": raw, "turn": 1, "step": 1}
    )

    saved = checkpoint_root / "test" / "by-id" / "call_7.json"
    assert saved.read_bytes() == raw.encode()
    assert executed.status == "error"
    assert executed.error["ename"] == "KeyError"
    assert executed.error["evalue"] == "'regoin'"
    notice = executed.error["traceback"][-1]
    assert "call_7" not in notice and str(saved) not in notice  # the short reference names it
    assert 'Saved as #1. Small fix? Send only:\nawait ptc_retry.replay("#1"' in notice
    assert "\x1b[" not in notice
    assert executed.reply["content"]["traceback"][-1] == notice
    assert executed.ptc == {
        "call_id": "call_7",
        "reference": "#1",
        "checkpoint": str(saved),
        "ordinal": 1,
        "status": "error",
        "notice": notice,
        "guard": None,
    }


def test_one_line_replay_runs_the_corrected_program(kernel: Kernel, checkpoint_root: Path) -> None:
    kernel.execute(PROGRAM, {"call_id": "call_7", "arguments": arguments_of(PROGRAM), "step": 1})
    line = f"await ptc_retry.replay('call_7', {FIX[0]!r}, {FIX[1]!r})"

    executed = kernel.execute(
        line, {"call_id": "call_8", "arguments": arguments_of(line), "step": 2}
    )

    assert executed.status == "ok", executed.error
    assert "regions: ['east', 'north', 'south']" in executed.stdout
    assert executed.result == "{'north': 162.75, 'south': 95.75, 'east': 310.0}"
    names = kernel.execute("print(sorted(summary), round(mean_amount, 2), callable(by_region))")
    assert names.stdout == "['east', 'north', 'south'] 113.7 True\n"
    session = checkpoint_root / "test"
    history = [json.loads(line) for line in (session / "history.jsonl").read_text().splitlines()]
    assert [(h["id"], h["status"], h.get("replay_of")) for h in history[:2]] == [
        ("call_7", "error", None),
        ("call_8", "ok", "call_7"),
    ]
    corrected = json.loads((session / "by-id" / "call_8.json").read_text())["code"]
    assert corrected == PROGRAM.replace(*FIX)


def test_replaying_a_replay_edits_the_corrected_program(kernel: Kernel) -> None:
    kernel.execute(PROGRAM, {"call_id": "a1"})
    first = kernel.execute(
        "await ptc_retry.replay('a1', 'print(\"regions:\"', 'print(\"REGIONS:\"')",
        {"call_id": "a2"},
    )
    assert first.status == "error"  # the KeyError is still there
    notice = first.error["traceback"][-1]
    assert parse_notice(notice) == "#2"  # the replay itself, so fixes accumulate

    second = kernel.execute(
        f"await ptc_retry.replay('#2', {FIX[0]!r}, {FIX[1]!r})", {"call_id": "a3"}
    )

    assert second.status == "ok", second.error
    assert "REGIONS: ['east', 'north', 'south']" in second.stdout


def test_replay_traceback_shows_the_corrected_programs_lines(kernel: Kernel) -> None:
    kernel.execute(PROGRAM, {"call_id": "t1"})
    executed = kernel.execute(
        "await ptc_retry.replay('t1', 'import statistics', 'import statistics\\n')"
    )
    text = ANSI.sub("", "\n".join(executed.error["traceback"]))
    assert 'totals.setdefault(row["regoin"], []).append(row["amount"])' in text
    assert "<ptc-retry" in text


def test_metadata_without_matching_code_saves_the_source(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    kernel.execute("x = 1", {"call_id": "m1", "arguments": '{"code": "something else"}'})
    saved = checkpoint_root / "test" / "by-id" / "m1.json"
    assert json.loads(saved.read_text()) == {"code": "x = 1"}


def test_successful_programs_are_checkpointed(kernel: Kernel, checkpoint_root: Path) -> None:
    executed = kernel.execute("answer = 6 * 7\nanswer")
    assert executed.result == "42"
    assert (
        executed.ptc["call_id"] == "c1"
        and executed.ptc["status"] == "ok"
        and executed.ptc["notice"] is None
    )
    saved = checkpoint_root / "test" / "by-id" / "c1.json"
    assert json.loads(saved.read_text()) == {"code": "answer = 6 * 7\nanswer"}


# A failing program whose saved size is set to the byte by the length of its title.
TITLE = (
    "Stock levels of the Lyon, Porto and Gdansk warehouses in week 23, counted on Monday "
    "morning by the night shift and checked against the delivery notes of the weekend"
)
STOCK_CHECK = """\
title = "{title}"
stock = {{"bolts": 1200, "nuts": 860, "washers": 310}}
print(title)
stock["screws"]
"""


def stock_check_of(size: int) -> str:
    """A failing program whose checkpoint, ``{"code": ...}`` as JSON, is ``size`` bytes."""
    empty = len(json.dumps({"code": STOCK_CHECK.format(title="")}).encode())
    program = STOCK_CHECK.format(title=TITLE[: size - empty])
    assert len(json.dumps({"code": program}, ensure_ascii=False).encode()) == size
    return program


@pytest.mark.parametrize(
    ("size", "noticed"), [(NOTICE_MIN_BYTES - 1, False), (NOTICE_MIN_BYTES, True)]
)
def test_the_default_notice_threshold_is_notice_min_bytes(
    kernel: Kernel, checkpoint_root: Path, size: int, noticed: bool
) -> None:
    executed = kernel.execute(stock_check_of(size), {"call_id": f"b{size}"})

    saved = checkpoint_root / "test" / "by-id" / f"b{size}.json"
    assert saved.stat().st_size == size  # what notice_min_bytes is compared with
    assert executed.error["ename"] == "KeyError"
    assert (executed.ptc["notice"] is not None) is noticed
    assert (parse_notice(executed.error["traceback"][-1]) == "#1") is noticed
    assert (checkpoint_root / "test" / "calls" / "1.json").exists() is noticed


def test_short_failing_program_gets_no_notice(kernel: Kernel) -> None:
    executed = kernel.execute("1/0")
    assert executed.status == "error"
    assert executed.ptc["notice"] is None
    assert not any("ptc-retry" in line for line in executed.error["traceback"])


def test_syntax_error_program_is_checkpointed_and_noticed(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    broken = PROGRAM.replace("def by_region(rows):", "def by_region(rows)")
    executed = kernel.execute(broken, {"call_id": "s1"})
    assert executed.error["ename"] == "SyntaxError"
    assert parse_notice(executed.error["traceback"][-1]) == "#1"
    assert (checkpoint_root / "test" / "by-id" / "s1.json").exists()
    fixed = kernel.execute(
        "await ptc_retry.replay('#1', edits=[('def by_region(rows)', 'def by_region(rows):'), "
        f"({FIX[0]!r}, {FIX[1]!r})])"
    )
    assert fixed.status == "ok", fixed.error


# Over notice_min_bytes: downloads pages until a person's interrupt (raised here) stops it.
INTERRUPTED = """\
import time

pages = [
    "https://example.com/reports/2024-01.csv",
    "https://example.com/reports/2024-02.csv",
    "https://example.com/reports/2024-03.csv",
    "https://example.com/reports/2024-04.csv",
]
fetched = []


def fetch(url):
    time.sleep(0.01)  # stands for a slow download
    return {"url": url, "bytes": len(url) * 1000}


for number, url in enumerate(pages, 1):
    fetched.append(fetch(url))
    if number == 2:
        raise KeyboardInterrupt  # as if a person pressed stop after the second page
print(len(fetched), "pages")
"""


def test_keyboard_interrupt_is_noticed(kernel: Kernel) -> None:
    executed = kernel.execute(INTERRUPTED, {"call_id": "k1"})
    assert executed.error["ename"] == "KeyboardInterrupt"
    assert executed.ptc["status"] == "interrupted"
    notice = executed.error["traceback"][-1]
    assert notice == '[ptc-retry] Interrupted; saved as #1. To go on:\nawait ptc_retry.resume("#1")'


# Over notice_min_bytes: an agent's program that ends by raising its final answer.
FINAL_ANSWER = """\
class FinalAnswerException(Exception):
    \"\"\"Raised by the agent's final_answer tool to end the run with a value.\"\"\"


def final_answer(value):
    raise FinalAnswerException(value)


invoices = [
    {"number": "INV-101", "customer": "Acme", "total": 1200.0, "paid": True},
    {"number": "INV-102", "customer": "Globex", "total": 860.5, "paid": False},
    {"number": "INV-103", "customer": "Initech", "total": 310.25, "paid": False},
]
unpaid = [invoice for invoice in invoices if not invoice["paid"]]
final_answer(f"{len(unpaid)} unpaid, {sum(i['total'] for i in unpaid):.2f} due")
"""


def test_control_flow_exceptions_get_no_notice(kernel: Kernel) -> None:
    executed = kernel.execute(FINAL_ANSWER)
    assert executed.error["ename"] == "FinalAnswerException"
    assert executed.ptc["notice"] is None
    assert executed.ptc["status"] == "ok"


def test_top_level_return_and_await_in_a_replayed_program(kernel: Kernel) -> None:
    program = (
        "import asyncio\n"
        "await asyncio.sleep(0.01)\n"
        "value = 'before'\n"
        "if value == 'before':\n"
        "    raise ValueError('boom')\n"
        "value\n"
    )
    kernel.execute(program, {"call_id": "r1"})
    executed = kernel.execute(
        "await ptc_retry.replay('r1', \"raise ValueError('boom')\", \"return 'returned'\")"
    )
    assert executed.status == "ok", executed.error
    assert executed.result == "'returned'"


def test_unicode_and_one_megabyte_programs_round_trip(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    text = "naïve → ünïcödé 🐍 " * 10
    program = f"label = {text!r}\n" + "# filler line for a large program\n" * 30000 + "len(label)\n"
    assert len(program.encode()) > 1_000_000
    raw = json.dumps({"code": program})
    executed = kernel.execute(program, {"call_id": "big", "arguments": raw})
    assert executed.result == str(len(text))
    assert (checkpoint_root / "test" / "by-id" / "big.json").read_bytes() == raw.encode()
    replayed = kernel.execute("await ptc_retry.replay('big', 'len(label)', 'label[:5]')")
    assert replayed.result == repr(text[:5])


def test_replay_without_await_says_what_to_write(kernel: Kernel) -> None:
    kernel.execute(PROGRAM, {"call_id": "w1"})
    executed = kernel.execute(f"x = ptc_retry.replay('w1', {FIX[0]!r}, {FIX[1]!r})")
    assert "await ptc_retry.replay('w1', ...)" in executed.stderr


def test_previous_one_is_the_last_program(kernel: Kernel) -> None:
    kernel.execute(PROGRAM)
    executed = kernel.execute(f"await ptc_retry.replay(1, {FIX[0]!r}, {FIX[1]!r})")
    assert executed.status == "ok", executed.error
    assert executed.ptc["call_id"] == "c2"


def test_remote_connect_makes_the_kernel_a_session_and_says_where(
    kernel: Kernel, tmp_path: Path
) -> None:
    executed = kernel.execute(
        "from ptc_retry.kernel.remote import connect\n"
        f"connect(1, session_id='remote', root_dir={str(tmp_path)!r})"
    )
    assert executed.status == "ok", executed.error
    answer = ast.literal_eval(executed.result or "")
    assert answer == {"api": 1, "version": __version__, "session_dir": str(tmp_path / "remote")}
    assert (tmp_path / "remote").is_dir()


def test_remote_connect_to_an_unknown_protocol_names_the_ones_it_speaks() -> None:
    answer = connect(99, session_id="remote")
    assert answer["api"] == APIS[-1] and answer["version"] == __version__
    assert answer["session_dir"] == ""
    assert "protocol 1, not 99" in answer["problem"]
