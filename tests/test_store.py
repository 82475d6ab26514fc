"""The checkpoint store on a real filesystem: no kernel involved."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptc_retry.core.errors import AmbiguousReferenceError, CheckpointError, StoreError
from ptc_retry.core.fs import default_root
from ptc_retry.core.layout import sanitize
from ptc_retry.core.store import CheckpointStore

from .helpers import finished_call

OpenStore = Callable[..., CheckpointStore]


@pytest.fixture
def open_store(root: Path) -> Iterator[OpenStore]:
    """``open_store(session="s", root=root)``; every store opened is closed after the test."""
    opened: list[CheckpointStore] = []

    def open_(session: str = "s", at: Path | None = None) -> CheckpointStore:
        store = CheckpointStore(at or root, session)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def previous_ids(store: CheckpointStore) -> list[str]:
    """What previous/ holds, as call ids in position order."""
    names = [n for n in os.listdir(store.session_dir / "previous") if not n.startswith(".")]
    positions = sorted(int(name[: -len(".json")]) for name in names)
    return [store.load(n)[0] for n in positions]


# -- saving ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        '{"code": "print(\'héllo wörld ✓ 🐍\')"}',
        '{"code":"a\\r\\nb",  "extra" : [1, 2]}\n',
        json.dumps({"code": "x" * (1 << 20)}),
        "not json at all: the store saves whatever it is given",
    ],
    ids=["unicode", "odd-spacing", "1MB", "not-json"],
)
def test_arguments_round_trip_byte_for_byte(open_store: OpenStore, arguments: str) -> None:
    call = open_store().begin(arguments)
    assert call.path.read_bytes() == arguments.encode("utf-8")
    assert call.bytes == len(arguments.encode("utf-8"))


def test_atomic_write_replaces_a_file_whole_and_leaves_no_temp_file(
    open_store: OpenStore,
) -> None:
    store = open_store()
    call = store.begin(json.dumps({"code": "an old, much longer program " * 100}))
    store.replace_arguments(call, '{"code": "short"}')
    assert call.path.read_text() == '{"code": "short"}'
    assert os.listdir(call.path.parent) == ["c1.json"]


def test_begin_saves_under_a_fresh_id_when_the_file_exists_from_before(
    open_store: OpenStore,
) -> None:
    store = open_store()
    finished_call(store)
    store.close()
    assert open_store().begin("{}").id == "c2"


def test_replace_arguments_overwrites_the_checkpoint_and_records_replay_of(
    open_store: OpenStore,
) -> None:
    store = open_store()
    call = store.begin("{\"code\": \"await ptc_retry.replay(1, 'a', 'b')\"}")
    store.replace_arguments(call, '{"code": "b = 2"}', replay_of="c0")
    assert call.path.read_text() == '{"code": "b = 2"}'
    assert (call.bytes, call.replay_of) == (len('{"code": "b = 2"}'), "c0")
    assert store.finish(call, "ok")["replay_of"] == "c0"


@pytest.mark.parametrize("umask", [0, 0o277])
def test_permissions_are_0700_and_0600_whatever_the_umask(
    open_store: OpenStore, umask: int
) -> None:
    old = os.umask(umask)
    try:
        store = open_store()
        finished_call(store, step=1)
        finished_call(store, step=2)
    finally:
        os.umask(old)
    for directory in (store.root, store.session_dir, *store.session_dir.iterdir()):
        if directory.is_dir():
            assert mode(directory) == 0o700, directory
    for file in (store.session_dir / "history.jsonl", store.session_dir / "by-id" / "c1.json"):
        assert mode(file) == 0o600, file


# -- an unsafe root ----------------------------------------------------------------------------


def test_symlink_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(StoreError, match="symlink.*PTC_RETRY_ROOT"):
        CheckpointStore(tmp_path / "link", "s")


def test_symlink_session_dir_is_refused(root: Path, tmp_path: Path) -> None:
    root.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir()
    (root / "s").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="session directory .* symlink"):
        CheckpointStore(root, "s")


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown")
def test_root_owned_by_another_user_is_refused(root: Path) -> None:
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.raises(StoreError, match=r"belongs to uid 65534.*directory you own"):
        CheckpointStore(root, "s")


def test_root_that_is_a_file_is_refused(root: Path) -> None:
    root.write_text("")
    with pytest.raises(StoreError, match="not a directory"):
        CheckpointStore(root, "s")


def test_a_file_in_the_root_path_raises_oserror(root: Path) -> None:
    root.write_text("")
    with pytest.raises(OSError):
        CheckpointStore(root / "below", "s")


@pytest.mark.parametrize("shared_mode", [0o2775, 0o777, 0o720])
def test_root_others_can_write_is_refused_and_keeps_its_mode(root: Path, shared_mode: int) -> None:
    root.mkdir()
    os.chmod(root, shared_mode)
    with pytest.raises(StoreError, match=r"can be written by .*chmod go-w .*PTC_RETRY_ROOT"):
        CheckpointStore(root, "s")
    assert mode(root) == shared_mode and list(root.iterdir()) == []


def test_an_existing_root_readable_by_others_is_used_as_it_is(root: Path) -> None:
    root.mkdir()
    os.chmod(root, 0o755)
    CheckpointStore(root, "s").close()
    assert mode(root) == 0o755 and mode(root / "s") == 0o700


def test_shared_sticky_root_is_refused_not_chmodded(root: Path) -> None:
    root.mkdir()
    os.chmod(root, 0o1777)
    with pytest.raises(StoreError, match="shared directory"):
        CheckpointStore(root, "s")
    assert mode(root) == 0o1777


def test_default_root_is_env_or_per_user_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTC_RETRY_ROOT", "/somewhere/else")
    assert default_root() == Path("/somewhere/else")
    monkeypatch.setenv("PTC_RETRY_ROOT", "")
    assert default_root().name == f"ptc-retry-{os.getuid()}"


# -- ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("call_id", ["call_7", "toolu_01A-b.c", "c1", "call_7.2", "x" * 120])
def test_sanitize_keeps_safe_names(call_id: str) -> None:
    assert sanitize(call_id) == call_id


@pytest.mark.parametrize(
    ("call_id", "kept"),
    [
        ("../../etc/passwd", "_.._.._etc_passwd"),
        ("", "_"),
        (".", "_."),
        ("..", "_.."),
        (".hidden", "_.hidden"),
        ("a b/c\\d", "a_b_c_d"),
        ("héllo✓", "h_llo_"),
        ("x\x00y\n", "x_y_"),
    ],
)
def test_sanitize_marks_a_changed_name_with_a_hash(call_id: str, kept: str) -> None:
    assert re.fullmatch(re.escape(kept) + "-[0-9a-f]{8}", sanitize(call_id))


@pytest.mark.parametrize(
    "names", [("ü", "é"), ("a:b", "a;b"), ("", "_"), (".x", "_.x"), ("a/b", "a_b")]
)
def test_names_that_sanitize_alike_stay_apart(names: tuple[str, str]) -> None:
    first, second = names
    assert sanitize(first) != sanitize(second)


def test_sanitize_keeps_long_ids_distinct_and_short() -> None:
    a, b = sanitize("x" * 300 + "a"), sanitize("x" * 300 + "b")
    assert a != b
    assert len(a) == len(b) == 120


@given(st.text())
def test_sanitize_is_a_safe_idempotent_file_name(call_id: str) -> None:
    safe = sanitize(call_id)
    assert safe and not safe.startswith(".") and len(safe) <= 120
    assert set(safe) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert sanitize(safe) == safe


@pytest.mark.parametrize("call_id", ["../../etc/passwd", "..", "/abs/path", "a/../../b", "~"])
def test_path_for_never_escapes_by_id(open_store: OpenStore, call_id: str) -> None:
    store = open_store()
    call = store.begin("{}", call_id=call_id)
    path = store.path_for(call_id)
    assert path == call.path
    assert path.resolve().parent == (store.session_dir / "by-id").resolve()


def test_default_ids_are_c1_c2_and_so_on(open_store: OpenStore) -> None:
    store = open_store()
    assert [store.begin("{}").id for _ in range(3)] == ["c1", "c2", "c3"]


def test_default_ids_skip_ids_the_caller_took(open_store: OpenStore) -> None:
    store = open_store()
    store.begin("{}", call_id="c1")
    store.begin("{}", call_id="c3")
    assert store.begin("{}").id == "c4"


def test_duplicate_call_ids_are_deduplicated_with_sent_id(open_store: OpenStore) -> None:
    store = open_store()
    first, second, third = (store.begin("{}", call_id="call_7") for _ in range(3))
    assert (first.id, first.sent_id) == ("call_7", None)
    assert (second.id, second.sent_id) == ("call_7.2", "call_7")
    assert (third.id, third.sent_id) == ("call_7.3", "call_7")
    assert store.finish(second, "ok")["sent_id"] == "call_7"
    assert "sent_id" not in store.finish(first, "ok")


def test_sanitized_call_id_records_what_was_sent(open_store: OpenStore) -> None:
    call = open_store().begin("{}", call_id="call/7")
    assert (call.id, call.sent_id) == (sanitize("call/7"), "call/7")
    assert call.id.startswith("call_7-")


def test_deduplicated_long_ids_stay_loadable(open_store: OpenStore) -> None:
    store = open_store()
    long_id = "y" * 200
    store.begin('{"code": "1"}', call_id=long_id)
    second = store.begin('{"code": "2"}', call_id=long_id)
    assert second.id.endswith(".2") and len(second.id) <= 120
    assert store.load_code(second.id) == (second.id, "2")


def test_a_call_id_sent_twice_is_refused_with_both_programs(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store, "x = 1", call_id="call_7")
    finished_call(store, "x = 2", call_id="call_7")

    with pytest.raises(AmbiguousReferenceError) as refused:
        store.load_code("call_7")

    assert str(refused.value) == (
        "call id 'call_7' names 2 programs in this session (it was sent again): "
        '#1 (call_7), #2 (call_7.2); give the reference of the one you mean instead, like "#2".'
    )
    assert store.load_code("#2") == store.load_code("call_7.2") == ("call_7.2", "x = 2")
    assert store.load_code("#1") == ("call_7", "x = 1")


def test_an_id_sent_again_whose_call_never_finished_stays_refused_after_reopens(
    open_store: OpenStore, root: Path
) -> None:
    first = open_store()
    finished_call(first, "x = 1", call_id="call_7")
    first.begin(json.dumps({"code": "boom()"}), call_id="call_7")  # its kernel died
    first.close()

    for _ in range(2):  # the first reopen writes its "unfinished" line, the second reads it
        store = open_store()
        with pytest.raises(AmbiguousReferenceError, match=r"#1 \(call_7\), #2 \(call_7.2\)"):
            store.load_code("call_7")
        store.close()


def test_an_id_that_differs_from_another_only_in_case_names_its_own_program(
    open_store: OpenStore,
) -> None:
    store = open_store()
    finished_call(store, "x = 1", call_id="Call_A")
    second = finished_call(
        store, "x = 2", call_id="call_a"
    )  # saved as call_a.2: one file on any disk

    assert second.id == "call_a.2"
    assert store.load_code("call_a") == ("call_a.2", "x = 2")
    assert store.load_code("Call_A") == ("Call_A", "x = 1")


# -- history -----------------------------------------------------------------------------------


def test_finish_appends_one_compact_line(open_store: OpenStore) -> None:
    store = open_store()
    call = store.begin('{"code": "1/0"}', turn=3, step=1)
    line = store.finish(call, "error", ename="ZeroDivisionError", evalue="é")
    raw = (store.session_dir / "history.jsonl").read_text("utf-8")
    assert raw == json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n"
    assert {k: line[k] for k in ("id", "tool", "turn", "step", "ordinal", "status", "bytes")} == {
        "id": "c1",
        "tool": "run_code",
        "turn": 3,
        "step": 1,
        "ordinal": 1,
        "status": "error",
        "bytes": call.bytes,
    }
    assert line["time"] == call.started and line["duration"] >= 0
    assert line["ename"] == "ZeroDivisionError" and "replay_of" not in line
    assert store.history() == [line]


def test_finish_rejects_unknown_status(open_store: OpenStore) -> None:
    store = open_store()
    with pytest.raises(ValueError, match="ok"):
        store.finish(store.begin("{}"), "done")
    assert store.history() == []


def test_finish_rejects_extra_keys_that_override_standard_ones(open_store: OpenStore) -> None:
    store = open_store()
    with pytest.raises(ValueError, match="override"):
        store.finish(store.begin("{}"), "ok", id="other", bytes=0)


def test_history_append_does_not_reopen_the_file(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    calls = [store.begin("{}") for _ in range(100)]
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"read {self}"))
    for call in calls:
        store.finish(call, "ok")
    assert opened == []
    monkeypatch.undo()
    assert len(store.history()) == 100


def test_torn_last_line_is_skipped_and_next_append_starts_fresh(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store)
    store.close()
    history = store.session_dir / "history.jsonl"
    with open(history, "a") as f:
        f.write('{"id":"c2","sta')  # a crash mid-write
    store = open_store()
    finished_call(store)
    assert [line["id"] for line in store.history()] == ["c1", "c2"]
    assert history.read_text().splitlines()[1] == '{"id":"c2","sta'


def test_latest_ids_are_newest_first(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(7):
        finished_call(store)
    assert store.latest_ids() == ["c7", "c6", "c5", "c4", "c3"]
    assert store.latest_ids(2) == ["c7", "c6"]


# -- reopening after a kernel restart -----------------------------------------------------------


def test_reopen_continues_counter_and_marks_orphans_unfinished(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store)
    crashed = store.begin('{"code": "import os; os._exit(1)"}')  # no finish: the kernel died
    store.close()
    store = open_store()
    latest = {line["id"]: line["status"] for line in store.history()}
    assert [cid for cid, status in latest.items() if status == "unfinished"] == ["c2"]
    assert store.history()[-1]["status"] == "unfinished"
    assert store.history()[-1]["bytes"] == crashed.bytes
    assert store.begin("{}").id == "c3"
    assert store.latest_ids(3) == ["c3", "c2", "c1"]


def test_reopen_makes_the_crashed_call_the_previous_program(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store)
    store.begin('{"code": "crash()"}')
    store.close()
    store = open_store()
    store.begin("{\"code\": \"await ptc_retry.replay(1, 'crash', 'fix')\"}")
    assert store.load_code(1) == ("c2", "crash()")


def test_reopen_deletes_stale_temp_files(open_store: OpenStore) -> None:
    store = open_store()
    store.close()
    stale = store.session_dir / "by-id" / ".c9.json.123.tmp"
    stale.write_text("half")
    open_store()
    assert not stale.exists()
    assert open_store().begin("{}").id == "c1"


def test_sessions_on_one_root_do_not_see_each_other(open_store: OpenStore) -> None:
    a, b = open_store("a"), open_store("b")
    finished_call(a, call_id="only_in_a")
    finished_call(a)
    assert b.begin("{}").id == "c1"
    assert [line["id"] for line in b.history()] == []
    with pytest.raises(CheckpointError):
        b.path_for("only_in_a")
    assert a.session_dir != b.session_dir and a.root == b.root


def test_fresh_session_names_are_unique_and_valid(root: Path) -> None:
    a, b = CheckpointStore(root), CheckpointStore(root)
    assert a.session != b.session and sanitize(a.session) == a.session
    a.close()
    b.close()


def test_closed_store_refuses_to_record(open_store: OpenStore) -> None:
    store = open_store()
    call = store.begin("{}")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.finish(call, "ok")


# -- previous/ ---------------------------------------------------------------------------------


def test_previous_holds_the_previous_steps_calls_in_ordinal_order(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(3):
        finished_call(store, turn=1, step=1)
    assert previous_ids(store) == []
    first = store.begin("{}", turn=1, step=2)
    assert first.ordinal == 1
    assert previous_ids(store) == ["c1", "c2", "c3"]
    second = store.begin("{}", turn=1, step=2)
    assert second.ordinal == 2
    assert previous_ids(store) == ["c1", "c2", "c3"]
    store.begin("{}", turn=2, step=1)
    assert previous_ids(store) == ["c4", "c5"]
    assert not (store.session_dir / "previous" / "3.json").exists()
    # A hard link: the checkpoint itself under a second name, no new file per cell.
    assert (store.session_dir / "previous" / "1.json").samefile(
        store.session_dir / "by-id" / "c4.json"
    )


def test_previous_with_step_none_holds_the_call_before(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store, "a = 1")
    finished_call(store, "b = 2")
    call = store.begin("c = 3")
    assert call.ordinal == 1
    assert previous_ids(store) == ["c2"]
    assert store.load_code(1) == ("c2", "b = 2")


def refuse(*args: Any, **kwargs: Any) -> None:
    raise OSError(1, "Operation not permitted")


def test_hard_link_refused_falls_back_to_symlinks(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", refuse)
    store = open_store()
    finished_call(store, "a = 1", turn=1, step=1)
    store.begin("{}", turn=1, step=2)
    assert os.readlink(store.session_dir / "previous" / "1.json") == os.path.join(
        "..", "by-id", "c1.json"
    )
    assert store.load_code(1) == ("c1", "a = 1")


def test_symlink_refused_falls_back_to_copies(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(os, "symlink", refuse)
    store = open_store()
    finished_call(store, "a = 1", turn=1, step=1)
    finished_call(store, "b = 2", turn=1, step=1)
    store.begin("{}", turn=1, step=2)
    one = store.session_dir / "previous" / "1.json"
    assert not one.is_symlink()
    assert store.load_code(1) == ("c1", "a = 1")
    assert store.load_code(2) == ("c2", "b = 2")
    store.begin("{}", turn=1, step=3)
    assert previous_ids(store) == ["c3"]


def test_copied_previous_entry_follows_replace_arguments(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(os, "symlink", refuse)
    store = open_store()
    call = finished_call(store, "old")
    store.begin("{}")
    store.replace_arguments(call, json.dumps({"code": "new"}))
    assert store.load_code(1) == ("c1", "new")


# -- loading -----------------------------------------------------------------------------------


def test_load_returns_id_raw_text_and_object(open_store: OpenStore) -> None:
    store = open_store()
    raw = '{"code": "x = 1",  "note": "kept as sent"}'
    store.begin(raw, call_id="call_1")
    assert store.load("call_1") == ("call_1", raw, {"code": "x = 1", "note": "kept as sent"})


def test_load_of_unknown_id_lists_recent_ids(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store)
    with pytest.raises(CheckpointError, match=r"'nope'.*does not exist.*c1"):
        store.load("nope")


def test_load_of_missing_previous_position_says_how_many_exist(open_store: OpenStore) -> None:
    store = open_store()
    finished_call(store)
    store.begin("{}")
    with pytest.raises(
        CheckpointError, match=r'holds the 1 call\(s\).*write "#2".*#2 \(c2\), #1 \(c1\)'
    ):
        store.load(2)
    with pytest.raises(CheckpointError, match="no previous/0.json"):
        store.load(0)


@pytest.mark.parametrize("target", [True, 1.0, None, b"c1"])
def test_load_rejects_targets_that_are_not_str_or_int(open_store: OpenStore, target: Any) -> None:
    store = open_store()
    finished_call(store)
    with pytest.raises(CheckpointError, match=r"call id \(str\)"):
        store.path_for(target)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "is not JSON"),
        (b"[1, 2]", "holds a list, not a JSON object"),
        (b'"code"', "holds a str, not a JSON object"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_load_rejects_content_that_is_not_a_json_object(
    open_store: OpenStore, content: bytes, message: str
) -> None:
    store = open_store()
    call = store.begin("{}")
    call.path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message) as info:
        store.load("c1")
    assert str(call.path) in str(info.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [('{"program": "x"}', 'no "code" key'), ('{"code": ["x"]}', '"code" is a list, not a string')],
)
def test_load_code_requires_a_code_string(
    open_store: OpenStore, arguments: str, message: str
) -> None:
    store = open_store()
    store.begin(arguments)
    with pytest.raises(CheckpointError, match=message):
        store.load_code("c1")


def test_load_of_checkpoint_deleted_from_under_the_store(open_store: OpenStore) -> None:
    store = open_store()
    call = finished_call(store)
    store.begin("{}")
    call.path.unlink()
    with pytest.raises(CheckpointError, match="c1"):
        store.load("c1")
    with pytest.raises(CheckpointError, match="previous/1.json was deleted"):
        store.load(1)


def test_load_reports_a_file_deleted_between_check_and_read(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    call = finished_call(store)
    real_path_for = store.path_for

    def path_then_delete(target: Any) -> Path:
        path = real_path_for(target)
        path.unlink()
        return path

    monkeypatch.setattr(store, "path_for", path_then_delete)
    with pytest.raises(CheckpointError, match=f"{call.path}.*deleted"):
        store.load("c1")


def test_threads_get_distinct_ids_and_whole_history_lines(open_store: OpenStore) -> None:
    store = open_store()

    def work() -> None:
        for _ in range(50):
            finished_call(store)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [line["id"] for line in store.history()]
    assert len(ids) == len(set(ids)) == 400


# -- session numbers and short references ------------------------------------------------------


def test_every_call_gets_the_next_session_number(open_store: OpenStore) -> None:
    store = open_store()
    calls = [finished_call(store, call_id=call_id) for call_id in ("call_a", None, "toolu_01b")]

    assert [call.reference for call in calls] == ["#1", "#2", "#3"]
    assert [line["n"] for line in store.history()] == [1, 2, 3]
    assert store.id_for_reference("#3") == "toolu_01b"
    assert store.load_code("#2") == ("c1", "x = 1")


def test_numbers_continue_after_a_reopen_and_orphans_get_theirs(open_store: OpenStore) -> None:
    first = open_store()
    finished_call(first, call_id="a")
    orphan = first.begin('{"code": "crash()"}', call_id="b")  # never finished: the kernel died
    first.close()

    second = open_store()
    after = finished_call(second, call_id="c")

    assert second.history()[1] == {**second.history()[1], "id": "b", "n": 2, "status": "unfinished"}
    assert orphan.n == 2 and after.reference == "#3"
    assert second.load_code("#2") == ("b", "crash()")


def test_a_reference_the_session_never_gave_is_refused_with_its_range(
    open_store: OpenStore,
) -> None:
    store = open_store()
    finished_call(store)
    finished_call(store)
    with pytest.raises(CheckpointError, match=r"no program #3 in this session .*#1 to #2"):
        store.load_code("#3")
    with pytest.raises(CheckpointError, match="not a reference"):
        store.load_code("#three")


def test_a_number_claimed_by_two_calls_is_refused_not_guessed(
    open_store: OpenStore, root: Path
) -> None:
    store = open_store()
    finished_call(store, call_id="first")
    store.close()
    history = root / "s" / "history.jsonl"
    line = json.loads(history.read_text())
    with history.open("a") as file:
        file.write(json.dumps(dict(line, id="second")) + "\n")

    reopened = open_store()
    with pytest.raises(CheckpointError, match="#1 is ambiguous"):
        reopened.load_code("#1")
    assert reopened.load_code("first") == ("first", "x = 1")


def test_a_sent_id_that_looks_like_a_reference_makes_that_reference_ambiguous(
    open_store: OpenStore,
) -> None:
    store = open_store()
    finished_call(store, call_id="real")
    finished_call(store, call_id="#1")  # saved as _1-<hash>: sanitized

    with pytest.raises(CheckpointError, match="#1 is ambiguous"):
        store.load_code("#1")
    assert store.reference_of(sanitize("#1")) == "#2"


def test_link_number_makes_calls_n_point_at_the_checkpoint(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    call = finished_call(store, "y = 2", call_id="call_long_id")
    path = store.link_number(call)

    assert path == store.session_dir / "calls" / "1.json" and path.is_symlink()
    assert json.loads(path.read_text()) == {"code": "y = 2"}
    monkeypatch.setattr(os, "symlink", refuse)
    copied = store.link_number(finished_call(store, "z = 3"))
    assert not copied.is_symlink() and json.loads(copied.read_text()) == {"code": "z = 3"}


def test_a_number_a_notice_gave_an_unfinished_call_survives_the_reopen(
    open_store: OpenStore,
) -> None:
    first = open_store()
    finished_call(first, call_id="a")
    dying = first.begin('{"code": "boom()"}', call_id="b")
    first.link_number(dying)  # the notice went out, then the kernel died
    first.close()

    assert open_store().id_for_reference("#2") == "b"
