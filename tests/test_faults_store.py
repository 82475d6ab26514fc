"""The store under faults, races and hostile files: issue 11, items 1, 3, 5, 6 and 7.

Real kernels wherever a kernel is part of the behaviour, a real second process for the
session lock, a real (small) tmpfs for a full disk, and links planted on a real filesystem.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.cli import main as cli_main
from ptc_retry.core import fs
from ptc_retry.core.errors import CheckpointError, StoreError
from ptc_retry.core.history_table import format_history
from ptc_retry.core.layout import sanitize
from ptc_retry.core.session_files import session_in_use
from ptc_retry.core.store import CheckpointStore
from ptc_retry.sessions import SessionReader

from .helpers import Kernel, finished_call, raw

POSIX = os.name == "posix"
needs_flock = pytest.mark.skipif(fs.fcntl is None, reason="no fcntl: sessions unlocked")


def warning_of(kernel: Kernel) -> str:
    """The store's opening warning, as the kernel's extension holds it."""
    shown = kernel.execute(
        "from ptc_retry.kernel.extension import active_extension\n"
        "print(active_extension().store.warning)"
    )
    return shown.stdout.strip()


def give_away(path: Path) -> None:
    """Make ``path`` (a symlink) someone else's, so that it is not the superuser's alone."""
    if os.geteuid() == 0:
        os.lchown(path, 65534, 65534)


# -- 1. a session belongs to one process at a time ---------------------------------------------


@needs_flock
def test_a_second_kernel_on_a_held_session_gets_its_own_directory_and_says_so(
    start_kernel: Any, checkpoint_root: Path
) -> None:
    first = start_kernel(session="shared")
    second = start_kernel(session="shared")
    one = first.execute("a = 1", {"call_id": "same"})
    two = second.execute("b = 2", {"call_id": "same"})

    assert Path(one.ptc["checkpoint"]) == checkpoint_root / "shared" / "by-id" / "same.json"
    assert Path(two.ptc["checkpoint"]) == checkpoint_root / "shared.2" / "by-id" / "same.json"
    assert json.loads(Path(one.ptc["checkpoint"]).read_text()) == {"code": "a = 1"}
    assert json.loads(Path(two.ptc["checkpoint"]).read_text()) == {"code": "b = 2"}
    assert warning_of(first) == "None"
    message = warning_of(second)
    assert "session shared is in use by another live kernel" in message
    assert str(checkpoint_root / "shared.2") in message


@needs_flock
def test_the_session_of_a_killed_kernel_is_continued_by_the_next(
    start_kernel: Any, checkpoint_root: Path
) -> None:
    first = start_kernel(session="mine")
    first.execute("a = 1")
    os.kill(first.manager.provisioner.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    first.wait_for_end()

    after = start_kernel(session="mine").execute("b = 2")

    assert after.ptc["call_id"] == "c2"  # the same session, continued
    assert Path(after.ptc["checkpoint"]).parent.parent == checkpoint_root / "mine"


HOLDER = textwrap.dedent(
    """\
    import sys
    from ptc_retry.core.store import CheckpointStore
    store = CheckpointStore(sys.argv[1], "s")
    print(store.session, flush=True)
    sys.stdin.read()  # hold the session until the test closes stdin
    """
)


@needs_flock
def test_a_store_in_another_live_process_holds_the_session_until_it_ends(tmp_path: Path) -> None:
    root = tmp_path / "root"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "s\n"
        assert session_in_use(root / "s")
        here = CheckpointStore(root, "s")
        assert (here.session, here.session_dir) == ("s.2", root / "s.2")
        assert here.warning is not None and "session s is in use" in here.warning
        here.close()
        assert not session_in_use(root / "s.2")
    finally:
        holder.kill()  # no close: the OS drops the lock of a process that dies
        holder.wait()
    again = CheckpointStore(root, "s")
    assert (again.session, again.warning) == ("s", None)
    again.close()


@needs_flock
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_does_not_keep_the_session_locked(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    forked, ready = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: lives on after its parent closed the store
        try:
            os.write(ready, b"!")
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        assert os.read(forked, 1) == b"!"  # the child runs: its fork handlers ran
        store.close()
        again = CheckpointStore(tmp_path, "s")
        assert again.session == "s"
        again.close()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(forked)
        os.close(ready)


def test_sessions_whose_names_sanitize_alike_never_share_a_directory(
    start_kernel: Any, checkpoint_root: Path
) -> None:
    saved = []
    for session in ("ü", "é"):
        kernel = start_kernel(session=session)
        saved.append(Path(kernel.execute(f"name = {session!r}").ptc["checkpoint"]))
    assert saved[0].parent.parent != saved[1].parent.parent
    assert {p.parent.parent.name for p in saved} == {sanitize("ü"), sanitize("é")}
    assert [json.loads(p.read_text())["code"] for p in saved] == ["name = 'ü'", "name = 'é'"]


def test_call_ids_that_sanitize_alike_keep_their_own_names(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    first, second = (
        finished_call(store, "a = 1", call_id="a:b"),
        finished_call(store, "b = 2", call_id="a;b"),
    )
    assert first.id != second.id and not second.id.endswith(".2")
    assert store.load_code("a:b") == (first.id, "a = 1")
    assert store.load_code("a;b") == (second.id, "b = 2")
    store.close()


def test_ids_that_differ_only_in_case_never_share_a_file(tmp_path: Path) -> None:
    # One file on a case-insensitive disk (macOS, Windows): the second is de-duplicated.
    store = CheckpointStore(tmp_path, "s")
    upper, lower = (
        finished_call(store, "a = 1", call_id="Call_A"),
        finished_call(store, "b = 2", call_id="call_a"),
    )
    assert (upper.id, lower.id) == ("Call_A", "call_a.2")
    assert store.load_code("Call_A") == ("Call_A", "a = 1")
    store.close()


# -- 3. a torn history append is never fatal to the next line ----------------------------------


def fill(disk: Path) -> None:
    """Write a file on ``disk`` until it is full."""
    with open(disk / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_torn_history_append_is_taken_back_and_no_acknowledged_call_is_lost(
    tmpfs: Any,
) -> None:
    disk = tmpfs("size=64k,mode=0700")
    store = CheckpointStore(disk / "root", "s")
    finished_call(store, "a = 1")
    torn, later = store.begin(raw("b = 2")), store.begin(raw("c = 3"))
    history = store.session_dir / "history.jsonl"
    size = history.stat().st_size
    fill(disk)

    # Longer than what is left of the history's last page: part of it is written, then ENOSPC.
    with pytest.raises(OSError):
        store.finish(torn, "error", ename="E" * 6000)

    assert history.stat().st_size == size  # taken back: no torn line for the next to glue to
    (disk / "filler").unlink()
    store.finish(later, "ok")
    lines = history.read_bytes().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["c1", "c2", "c3"]  # c2 came late
    store.close()

    reopened = CheckpointStore(disk / "root", "s")
    assert all(line["status"] != "unfinished" for line in reopened.history())
    assert [(line["id"], line["status"]) for line in reopened.history()] == [
        ("c1", "ok"),
        ("c2", "error"),
        ("c3", "ok"),
    ]
    reopened.close()


# -- 5. damaged files are skipped, never fatal ---------------------------------------------------


@pytest.mark.skipif(not POSIX, reason="symlinks and FIFOs")
def test_unusable_checkpoint_entries_are_skipped_on_reopen_with_one_warning(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path
) -> None:
    first = start_kernel(session="s")
    first.execute("a = 1")
    first.shutdown()
    by_id = checkpoint_root / "s" / "by-id"
    (by_id / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    (by_id / "outside.json").symlink_to("/etc/passwd")
    (by_id / "folder.json").mkdir()
    os.mkfifo(by_id / "pipe.json")

    kernel = start_kernel(session="s")
    after = kernel.execute("b = 2")

    assert after.status == "ok" and after.ptc["call_id"] == "c2"  # checkpoints still on
    message = warning_of(kernel)
    assert "skipped 4 entries" in message and "dangling.json" in message
    for name in ("dangling", "outside", "folder", "pipe"):
        replay = kernel.execute(f"await ptc_retry.replay({name!r}, 'a', 'b')")
        assert replay.status == "error" and "root:" not in replay.error["evalue"]


def damaged_history() -> bytes:
    lines = [
        json.dumps({"id": "c1", "n": 1, "status": "ok", "time": 1e300}).encode(),
        b"[" * 100_000,  # RecursionError in json.loads
        b'{"id": "c2", "n": 2, "pad": "' + b"x" * (3 << 20) + b'"}',  # a huge line
        b'{"id": "c3", "n": 3, "status": "ok", "bad": "\xff\xfe"}',  # not UTF-8
        b"[1, 2]",
        b"42",
        b"null",
        b'"a string"',
        json.dumps({"id": "../../../etc/passwd", "n": 4, "status": "ok"}).encode(),
        json.dumps({"id": "c4", "n": 10**40, "status": "ok", "time": "NaN"}).encode(),
        json.dumps({"id": "c5", "n": 5, "status": "ok", "time": float("nan")}).encode(),
        b'{"id": "c6", "n": 6, "st',  # torn
    ]
    return b"\n".join(lines)


def test_damaged_history_lines_are_skipped_by_the_store_and_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    session.mkdir(mode=0o700)
    (session / "history.jsonl").write_bytes(damaged_history())

    store = CheckpointStore(tmp_path, "s")
    assert [line["id"] for line in store.history()] == ["c1", "c4", "c5"]
    with pytest.raises(CheckpointError, match="no program #4"):
        store.path_for("#4")
    assert finished_call(store).n == 6  # 10**40 is damage, not a number
    store.close()

    reader = SessionReader(session)
    assert [line["id"] for line in reader.history()] == ["c1", "c4", "c5", "c6"]
    format_history(reader.history())
    for argv in (["history"], ["history", "--json"], ["show", "#4"], ["stats"]):
        cli_main([*argv, "--root", str(tmp_path), "--session", "s"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "root:" not in out


def test_a_kernel_on_a_damaged_history_runs_and_shows_it(
    start_kernel: Any, checkpoint_root: Path
) -> None:
    checkpoint_root.mkdir(mode=0o700)
    session = checkpoint_root / "s"
    session.mkdir(mode=0o700)
    (session / "history.jsonl").write_bytes(damaged_history())
    kernel = start_kernel(session="s")

    runs = [kernel.execute("x = 1"), kernel.execute("%ptc_history"), kernel.execute("y = 2")]

    assert [r.status for r in runs] == ["ok", "ok", "ok"]
    assert all("Error in callback" not in r.stderr and "Traceback" not in r.stderr for r in runs)
    assert runs[0].ptc["call_id"] == "c6" and runs[2].ptc["call_id"] == "c7"
    assert "c1" in runs[1].displayed and "etc/passwd" not in runs[1].displayed


# -- 6. nothing is read or written through a planted link ---------------------------------------


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_a_history_file_planted_as_a_link_is_never_written_through(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("mine\n")
    checkpoint_root.mkdir(mode=0o700)
    (checkpoint_root / "s").mkdir(mode=0o700)
    (checkpoint_root / "s" / "history.jsonl").symlink_to(outside)

    with pytest.raises(StoreError, match="history.jsonl is a symlink"):
        CheckpointStore(checkpoint_root, "s")
    ran = start_kernel(session="s").execute("print('runs')")

    assert ran.stdout == "runs\n" and "history.jsonl is a symlink" in ran.stderr
    assert outside.read_text() == "mine\n"


def precious(tmp_path: Path) -> Path:
    """A file of the user's outside every session, on the same filesystem (for hard links)."""
    outside = tmp_path / "precious.txt"
    outside.write_text("mine\n")
    return outside


def plant_hard_link(entry: Path, outside: Path) -> None:
    """Make ``entry`` (in a session) another name of ``outside``, as a program could."""
    entry.parent.mkdir(mode=0o700, exist_ok=True)
    if entry.exists():
        entry.unlink()
    os.link(outside, entry)


@pytest.mark.skipif(not POSIX, reason="hard links")
def test_a_history_file_planted_as_a_hard_link_is_never_appended_to(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path
) -> None:
    outside = precious(tmp_path)
    checkpoint_root.mkdir(mode=0o700)
    plant_hard_link(checkpoint_root / "s" / "history.jsonl", outside)

    with pytest.raises(StoreError, match="history.jsonl has 2 hard links"):
        CheckpointStore(checkpoint_root, "s")
    ran = start_kernel(session="s").execute("print('runs')")

    assert ran.stdout == "runs\n"
    assert "history.jsonl has 2 hard links, so it may be a file outside the session" in ran.stderr
    assert outside.read_text() == "mine\n"


@pytest.mark.skipif(not POSIX, reason="hard links")
def test_a_tool_call_recording_planted_as_a_hard_link_is_never_appended_to(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path
) -> None:
    kernel = start_kernel(session="s")
    kernel.execute("@ptc_retry.recorded\ndef double(x):\n    return 2 * x")
    outside = precious(tmp_path)
    plant_hard_link(checkpoint_root / "s" / "tool-calls" / "t1.jsonl", outside)

    ran = kernel.execute("double(21)", {"call_id": "t1"})

    assert ran.status == "ok" and ran.result == "42"
    assert "could not record the tool calls of t1" in ran.stderr
    assert "t1.jsonl has 2 hard links" in ran.stderr and "remove it" in ran.stderr
    assert outside.read_text() == "mine\n"


@pytest.mark.skipif(not POSIX, reason="hard links")
@pytest.mark.parametrize("entry", ["by-id/o2.json", "previous/1.json"])
def test_a_file_the_store_replaces_planted_as_a_hard_link_is_replaced_not_written(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path, entry: str
) -> None:
    kernel = start_kernel(session="s")
    kernel.execute("a = 1", {"call_id": "o1"})
    outside = precious(tmp_path)
    plant_hard_link(checkpoint_root / "s" / entry, outside)

    ran = kernel.execute("b = a + 1\nb", {"call_id": "o2"})  # a new step: previous/ is rebuilt

    assert ran.status == "ok" and ran.result == "2" and ran.stderr == ""
    assert outside.read_text() == "mine\n"
    session = checkpoint_root / "s"
    assert json.loads((session / "by-id" / "o2.json").read_text()) == {"code": "b = a + 1\nb"}
    assert json.loads((session / "previous" / "1.json").read_text()) == {"code": "a = 1"}


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_temp_files_are_never_written_through_a_planted_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path / "root", "s")
    outside = tmp_path / "precious.txt"
    outside.write_text("mine\n")
    # As if the temp name's random part had been guessed.
    monkeypatch.setattr(fs, "_TEMP_SECRET", "guessed")
    monkeypatch.setattr(fs, "_temp_counter", itertools.count())
    planted = f".c1.json.{os.getpid()}-guessed-0.tmp"
    (store.session_dir / "by-id" / planted).symlink_to(outside)

    with pytest.raises(FileExistsError):  # O_EXCL: the name is taken, nothing is written
        store.begin(raw("x = 1"))

    assert outside.read_text() == "mine\n"
    store.close()


@pytest.mark.skipif(not fs._DIR_FDS, reason="no dir_fd: directories go by path")
@pytest.mark.parametrize("swapped", ["by-id", "previous", "calls"])
def test_a_directory_swapped_for_a_link_after_opening_is_not_followed(
    tmp_path: Path, swapped: str
) -> None:
    store = CheckpointStore(tmp_path / "root", "s")
    first = finished_call(store, "a = 1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.session_dir / swapped).rename(store.session_dir / f"{swapped}.moved")
    (store.session_dir / swapped).symlink_to(outside)

    second = finished_call(store, "b = 2")
    store.link_number(first)
    store.link_number(second)

    assert list(outside.iterdir()) == []
    assert store.load_code(1) == ("c1", "a = 1")  # read through the directory it opened
    store.close()


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_a_replay_never_runs_a_checkpoint_link_that_leads_outside(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path
) -> None:
    kernel = start_kernel(session="s")
    kernel.execute("values = [1]\nvalues[3]", {"call_id": "p1"})
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"code": "print('outside ran')"}))
    checkpoint = checkpoint_root / "s" / "by-id" / "p1.json"
    checkpoint.unlink()
    checkpoint.symlink_to(outside)

    replay = kernel.execute("await ptc_retry.replay('p1', 'values[3]', 'values[0]')")

    assert replay.status == "error" and "outside ran" not in replay.stdout
    assert "symbolic link" in replay.error["evalue"]


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_a_previous_entry_planted_as_a_foreign_link_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "root", "s")
    finished_call(store, "a = 1")
    store.begin(raw("b = 2"))
    entry = store.session_dir / "previous" / "1.json"
    entry.unlink()
    entry.symlink_to("/etc/passwd")

    with pytest.raises(CheckpointError, match="not to a checkpoint of this session"):
        store.load(1)
    with pytest.raises(CheckpointError, match="not to a checkpoint of this session"):
        SessionReader(store.session_dir).read(1)
    store.close()


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_a_root_under_a_link_someone_could_change_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    give_away(link)

    with pytest.raises(StoreError, match=r"lies under the symlink .*link.*real path .*real"):
        CheckpointStore(link / "deeper" / "root", "s")
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.skipif(not POSIX or os.geteuid() != 0, reason="a link only root controls")
def test_a_link_only_the_superuser_controls_is_resolved(tmp_path: Path) -> None:
    # Like macOS /var -> private/var: root's link in root's directory that others cannot write.
    (tmp_path / "private").mkdir(mode=0o755)
    (tmp_path / "var").symlink_to("private")
    store = CheckpointStore(tmp_path / "var" / "root", "s")
    finished_call(store)
    store.close()
    assert (tmp_path / "private" / "root" / "s" / "by-id" / "c1.json").is_file()


# -- 7. an existing root keeps its mode ----------------------------------------------------------


@pytest.mark.skipif(not POSIX, reason="POSIX modes")
def test_a_root_others_can_write_is_refused_and_keeps_its_mode(
    start_kernel: Any, tmp_path: Path
) -> None:
    shared = tmp_path / "team"
    shared.mkdir()
    os.chmod(shared, 0o2775)

    ran = start_kernel(root=shared).execute("print('runs')")

    assert ran.stdout == "runs\n" and ran.ptc["call_id"] is None
    assert "can be written by its group" in ran.stderr and f"chmod go-w {shared}" in ran.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o2775 and list(shared.iterdir()) == []


# -- per-cell cost -------------------------------------------------------------------------------


def test_a_cell_creates_one_file_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path, "s")
    for _ in range(3):
        finished_call(store)  # steps of their own: previous/1.json moves on every call
    created: list[str] = []
    real_open, real_symlink, real_mkdir = os.open, os.symlink, os.mkdir

    def counting_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            created.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def counting(real: Any) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            created.append(os.fspath(args[1] if real is real_symlink else args[0]))
            return real(*args, **kwargs)

        return make

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(os, "symlink", counting(real_symlink))
    monkeypatch.setattr(os, "mkdir", counting(real_mkdir))
    for _ in range(10):
        finished_call(store)
    monkeypatch.undo()

    assert len(created) == 10 and all(Path(name).name.startswith(".c") for name in created)
    assert store.load_code(1)[0] == "c12"
    assert (store.session_dir / "previous" / "1.json").samefile(
        store.session_dir / "by-id" / "c12.json"
    )
    store.close()


def test_a_restarted_kernel_goes_back_to_its_own_session_not_a_freed_one(
    start_kernel: Any, checkpoint_root: Path
) -> None:
    first = start_kernel(session="s")
    second = start_kernel(session="s")  # s is held: it saves in s.2
    pad = "# " + "a comment that makes the program long enough for a notice " * 4 + "\n"
    first.execute(pad + "print('program of the first kernel')\nx = 1 / 0")
    failed = second.execute(pad + "print('program of the second kernel')\nx = 1 / 0")
    assert failed.ptc["reference"] == "#1"
    assert failed.ptc["checkpoint"].startswith(str(checkpoint_root / "s.2"))

    first.shutdown()  # s is free now
    second.restart()
    fixed = second.execute("await ptc_retry.replay('#1', 'x = 1 / 0', 'x = 1')")

    assert fixed.stdout == "program of the second kernel\n"
    assert fixed.ptc["checkpoint"].startswith(str(checkpoint_root / "s.2"))
