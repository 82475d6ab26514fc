"""Fixtures: real kernels started through jupyter_client, isolated from the user's files.

The ``ptc-retry`` kernelspec is installed into a temporary prefix that
``JUPYTER_PATH`` points at; checkpoints go to a per-test ``PTC_RETRY_ROOT``.
A test that starts a kernel is marked ``kernel`` (by its fixtures or its module's
``pytestmark``), so ``pytest -m "not kernel"`` runs the pure tests in seconds; a
test not so marked that starts a kernel fails, which keeps the marker true.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from ptc_retry import kernelspec

from .helpers import Kernel, Run, spawn

#: Fixtures that start kernels, or exist only to serve tests that do.
KERNEL_FIXTURES = frozenset({"run", "jupyter_path", "start_kernel", "kernel"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if KERNEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kernel)


@pytest.fixture(autouse=True)
def _no_kernel_unless_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that is not marked ``kernel`` must not launch one."""
    if request.node.get_closest_marker("kernel"):
        return
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    async def refuse(self: Any, cmd: list[str], **kwargs: Any) -> Any:
        raise AssertionError(f"{request.node.nodeid} starts a kernel: mark it kernel")

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", refuse)


@pytest.fixture(scope="module")
def run() -> Iterator[Run[Any]]:
    """Run a coroutine on the one event loop every backend of a test module lives on."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


@pytest.fixture(scope="session")
def jupyter_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private Jupyter data prefix holding the ptc-retry kernelspec."""
    prefix = tmp_path_factory.mktemp("jupyter-prefix")
    kernelspec.install(prefix=str(prefix))
    data = prefix / "share" / "jupyter"
    saved = {key: os.environ.get(key) for key in ("JUPYTER_PATH", "JUPYTER_DATA_DIR")}
    os.environ["JUPYTER_PATH"] = str(data)
    os.environ["JUPYTER_DATA_DIR"] = str(tmp_path_factory.mktemp("jupyter-data"))
    yield data
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def checkpoint_root(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


@pytest.fixture
def start_kernel(jupyter_path: Path, checkpoint_root: Path) -> Iterator[Any]:
    """``start_kernel(name="ptc-retry", session="test", root=None, env=None, args=())``."""
    kernels: list[Kernel] = []

    def start(name: str = "ptc-retry", *, root: Path | None = None, **options: Any) -> Kernel:
        kernel = spawn(name, root=root or checkpoint_root, **options)
        kernels.append(kernel)
        return kernel

    yield start
    for kernel in kernels:
        kernel.shutdown()


@pytest.fixture
def kernel(start_kernel: Any) -> Kernel:
    """A fresh ptc-retry kernel whose session directory is ``<checkpoint_root>/test``."""
    return start_kernel()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs(options)``: a real tmpfs mounted in ``tmp_path`` with ``options`` (such as
    ``"size=64k,mode=0700"``); needs root, and skips the test where it cannot mount."""
    import subprocess

    mounted: list[Path] = []

    def mount(options: str) -> Path:
        path = tmp_path / f"tmpfs-{len(mounted)}"
        path.mkdir()
        command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)]
        if subprocess.run(command, capture_output=True).returncode != 0:
            pytest.skip(f"cannot mount a tmpfs ({options}) here")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:  # lazy: a kernel may still hold a file open until its fixture ends
        subprocess.run(["umount", "--lazy", str(path)], check=False)
