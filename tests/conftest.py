"""Shared fixtures: real kernels, started through jupyter_client, isolated from the user's files.

The ``ptc-retry`` kernelspec is installed into a temporary prefix that
``JUPYTER_PATH`` points at; checkpoints go to a per-test ``PTC_RETRY_ROOT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from kernel_ext import kernelspec

KERNEL_TIMEOUT = 60

T = TypeVar("T")
#: The ``run`` fixture: runs a coroutine to completion on the module's event loop.
Run = Callable[[Coroutine[Any, Any, T]], T]

# A program that prints, then kills its kernel before it can finish.
DYING = """\
values = [3, 4, 5]
total = sum(values)
print('partial', total)
import os, sys, time
sys.stdout.flush()
time.sleep(0.5)
os._exit(1)
print('finished', total * 2)
"""


def raw(code: str) -> str:
    """A run_code tool call's arguments as a model writes them."""
    return json.dumps({"code": code}, ensure_ascii=False)


def history(directory: Path | None) -> list[dict[str, Any]]:
    """The lines of ``directory/history.jsonl`` (none when it does not exist yet)."""
    assert directory is not None
    path = directory / "history.jsonl"
    text = path.read_text("utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]


def line_of(directory: Path | None, call_id: str) -> dict[str, Any]:
    """The one history line of ``call_id``."""
    (line,) = [h for h in history(directory) if h["id"] == call_id]
    return line


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


@dataclass
class Execution:
    """Everything a kernel sent back for one execute_request."""

    reply: dict[str, Any]
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.reply["content"]["status"]

    @property
    def ptc(self) -> dict[str, Any] | None:
        return self.reply["metadata"].get("ptc_retry")

    @property
    def error(self) -> dict[str, Any] | None:
        errors = [out for out in self.outputs if out["msg_type"] == "error"]
        return errors[-1]["content"] if errors else None

    @property
    def stdout(self) -> str:
        return "".join(
            o["content"]["text"]
            for o in self.outputs
            if o["msg_type"] == "stream" and o["content"]["name"] == "stdout"
        )

    @property
    def stderr(self) -> str:
        return "".join(
            o["content"]["text"]
            for o in self.outputs
            if o["msg_type"] == "stream" and o["content"]["name"] == "stderr"
        )

    @property
    def result(self) -> str | None:
        for out in self.outputs:
            if out["msg_type"] == "execute_result":
                return out["content"]["data"]["text/plain"]
        return None


class Kernel:
    """A real kernel and a blocking client, with an ``execute`` that can send metadata."""

    def __init__(self, name: str, env: dict[str, str], extra_arguments: list[str]) -> None:
        self.manager = KernelManager(kernel_name=name)
        self.manager.start_kernel(env=env, extra_arguments=extra_arguments)
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)

    def execute(
        self,
        code: str,
        metadata: dict[str, Any] | None = None,
        timeout: float = KERNEL_TIMEOUT,
    ) -> Execution:
        """Run ``code``; ``metadata`` goes to ``metadata["ptc_retry"]`` of the request.

        Requests say ``stop_on_error: False``, as an agent backend's do: each program
        stands alone, and ipykernel 6 may abort a request that arrives just after an
        error reply otherwise (its abort window races).
        """
        return self.collect(self.send(code, metadata), timeout)

    def send(self, code: str, metadata: dict[str, Any] | None = None, **header: Any) -> str:
        """Send an execute_request without waiting for it; its msg_id. ``header`` adds
        fields to the message's header (``subshell_id``)."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        request_md = {"ptc_retry": metadata} if metadata is not None else {}
        msg = self.client.session.msg("execute_request", content, metadata=request_md)
        msg["header"].update(header)
        self.client.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    def collect(self, msg_id: str, timeout: float = KERNEL_TIMEOUT) -> Execution:
        deadline = time.monotonic() + timeout
        outputs: list[dict[str, Any]] = []
        idle = False
        while not idle:
            try:
                msg = self.client.get_iopub_msg(timeout=self._left(deadline))
            except queue.Empty:
                raise TimeoutError(f"no idle status for {msg_id} within {timeout}s") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            elif msg["msg_type"] != "execute_input":
                outputs.append(msg)
        while True:
            reply = self.client.get_shell_msg(timeout=self._left(deadline))
            if reply["parent_header"].get("msg_id") == msg_id:
                return Execution(reply, outputs)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.1, deadline - time.monotonic())

    def restart(self) -> None:
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)

    def shutdown(self) -> None:
        self.client.stop_channels()
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=True)


@pytest.fixture
def checkpoint_root(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


def spawn(
    name: str = "ptc-retry",
    *,
    root: Path,
    session: str | None = "test",
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Kernel:
    """Start a real kernel whose checkpoints go to ``root/session``.

    ``session=None`` leaves the session to the kernel (derived from its connection file).
    """
    kernel_env = dict(os.environ)
    kernel_env["PTC_RETRY_ROOT"] = str(root)
    kernel_env.pop("PTC_RETRY_SESSION", None)
    if session is not None:
        kernel_env["PTC_RETRY_SESSION"] = session
    kernel_env.update(env or {})
    return Kernel(name, kernel_env, list(args))


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
