"""The backend under hostile or broken checkpoint roots: it deletes only what it made, and it
never starts a kernel whose programs could not be saved while its texts say they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import BackendError, KernelBackend

from .helpers import OnLoop


def test_shutdown_leaves_a_directory_that_was_there_before(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "root" / "notes"
    notes.mkdir(parents=True, mode=0o700)
    (notes / "precious.txt").write_text("keep me")

    kb = KernelBackend(root=tmp_path / "root", session_id="notes")
    on_loop(kb.start())
    assert on_loop(kb.run_code("1 + 1")).value == "2"
    on_loop(kb.shutdown())

    assert (notes / "precious.txt").read_text() == "keep me"
    assert (notes / "by-id" / "c1.json").exists()  # the session goes on, next time


def test_shutdown_removes_the_session_directory_it_made(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path: Path
) -> None:
    kb = KernelBackend(root=tmp_path / "root")
    on_loop(kb.start())
    on_loop(kb.run_code("1 + 1"))
    assert kb.session_dir is not None and kb.session_dir.is_dir()
    on_loop(kb.shutdown())
    assert not kb.session_dir.exists()


def test_start_on_a_root_that_cannot_be_written_fails_clearly(
    on_loop: OnLoop[Any], jupyter_path: Path, read_only_dir: Path
) -> None:
    kb = KernelBackend(root=read_only_dir / "root")
    with pytest.raises(BackendError, match=r"cannot keep checkpoints in .*nothing was started"):
        on_loop(kb.start())
    assert kb.connection is None
    on_loop(kb.shutdown())


def test_start_on_a_root_that_is_a_file_fails_clearly(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path: Path
) -> None:
    (tmp_path / "root").write_text("not a directory")
    kb = KernelBackend(root=tmp_path / "root")
    with pytest.raises(BackendError, match="not a directory.*Pass root="):
        on_loop(kb.start())
    on_loop(kb.shutdown())
    assert (tmp_path / "root").read_text() == "not a directory"
