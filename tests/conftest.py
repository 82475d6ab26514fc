"""Fixtures: real kernels started through jupyter_client, isolated from the user's files.

The ``ptc-retry`` kernelspec is installed into a temporary prefix that
``JUPYTER_PATH`` points at; checkpoints go to a per-test ``PTC_RETRY_ROOT``.
A test that starts a kernel is marked ``kernel`` (by its fixtures or its module's
``pytestmark``), so ``pytest -m "not kernel"`` runs the pure tests in seconds; a
test not so marked that starts a kernel fails, which keeps the marker true.

One fixture per resource: a kernel for one test (``kernel``, ``start_kernel``) or for the
module (``start_shared_kernel``); a ``KernelBackend`` for the module (``backend``, ``fragile``,
``priced_backend`` with its host tool ``prices``, ``start_backend``), started with ``options``,
which a module may override. A module that sets
``TRANSPORTS`` (a list of ``"local"``, ``KERNEL_GATEWAY``, ``ENTERPRISE_GATEWAY``) runs each of
its tests that uses ``transport`` (through ``options``, ``backend``...) once per transport;
otherwise every backend is local. A test marked ``transports(*names)`` runs on those
instead: a module keeps its runs through a gateway to the tests where the gateway's code
differs. ``PTC_RETRY_TEST_TRANSPORTS=local`` (a comma-separated list)
keeps only those transports of every ``TRANSPORTS``: the floor's CI stage runs so, since the
gateways' own tests (tests/test_gateway.py) cover the gateway client there, and what
``TRANSPORTS`` repeats through a gateway runs the same kernel and backend code.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry import kernelspec
from ptc_retry.backend import KernelBackend

from .gateway_server import ENTERPRISE_GATEWAY, KERNEL_GATEWAY, Gateway, gateway_of, start_gateway
from .helpers import Kernel, OnLoop, PriceList, StartBackend, StartKernel, spawn

#: Fixtures that start kernels, or exist only to serve tests that do.
KERNEL_FIXTURES = frozenset({"on_loop", "jupyter_path", "start_kernel", "kernel"})
#: Every transport a backend may reach its kernel by (``TRANSPORTS``, ``transport``).
ALL_TRANSPORTS = ["local", KERNEL_GATEWAY, ENTERPRISE_GATEWAY]


#: The modules that take longest, slowest first: each module's test times summed (setup
#: included, as ``--junitxml`` reports them), one run of the whole suite on two workers on a
#: shared 2-core machine (18:37), every module of 29 s or more; test_eval.py took 167 s and
#: test_mcp_server_inspector.py 29 s (test_provider_sdks.py, timed alone, 143 s). They are
#: collected first, so that pytest-xdist, which hands each worker whole modules in
#: collection order, never starts a long one when the others are nearly done.
SLOWEST_MODULES = (
    "test_eval.py",
    "test_provider_sdks.py",
    "test_host_tools.py",
    "test_gateway.py",
    "test_browser.py",
    "test_late_results.py",
    "test_backend.py",
    "test_faults_kernel.py",
    "test_partial.py",
    "test_mcp.py",
    "test_backend_transports.py",
    "test_mcp_upstream.py",
    "test_notebooks.py",
    "test_mcp_server_http.py",
    "test_mcp_server_upstream.py",
    "test_tools_kernel.py",
    "test_tracing.py",
    "test_smolagents.py",
    "test_approvals.py",
    "test_faults_store.py",
    "test_references.py",
    "test_kernel.py",
    "test_mcp_server_raw.py",
    "test_mcp_server.py",
    "test_examples.py",
    "test_mcp_server_inspector.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if KERNEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kernel)
    rank = {name: place for place, name in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module's ``TRANSPORTS`` parametrize ``transport`` for each of its tests that uses it,
    one backend per transport for the whole module; a test marked ``transports(...)`` runs on
    those instead."""
    transports = getattr(metafunc.module, "TRANSPORTS", None)
    marked = metafunc.definition.get_closest_marker("transports")
    if transports is not None and marked is not None:
        transports = list(marked.args)
    chosen = os.environ.get("PTC_RETRY_TEST_TRANSPORTS")
    if transports is not None and chosen:
        transports = [name for name in transports if name in chosen.split(",")]
    if transports is not None and "transport" in metafunc.fixturenames:
        metafunc.parametrize("transport", transports, indirect=True, scope="module")


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
def on_loop() -> Iterator[OnLoop[Any]]:
    """``on_loop(coroutine)``: run it to completion on the one event loop every backend of
    the test module lives on, and return its result."""
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
def root(tmp_path: Path) -> Path:
    """A checkpoint root that does not exist yet (a store or the CLI makes it)."""
    return tmp_path / "root"


@pytest.fixture
def start_kernel(jupyter_path: Path, checkpoint_root: Path) -> Iterator[StartKernel]:
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


@pytest.fixture(scope="module")
def module_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint root of the module's shared kernels (``start_shared_kernel``)."""
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="module")
def start_shared_kernel(jupyter_path: Path, module_root: Path) -> Iterator[StartKernel]:
    """``start_shared_kernel(session, env=None, args=())``: a ptc-retry kernel for the whole
    module, whose checkpoints go to ``<module_root>/<session>``; shut down after the module.
    Its tests use distinct call ids, or expect the history the earlier ones left."""
    kernels: list[Kernel] = []

    def start(session: str, **options: Any) -> Kernel:
        kernel = spawn(root=module_root, session=session, **options)
        kernels.append(kernel)
        return kernel

    yield start
    for kernel in kernels:
        kernel.shutdown()


@pytest.fixture(scope="module")
def transport(request: pytest.FixtureRequest) -> str:
    """How the module's backends reach their kernel: ``"local"``, or each of the module's
    ``TRANSPORTS`` in turn."""
    return str(getattr(request, "param", "local"))


@pytest.fixture(scope="module")
def roots(jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Where each transport's kernels keep their checkpoints (all on this machine here)."""
    return {name: tmp_path_factory.mktemp(f"{name}-checkpoints") for name in ALL_TRANSPORTS}


def _gateway(kind: str, roots: dict[str, Path], tmp_path_factory: Any) -> Iterator[Gateway]:
    gateway = start_gateway(kind, roots[kind], tmp_path_factory.mktemp(kind))
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def kernel_gateway(
    roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """A real Jupyter Kernel Gateway, for the module (skips where it is not installed)."""
    yield from _gateway(KERNEL_GATEWAY, roots, tmp_path_factory)


@pytest.fixture(scope="module")
def enterprise_gateway(
    roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """A real Jupyter Enterprise Gateway, for the module (skips where it is not installed)."""
    yield from _gateway(ENTERPRISE_GATEWAY, roots, tmp_path_factory)


@pytest.fixture(scope="module")
def options(
    transport: str,
    roots: dict[str, Path],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """KernelBackend keyword arguments for ``transport``, every file in temporary directories
    (``roots[transport]`` holds the checkpoints)."""
    if transport != "local":
        return gateway_of(transport, request).backend_options()
    ipython = str(tmp_path_factory.mktemp("ipython"))
    return {"root": roots["local"], "env": {"IPYTHONDIR": ipython}}


@pytest.fixture(scope="module")
def start_backend(jupyter_path: Path, on_loop: OnLoop[Any]) -> Iterator[StartBackend]:
    """``start_backend(**keywords)``: a started ``KernelBackend(**keywords)``, shut down
    after the module."""
    backends: list[KernelBackend] = []

    def start(**keywords: Any) -> KernelBackend:
        backend = KernelBackend(**keywords)
        on_loop(backend.start())
        backends.append(backend)
        return backend

    yield start
    for backend in reversed(backends):
        on_loop(backend.shutdown())


@pytest.fixture(scope="module")
def backend(start_backend: StartBackend, options: dict[str, Any]) -> KernelBackend:
    """The module's backend, started with ``options``; tests that share it leave its kernel
    usable and use distinct call ids."""
    return start_backend(**options)


@pytest.fixture(scope="module")
def prices() -> PriceList:
    """The module's host tool ``lookup_price`` and the calls the host made of it."""
    return PriceList()


@pytest.fixture(scope="module")
def priced_backend(
    start_backend: StartBackend, options: dict[str, Any], prices: PriceList
) -> KernelBackend:
    """The module's backend whose programs may call ``await tools.lookup_price(...)``
    (``prices``), as ``helpers.PRICED_ORDERS`` does."""
    return start_backend(tools=[prices.lookup_price], **options)


@pytest.fixture(scope="module")
def fragile(start_backend: StartBackend, options: dict[str, Any]) -> KernelBackend:
    """A second backend of the module, for the tests that kill or restart its kernel."""
    return start_backend(interrupt_grace=1, **options)


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


@pytest.fixture
def read_only_dir(tmpfs: Callable[[str], Path]) -> Path:
    """A read-only tmpfs of 1 MB."""
    return tmpfs("ro,size=1m")


@pytest.fixture(scope="module")
def count_tokens() -> Callable[[str], int]:
    """The cl100k_base token count of a text, as the sentences' budgets count; skips the test
    where the tokenizer is not installed."""
    from ptc_retry.tokens import load_tokenizer

    tokenizer = load_tokenizer()
    if not tokenizer.available:
        pytest.skip(tokenizer.problem)
    return tokenizer.count
