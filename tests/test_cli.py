"""The ``ptc-retry`` command on sessions built on disk with the store: no kernel involved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ptc_retry.cli import main
from ptc_retry.core import root as store_root
from ptc_retry.core.store import CheckpointStore

DAY = 86400
PROGRAM = "import json\nrows = load()\nfor row in rows:\n    check(row, retries=3)\n"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """``cli(*argv) -> (exit code, stdout, stderr)``."""

    def invoke(*argv: str | Path) -> tuple[int, str, str]:
        code = main([str(arg) for arg in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def code_arguments(code: str) -> str:
    return json.dumps({"code": code})


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def make_session(root: Path, name: str, codes: list[str], *, status: str = "ok") -> Path:
    """A session whose calls ``c1, c2, ...`` each ran one program, one step each."""
    store = CheckpointStore(root, name)
    try:
        for code in codes:
            store.finish(store.begin(code_arguments(code)), status)
    finally:
        store.close()
    return root / name


def set_age(path: Path, seconds: float) -> None:
    """Make everything under ``path`` (itself included) last written ``seconds`` ago."""
    when = time.time() - seconds
    no_follow = os.utime in os.supports_follow_symlinks
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = os.path.join(directory, name)
            if os.path.islink(entry) and not no_follow:
                continue
            os.utime(entry, (when, when), follow_symlinks=not no_follow)
    os.utime(path, (when, when))


def snapshot(top: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``top`` with its mode, size and mtime: what a write would change."""
    found = {}
    for directory, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            entry = os.path.join(directory, name)
            st = os.lstat(entry)
            found[os.path.relpath(entry, top)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


def tree_bytes(path: Path) -> int:
    return sum(
        os.lstat(os.path.join(d, f)).st_size
        for d, _, files in os.walk(path)
        for f in files
        if not os.path.islink(os.path.join(d, f))
    )


# -- history -----------------------------------------------------------------------------------


def test_history_shows_the_latest_session_and_how_to_pick_another(root: Path, cli: Any) -> None:
    set_age(make_session(root, "older", ["a = 1"]), DAY)
    make_session(root, "newer", ["b = 2", "c = 3"])
    code, out, err = cli("history", "--root", root)
    assert code == 0
    assert out.splitlines()[0] == f"session: {root.absolute() / 'newer'}"
    assert [line.split()[:2] for line in out.splitlines()[2:]] == [["#1", "c1"], ["#2", "c2"]]
    assert "showing session newer" in err and "older" in err and "--session NAME" in err


def test_history_of_a_named_session(root: Path, cli: Any) -> None:
    make_session(root, "one", ["a = 1"])
    make_session(root, "two", ["b = 2", "c = 3", "d = 4"])
    code, out, err = cli("history", "--root", root, "--session", "one")
    assert code == 0 and err == ""
    assert out.splitlines()[0].endswith("one")
    assert [line.split()[:3] for line in out.splitlines()[2:]] == [["#1", "c1", "ok"]]


def test_history_uses_ptc_retry_root_by_default(
    root: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(root, "s", ["a = 1"])
    monkeypatch.setenv("PTC_RETRY_ROOT", str(root))
    code, out, _ = cli("history")
    assert code == 0 and "c1" in out


def test_history_json_prints_the_history_lines(root: Path, cli: Any) -> None:
    make_session(root, "s", ["a = 1", "b = 2"])
    code, out, _ = cli("history", "--root", root, "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [(line["id"], line["status"]) for line in lines] == [("c1", "ok"), ("c2", "ok")]
    assert lines[0]["bytes"] == size(code_arguments("a = 1"))


def test_history_last_n_keeps_the_newest_calls(root: Path, cli: Any) -> None:
    make_session(root, "s", ["a = 1", "b = 2", "c = 3"])
    _, out, _ = cli("history", "--root", root, "--json", "--last", "2")
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["c2", "c3"]
    _, out, _ = cli("history", "--root", root, "--last", "1")
    assert "the last 1 of 3 calls" in out


def test_history_skips_a_torn_line(root: Path, cli: Any) -> None:
    session = make_session(root, "s", ["a = 1", "b = 2"])
    with open(session / "history.jsonl", "ab") as history:
        history.write(b'{"id": "c9", "status": "o')  # a crash in the middle of an append
    code, out, _ = cli("history", "--root", root, "--json")
    assert code == 0
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["c1", "c2"]


def test_history_shows_a_call_without_a_history_line_as_unfinished(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    store.finish(store.begin(code_arguments("a = 1")), "ok")
    store.begin(code_arguments("import os; os._exit(1)"))  # the process dies before finish
    store.close()
    code, out, _ = cli("history", "--root", root)
    assert code == 0
    assert out.splitlines()[3].split()[:3] == ["#2", "c2", "unfinished"]
    assert "still running, or its kernel died" in out
    _, out, _ = cli("history", "--root", root, "--json")
    last = json.loads(out.splitlines()[-1])
    assert last["status"] == "unfinished"
    assert last["bytes"] == size(code_arguments("import os; os._exit(1)"))


def test_no_sessions_says_where_it_looked(root: Path, cli: Any) -> None:
    code, out, err = cli("history", "--root", root)
    assert code == 1 and out == ""
    assert str(root) in err and "--root" in err
    assert not root.exists()


def test_unknown_session_lists_the_sessions(root: Path, cli: Any) -> None:
    make_session(root, "real", ["a = 1"])
    code, _, err = cli("history", "--root", root, "--session", "nope")
    assert code == 1
    assert "'nope'" in err and "does not exist" in err and "real" in err


def test_read_only_commands_change_nothing(root: Path, cli: Any, tmp_path: Path) -> None:
    store = CheckpointStore(root, "s")
    store.finish(store.begin(code_arguments("a = 1")), "error")
    store.begin(code_arguments("b = 2"), turn=1, step=1)  # unfinished: the store would add a line
    store.close()
    make_session(root, "t", ["c = 3"])
    before = snapshot(tmp_path)
    for argv in (
        ["history"],
        ["history", "--json", "--session", "s"],
        ["show", "c1", "--session", "s"],
        ["show", "1", "--session", "s"],
        ["show", "#2", "--session", "s"],
        ["show", "#9", "--session", "s"],
        ["show", "missing", "--session", "s"],
        ["stats", "--all"],
        ["stats", "--session", "s"],
        ["gc", "--older-than", "0s", "--dry-run"],
    ):
        cli(*argv, "--root", root)
    assert snapshot(tmp_path) == before


# -- show --------------------------------------------------------------------------------------


def test_show_prints_the_saved_program(root: Path, cli: Any) -> None:
    make_session(root, "s", [PROGRAM, "x = 2"])
    code, out, err = cli("show", "c1", "--root", root)
    assert code == 0
    assert out == PROGRAM
    assert "c1" in err  # which checkpoint, on stderr so that stdout can go to a file


def test_show_a_number_means_previous_n(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    for n, code in enumerate(["first = 1", "second = 2"], 1):
        store.finish(store.begin(code_arguments(code), call_id=f"call_{n}", step=1), "ok")
    store.finish(store.begin(code_arguments("third = 3"), call_id="call_3", step=2), "ok")
    store.close()
    assert cli("show", "1", "--root", root)[1] == "first = 1\n"
    code, out, err = cli("show", "2", "--root", root)
    assert (code, out) == (0, "second = 2\n") and "call_2" in err


def test_show_prints_a_tool_checkpoint_without_code_as_json(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    arguments = {"path": "notes.txt", "edits": [["old", "new"]]}
    store.finish(store.begin(json.dumps(arguments), call_id="t1", tool="edit"), "ok")
    store.close()
    code, out, _ = cli("show", "t1", "--root", root)
    assert code == 0
    assert json.loads(out) == arguments and out.startswith("{\n  ")


def test_show_unknown_id_lists_the_latest_ids(root: Path, cli: Any) -> None:
    make_session(root, "s", ["a = 1", "b = 2", "c = 3"])
    code, out, err = cli("show", "c9", "--root", root)
    assert code == 1 and out == ""
    assert "'c9'" in err and "#3 (c3), #2 (c2), #1 (c1)" in err and "ptc-retry history" in err
    code, _, err = cli("show", "7", "--root", root)
    assert code == 1 and "previous/7.json" in err and "#3 (c3), #2 (c2), #1 (c1)" in err
    assert 'for program number 7 write "#7"' in err


def test_show_a_reference_prints_that_program(root: Path, cli: Any) -> None:
    make_session(root, "s", ["a = 1", PROGRAM, "c = 3"])
    code, out, err = cli("show", "#2", "--root", root)
    assert (code, out) == (0, PROGRAM)
    assert err.startswith("# c2 (#2): ")


def test_show_a_reference_of_a_program_still_running(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    store.finish(store.begin(code_arguments("a = 1")), "ok")
    running = store.begin(code_arguments("while True: pass"))  # no history line yet
    code, out, _ = cli("show", running.reference, "--root", root)
    store.close()
    assert running.reference == "#2"
    assert (code, out) == (0, "while True: pass\n")


def test_show_an_unknown_reference_names_the_numbers_the_session_has(root: Path, cli: Any) -> None:
    make_session(root, "s", ["a = 1", "b = 2", "c = 3"])
    code, out, err = cli("show", "#4", "--root", root)
    assert code == 1 and out == ""
    assert "no program #4 in session s: its programs are #1 to #3" in err
    assert "#3 (c3)" in err


def test_show_a_reference_in_a_session_written_without_numbers(root: Path, cli: Any) -> None:
    session = root / "old"
    (session / "by-id").mkdir(parents=True)
    (session / "by-id" / "c1.json").write_text(code_arguments("a = 1"))
    line = {"id": "c1", "tool": "run_code", "turn": 0, "step": None, "ordinal": 1, "status": "ok"}
    (session / "history.jsonl").write_text(json.dumps(line) + "\n")
    code, out, err = cli("show", "#1", "--root", root)
    assert code == 1 and out == ""
    assert "records no program numbers" in err and "give the call id" in err and "c1" in err
    assert cli("show", "c1", "--root", root)[:2] == (0, "a = 1\n")


def test_show_a_reference_two_calls_carry_is_refused(root: Path, cli: Any) -> None:
    session = make_session(root, "s", ["a = 1", "b = 2"])
    (session / "by-id" / "x9.json").write_text(code_arguments("x = 9"))
    damaged = {"id": "x9", "n": 2, "tool": "run_code", "status": "ok"}  # also says #2
    with open(session / "history.jsonl", "a") as history:
        history.write(json.dumps(damaged) + "\n")
    code, out, err = cli("show", "#2", "--root", root)
    assert code == 1 and out == ""
    assert "#2 is ambiguous in session s: two calls carry it (c2, x9)" in err
    assert cli("show", "#1", "--root", root)[:2] == (0, "a = 1\n")  # the others still work


def test_show_a_reference_that_is_also_a_sent_call_id_is_refused(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    store.finish(store.begin(code_arguments("a = 1")), "ok")
    second = store.begin(code_arguments("b = 2"), call_id="#1")  # saved as _1-<hash>
    store.finish(second, "ok")
    store.close()
    code, out, err = cli("show", "#1", "--root", root)
    assert code == 1 and out == ""
    assert "#1 is ambiguous" in err and "a call was sent with the id '#1'" in err
    assert cli("show", second.id, "--root", root)[:2] == (0, "b = 2\n")


def test_show_a_call_id_sent_for_two_programs_is_refused(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    for code in ("a = 1", "b = 2"):
        store.finish(store.begin(code_arguments(code), call_id="call_1"), "ok")
    store.close()

    code, out, err = cli("show", "call_1", "--root", root)

    assert code == 1 and out == ""
    assert err == (
        "ptc-retry show: call id 'call_1' names 2 programs in session s (it was sent again): "
        '#1 (call_1), #2 (call_1.2); give the reference of the one you mean instead, like "#2".\n'
    )
    assert cli("show", "#2", "--root", root)[:2] == (0, "b = 2\n")


def test_show_a_malformed_reference_says_how_to_write_one(root: Path, cli: Any) -> None:
    make_session(root, "s", ["a = 1"])
    code, _, err = cli("show", "#two", "--root", root)
    assert code == 1 and "'#two' is not a reference" in err and '"#7"' in err


# -- stats -------------------------------------------------------------------------------------


def stats_rows(out: str) -> dict[str, list[int]]:
    rows = {}
    for line in out.splitlines()[1:]:
        if not line.startswith("-"):
            name, *numbers = line.split()
            rows[name] = [int(n) for n in numbers]
    return rows


def test_stats_figures_on_a_constructed_session(root: Path, cli: Any) -> None:
    store = CheckpointStore(root, "s")
    arguments = {
        "c1": code_arguments("x = 1"),
        "call_2": code_arguments(PROGRAM),
        "call_3": code_arguments(PROGRAM.replace("retries=3", "retries=5")),
        "call_4": code_arguments("while True: pass"),
        "call_5": code_arguments("import os; os._exit(1)"),
    }
    store.finish(store.begin(arguments["c1"], call_id="c1"), "ok")
    store.finish(store.begin(arguments["call_2"], call_id="call_2"), "error", ename="ValueError")
    replay = store.begin(
        code_arguments('await ptc_retry.replay("call_2", "=3", "=5")'), call_id="call_3"
    )
    store.replace_arguments(replay, arguments["call_3"], replay_of="call_2")
    store.finish(replay, "ok")
    store.finish(store.begin(arguments["call_4"], call_id="call_4"), "interrupted")
    store.begin(arguments["call_5"], call_id="call_5")
    store.close()
    code, out, _ = cli("stats", "--root", root)
    assert code == 0
    assert out.split()[:7] == [
        "session", "calls", "failures", "replays", "unfinished", "program", "bytes"
    ]  # fmt: skip
    program_bytes = sum(size(text) for text in arguments.values())
    assert stats_rows(out) == {"s": [5, 2, 1, 1, program_bytes, size(arguments["call_2"])]}


def test_stats_all_has_a_row_per_session_and_a_total(root: Path, cli: Any) -> None:
    make_session(root, "a", ["x = 1", "y = 2"], status="error")
    make_session(root, "b", ["z = 3"])
    code, out, _ = cli("stats", "--all", "--root", root)
    a = size(code_arguments("x = 1")) + size(code_arguments("y = 2"))
    b = size(code_arguments("z = 3"))
    assert code == 0
    assert stats_rows(out) == {
        "a": [2, 2, 0, 0, a, 0],
        "b": [1, 0, 0, 0, b, 0],
        "total": [3, 2, 0, 0, a + b, 0],
    }


def test_stats_help_says_what_bytes_not_re_sent_means(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["stats", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    assert "bytes not re-sent for each replay, the saved size of the program it replayed" in out


# -- gc ----------------------------------------------------------------------------------------


def test_gc_removes_sessions_older_than_the_age(root: Path, cli: Any) -> None:
    old = make_session(root, "old", [PROGRAM])
    hour = make_session(root, "hour", ["x = 1"])
    fresh = make_session(root, "fresh", ["y = 2"])
    set_age(old, 8 * DAY)
    set_age(hour, 3600)
    freed = tree_bytes(old)
    code, out, _ = cli("gc", "--root", root)  # default: 7d
    assert code == 0
    assert not old.exists() and hour.exists() and fresh.exists()
    assert f"removed old: {freed} bytes" in out
    assert f"removed 1 session(s) under {root.absolute()}, freed {freed} bytes; kept 2" in out
    code, out, _ = cli("gc", "--root", root, "--older-than", "30m")
    assert code == 0 and not hour.exists() and fresh.exists()


def test_gc_dry_run_removes_nothing(root: Path, cli: Any) -> None:
    old = make_session(root, "old", [PROGRAM])
    set_age(old, 2 * DAY)
    code, out, _ = cli("gc", "--root", root, "--older-than", "12h", "--dry-run")
    assert code == 0 and old.exists()
    assert f"would remove old: {tree_bytes(old)} bytes" in out
    assert f"would free {tree_bytes(old)} bytes" in out


def test_gc_skips_foreign_entries_and_never_follows_symlinks(
    root: Path, cli: Any, tmp_path: Path
) -> None:
    make_session(root, "ours", ["x = 1"])
    photos = root / "photos"
    photos.mkdir()
    (photos / "cat.jpg").write_bytes(b"\xff\xd8")
    (root / "notes.txt").write_text("keep me")
    outside = make_session(tmp_path / "elsewhere", "victim", ["y = 2"])
    (root / "link").symlink_to(outside, target_is_directory=True)
    for entry in (root / "ours", photos, outside):
        set_age(entry, 30 * DAY)
    code, out, _ = cli("gc", "--root", root)
    assert code == 0
    assert not (root / "ours").exists()
    assert (photos / "cat.jpg").exists() and (root / "notes.txt").exists()
    assert (root / "link").is_symlink() and (outside / "history.jsonl").exists()
    assert "skipped photos: not a ptc-retry session" in out
    assert "skipped link: a symlink" in out
    assert "skipped notes.txt: not a directory" in out


def test_gc_on_a_missing_root_has_nothing_to_do(root: Path, cli: Any) -> None:
    code, out, _ = cli("gc", "--root", root)
    assert code == 0 and "nothing to remove" in out and not root.exists()


def test_gc_rejects_a_malformed_age(root: Path, cli: Any, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["gc", "--root", str(root), "--older-than", "7 days"])
    assert exit_.value.code == 2
    assert "e.g. 30m, 12h or 7d" in capsys.readouterr().err


# -- unsafe roots ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["history"], ["show", "c1"], ["stats", "--all"], ["gc"]])
def test_a_symlink_root_is_refused(
    root: Path, cli: Any, tmp_path: Path, command: list[str]
) -> None:
    make_session(root, "s", ["x = 1"])
    set_age(root / "s", 30 * DAY)
    link = tmp_path / "link"
    link.symlink_to(root, target_is_directory=True)
    code, out, err = cli(*command, "--root", link)
    assert code == 2 and out == ""
    assert "is a symlink" in err and "--root" in err
    assert (root / "s" / "history.jsonl").exists()


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no uids on this platform")
def test_a_root_owned_by_another_user_is_refused(
    root: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(root, "s", ["x = 1"])
    monkeypatch.setattr(store_root, "uid", lambda: os.getuid() + 1)
    code, _, err = cli("history", "--root", root)
    assert code == 2 and "belongs to uid" in err


# -- the command itself ------------------------------------------------------------------------


def test_demo_runs_on_a_real_kernel_and_saves_its_notebook(
    cli: Any, root: Path, tmp_path: Path, jupyter_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTC_RETRY_ROOT", str(root))
    notebook = tmp_path / "demo.ipynb"
    code, out, _ = cli("demo", "--save", notebook)
    assert code == 0
    assert "await ptc_retry.replay(" in out
    nbformat.validate(nbformat.read(notebook, as_version=4))
    (session,) = root.iterdir()  # the demo's checkpoints went to the root it was given
    assert (session / "history.jsonl").exists()


def test_the_installed_console_script_explains_its_commands() -> None:
    bindir = Path(sys.executable).parent
    script = next((p for p in (bindir / "ptc-retry", bindir / "ptc-retry.exe") if p.exists()), None)
    assert script is not None, f"no ptc-retry console script next to {sys.executable}"
    result = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    for command in ("history", "show", "stats", "gc", "demo"):
        assert command in result.stdout
