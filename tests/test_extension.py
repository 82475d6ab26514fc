"""%load_ext ptc_retry in a stock ipykernel: what it adds, configures and removes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ptc_retry.core.notice import parse_notice

from .helpers import Kernel, line_of
from .test_cell_endings import REFUSED_BY_IPYTHON, fail_in_hook_once

SNAPSHOT = """
import json as _json
_ip = get_ipython()
_json.dumps({
    "pre": len(_ip.events.callbacks["pre_run_cell"]),
    "post": len(_ip.events.callbacks["post_run_cell"]),
    "own_showtraceback": "_showtraceback" in _ip.__dict__,
    "configurables": sorted(
        type(c).__name__ for c in _ip.configurables if type(c).__name__.startswith("PtcRetry")
    ),
    "registry": sorted(n for n in _ip.magics_manager.registry if n.startswith("PtcRetry")),
    "magics": sorted(n for n in _ip.magics_manager.magics["line"] if n.startswith("ptc_")),
    "ptc_retry_in_ns": "ptc_retry" in _ip.user_ns,
    "own_input_request": "_input_request" in _ip.kernel.__dict__,
})
"""

# Over notice_min_bytes: four students, and the last line asks for a fifth.
RANKING = """\
scores = {
    "ana": [88, 92, 79, 85],
    "ben": [71, 85, 90, 77],
    "chloe": [95, 91, 97, 89],
    "dev": [64, 70, 82, 75],
}


def average(marks):
    return round(sum(marks) / len(marks), 1)


ranking = sorted(scores, key=lambda name: average(scores[name]), reverse=True)
for place, name in enumerate(ranking, 1):
    print(f"{place}. {name:<6} {average(scores[name]):5.1f}")
print("class average:", average([m for marks in scores.values() for m in marks]))
ranking[4]
"""


@pytest.fixture
def stock(start_kernel) -> Kernel:  # type: ignore[no-untyped-def]
    return start_kernel("python3")


def snapshot(kernel: Kernel) -> dict:
    return json.loads(ast.literal_eval(kernel.execute(SNAPSHOT).result))


def test_unload_removes_every_hook_name_and_magic(stock: Kernel) -> None:
    before = snapshot(stock)
    stock.execute("%load_ext ptc_retry")
    stock.execute("%config PtcRetry.failure_limit = 4")  # reconfigured state unloads too
    loaded = snapshot(stock)
    stock.execute("%unload_ext ptc_retry")
    after = snapshot(stock)

    assert loaded["pre"] == before["pre"] + 1 and loaded["post"] == before["post"] + 1
    assert loaded["own_showtraceback"] and loaded["ptc_retry_in_ns"]
    assert loaded["own_input_request"]  # input() goes through the shared stdin channel
    assert loaded["magics"] == ["ptc_guard", "ptc_history", "ptc_show"]
    assert loaded["configurables"] == ["PtcRetry", "PtcRetryMagics"]
    assert loaded["registry"] == ["PtcRetryMagics"]
    assert after == before


def test_unload_restores_a_traceback_hook_someone_else_set(stock: Kernel) -> None:
    stock.execute(
        "_ip = get_ipython()\n"
        "_orig = _ip._showtraceback\n"
        "def _mine(etype, value, stb):\n    _orig(etype, value, stb + ['mine'])\n"
        "_ip._showtraceback = _mine"
    )
    stock.execute("%load_ext ptc_retry")
    stock.execute("%unload_ext ptc_retry")
    assert stock.execute("get_ipython()._showtraceback is _mine").result == "True"
    assert stock.execute("1/0").error["traceback"][-1] == "mine"


def test_extension_in_a_stock_kernel_saves_and_notices(
    stock: Kernel, checkpoint_root: Path
) -> None:
    stock.execute("%load_ext ptc_retry")
    failed = stock.execute(RANKING)
    saved = checkpoint_root / "test" / "by-id" / "c1.json"
    # c1, #1: the %load_ext cell ran before the hooks.
    assert parse_notice(failed.error["traceback"][-1]) == "#1"
    fixed = stock.execute("await ptc_retry.replay('#1', 'ranking[4]', 'ranking[3]')")
    assert fixed.result == "'dev'"
    assert json.loads(saved.read_text()) == {"code": RANKING}


def test_config_magic_changes_the_notice_threshold(stock: Kernel) -> None:
    stock.execute("%load_ext ptc_retry")
    stock.execute("%config PtcRetry.notice_min_bytes = 0")
    assert "ptc-retry" in stock.execute("1/0").error["traceback"][-1]
    stock.execute("%config PtcRetry.notice_min_bytes = 100000")
    assert "ptc-retry" not in stock.execute("1/0").error["traceback"][-1]


def test_traits_are_settable_on_the_kernel_command_line(start_kernel) -> None:  # type: ignore[no-untyped-def]
    kernel = start_kernel(args=("--PtcRetry.notice_min_bytes=0",))
    assert "ptc-retry" in kernel.execute("1/0").error["traceback"][-1]


def test_history_and_show_magics(stock: Kernel) -> None:
    stock.execute("%load_ext ptc_retry")
    stock.execute("answer = 42")
    history = stock.execute("%ptc_history").displayed
    assert "c1" in history and "ok" in history
    shown = stock.execute("%ptc_show c1").stdout
    assert shown.endswith("answer = 42\n")
    assert "nope" in stock.execute("%ptc_show nope").stderr


@pytest.mark.parametrize(
    ("setup", "cell", "ename"),
    [
        pytest.param(None, REFUSED_BY_IPYTHON, "RuntimeError", id="a cell IPython refuses"),
        pytest.param(
            fail_in_hook_once(".programs.pop", "RuntimeError('a bug')"),
            "1/0",
            "ZeroDivisionError",
            id="our post_run_cell fails",
        ),
    ],
)
def test_in_a_stock_kernel_the_next_cell_is_a_call_after(
    stock: Kernel, checkpoint_root: Path, setup: str | None, cell: str, ename: str
) -> None:
    stock.execute("%load_ext ptc_retry\n%config PtcRetry.notice_min_bytes = 0")
    if setup is not None:
        stock.execute(setup)  # a call of its own: c1
    first, second = (2, 3) if setup is not None else (1, 2)

    assert stock.execute(cell).error["ename"] == ename
    after = stock.execute("undefined_name")

    session = checkpoint_root / "test"
    assert parse_notice(after.error["traceback"][-1]) == f"#{second}"
    assert line_of(session, f"c{second}")["ename"] == "NameError"
    # The program before is recorded as failed, by the error IPython showed for it.
    line = line_of(session, f"c{first}")
    assert (line["status"], line["ename"]) == ("error", ename)
