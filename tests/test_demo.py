"""``ptc-retry demo`` runs to the end on a real kernel and saves a notebook JupyterLab opens."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ptc_retry import demo
from ptc_retry.cli import main
from ptc_retry.tokens import load_tokenizer


@pytest.fixture(scope="module")
def played(jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One demo run: (exit code, transcript, notebook path, checkpoint root)."""
    root = tmp_path_factory.mktemp("checkpoints")
    notebook = tmp_path_factory.mktemp("saved") / "demo.ipynb"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = demo.run(root=root, save=notebook)
    yield code, out.getvalue(), notebook, root


def test_demo_completes(played: Any) -> None:
    code, transcript, _, _ = played
    assert code == 0, transcript


def test_transcript_shows_the_failure_the_notice_and_the_replay(played: Any) -> None:
    _, transcript, _, _ = played
    failure = transcript.index("KeyError: 'unit_prcie'")
    # The notice ends in ", resume=True" when the program ran a second before it failed, as it
    # may on a loaded machine; the call it offers begins the same either way.
    notice = transcript.index('await ptc_retry.replay("#1", "<old>", "<new>"')
    replay = transcript.index(
        """await ptc_retry.replay("#1", 'row["unit_prcie"]', 'row["unit_price"]')"""
    )
    success = transcript.index("best month 2024-03: 71.90; median order 21.75")
    assert failure < notice < replay < success
    assert "the model reads (status: ok)" in transcript


def test_transcript_compares_the_retry_with_resending(played: Any) -> None:
    _, transcript, _, _ = played
    retry = len(json.dumps({"code": _replay_line()}).encode())
    resend = len(json.dumps({"code": demo.PROGRAM.replace(*demo.FIX)}).encode())
    assert f"retry by replay (one line)       {retry:>6,} bytes" in transcript
    assert f"retry by re-sending the program  {resend:>6,} bytes" in transcript
    tokenizer = load_tokenizer()
    if tokenizer.available:
        replay_tokens = tokenizer.count(json.dumps({"code": _replay_line()}))
        assert f"{retry:>6,} bytes {replay_tokens:>7,} tokens" in transcript
        assert "tokens: cl100k_base" in transcript
    else:
        assert "ceil(bytes / 4)" in transcript


def test_the_checkpoints_of_the_demo_are_kept(played: Any) -> None:
    _, _, _, root = played
    (session,) = root.iterdir()
    assert {p.name for p in (session / "by-id").iterdir()} == {
        f"{demo.FIRST_ID}.json",
        f"{demo.RETRY_ID}.json",
    }


def test_save_writes_a_valid_notebook(played: Any) -> None:
    _, _, path, _ = played
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)

    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    failed, fixed = code_cells
    assert failed.source == demo.PROGRAM
    assert failed.outputs[-1].output_type == "error"
    assert "raises-exception" in failed.metadata.tags
    assert fixed.source == _replay_line()
    assert any("best month" in output.get("text", "") for output in fixed.outputs)
    assert notebook.metadata.kernelspec.name == "ptc-retry"


def _replay_line() -> str:
    old, new = demo.FIX
    return f'await ptc_retry.replay("#1", {old!r}, {new!r})'


def test_demo_says_so_when_the_kernel_cannot_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(demo.KernelBackend, "start", _refuse_to_start)
    assert demo.run(root=tmp_path) == 1
    assert "the kernel did not start: no python here" in capsys.readouterr().err


async def _refuse_to_start(self: Any) -> None:
    raise demo.KernelStartError("no python here")


@pytest.fixture(params=["read-only", "others can write", "a symlink"])
def unusable_root(request: pytest.FixtureRequest, tmp_path: Path, tmpfs: Any) -> Path:
    if request.param == "read-only":
        return tmpfs("ro,size=64k,mode=0700")
    if request.param == "others can write":
        root = tmp_path / "shared"
        root.mkdir()
        root.chmod(0o777)
        return root
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    return tmp_path / "link"


def test_demo_on_an_unusable_root_says_why_in_one_line_as_history_does(
    unusable_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTC_RETRY_ROOT", str(unusable_root))

    code = main(["demo"])  # starts no kernel: this test is not marked kernel

    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"ptc-retry demo: cannot keep checkpoints in {unusable_root}/demo-")
    assert err.count("\n") == 1 and "Traceback" not in err
    history = main(["history"])
    assert history != 0 and capsys.readouterr().err.count("\n") == 1
