"""KernelBackend through a real Jupyter Kernel Gateway, on 127.0.0.1 with a token.

Each gateway is a ``python -m kernel_gateway`` subprocess that sees the ptc-retry
kernelspec (``jupyter_path``) and gives its kernels ``PTC_RETRY_ROOT``; the backend
only talks to it over REST and the websocket. The tests read checkpoint files only to
check what the kernel wrote: the backend never does.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

kernel_gateway = pytest.importorskip(
    "kernel_gateway", reason="jupyter-kernel-gateway is a test extra"
)
if int(kernel_gateway.__version__.split(".")[0]) < 3:
    # 2.x serves kernels through the classic notebook server, whose websocket handler
    # never completes the handshake under tornado >= 6.5.
    pytest.skip("these tests need jupyter-kernel-gateway >= 3", allow_module_level=True)

from tornado.httpclient import AsyncHTTPClient, HTTPRequest  # noqa: E402
from tornado.websocket import websocket_connect  # noqa: E402

from ptc_retry.backend import (  # noqa: E402
    BackendError,
    GatewayError,
    KernelBackend,
    KernelStartError,
    RunResult,
)
from ptc_retry.core.notice import parse_notice  # noqa: E402

from .helpers import DYING, Run, raw  # noqa: E402

TOKEN = "test-token-" + uuid.uuid4().hex[:8]
# Over notice_min_bytes: one wrong key ("regoin") in a lookup.
PROGRAM = """\
orders = [
    {"id": 1, "region": "north", "amount": 120.5, "items": 3},
    {"id": 2, "region": "south", "amount": 80.0, "items": 1},
    {"id": 3, "region": "north", "amount": 42.25, "items": 2},
    {"id": 4, "region": "south", "amount": 15.75, "items": 1},
]


def add_order(totals, row):
    entry = totals.setdefault(row["regoin"], {"amount": 0.0, "items": 0})
    entry["amount"] += row["amount"]
    entry["items"] += row["items"]
    return totals


totals = {}
for row in orders:
    add_order(totals, row)
busiest = max(totals, key=lambda name: totals[name]["items"])
print(sorted(totals))
"""
FIX = "await ptc_retry.replay({target!r}, 'row[\"regoin\"]', 'row[\"region\"]')"


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


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway-checkpoints")


@pytest.fixture(scope="module")
def gateway(
    jupyter_path: Path, root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gateway = Gateway(root, tmp_path_factory.mktemp("gateway"))
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def backend(run: Run[Any], gateway: Gateway) -> Iterator[KernelBackend]:
    kb = KernelBackend(gateway_url=gateway.url, token=TOKEN, startup_timeout=30)
    run(kb.start())
    yield kb
    run(kb.shutdown())


@pytest.fixture(scope="module")
def fragile(run: Run[Any], gateway: Gateway) -> Iterator[KernelBackend]:
    """A backend whose kernel the tests kill and restart."""
    kb = KernelBackend(gateway_url=gateway.url, token=TOKEN, startup_timeout=30, interrupt_grace=1)
    run(kb.start())
    yield kb
    run(kb.shutdown())


# -- the agent loop, through the gateway ----------------------------------------------------


def test_fail_notice_one_line_replay_success(
    backend: KernelBackend, gateway: Gateway, run: Run[Any]
) -> None:
    failed = run(backend.run_code(PROGRAM, call_id="call_g1", arguments=raw(PROGRAM)))

    assert (failed.status, failed.ename) == ("error", "KeyError")
    assert failed.metadata["call_id"] == "call_g1"  # the request's metadata passed through
    assert failed.notice == failed.text.splitlines()[-1]
    assert parse_notice(failed.notice) == failed.reference == failed.metadata["reference"]
    assert backend.session_dir == gateway.root / backend.session_id  # as the kernel said
    assert failed.checkpoint == str(backend.session_dir / "by-id" / "call_g1.json")
    assert Path(failed.checkpoint).read_bytes() == raw(PROGRAM).encode()
    assert str(backend.session_dir) in backend.system_prompt()

    text = run(backend.handle_tool_call("run_code", raw(FIX.format(target="call_g1")), "call_g2"))

    assert text == "['north', 'south']"
    assert backend.last_result.metadata["status"] == "ok"


def test_timeout_keeps_partial_output(backend: KernelBackend, run: Run[Any]) -> None:
    run(backend.run_code("kept = 'still here'", call_id="call_t0"))
    code = "import time\nprint('line 1')\nprint('line 2', flush=True)\ntime.sleep(60)"

    result = run(backend.run_code(code, call_id="call_t1", timeout=1))

    assert result.status == "timeout" and not result.restarted
    assert result.text.startswith("line 1\nline 2\n") and "KeyboardInterrupt" in result.text
    assert result.duration < 10
    assert run(backend.run_code("kept", call_id="call_t2")).value == "'still here'"


def test_cancelled_call_interrupts_through_the_gateway(
    backend: KernelBackend, run: Run[Any]
) -> None:
    with pytest.raises(asyncio.TimeoutError):
        run(asyncio.wait_for(backend.run_code("import time\ntime.sleep(60)"), 1))
    started = time.monotonic()

    after = run(backend.run_code("'free'", call_id="call_c1", timeout=30))

    assert after.value == "'free'" and time.monotonic() - started < 10


def test_guard_refuses_after_three_identical_failures(
    backend: KernelBackend, run: Run[Any]
) -> None:
    backend.new_turn()
    run(backend.run_code('%config PtcRetry.guard_mode = "pause"', call_id="call_q0"))
    failures = [
        run(backend.run_code(PROGRAM, call_id=f"call_q{n}", arguments=raw(PROGRAM)))
        for n in (1, 2, 3)
    ]

    refused = run(backend.run_code("print('must not run')", call_id="call_q4"))

    assert [f.status for f in failures] == ["error"] * 3
    assert failures[2].metadata["guard"]["paused"] is True
    assert refused.status == "refused" and refused.ename == "RetryGuardPaused"
    assert not [out for out in refused.outputs if out["output_type"] == "stream"]  # never ran
    backend.new_turn()  # a person's new instruction lifts the pause
    run(backend.run_code('%config PtcRetry.guard_mode = "observe"', call_id="call_q5"))
    assert run(backend.run_code("print('runs again')", call_id="call_q6")).text == "runs again"


# -- deaths and restarts, through the gateway's API -----------------------------------------


def test_kernel_death_is_detected_restarted_and_the_program_replays(
    fragile: KernelBackend, run: Run[Any]
) -> None:
    result = run(fragile.run_code(DYING, call_id="call_x1", arguments=raw(DYING), timeout=120))

    assert result.status == "died" and result.restarted and result.duration < 20
    assert result.text.startswith("partial 12\n")
    assert "all variables" in result.text
    assert parse_notice(result.text) == "call_x1"
    assert result.checkpoint == str(fragile.session_dir / "by-id" / "call_x1.json")
    fix = "await ptc_retry.replay('call_x1', 'os._exit(1)', 'pass')"
    replayed = run(fragile.run_code(fix, call_id="call_x2", timeout=60))
    assert (replayed.status, replayed.text) == ("ok", "partial 12\nfinished 24")
    assert replayed.metadata["checkpoint"].startswith(str(fragile.session_dir))  # same session


def test_program_deaf_to_interrupts_gets_the_kernel_restarted(
    fragile: KernelBackend, run: Run[Any]
) -> None:
    run(fragile.run_code("lost = 1", call_id="call_r0"))
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('ignoring interrupts', flush=True)\n"
        "time.sleep(60)"
    )

    result = run(fragile.run_code(code, call_id="call_r1", timeout=1))

    assert result.status == "timeout" and result.restarted
    assert result.text.startswith("ignoring interrupts\n")
    assert "the kernel was restarted" in result.text
    assert run(fragile.run_code("'lost' in globals()", call_id="call_r2")).value == "False"


def test_kernel_deleted_behind_the_backends_back_is_replaced(
    fragile: KernelBackend, gateway: Gateway, run: Run[Any]
) -> None:
    """A culled kernel: the next call gets a new one, in the same session directory."""
    run(fragile.run_code("gone = 1", call_id="call_d0"))
    old_id = fragile.connection.kernel_id

    async def delete() -> None:
        http = AsyncHTTPClient(force_instance=True)
        headers = {"Authorization": f"token {TOKEN}"}
        await http.fetch(f"{gateway.url}/api/kernels/{old_id}", method="DELETE", headers=headers)
        http.close()

    run(delete())

    result = run(fragile.run_code("print('gone' in globals())", call_id="call_d1"))

    assert result.status == "ok" and result.restarted
    assert result.text.startswith("[ptc-retry] The kernel had died since the last call")
    assert result.text.endswith("\nFalse")
    assert fragile.connection.kernel_id != old_id
    assert result.metadata["checkpoint"] == str(fragile.session_dir / "by-id" / "call_d1.json")


# -- several clients, other clients ---------------------------------------------------------


def test_two_backends_on_one_gateway_at_once(gateway: Gateway, run: Run[Any]) -> None:
    async def two() -> tuple[list[RunResult], float, list[Any]]:
        backends = [KernelBackend(gateway_url=gateway.url, token=TOKEN) for _ in range(2)]
        await asyncio.gather(*(kb.start() for kb in backends))
        try:
            await asyncio.gather(*(kb.run_code(f"mine = {n}") for n, kb in enumerate(backends)))
            started = time.monotonic()
            results = await asyncio.gather(
                *(kb.run_code("import time\ntime.sleep(1)\nmine") for kb in backends)
            )
            return list(results), time.monotonic() - started, [b.session_dir for b in backends]
        finally:
            await asyncio.gather(*(kb.shutdown() for kb in backends))

    results, elapsed, dirs = run(two())

    assert [r.value for r in results] == ["0", "1"]
    assert elapsed < 1.9  # the two one-second programs overlapped
    assert dirs[0] != dirs[1] and not any(d.exists() for d in dirs)  # shutdown removed them


async def plain_client_run(
    url: str, kernel_name: str, code: str, env: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    """What a framework's own gateway client does: no ptc_retry metadata at all."""
    http = AsyncHTTPClient(force_instance=True)
    headers = {"Authorization": f"token {TOKEN}"}
    body = json.dumps({"name": kernel_name, "env": env})
    model = json.loads(
        (await http.fetch(f"{url}/api/kernels", method="POST", headers=headers, body=body)).body
    )
    ws_url = f"ws{url[4:]}/api/kernels/{model['id']}/channels"
    ws = await websocket_connect(HTTPRequest(ws_url, headers=headers))
    msg_id = uuid.uuid4().hex
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
    header = {"msg_id": msg_id, "msg_type": "execute_request", "session": "plain"}
    header.update(username="plain", version="5.3", date="2026-01-01T00:00:00Z")
    request = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    await ws.write_message(json.dumps({**request, "channel": "shell", "buffers": []}))
    error: dict[str, Any] = {}
    while True:
        message = json.loads(await asyncio.wait_for(ws.read_message(), 30))
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "error":
            error = message["content"]
        if message["msg_type"] == "execute_reply":
            break
    ws.close()
    await http.fetch(f"{url}/api/kernels/{model['id']}", method="DELETE", headers=headers)
    http.close()
    return model["name"], error


def test_forced_kernel_gives_a_python3_client_checkpoints_and_notices(
    jupyter_path: Path, run: Run[Any], tmp_path: Path
) -> None:
    root = tmp_path / "checkpoints"
    # As docs/gateway.md says: a client that sends its own env replaces the kernel's
    # environment, so the operator whitelists PTC_RETRY_ROOT from the gateway's.
    whitelist = {"KG_ENV_PROCESS_WHITELIST": "PTC_RETRY_ROOT"}
    forced = Gateway(
        root, tmp_path, "--KernelGatewayApp.force_kernel_name=ptc-retry", env=whitelist
    )
    try:
        name, error = run(plain_client_run(forced.url, "python3", PROGRAM, {"KERNEL_USER": "a"}))
    finally:
        forced.stop()

    assert name == "ptc-retry"
    assert error["ename"] == "KeyError"
    notice = error["traceback"][-1]
    (saved,) = root.glob("*/by-id/c1.json")
    assert notice.startswith("[ptc-retry]") and parse_notice(notice) == "#1"
    assert json.loads(saved.read_text()) == {"code": PROGRAM}


# -- a gateway that is not there, or not ours -----------------------------------------------


def test_wrong_token_is_a_clear_error_within_seconds(gateway: Gateway, run: Run[Any]) -> None:
    kb = KernelBackend(gateway_url=gateway.url, token="not-the-token")
    started = time.monotonic()
    with pytest.raises(GatewayError, match="refused the token"):
        run(kb.start())
    assert time.monotonic() - started < 5


def test_unknown_kernel_name_names_the_gateways_kernels(gateway: Gateway, run: Run[Any]) -> None:
    kb = KernelBackend(gateway_url=gateway.url, token=TOKEN, kernel_name="no-such-kernel")
    with pytest.raises(KernelStartError, match="no kernel named 'no-such-kernel'.*ptc-retry"):
        run(kb.start())


def test_gateway_that_goes_away_is_a_clear_error_within_seconds(
    jupyter_path: Path, run: Run[Any], tmp_path: Path
) -> None:
    doomed = Gateway(tmp_path / "checkpoints", tmp_path)
    kb = KernelBackend(gateway_url=doomed.url, token=TOKEN)

    async def stop_while_a_program_runs() -> float:
        call = asyncio.ensure_future(kb.run_code("import time\ntime.sleep(60)"))
        await asyncio.sleep(1)
        await asyncio.get_running_loop().run_in_executor(None, doomed.stop)
        stopped = time.monotonic()
        with pytest.raises(GatewayError, match="cannot reach the gateway"):
            await call
        return time.monotonic() - stopped

    try:
        run(kb.start())
        assert run(kb.run_code("6 * 7")).value == "42"

        assert run(stop_while_a_program_runs()) < 5
        started = time.monotonic()
        with pytest.raises(GatewayError, match="cannot reach the gateway"):
            run(kb.run_code("6 * 7"))
        with pytest.raises(GatewayError, match="cannot reach the gateway"):
            run(KernelBackend(gateway_url=doomed.url, token=TOKEN).start())
        assert time.monotonic() - started < 5
    finally:
        doomed.stop()
        run(asyncio.wait_for(kb.shutdown(), 10))


def test_gateway_options_are_checked_when_the_backend_is_made() -> None:
    with pytest.raises(ValueError, match="http:// or https:// URL"):
        KernelBackend(gateway_url="127.0.0.1:8888")
    with pytest.raises(ValueError, match="kernelspec on the gateway"):
        KernelBackend(gateway_url="http://127.0.0.1:8888", cwd="/tmp")
    kb = KernelBackend(gateway_url="http://127.0.0.1:8888/")
    assert kb.session_dir is None  # the kernel's host decides, in start()
    with pytest.raises(BackendError, match="call start"):
        kb.system_prompt()
