"""``ptc-retry mcp --gateway-url URL --token TOKEN``: the host's kernel runs behind a real
Jupyter Kernel Gateway, and the host sees what it sees with a local one."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.core.notice import parse_notice

from .gateway_server import KERNEL_GATEWAY, TOKEN, start_gateway
from .helpers import ORDERS, ORDERS_FIX, OnLoop
from .mcp_servers import CALL_TIMEOUT, HeldClient, ptc_retry_command, server_env

if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK (the mcp extra) is not installed here", allow_module_level=True)

pytestmark = pytest.mark.kernel


def test_a_failure_and_its_replay_through_a_kernel_gateway(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path: Path
) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    root = tmp_path / "gateway-checkpoints"
    gateway = start_gateway(KERNEL_GATEWAY, root, tmp_path)
    command, *args = ptc_retry_command()
    argv = [*args, "mcp", "--gateway-url", gateway.url, "--token", TOKEN]
    parameters = StdioServerParameters(command=command, args=argv, env=server_env(tmp_path))
    try:
        with open(tmp_path / "server-stderr.log", "w") as err:
            held = HeldClient(on_loop, stdio_client(parameters, errlog=err))
            try:
                client = held.client
                assert f"Programs are saved in {root}" in client.instructions

                def call(code: str) -> tuple[str, bool]:
                    result = on_loop(
                        asyncio.wait_for(client.call_tool("run_code", {"code": code}), CALL_TIMEOUT)
                    )
                    return result.content[0].text, result.is_error

                text, error = call(ORDERS)
                assert error is True
                reference = parse_notice("\n".join(text.splitlines()[-2:]))
                assert reference is not None
                old, new = (json.dumps(part) for part in ORDERS_FIX)
                fixed, error = call(
                    f"await ptc_retry.replay({json.dumps(reference)}, {old}, {new})"
                )
                assert error is False
                assert "mean order: 113.70" in fixed
            finally:
                held.close()
    finally:
        gateway.stop()
