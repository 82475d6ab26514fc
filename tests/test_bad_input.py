"""Bad input gets a clear error and breaks nothing else: real kernels, real files."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import Kernel, StartKernel

PROGRAM = "\n".join(
    [
        "import json",
        "settings = {'retries': 3, 'timeout': 2.5, 'endpoint': 'https://example.invalid/api'}",
        "attempts = [settings['retries'] * n for n in range(4)]",
        "payload = json.dumps({'attempts': attempts, 'timeout': settings['timeout']})",
        "print(len(payload))",
        "attempts[0] = attempts[0] + 1",
        "assert settings['retries'] == 5, 'wrong retries'",
    ]
)


@pytest.fixture(scope="module")
def shared(start_shared_kernel: StartKernel) -> Kernel:
    """The module's kernel, whose first program (``p1``) failed."""
    kernel = start_shared_kernel("bad")
    first = kernel.execute(PROGRAM, {"call_id": "p1"})
    assert first.error["ename"] == "AssertionError"
    return kernel


def replay_error(kernel: Kernel, line: str) -> str:
    executed = kernel.execute(line)
    assert executed.status == "error"
    assert executed.error["ename"] == "ReplayError", executed.error
    assert kernel.execute("1 + 1").result == "2"  # the kernel goes on
    return executed.error["evalue"]


def test_unknown_id_lists_the_latest_ids(shared: Kernel) -> None:
    message = replay_error(shared, "await ptc_retry.replay('nope', 'a', 'b')")
    assert "nope" in message and "p1" in message


def test_missing_old_shows_the_nearest_lines(shared: Kernel) -> None:
    message = replay_error(
        shared, "await ptc_retry.replay('p1', \"'retries': 4\", \"'retries': 5\")"
    )
    assert "not found" in message
    assert "line 2:" in message


def test_ambiguous_old_gives_the_count(shared: Kernel) -> None:
    message = replay_error(shared, "await ptc_retry.replay('p1', 'attempts', 'tries')")
    assert "occurs" in message and "times" in message
    assert "replace_all=True" in message


def test_checkpoint_that_is_not_json_is_reported(shared: Kernel) -> None:
    (shared.session_dir / "by-id" / "garbage.json").write_text("not json {")
    message = replay_error(shared, "await ptc_retry.replay('garbage', 'a', 'b')")
    assert "garbage.json" in message and "JSON" in message


def test_checkpoint_without_code_is_reported(shared: Kernel) -> None:
    (shared.session_dir / "by-id" / "nocode.json").write_text('{"path": "x.txt"}')
    message = replay_error(shared, "await ptc_retry.replay('nocode', 'a', 'b')")
    assert '"code"' in message


def test_checkpoint_deleted_from_under_the_kernel_is_reported(shared: Kernel) -> None:
    shared.execute(PROGRAM, {"call_id": "gone"})
    (shared.session_dir / "by-id" / "gone.json").unlink()
    message = replay_error(shared, "await ptc_retry.replay('gone', 'a', 'b')")
    assert "gone" in message


def test_path_like_ids_stay_inside_by_id(shared: Kernel) -> None:
    executed = shared.execute("x = 1", {"call_id": "../../etc/passwd"})
    saved = Path(executed.ptc["checkpoint"])
    assert saved.parent == shared.session_dir / "by-id"
    assert json.loads(saved.read_text()) == {"code": "x = 1"}
    message = replay_error(shared, "await ptc_retry.replay('../../../../etc/passwd', 'a', 'b')")
    assert "root:" not in message


def test_edit_arguments_of_the_wrong_type_are_reported(shared: Kernel) -> None:
    message = replay_error(shared, "await ptc_retry.replay('p1', 3, 'b')")
    assert "old" in message and "int" in message


def warning_kernel(start_kernel, root: Path) -> Kernel:  # type: ignore[no-untyped-def]
    kernel = start_kernel(root=root)
    first = kernel.execute("print('still runs')")
    second = kernel.execute("print('again')")
    assert first.status == second.status == "ok"
    assert first.stdout == "still runs\n" and second.stdout == "again\n"
    assert first.stderr.count("ptc-retry:") == 1
    assert ".." not in first.stderr and first.stderr.endswith(". Programs still run as usual.\n")
    assert second.stderr == ""  # reported once
    assert first.ptc["call_id"] is None
    return kernel


def test_symlink_root_is_refused_and_programs_still_run(start_kernel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    warning_kernel(start_kernel, tmp_path / "link")
    assert list(target.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_root_owned_by_someone_else_is_refused(start_kernel, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, 65534, 65534)
    warning_kernel(start_kernel, root)
    assert list(root.iterdir()) == []


def test_read_only_root_warns_once_and_programs_still_run(
    start_kernel, read_only_dir: Path
) -> None:  # type: ignore[no-untyped-def]
    warning_kernel(start_kernel, read_only_dir / "root")


@pytest.fixture
def tiny_dir(tmpfs: Callable[[str], Path]) -> Path:
    return tmpfs("size=64k")


def test_full_disk_warns_once_and_programs_that_fit_are_still_saved(
    start_kernel, tiny_dir: Path
) -> None:  # type: ignore[no-untyped-def]
    kernel = start_kernel(root=tiny_dir / "root")
    big = "x = 1\n" + "# filler\n" * 20_000
    first = kernel.execute(big)
    second = kernel.execute(big)
    assert first.status == second.status == "ok"
    assert first.stderr.count("could not save") == 1 and second.stderr == ""
    small = kernel.execute("y = 2")
    assert small.ptc["call_id"] is not None
    assert not [
        p for p in (tiny_dir / "root" / "test" / "by-id").iterdir() if p.name.startswith(".")
    ]


def test_a_call_cannot_replay_itself(shared: Kernel) -> None:
    executed = shared.execute("await ptc_retry.replay('me', 'a', 'b')", {"call_id": "me"})
    assert executed.error["ename"] == "ReplayError"
    assert "itself" in executed.error["evalue"]
