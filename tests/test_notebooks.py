"""The demo notebooks run top to bottom under nbclient, fail only where they are meant to,
and are stored with their outputs, as ``notebooks/build.py`` writes them."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]-*.ipynb"))
# Native mode's notice names the call id by design: editPreviousToolCalling takes it.
CODE_MODE = [path for path in NOTEBOOKS if path.name != "04-native-mode.ipynb"]
MEANT_TO_FAIL = "raises-exception"


def _load(name: str) -> ModuleType:
    """``notebooks/<name>.py``: scripts, not a package."""
    spec = importlib.util.spec_from_file_location(f"notebooks_{name}", NOTEBOOKS_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


execute = _load("execute")
build = _load("build")


def _errors(cell: Any) -> list[Any]:
    return [out for out in cell.get("outputs", []) if out["output_type"] == "error"]


def _meant_to_fail(cell: Any) -> bool:
    return MEANT_TO_FAIL in cell.metadata.get("tags", [])


def test_every_notebook_is_built_by_build_py() -> None:
    assert [p.name for p in NOTEBOOKS] == list(build.NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_runs_top_to_bottom_failing_only_where_tagged(
    path: Path, jupyter_path: Path, tmp_path: Path
) -> None:
    nb = nbformat.read(str(path), as_version=4)
    root = tmp_path / "checkpoints"
    root.mkdir(mode=0o700)
    # Raises CellExecutionError on an error in a cell not tagged raises-exception.
    execute.execute_notebook(nb, root=root, session=path.stem, cwd=tmp_path)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if _meant_to_fail(cell):
            assert _errors(cell), f"a cell tagged {MEANT_TO_FAIL} did not fail:\n{cell.source}"
        else:
            assert not _errors(cell), cell.source


def test_the_notebooks_are_stored_with_their_outputs() -> None:
    for path in NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        cells = [cell for cell in nb.cells if cell.cell_type == "code"]
        assert all(cell.execution_count for cell in cells), path.name
        assert sum(bool(cell.outputs) for cell in cells) >= len(cells) // 2, path.name
        for cell in cells:
            assert bool(_errors(cell)) == _meant_to_fail(cell), (path.name, cell.source[:60])


def test_the_stored_notebooks_are_what_build_writes(tmp_path: Path) -> None:
    for built in build.build(tmp_path):
        fresh = nbformat.read(str(built), as_version=4)
        stored = nbformat.read(str(NOTEBOOKS_DIR / built.name), as_version=4)
        assert stored.metadata["kernelspec"] == fresh.metadata["kernelspec"]
        assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in stored.cells] == [
            (c.cell_type, c.source, c.metadata.get("tags")) for c in fresh.cells
        ], f"{built.name} is stale: run notebooks/build.py, then notebooks/execute.py"


def test_the_quickstart_loads_the_extension_in_the_stock_kernel() -> None:
    nb = nbformat.read(str(NOTEBOOKS_DIR / "01-quickstart.ipynb"), as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    first = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert first.source == "%load_ext ptc_retry"
    (failed,) = [cell for cell in nb.cells if cell.cell_type == "code" and _meant_to_fail(cell)]
    notice = _errors(failed)[0]["traceback"][-1]
    assert notice.startswith("[ptc-retry] Saved as #1. ") and 'replay("#1", "<old>"' in notice


def _notices(nb: Any) -> list[str]:
    """Every notice line in a stored notebook: in tracebacks and in printed text."""
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                texts.extend(out["traceback"])
            elif out["output_type"] == "stream":
                texts.append(out["text"])
    lines = [line.strip() for text in texts for line in text.splitlines()]
    # A notice's lines: its sentences, and the call it offers on the line after one.
    return [
        line
        for before, line in zip(["", *lines], lines)
        if line.startswith("[ptc-retry] ")
        or (before.startswith("[ptc-retry] ") and line.startswith("await ptc_retry."))
    ]


@pytest.mark.parametrize("path", CODE_MODE, ids=[p.stem for p in CODE_MODE])
def test_the_stored_notices_name_programs_by_reference_not_by_id_or_path(path: Path) -> None:
    notices = _notices(nbformat.read(str(path), as_version=4))
    offers = [line for line in notices if "ptc_retry.re" in line]
    assert offers, path.name
    for line in offers:
        assert re.search(r'ptc_retry\.re(?:play|sume)\("#\d+"', line), line
        assert "call_" not in line and "by-id" not in line, line


def test_the_resume_notebook_shows_the_resume_offer_and_the_time_limit() -> None:
    path = NOTEBOOKS_DIR / "03-guard-and-resume.ipynb"
    notices = _notices(nbformat.read(str(path), as_version=4))
    assert any(line.endswith('"<old>", "<new>", resume=True)') for line in notices)
    assert any("Stopped by the time limit (2 s); saved as #6." in line for line in notices)
