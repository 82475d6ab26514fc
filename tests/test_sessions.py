"""Sessions: clients that send no metadata, a kernel that dies, two kernels on one root."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from ptc_retry.core.notice import parse_notice

from .helpers import Kernel

# Over notice_min_bytes: three readings, and the last line asks for a fourth.
LONG_FAILURE = """\
readings = [
    {"sensor": "north", "celsius": 18.5, "time": "06:00"},
    {"sensor": "south", "celsius": 21.0, "time": "06:00"},
    {"sensor": "east", "celsius": 3.0, "time": "06:05"},
]


def fahrenheit(celsius):
    return round(celsius * 9 / 5 + 32, 1)


for reading in readings:
    reading["fahrenheit"] = fahrenheit(reading["celsius"])
    print(f"{reading['sensor']:>6} {reading['time']}: {reading['fahrenheit']} F")
values = [reading["celsius"] for reading in readings]
values[3]
"""


def test_client_without_metadata_gets_default_ids_and_the_notice(
    jupyter_path: Path, checkpoint_root: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PTC_RETRY_ROOT", str(checkpoint_root))
    monkeypatch.setenv("PTC_RETRY_SESSION", "nb")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("total = 40 + 2"),
        nbformat.v4.new_code_cell(LONG_FAILURE),
        nbformat.v4.new_code_cell("await ptc_retry.replay('c2', 'values[3]', 'values[2] + total')"),
    ]
    NotebookClient(nb, kernel_name="ptc-retry", timeout=60, allow_errors=True).execute()

    error = nb.cells[1].outputs[-1]
    assert error["ename"] == "IndexError"
    assert error["traceback"][-1].startswith("[ptc-retry] Saved as ")
    assert parse_notice(error["traceback"][-1]) == "#2"
    assert (checkpoint_root / "nb" / "calls" / "2.json").resolve().name == "c2.json"
    assert nb.cells[2].outputs[-1]["data"]["text/plain"] == "45.0"
    history = (checkpoint_root / "nb" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in history] == ["c1", "c2", "c3"]


def test_program_that_kills_the_kernel_is_unfinished_and_replayable(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    program = "import os\nprogress = 'half'\n" + "os._exit(1)\n"
    kernel.client.execute(program)  # no reply will come
    kernel.wait_for_end()
    assert json.loads((checkpoint_root / "test" / "by-id" / "c1.json").read_text())["code"] == (
        program
    )

    kernel.restart()
    after = kernel.execute("print('back')")

    assert after.ptc["call_id"] == "c2"  # ids continue, never reused
    lines = [json.loads(line) for line in (checkpoint_root / "test" / "history.jsonl").open()]
    assert {"id": "c1", "status": "unfinished"}.items() <= lines[0].items()
    replayed = kernel.execute("await ptc_retry.replay('c1', 'os._exit(1)', 'progress')")
    assert replayed.result == "'half'"


def test_two_kernels_on_one_root_keep_their_sessions_apart(
    start_kernel, checkpoint_root: Path
) -> None:  # type: ignore[no-untyped-def]
    first = start_kernel(session="one")
    second = start_kernel(session="two")
    first.execute("a = 1", {"call_id": "shared-id"})
    first.execute("a = 2", {"call_id": "only-first"})
    second.execute("b = 2", {"call_id": "shared-id"})

    message = second.execute("await ptc_retry.replay('only-first', 'a', 'b')").error["evalue"]

    assert "only-first" in message and "shared-id" in message  # unknown here; lists its own
    for session, code in (("one", "a = 1"), ("two", "b = 2")):
        saved = checkpoint_root / session / "by-id" / "shared-id.json"
        assert json.loads(saved.read_text()) == {"code": code}


def test_session_follows_the_connection_file_across_restarts(start_kernel) -> None:  # type: ignore[no-untyped-def]
    kernel = start_kernel(session=None)
    before = kernel.execute("x = 1").ptc["checkpoint"]
    kernel.restart()
    after = kernel.execute("x = 2").ptc["checkpoint"]
    assert Path(before).parent == Path(after).parent
    assert Path(before).parent.parent.name.startswith("k")
