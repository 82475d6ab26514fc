"""KernelBackend through a real Jupyter Kernel Gateway, on 127.0.0.1 with a token.

Each gateway is a ``python -m kernel_gateway`` subprocess (``gateway_server.Gateway``); the
backend only talks to it over REST and the websocket. The tests read checkpoint files only
to check what the kernel wrote: the backend never does. What the gateway and the local
transport share is tested over both in ``test_backend_transports.py``; the reading of the
remote kernel's answer is tested here without a gateway.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from ptc_retry.backend import (
    BackendError,
    GatewayError,
    GatewayKernel,
    KernelBackend,
    KernelSetup,
    KernelStartError,
    RunResult,
)
from ptc_retry.backend.remote import REMOTE_API, remote_session_dir
from ptc_retry.core.notice import parse_notice
from ptc_retry.core.version import __version__

from .gateway_server import TOKEN, Gateway, require_kernel_gateway
from .helpers import ORDERS, Run, raw

PROGRAM = ORDERS  # over notice_min_bytes, one wrong literal: "regoin" for "region"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway-checkpoints")


@pytest.fixture(scope="module")
def gateway(
    jupyter_path: Path, root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    require_kernel_gateway()
    gateway = Gateway(root, tmp_path_factory.mktemp("gateway"))
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def backend(run: Run[Any], gateway: Gateway) -> Iterator[KernelBackend]:
    kb = KernelBackend(gateway_url=gateway.url, token=TOKEN, startup_timeout=30)
    run(kb.start())
    yield kb
    run(kb.shutdown())


# -- the agent loop, through the gateway ----------------------------------------------------


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
    require_kernel_gateway()
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
    require_kernel_gateway()
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


# -- the remote kernel's answer, read without a gateway -------------------------------------


def answer(text: str, status: str = "ok", **error: str) -> dict[str, Any]:
    """The content of an execute_reply whose user expression ``remote`` gave ``text``."""
    remote: dict[str, Any] = {"status": status, "data": {"text/plain": text}, **error}
    return {"status": "ok", "user_expressions": {"remote": remote}}


def test_the_remote_kernels_session_directory_is_read_from_its_answer() -> None:
    said = {"api": REMOTE_API, "version": __version__, "session_dir": "/srv/ptc/s1"}
    assert remote_session_dir(answer(repr(said)), "", "ptc-retry") == "/srv/ptc/s1"


@pytest.mark.parametrize(("version", "api"), [("0.0.1", REMOTE_API), (__version__, REMOTE_API + 1)])
def test_a_remote_kernel_of_another_version_or_protocol_is_refused_clearly(
    version: str, api: int
) -> None:
    said = {"api": api, "version": version, "session_dir": "/srv/ptc/s1"}
    expected = (
        f"the kernel behind the gateway runs ptc-retry {version} (protocol {api}) and this "
        f"backend ptc-retry {__version__} (protocol {REMOTE_API}); install the same ptc-retry "
        "version on both sides"
    )
    with pytest.raises(KernelStartError) as caught:
        remote_session_dir(answer(repr(said)), "", "ptc-retry")
    assert str(caught.value) == expected


def test_an_answer_this_backend_cannot_read_is_a_version_mismatch() -> None:
    with pytest.raises(KernelStartError, match="runs ptc-retry None .*same ptc-retry version"):
        remote_session_dir(answer("<ptc_retry.Answer object at 0x7f>"), "", "ptc-retry")


def test_a_remote_kernel_without_ptc_retry_is_told_what_to_install() -> None:
    missing = answer("", "error", ename="ModuleNotFoundError", evalue="No module named 'x'")
    with pytest.raises(
        KernelStartError, match=f"'python3' kernel .* has no ptc-retry {__version__}"
    ):
        remote_session_dir(missing, "", "python3")


def test_a_remote_kernel_that_cannot_keep_checkpoints_says_why() -> None:
    said = {"api": REMOTE_API, "version": __version__, "session_dir": "", "problem": "read-only"}
    with pytest.raises(KernelStartError, match=r"cannot keep checkpoints \(read-only\)"):
        remote_session_dir(answer(repr(said)), "", "ptc-retry")


def test_a_gateway_kernel_refuses_command_line_options() -> None:
    kernel = GatewayKernel("http://127.0.0.1:1", token=TOKEN)
    setup = KernelSetup("s1", None, ("--PtcRetry.notice_min_bytes=1",))
    with pytest.raises(ValueError, match="kernelspec there"):
        asyncio.run(kernel.start(setup))
