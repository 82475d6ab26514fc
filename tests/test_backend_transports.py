"""KernelBackend's behaviour that does not depend on how the kernel is reached: each test runs
on a local kernel, on a kernel behind a real Jupyter Kernel Gateway and on one behind a real
Jupyter Enterprise Gateway (skipped where it is not installed: ``gateway_server``).

Tests that leave the kernel usable share one backend per transport (conftest's ``backend``)
and use distinct call ids; tests that kill or restart a kernel share another (``fragile``).
"""

from __future__ import annotations

import ast
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient

from ptc_retry.backend import KernelBackend
from ptc_retry.core.notice import parse_notice

from .gateway_server import ENTERPRISE_GATEWAY, KERNEL_GATEWAY, TOKEN, Gateway, gateway_of
from .helpers import DYING, ORDERS, ORDERS_FIX, OnLoop, cancel_when, line_of, raw

#: Each test runs on a local kernel and behind each gateway (conftest's ``transport``).
TRANSPORTS = ["local", KERNEL_GATEWAY, ENTERPRISE_GATEWAY]
#: How long noticing a death and restarting may take: a gateway notices on its own clock.
DEATH_SECONDS = {"local": 15, KERNEL_GATEWAY: 20, ENTERPRISE_GATEWAY: 20}
FIXED = "regions: ['east', 'north', 'south']\nmean order: 113.70"
SUMMARY = "{'north': 162.75, 'south': 95.75, 'east': 310.0}"


# -- the agent loop -------------------------------------------------------------------------


def test_scripted_agent_fails_reads_the_notice_replays_and_succeeds(
    backend: KernelBackend, on_loop: OnLoop[Any], transport: str, roots: dict[str, Path]
) -> None:
    first = on_loop(backend.handle_tool_call("run_code", raw(ORDERS), "call_a1"))
    failed = backend.last_result

    assert failed is not None and failed.text == first
    assert (failed.status, failed.ename) == ("error", "KeyError")
    assert "KeyError: 'regoin'" in first
    notice = "\n".join(first.splitlines()[-2:])  # its sentence, then the call to send
    assert notice == failed.notice
    assert notice.startswith("[ptc-retry]") and "\x1b[" not in first
    target = parse_notice(notice)
    assert target == failed.reference == failed.metadata["reference"]
    assert target is not None and target.startswith("#")
    assert failed.metadata["call_id"] == "call_a1"  # the request's metadata passed through
    assert backend.session_dir == roots[transport] / backend.session_id  # as the kernel said
    assert failed.checkpoint == str(backend.session_dir / "by-id" / "call_a1.json")
    assert Path(failed.checkpoint).read_bytes() == raw(ORDERS).encode()
    assert str(backend.session_dir) in backend.system_prompt()

    line = f"await ptc_retry.replay({target!r}, {ORDERS_FIX[0]!r}, {ORDERS_FIX[1]!r})"
    second = on_loop(backend.handle_tool_call("run_code", raw(line), "call_a2"))

    assert second == f"{FIXED}\n{SUMMARY}"
    assert backend.last_result is not None and backend.last_result.metadata["status"] == "ok"
    assert line_of(backend.session_dir, "call_a1")["status"] == "error"
    assert line_of(backend.session_dir, "call_a2")["status"] == "ok"
    assert line_of(backend.session_dir, "call_a2")["replay_of"] == "call_a1"
    by_id = f"await ptc_retry.replay('call_a1', {ORDERS_FIX[0]!r}, {ORDERS_FIX[1]!r})"
    assert on_loop(backend.handle_tool_call("run_code", raw(by_id), "call_a3")) == second


def test_env_reaches_the_kernel_beside_what_the_gateway_passes_on(
    on_loop: OnLoop[Any], options: dict[str, Any], transport: str, roots: dict[str, Path]
) -> None:
    """``env=``: the ``KERNEL_*`` names a gateway passes on (Enterprise Gateway's
    ``KERNEL_USERNAME`` among them), while the kernel keeps what its operator passes on from the
    gateway's environment (here ``PTC_RETRY_ROOT``)."""
    env = {**options.get("env", {}), "KERNEL_TEAM": "blue"}
    kb = KernelBackend(**{**options, "env": env})
    on_loop(kb.start())
    try:
        code = "import os\nsorted((k, v) for k, v in os.environ.items() if k.startswith('KERNEL_'))"
        result = on_loop(kb.run_code(code, call_id="call_e1"))
        session_dir = kb.session_dir
    finally:
        on_loop(kb.shutdown())

    given = [item for item in ast.literal_eval(result.value or "[]") if item[0] in env]
    assert given == sorted(item for item in env.items() if item[0].startswith("KERNEL_"))
    assert session_dir is not None and session_dir.parent == roots[transport]


# -- time limits ------------------------------------------------------------------------------


def test_timeout_keeps_printed_lines_and_the_kernels_state(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    on_loop(backend.run_code("kept = 'still here'", call_id="call_s1"))
    code = "import time\nprint('line 1')\nprint('line 2', flush=True)\ntime.sleep(60)"

    result = on_loop(backend.run_code(code, call_id="call_s2", timeout=1))

    assert result.status == "timeout" and not result.restarted
    assert result.text.startswith("line 1\nline 2\n")
    assert "KeyboardInterrupt" in result.text
    assert "time limit" in result.text.splitlines()[-1]  # the kernel's or the backend's words
    assert result.duration < 10
    after = on_loop(backend.run_code("print(kept)", call_id="call_s3"))
    assert (after.status, after.text) == ("ok", "still here")
    assert on_loop(backend.run_code("kept", call_id="call_s4")).value == "'still here'"


def test_cancelling_a_call_interrupts_the_program(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    sleeping = "import time\nprint('waiting', flush=True)\ntime.sleep(60)"
    waiting = lambda: "waiting" in (backend.running_output() or "")  # noqa: E731
    on_loop(cancel_when(backend.run_code(sleeping), waiting))
    started = time.monotonic()
    after = on_loop(backend.run_code("'free'", call_id="call_c1", timeout=30))
    assert after.value == "'free'" and time.monotonic() - started < 10


def test_program_deaf_to_interrupts_gets_the_kernel_restarted(
    fragile: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    on_loop(fragile.run_code("lost = 1", call_id="call_r0"))
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('ignoring interrupts', flush=True)\n"
        "time.sleep(60)"
    )
    result = on_loop(fragile.run_code(code, call_id="call_r1", timeout=1))

    assert result.status == "timeout" and result.restarted
    assert result.text.startswith("ignoring interrupts\n")
    assert "the kernel was restarted" in result.text
    assert result.text.endswith('Saved as call_r1. To go on: await ptc_retry.resume("call_r1")')
    assert parse_notice(result.text) == "call_r1"
    after = on_loop(fragile.run_code("'lost' in globals()", call_id="call_r2"))
    assert after.value == "False"


# -- kernel death -----------------------------------------------------------------------------


def test_a_death_is_reported_logged_and_restarted_and_the_program_replays(
    fragile: KernelBackend, on_loop: OnLoop[Any], transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ptc_retry.backend")

    result = on_loop(fragile.run_code(DYING, call_id="call_x1", arguments=raw(DYING), timeout=120))

    assert result.status == "died" and result.restarted
    assert result.duration < DEATH_SECONDS[transport]
    assert result.text.startswith("partial 12\n")
    assert "all variables" in result.text
    if transport == "local":
        assert "(exit code 1)" in result.text
    assert parse_notice(result.text) == "call_x1"  # the kernel that numbered it is gone
    assert result.checkpoint == str(fragile.session_dir / "by-id" / "call_x1.json")
    assert Path(result.checkpoint).read_bytes() == raw(DYING).encode()
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("ptc_retry.backend")]
    assert any("died while running call call_x1" in message for message in logged)
    assert any(message.startswith("restarted the 'ptc-retry' kernel") for message in logged)

    fix = "await ptc_retry.replay('call_x1', 'os._exit(1)', 'pass')"
    replayed = on_loop(fragile.run_code(fix, call_id="call_x2", timeout=60))

    assert (replayed.status, replayed.text) == ("ok", "partial 12\nfinished 24")
    assert replayed.metadata["checkpoint"].startswith(str(fragile.session_dir))  # same session
    assert line_of(fragile.session_dir, "call_x1")["status"] == "unfinished"


def test_death_between_calls_is_noticed_by_the_next_call(
    fragile: KernelBackend, on_loop: OnLoop[Any], transport: str, request: pytest.FixtureRequest
) -> None:
    """A killed kernel, or one the gateway culled: the next call gets a new one, in the same
    session directory."""
    on_loop(fragile.run_code("gone = 1", call_id="call_d0"))
    old_id = getattr(fragile.connection, "kernel_id", None)
    if transport == "local":
        os.kill(fragile.kernel_manager.provisioner.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10  # a loaded machine takes a while to end a process
        while on_loop(fragile.kernel_manager.is_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        on_loop(_delete_kernel(gateway_of(transport, request), old_id))

    result = on_loop(fragile.run_code("print('gone' in globals())", call_id="call_d1"))

    assert result.status == "ok" and result.restarted
    assert result.text.startswith("[ptc-retry] The kernel had died since the last call")
    assert result.text.endswith("\nFalse")
    assert result.metadata["checkpoint"] == str(fragile.session_dir / "by-id" / "call_d1.json")
    if transport != "local":
        assert fragile.connection.kernel_id != old_id


async def _delete_kernel(gateway: Gateway, kernel_id: str | None) -> None:
    http = AsyncHTTPClient(force_instance=True)
    headers = {"Authorization": f"token {TOKEN}"}
    await http.fetch(f"{gateway.url}/api/kernels/{kernel_id}", method="DELETE", headers=headers)
    http.close()
