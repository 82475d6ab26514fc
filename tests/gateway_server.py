"""Real gateways for the tests, each a subprocess on a free loopback port with a token, that
sees the ptc-retry kernelspec (``jupyter_path``) and gives its kernels ``PTC_RETRY_ROOT``:

- ``Gateway``: Jupyter Kernel Gateway, ``python -m kernel_gateway`` of the test venv;
- ``EnterpriseGateway``: Jupyter Enterprise Gateway, ``python -m enterprise_gateway`` of a venv
  of its own (it needs jupyter_client 6 and jupyter_server 1): ``.venv-enterprise-gateway/``
  at the top of the checkout, or the venv ``$PTC_RETRY_ENTERPRISE_GATEWAY`` names. It starts local
  kernels (its local process proxy) with the kernelspec's command, so the kernels run the
  test venv's Python and ptc-retry; its own venv needs no ptc-retry.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

TOKEN = "test-token-" + uuid.uuid4().hex[:8]
#: The test ids of the two gateways.
KERNEL_GATEWAY, ENTERPRISE_GATEWAY = "kernel-gateway", "enterprise-gateway"
GATEWAYS = [KERNEL_GATEWAY, ENTERPRISE_GATEWAY]
#: Where the Enterprise Gateway venv is looked for, unless $PTC_RETRY_ENTERPRISE_GATEWAY says.
ENTERPRISE_GATEWAY_VENV = Path(__file__).resolve().parent.parent / ".venv-enterprise-gateway"
#: Enterprise Gateway refuses to start kernels for root (its unauthorized_users), the user the
#: tests run as in CI: its kernels are started for this user, as a deployment names its users.
KERNEL_USERNAME = "ptc-agent"
#: What a gateway's kernels take from its environment when a client sends an ``env``.
INHERITED = "PTC_RETRY_ROOT,IPYTHONDIR,PATH"
#: Seconds a gateway may take to answer after it starts: on a loaded 2-core machine, under
#: coverage, a Kernel Gateway took over 30 s (and printed nothing meanwhile).
START_SECONDS = 60


def require_kernel_gateway() -> None:
    """Skip the calling test (or module) unless jupyter-kernel-gateway >= 3 is installed."""
    kernel_gateway = pytest.importorskip(
        "kernel_gateway", reason="jupyter-kernel-gateway is a test extra"
    )
    if int(kernel_gateway.__version__.split(".")[0]) < 3:
        # 2.x serves kernels through the classic notebook server, whose websocket handler
        # never completes the handshake under tornado >= 6.5.
        pytest.skip("these tests need jupyter-kernel-gateway >= 3")


def require_enterprise_gateway() -> Path:
    """The Python of the Enterprise Gateway venv; skips the calling test without one."""
    venv = Path(os.environ.get("PTC_RETRY_ENTERPRISE_GATEWAY") or ENTERPRISE_GATEWAY_VENV)
    python = venv / "bin" / "python"
    if not python.exists() or not list(venv.glob("lib/python3*/site-packages/enterprise_gateway")):
        pytest.skip(
            f"Jupyter Enterprise Gateway is not installed in {venv}: make that venv with "
            f"`python3.11 -m venv {venv} && {venv}/bin/pip install "
            "jupyter-enterprise-gateway==3.3.0` (as .ci/run does), or name another in "
            "PTC_RETRY_ENTERPRISE_GATEWAY"
        )
    return python


class Gateway:
    """A ``jupyter kernelgateway`` on a free loopback port, stopped by ``stop()``.

    ``args`` go on its command line, ``env`` into its environment. ``backend_options()`` are
    the KernelBackend keywords that reach it.
    """

    kind = KERNEL_GATEWAY
    #: The ``env`` its kernels are started with (none: they inherit the gateway's).
    kernel_env: dict[str, str] = {}

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
        )
        environ.update(env or {})  # which may set any of these its own way
        environ.pop("PTC_RETRY_SESSION", None)
        self.log = workdir / f"{self.kind}.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                self.command(*args), env=environ, cwd=workdir, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_until_it_answers()

    def command(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "kernel_gateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={self.port}",
            "--KernelGatewayApp.port_retries=0",
            f"--KernelGatewayApp.auth_token={TOKEN}",
            *args,
        ]

    def backend_options(self, **env: str) -> dict[str, Any]:
        """KernelBackend keywords for a kernel behind this gateway, with ``env`` sent too."""
        options: dict[str, Any] = {"gateway_url": self.url, "token": TOKEN, "startup_timeout": 30}
        if self.kernel_env or env:
            options["env"] = {**self.kernel_env, **env}
        return options

    def _wait_until_it_answers(self, timeout: float = START_SECONDS) -> None:
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
        pytest.fail(
            f"the {self.kind} did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class EnterpriseGateway(Gateway):
    """A ``jupyter enterprisegateway`` on a free loopback port that starts ``ptc-retry``
    kernels by default, as local processes; the kernels it starts give the environment
    variables in ``INHERITED`` on to the kernel (a client's ``env`` replaces the rest)."""

    kind = ENTERPRISE_GATEWAY
    kernel_env = {"KERNEL_USERNAME": KERNEL_USERNAME}

    def __init__(
        self, root: Path, workdir: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.python = require_enterprise_gateway()
        super().__init__(root, workdir, *args, env={"EG_INHERITED_ENVS": INHERITED, **(env or {})})

    def command(self, *args: str) -> list[str]:
        return [
            str(self.python),
            "-m",
            "enterprise_gateway",
            "--EnterpriseGatewayApp.ip=127.0.0.1",
            f"--EnterpriseGatewayApp.port={self.port}",
            "--EnterpriseGatewayApp.port_retries=0",
            f"--EnterpriseGatewayApp.auth_token={TOKEN}",
            "--EnterpriseGatewayApp.default_kernel_name=ptc-retry",
            *args,
        ]


def start_gateway(
    kind: str, root: Path, workdir: Path, *args: str, env: dict[str, str] | None = None
) -> Gateway:
    """A gateway of ``kind`` (``GATEWAYS``); skips the calling test when it is not installed.

    Its kernels started with a client's ``env`` keep ``PTC_RETRY_ROOT``, ``IPYTHONDIR`` and
    ``PATH`` from its environment (Kernel Gateway's ``KG_ENV_PROCESS_WHITELIST``, Enterprise
    Gateway's ``EG_INHERITED_ENVS``), as an operator sets up.
    """
    if kind == ENTERPRISE_GATEWAY:
        return EnterpriseGateway(root, workdir, *args, env=env)
    require_kernel_gateway()
    return Gateway(root, workdir, *args, env={"KG_ENV_PROCESS_WHITELIST": INHERITED, **(env or {})})


def gateway_of(transport: str, request: pytest.FixtureRequest) -> Gateway:
    """The gateway behind ``transport`` (conftest's ``kernel_gateway`` or
    ``enterprise_gateway``, started on first use)."""
    name = "kernel_gateway" if transport == KERNEL_GATEWAY else "enterprise_gateway"
    found: Gateway = request.getfixturevalue(name)
    return found
