"""A third-party client on ``ptc-retry mcp``: the MCP Inspector's command-line mode (npm
``@modelcontextprotocol/inspector``, run through ``npx`` as its README says) starts the
server on stdio, lists its tools and calls ``run_code``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .mcp_servers import CONNECT_TIMEOUT, npx, ptc_retry_command, server_env

if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK (the mcp extra) is not installed here", allow_module_level=True)
if npx() is None:
    pytest.skip(
        "npx (Node.js) is not installed, so the MCP Inspector cannot run", allow_module_level=True
    )

pytestmark = pytest.mark.kernel

#: The Inspector release these tests were written against; npx fetches it once.
INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"


def inspect(root: Path, *method: str) -> Any:
    """Run the Inspector's CLI on ``ptc-retry mcp`` with ``method``; its JSON answer."""
    command = [str(npx()), "-y", INSPECTOR, "--cli", *ptc_retry_command(), "mcp", *method]
    done = subprocess.run(
        command, env=server_env(root), capture_output=True, text=True, timeout=CONNECT_TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_inspector_lists_run_code(jupyter_path: Path, tmp_path: Path) -> None:
    listing = inspect(tmp_path, "--method", "tools/list")
    assert [tool["name"] for tool in listing["tools"]] == ["run_code"]
    assert listing["tools"][0]["annotations"]["readOnlyHint"] is False


def test_the_inspector_calls_run_code(jupyter_path: Path, tmp_path: Path) -> None:
    call = ("--method", "tools/call", "--tool-name", "run_code")
    ran = inspect(tmp_path, *call, "--tool-arg", "code=print(6 * 7)")
    assert ran == {"content": [{"type": "text", "text": "42"}], "isError": False}
