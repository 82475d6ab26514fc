"""``ptc-retry mcp`` and the repeated-failure guard: a program the paused guard refuses is
an error for the host. Its own server: over MCP nothing says a person gave a new
instruction, so the pause outlasts the test (docs/mcp.md, Limits)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import ORDERS, OnLoop
from .mcp_servers import StdioServer, stdio_server

if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK (the mcp extra) is not installed here", allow_module_level=True)

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def server(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StdioServer]:
    with stdio_server(on_loop, tmp_path_factory.mktemp("mcp-guard-root")) as started:
        yield started


def test_a_program_the_paused_guard_refuses_is_an_error(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    server.call(on_loop, '%config PtcRetry.guard_mode = "pause"')
    for _ in range(3):  # three identical failures in a row pause the guard
        assert server.call(on_loop, ORDERS)[1] is True
    text, error = server.call(on_loop, "print('must not run')")
    assert error is True
    assert "RetryGuardPaused" in text
    assert "must not run" not in text
