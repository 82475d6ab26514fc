"""KernelBackend through a real Jupyter Kernel Gateway and a real Jupyter Enterprise Gateway,
on 127.0.0.1 with a token.

Each gateway is a subprocess (``gateway_server``); the backend only talks to it over REST and
the websocket. The tests read checkpoint files only to check what the kernel wrote: the
backend never does. What the gateways and the local transport share is tested over all three
in ``test_backend_transports.py``; here, what a gateway says: each error it answers, tested
against both; and the reading of the remote kernel's answer, without a gateway.
"""

from __future__ import annotations

import ast
import asyncio
import getpass
import io
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse
from tornado.websocket import websocket_connect

from ptc_retry.backend import (
    BackendError,
    GatewayError,
    GatewayKernel,
    KernelBackend,
    KernelSetup,
    KernelStartError,
    MessageTooLarge,
    RunResult,
)
from ptc_retry.backend.gateway_errors import MAX_SAID_CHARS, gateway_said
from ptc_retry.backend.remote import REMOTE_API, remote_session_dir
from ptc_retry.core.notice import parse_notice
from ptc_retry.core.version import __version__

from .gateway_server import (
    ENTERPRISE_GATEWAY,
    GATEWAYS,
    KERNEL_GATEWAY,
    TOKEN,
    Gateway,
    require_kernel_gateway,
    start_gateway,
)
from .helpers import ORDERS, OnLoop, raw, until_printed

PROGRAM = ORDERS  # over notice_min_bytes, one wrong literal: "regoin" for "region"
#: A kernelspec whose kernel exits at once, as one whose image lacks a package does.
BROKEN = {
    "argv": [
        sys.executable,
        "-c",
        "import sys; print('ModuleNotFoundError: numpy', file=sys.stderr); sys.exit(3)",
        "{connection_file}",
    ],
    "display_name": "Broken",
    "language": "python",
}


@pytest.fixture(scope="module", params=GATEWAYS)
def gateway(
    jupyter_path: Path, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """Each kind of gateway in turn."""
    kind = str(request.param)
    root = tmp_path_factory.mktemp(f"{kind}-checkpoints")
    gateway = start_gateway(kind, root, tmp_path_factory.mktemp(kind))
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module", params=GATEWAYS)
def limited(
    jupyter_path: Path, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """Each kind of gateway in turn, running one kernel at most, knowing the ``broken``
    kernelspec, and giving up on a kernel that exits after one restart (checking every
    second, not every 3)."""
    kind = str(request.param)
    workdir = tmp_path_factory.mktemp(f"{kind}-limited")
    spec = workdir / "share" / "kernels" / "broken"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(BROKEN))
    app = "KernelGatewayApp" if kind == KERNEL_GATEWAY else "EnterpriseGatewayApp"
    gateway = start_gateway(
        kind,
        workdir / "checkpoints",
        workdir,
        f"--{app}.max_kernels=1",
        "--KernelRestarter.restart_limit=1",
        "--KernelRestarter.time_to_dead=1",
        env={"JUPYTER_PATH": f"{jupyter_path}{os.pathsep}{workdir / 'share'}"},
    )
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def options(gateway: Gateway) -> dict[str, Any]:
    """The module's backend (conftest's ``backend``) reaches its kernel through ``gateway``."""
    return gateway.backend_options()


# -- the agent loop, through the gateway ----------------------------------------------------


def test_guard_refuses_after_three_identical_failures(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    backend.new_turn()
    on_loop(backend.run_code('%config PtcRetry.guard_mode = "pause"', call_id="call_q0"))
    failures = [
        on_loop(backend.run_code(PROGRAM, call_id=f"call_q{n}", arguments=raw(PROGRAM)))
        for n in (1, 2, 3)
    ]

    refused = on_loop(backend.run_code("print('must not run')", call_id="call_q4"))

    assert [f.status for f in failures] == ["error"] * 3
    assert failures[2].metadata["guard"]["paused"] is True
    assert refused.status == "refused" and refused.ename == "RetryGuardPaused"
    assert not [out for out in refused.outputs if out["output_type"] == "stream"]  # never ran
    backend.new_turn()  # a person's new instruction lifts the pause
    on_loop(backend.run_code('%config PtcRetry.guard_mode = "observe"', call_id="call_q5"))
    assert on_loop(backend.run_code("print('runs again')", call_id="call_q6")).text == "runs again"


# -- tool results and the gateway's websocket limit -----------------------------------------


def text_of(mb: float) -> str:
    """A host tool's result: ``mb`` million bytes of text (as JSON, two more)."""
    return "x" * int(mb * 1_000_000)


def fails_at_length(mb: float) -> None:
    """A host tool whose error message is ``mb`` million bytes long."""
    raise ValueError("x" * int(mb * 1_000_000))


@pytest.fixture(scope="module")
def with_tools(backend: KernelBackend) -> KernelBackend:
    """The module's backend, with host tools whose result or error is as large as asked."""
    backend.register_tool(text_of)
    backend.register_tool(fails_at_length)
    return backend


def refused_as_too_large(
    text: str, result_bytes: int, url: str | None, what: str = "text_of: its result"
) -> int:
    """The size of the reply that ``text``, a ToolError's, says was too large to send: it
    gives the result's own size, the reply's (which depends on the headers: not given here)
    and the limit."""
    said = re.fullmatch(
        rf"tools\.{what} \({result_bytes:,} bytes as JSON\) is too large to send "
        r"to the kernel: the reply to the kernel's tool request would be ([\d,]+) bytes on "
        r"the websocket, over the 10,485,760 \(10 MiB\) that the gateway at "
        rf"{re.escape(str(url))} takes in one message, so it was not sent; return less at a "
        r"time \(a part, or a summary\)",
        text,
    )
    assert said is not None, text
    return int(said[1].replace(",", ""))


def test_a_result_over_the_websocket_limit_is_a_tool_error_with_the_size_and_the_limit(
    with_tools: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "calls = tools.text_of(mb=10.5), tools.text_of(mb=10), tools.fails_at_length(mb=11)\n"
        "for call in calls:\n"
        "    try:\n"
        "        print(len(await call))\n"
        "    except ptc_retry.ToolError as error:\n"
        "        print(error)\n"
    )

    result = on_loop(asyncio.wait_for(with_tools.run_code(program, timeout=60), 90))

    assert result.status == "ok", result.text
    refused, arrived, failed = result.text.splitlines()
    reply = refused_as_too_large(refused, 10_500_002, with_tools.gateway_url)
    assert 10_500_002 < reply < 10_502_000  # the result and the message's headers
    assert arrived == "10000000"  # 10 MB, just under 10 MiB, goes through
    what = "fails_at_length: its error message"
    refused_as_too_large(failed, 11_000_014, with_tools.gateway_url, what)  # "ValueError: x..."
    after = on_loop(asyncio.wait_for(with_tools.run_code("1 + 1", timeout=20), 30))
    assert after.value == "2"


def test_a_batch_over_the_limit_loses_only_its_largest_result(
    with_tools: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "import asyncio\n"
        "got = await asyncio.gather(tools.text_of(mb=6), tools.text_of(mb=5), "
        "return_exceptions=True)\n"
        "[len(g) if isinstance(g, str) else str(g) for g in got]"
    )

    result = on_loop(asyncio.wait_for(with_tools.run_code(program, timeout=60), 90))

    assert result.status == "ok", result.text
    assert result.value is not None
    refused, arrived = ast.literal_eval(result.value)
    reply = refused_as_too_large(refused, 6_000_002, with_tools.gateway_url)
    assert 11_000_004 < reply < 11_002_000  # both results
    assert arrived == 5_000_000


def test_a_program_over_the_websocket_limit_is_not_sent(
    with_tools: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = f"text = {'x' * 11_000_000!r}\nlen(text)"

    with pytest.raises(MessageTooLarge, match=r"the program's execute_request would be [\d,]+ "):
        on_loop(asyncio.wait_for(with_tools.run_code(program, timeout=20), 30))

    after = on_loop(asyncio.wait_for(with_tools.run_code("1 + 1", timeout=20), 30))
    assert after.value == "2"


# -- several clients, other clients ---------------------------------------------------------


def test_two_backends_on_one_gateway_at_once(gateway: Gateway, on_loop: OnLoop[Any]) -> None:
    async def two() -> tuple[list[RunResult], float, list[Any]]:
        backends = [KernelBackend(**gateway.backend_options()) for _ in range(2)]
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

    results, elapsed, dirs = on_loop(two())

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
    jupyter_path: Path, on_loop: OnLoop[Any], tmp_path: Path
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
        name, error = on_loop(
            plain_client_run(forced.url, "python3", PROGRAM, {"KERNEL_USER": "a"})
        )
    finally:
        forced.stop()

    assert name == "ptc-retry"
    assert error["ename"] == "KeyError"
    notice = error["traceback"][-1]
    (saved,) = root.glob("*/by-id/c1.json")
    assert notice.startswith("[ptc-retry]") and parse_notice(notice) == "#1"
    assert json.loads(saved.read_text()) == {"code": PROGRAM}


# -- what a gateway says, as the backend says it -------------------------------------------


def start_error(on_loop: OnLoop[Any], **options: Any) -> str:
    """The message of the error a backend with ``options`` raises from start()."""
    kb = KernelBackend(**options)
    started = time.monotonic()
    with pytest.raises(BackendError) as caught:
        on_loop(kb.start())
    assert time.monotonic() - started < 10  # within seconds
    return f"{type(caught.value).__name__}: {caught.value}"


def test_a_wrong_or_missing_token_is_a_clear_error_within_seconds(
    gateway: Gateway, on_loop: OnLoop[Any]
) -> None:
    options = {**gateway.backend_options(), "token": "not-the-token"}
    hint = (
        "(HTTP 401: Unauthorized); pass its auth token (KG_AUTH_TOKEN of Kernel Gateway, "
        "EG_AUTH_TOKEN of Enterprise Gateway) as token=..."
    )

    wrong = start_error(on_loop, **options)
    missing = start_error(on_loop, **{**options, "token": None})

    assert wrong == f"GatewayError: the gateway at {gateway.url} refused the token {hint}"
    assert missing == f"GatewayError: the gateway at {gateway.url} asks for a token {hint}"


def test_a_url_without_the_gateways_base_path_is_a_clear_error(
    gateway: Gateway, on_loop: OnLoop[Any]
) -> None:
    url = f"{gateway.url}/kernels"
    said = start_error(on_loop, **{**gateway.backend_options(), "gateway_url": url})

    assert said == (
        f"GatewayError: the gateway at {url} has no /api/kernels (HTTP 404: Not Found); is "
        "the URL right, with the gateway's base path?"
    )


def test_an_unknown_kernel_name_names_the_gateways_kernels(
    gateway: Gateway, on_loop: OnLoop[Any]
) -> None:
    said = start_error(on_loop, **gateway.backend_options(), kernel_name="no-such-kernel")

    start = (
        f"KernelStartError: the gateway at {gateway.url} has no kernel named 'no-such-kernel' "
        "(HTTP 500: jupyter_client.kernelspec.NoSuchKernel: No such kernel named "
        "no-such-kernel); its kernels are: "
    )
    end = (
        "; pass one as kernel_name=..., or install the ptc-retry kernelspec there "
        "(ptc-retry install-kernel)"
    )
    assert said.startswith(start) and said.endswith(end)
    assert "ptc-retry" in said[len(start) : -len(end)].split(", ")


def test_a_user_the_gateway_refuses_is_told_to_name_another(
    jupyter_path: Path, on_loop: OnLoop[Any], tmp_path: Path
) -> None:
    """Enterprise Gateway refuses kernels for root (its default unauthorized_users) and, when
    a client names no KERNEL_USERNAME, starts them for the user it runs as."""
    refusing = start_gateway(
        ENTERPRISE_GATEWAY,
        tmp_path / "checkpoints",
        tmp_path,
        env={"EG_UNAUTHORIZED_USERS": f"root,{getpass.getuser()},mallory"},
    )
    options = refusing.backend_options()
    try:
        unnamed = start_error(on_loop, **{**options, "env": {}})
        refused = start_error(on_loop, **{**options, "env": {"KERNEL_USERNAME": "mallory"}})
    finally:
        refusing.stop()

    display = "Python 3 (ptc-retry)"
    assert unnamed.startswith(
        f"KernelStartError: the gateway at {refusing.url} refused to start a kernel for the "
        "user it runs as (HTTP 403: User '"
    )
    assert unnamed.endswith(
        f"' is not authorized to start kernel '{display}'. Ensure KERNEL_USERNAME is set to an "
        "appropriate value and retry the request.); name the user the kernel is for: "
        "env={'KERNEL_USERNAME': '<user>'} (Enterprise Gateway refuses the users in its "
        "unauthorized_users, root unless its operator changes that)"
    )
    assert refused == (
        f"KernelStartError: the gateway at {refusing.url} refused to start a kernel for "
        f"KERNEL_USERNAME 'mallory' (HTTP 403: User 'mallory' is not authorized to start kernel "
        f"'{display}'. Ensure KERNEL_USERNAME is set to an appropriate value and retry the "
        "request.); pass a user it allows, or have its operator change its unauthorized_users "
        "or authorized_users"
    )


def test_a_gateway_at_its_kernel_limit_says_so(limited: Gateway, on_loop: OnLoop[Any]) -> None:
    first = KernelBackend(**limited.backend_options())
    on_loop(first.start())
    try:
        said = start_error(on_loop, **limited.backend_options())
    finally:
        on_loop(first.shutdown())

    assert said == (
        f"KernelStartError: the gateway at {limited.url} runs as many kernels as it allows "
        "(HTTP 403: Resource Limit); shut down the backends you no longer use, or have its "
        "operator raise max_kernels (--KernelGatewayApp.max_kernels, "
        "--EnterpriseGatewayApp.max_kernels or max_kernels_per_user)"
    )


def test_a_kernel_that_exits_at_start_is_reported_once_the_gateway_gives_up(
    limited: Gateway, on_loop: OnLoop[Any]
) -> None:
    kb = KernelBackend(**limited.backend_options(), kernel_name="broken")
    started = time.monotonic()
    with pytest.raises(KernelStartError) as caught:
        on_loop(kb.start())

    assert str(caught.value) == (
        f"the 'broken' kernel behind the gateway at {limited.url} exited before it answered, "
        "and the gateway gave up restarting it; run the command of its kernelspec on the "
        "gateway's host to see why (its output is in the gateway's log)"
    )
    assert time.monotonic() - started < 20  # the gateway's restart and its check, not 30 s
    assert "ModuleNotFoundError: numpy" in limited.log.read_text()


# -- a gateway that is not there ------------------------------------------------------------


def test_gateway_that_goes_away_is_a_clear_error_within_seconds(
    jupyter_path: Path, on_loop: OnLoop[Any], tmp_path: Path
) -> None:
    require_kernel_gateway()
    doomed = Gateway(tmp_path / "checkpoints", tmp_path)
    kb = KernelBackend(gateway_url=doomed.url, token=TOKEN)

    async def stop_while_a_program_runs() -> float:
        program = "import time\nprint('waiting', flush=True)\ntime.sleep(60)"
        call = asyncio.ensure_future(kb.run_code(program))
        await until_printed(kb, "waiting")
        await asyncio.get_running_loop().run_in_executor(None, doomed.stop)
        stopped = time.monotonic()
        with pytest.raises(GatewayError, match="cannot reach the gateway"):
            await call
        return time.monotonic() - stopped

    try:
        on_loop(kb.start())
        assert on_loop(kb.run_code("6 * 7")).value == "42"

        assert on_loop(stop_while_a_program_runs()) < 5
        started = time.monotonic()
        with pytest.raises(GatewayError, match="cannot reach the gateway"):
            on_loop(kb.run_code("6 * 7"))
        with pytest.raises(GatewayError, match="cannot reach the gateway"):
            on_loop(KernelBackend(gateway_url=doomed.url, token=TOKEN).start())
        assert time.monotonic() - started < 5
    finally:
        doomed.stop()
        on_loop(asyncio.wait_for(kb.shutdown(), 10))


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


def said(code: int, body: bytes) -> str:
    """What ``gateway_said`` reads from an error answer ``code`` with ``body``."""
    response = HTTPResponse(
        HTTPRequest("http://gateway/api/kernels"), code, buffer=io.BytesIO(body)
    )
    return gateway_said(HTTPClientError(code, response=response))


def test_what_a_gateway_said_is_read_from_any_answer() -> None:
    trace = "Traceback (most recent call last):\n  ...\nOSError: [Errno 28] No space left\n"
    internal = {"reason": "Internal Server Error", "message": "Unknown server error"}

    assert said(403, b'{"reason": "Forbidden", "message": "Resource Limit"}') == "Resource Limit"
    assert said(403, b'{"reason": "User \'root\' is not authorized", "message": ""}') == (
        "User 'root' is not authorized"
    )
    assert said(500, json.dumps({**internal, "traceback": trace}).encode()) == (
        "OSError: [Errno 28] No space left"
    )
    assert said(502, b"<html><body>Bad Gateway</body></html>") == "Bad Gateway"
    long = said(400, json.dumps({"message": "x" * 2000}).encode())
    assert len(long) == MAX_SAID_CHARS and long.endswith("...")


def test_a_program_outside_ascii_goes_as_utf_8_on_the_websocket_and_is_saved_as_it_is(
    gateway: Gateway, on_loop: OnLoop[Any]
) -> None:
    text = "é" * 200_000  # 400 kB as UTF-8; 1.2 MB as \u00e9 escapes
    program = f"text = {text!r}\nlen(text)"
    # Under a limit of 1 MB: its UTF-8 fits, its escapes would not.
    options = gateway.backend_options()
    transport = GatewayKernel(
        options["gateway_url"],
        token=TOKEN,
        env=options.get("env"),
        startup_timeout=30,
        max_send_bytes=1_000_000,
    )

    async def run() -> tuple[RunResult, bytes]:
        async with KernelBackend(transport=transport) as kb:
            result = await kb.run_code(program, call_id="call_utf8", timeout=20)
            assert result.checkpoint is not None  # the gateway's kernel is on this machine
            return result, Path(result.checkpoint).read_bytes()

    result, saved = on_loop(asyncio.wait_for(run(), 60))

    assert result.value == "200000", result.text
    assert json.loads(saved) == {"code": program}
    assert len(saved) < 2 * len(text) + 100  # "é" saved as its 2 bytes, not as \u00e9
