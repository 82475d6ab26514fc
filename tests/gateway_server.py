"""A real Jupyter Kernel Gateway for the tests: a ``python -m kernel_gateway`` subprocess on a
free loopback port, with a token, that sees the ptc-retry kernelspec (``jupyter_path``) and
gives its kernels ``PTC_RETRY_ROOT``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

TOKEN = "test-token-" + uuid.uuid4().hex[:8]


def require_kernel_gateway() -> None:
    """Skip the calling test (or module) unless jupyter-kernel-gateway >= 3 is installed."""
    kernel_gateway = pytest.importorskip(
        "kernel_gateway", reason="jupyter-kernel-gateway is a test extra"
    )
    if int(kernel_gateway.__version__.split(".")[0]) < 3:
        # 2.x serves kernels through the classic notebook server, whose websocket handler
        # never completes the handshake under tornado >= 6.5.
        pytest.skip("these tests need jupyter-kernel-gateway >= 3")


class Gateway:
    """A ``jupyter kernelgateway`` on a free loopback port, stopped by ``stop()``."""

    def __init__(
        self, root: Path, workdir: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        environ = dict(os.environ)  # JUPYTER_PATH from the jupyter_path fixture
        environ.update(
            PTC_RETRY_ROOT=str(root),
            JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
            IPYTHONDIR=str(workdir / "ipython"),
            **(env or {}),
        )
        environ.pop("PTC_RETRY_SESSION", None)
        self.log = workdir / "gateway.log"
        command = [
            sys.executable,
            "-m",
            "kernel_gateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={self.port}",
            "--KernelGatewayApp.port_retries=0",
            f"--KernelGatewayApp.auth_token={TOKEN}",
            *args,
        ]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                command, env=environ, cwd=workdir, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_until_it_answers()

    def _wait_until_it_answers(self, timeout: float = 30) -> None:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            f"{self.url}/api", headers={"Authorization": f"token {TOKEN}"}
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(request, timeout=1):
                    return
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"the gateway did not answer:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
