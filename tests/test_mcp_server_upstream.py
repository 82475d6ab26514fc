"""``ptc-retry mcp`` with upstream MCP servers (``--upstream``, ``--config``), driven by the
official MCP client on real kernels: the instructions list the upstream tools and name the
server that did not start, a program calls them, a replay does not call them again, and over
HTTP each session has upstream processes of its own.

One stdio server serves the module, with ``mcp-server-time`` (``--upstream``), the npm
filesystem server (``--config``, when ``npx`` is here) and a server that cannot start.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.core.notice import parse_notice

from . import test_mcp_upstream
from .helpers import OnLoop, stop_process
from .mcp_servers import HeldClient, StdioServer, start_http_server, stdio_server
from .test_mcp_upstream import BROKEN, NPX, TIME_SERVER, child_processes, needs_npx, needs_sdk

pytestmark = [pytest.mark.kernel, needs_sdk]

UPSTREAM_TIME = f"time={TIME_SERVER} --local-timezone UTC"
files = test_mcp_upstream.files  # the one directory the filesystem server may touch
#: A program that calls the time server and shows what it answered.
ASK = "now = await tools.time_get_current_time(timezone='UTC')\nnow['timezone']"


@pytest.fixture(scope="module")
def server(
    on_loop: OnLoop[Any], jupyter_path: Path, files: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StdioServer]:
    servers: dict[str, Any] = {"broken": {"command": BROKEN[0], "args": BROKEN[1:]}}
    if NPX is not None:
        servers["filesystem"] = {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", str(files)],
        }
    config = tmp_path_factory.mktemp("mcp-config") / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    root = tmp_path_factory.mktemp("mcp-upstream-root")
    options = ("--upstream", UPSTREAM_TIME, "--config", str(config))
    with stdio_server(on_loop, root, *options) as started:
        yield started


def test_the_instructions_list_the_upstream_tools_and_name_the_server_that_did_not_start(
    server: StdioServer,
) -> None:
    instructions = server.client.instructions

    assert (
        "await tools.time_get_current_time(timezone: str, **kwargs)  # [read-only" in instructions
    )
    if NPX is not None:
        assert "await tools.filesystem_write_file(path: str, content: str" in instructions
    assert instructions.endswith(
        "\nThese upstream MCP servers did not start, so programs cannot call their tools in "
        "this session: broken.\n"
    )
    assert "boom: no API token" not in instructions  # its stderr is the server log's
    assert "boom: no API token" in server.errlog.read_text()


def test_a_program_calls_an_upstream_tool(on_loop: OnLoop[Any], server: StdioServer) -> None:
    assert server.call(on_loop, ASK) == ("'UTC'", False)


@needs_npx
def test_the_one_line_replay_of_a_program_that_wrote_a_file_leaves_one_write(
    on_loop: OnLoop[Any], server: StdioServer, files: Path
) -> None:
    report = files / "report.txt"
    program = f"""\
rows = [{{"city": "Paris", "orders": 120}}, {{"city": "Lyon", "orders": 75}}]
text = "".join(f"{{row['city']}}: {{row['orders']}} orders\\n" for row in rows)
print(await tools.filesystem_write_file(path={str(report)!r}, content=text))
print("orders in all:", sum(row["ordres"] for row in rows))
"""
    failed, error = server.call(on_loop, program)
    assert error is True and "KeyError: 'ordres'" in failed, failed
    written = report.stat()
    reference = parse_notice("\n".join(failed.splitlines()[-2:]))
    assert reference is not None, failed

    line = f"await ptc_retry.replay({reference!r}, 'row[\"ordres\"]', 'row[\"orders\"]')"
    fixed, error = server.call(on_loop, line)

    assert error is False and "orders in all: 195" in fixed, fixed
    # One write on disk: the file the failed program wrote, not written since.
    after = report.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_ctime_ns) == (
        written.st_ino,
        written.st_mtime_ns,
        written.st_ctime_ns,
    )
    assert [path.name for path in files.iterdir()] == ["report.txt"]
    assert report.read_text() == "Paris: 120 orders\nLyon: 75 orders\n"


def test_over_http_each_session_has_its_own_upstream_process_closed_with_it(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    process, url = start_http_server(tmp_path / "root", log, "--upstream", UPSTREAM_TIME)
    try:
        first, second = HeldClient(on_loop, url), HeldClient(on_loop, url)
        try:
            both = child_processes("mcp-server-time", process.pid)
            assert len(both) == 2, both
            assert "tools.time_get_current_time(" in first.client.instructions
        finally:
            first.close()  # the host ends its session (DELETE)
        deadline = time.monotonic() + 20
        while len(left := child_processes("mcp-server-time", process.pid)) != 1:
            assert time.monotonic() < deadline, f"upstreams left: {left}; {log.read_text()}"
            time.sleep(0.1)
        try:
            assert set(left) < set(both)
            result = on_loop(
                asyncio.wait_for(second.client.call_tool("run_code", {"code": ASK}), 60)
            )
            assert (result.content[0].text, result.is_error) == ("'UTC'", False)
        finally:
            second.close()
    finally:
        stop_process(process)
