"""Run the demo notebooks top to bottom with nbclient and store their outputs in place.

    python notebooks/execute.py                    # every notebook here
    python notebooks/execute.py 01-quickstart.ipynb

Each notebook runs in a fresh kernel of the kind its metadata names (``python3`` for
the quickstart, ``ptc-retry`` for the others; the ``ptc-retry`` kernel works here
without an installed kernelspec). The checkpoints go to a private
``<tempdir>/ptc-retry-notebooks-<uid>`` root that is removed afterwards, one session
per notebook, so nothing lands in your own checkpoint root and the paths in the
outputs stay the same from run to run on one machine. Cells tagged
``raises-exception`` must fail; any other error stops the run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat

HERE = Path(__file__).resolve().parent
TIMEOUT = 180  # seconds per cell


def execute_notebook(nb: Any, *, root: Path, session: str, cwd: Path | None = None) -> Any:
    """Run ``nb`` (a NotebookNode) in place with nbclient and return it.

    ``root``/``session``: where its kernel saves checkpoints (``PTC_RETRY_ROOT`` and
    ``PTC_RETRY_SESSION`` of the kernel, and of the backends its cells start).
    Raises ``nbclient.exceptions.CellExecutionError`` on an error in a cell that is
    not tagged ``raises-exception``.
    """
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    from kernel_ext.kernelspec import kernel_spec_manager

    name = nb.metadata["kernelspec"]["name"]
    manager = AsyncKernelManager(kernel_name=name, kernel_spec_manager=kernel_spec_manager())
    env = dict(os.environ)
    env.update(
        PTC_RETRY_ROOT=str(root),
        PTC_RETRY_SESSION=session,
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    client = NotebookClient(
        nb,
        km=manager,
        timeout=TIMEOUT,
        record_timing=False,
        # The kernel's own startup warnings are not part of any notebook.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        resources={"metadata": {"path": str(cwd or HERE)}},
    )
    try:
        client.execute(env=env)
    finally:
        # nbclient leaves a kernel manager it was given running: stop the kernel here.
        if manager.has_kernel:
            run_sync(manager.shutdown_kernel)(now=True)
    return nb


def scrub(nb: Any) -> Any:
    """Drop what changes from run to run without meaning anything: execution metadata."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def private_root() -> Path:
    """A fresh, private checkpoint root: ``<tempdir>/ptc-retry-notebooks-<uid>``."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    root = Path(tempfile.gettempdir()) / f"ptc-retry-notebooks-{uid}"
    if root.is_symlink():
        raise SystemExit(f"{root} is a symlink; remove it and run again")
    shutil.rmtree(root, ignore_errors=True)
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:  # not ours to remove: use a fresh one (paths then vary)
        return Path(tempfile.mkdtemp(prefix="ptc-retry-notebooks-"))
    return root


def main(names: list[str]) -> int:
    paths = [HERE / name for name in names] or sorted(HERE.glob("[0-9][0-9]-*.ipynb"))
    root = private_root()
    try:
        for path in paths:
            nb = nbformat.read(str(path), as_version=4)
            print(f"executing {path.name} ...", flush=True)
            with tempfile.TemporaryDirectory() as work:
                # The notebook's own session; backends its cells start name their own.
                execute_notebook(nb, root=root, session=path.stem, cwd=Path(work))
            nbformat.write(scrub(nb), str(path))
            print(f"wrote {path}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
