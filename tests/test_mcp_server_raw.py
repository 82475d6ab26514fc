"""``ptc-retry mcp`` on stdio driven by a host that writes the protocol's lines itself, on a
real kernel: requests the official client cannot send (a lone surrogate escape), and a
host that closes stdin mid-program or closes the server's stdout.

One server (one kernel) serves the module; each disconnect test starts its own.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import history, process_runs, wait_until
from .mcp_servers import RawStdioServer

if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK (the mcp extra) is not installed here", allow_module_level=True)

pytestmark = pytest.mark.kernel

#: Seconds a server whose host closed stdin may take to stop its kernel and exit.
EXIT_BOUND = 30


@pytest.fixture(scope="module")
def server(
    jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RawStdioServer]:
    started = RawStdioServer(tmp_path_factory.mktemp("mcp-raw-root"))
    yield started
    started.close()


def saved_programs(directory: Path) -> list[str]:
    return [json.loads(path.read_text())["code"] for path in directory.glob("by-id/*.json")]


def text_of(answer: dict[str, object]) -> str:
    result = answer["result"]
    assert isinstance(result, dict), answer
    (content,) = result["content"]
    return str(content["text"])


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        (r'{"code": "x = \"\ud800\""}', "params.arguments.code"),
        (r'{"code": "1", "\udc00": 1}', "the key params.arguments.\\udc00"),
    ],
)
def test_a_request_holding_a_lone_surrogate_is_answered_with_an_error_naming_it(
    server: RawStdioServer, arguments: str, where: str
) -> None:
    server.call(1, '{"code": "warmed = 1"}')
    before = len(history(server.session_dir))
    answer = server.call(2, arguments)
    assert answer["id"] == 2
    error = answer["error"]
    assert error["code"] == -32602  # invalid params
    assert "lone surrogate" in error["message"] and where in error["message"], error
    assert "nothing ran" in error["message"]
    assert len(history(server.session_dir)) == before
    assert text_of(server.call(3, '{"code": "6 * 7"}')) == "42"  # the server goes on


def test_a_surrogate_pair_escape_is_a_character_and_runs(server: RawStdioServer) -> None:
    answer = server.call(4, r'{"code": "\"\ud83d\ude00\""}')
    assert answer["result"]["isError"] is False
    assert text_of(answer) == "'\U0001f600'"


@pytest.fixture
def own_server(jupyter_path: Path, tmp_path: Path) -> Iterator[tuple[RawStdioServer, int]]:
    """A server of the test's own, which the test ends, and its kernel's pid."""
    host = RawStdioServer(tmp_path / "root")
    try:
        yield host, int(text_of(host.call(1, '{"code": "import os; os.getpid()"}')))
    finally:
        host.close()


def test_a_host_that_closes_stdin_mid_program_ends_the_server_and_its_kernel(
    own_server: tuple[RawStdioServer, int],
) -> None:
    host, kernel_pid = own_server
    working = host.session_dir.parent / "working"
    code = f"import pathlib, time\npathlib.Path({str(working)!r}).touch()\ntime.sleep(120)"
    host.send_call(2, json.dumps({"code": code}))
    wait_until(working.exists, 30, "the program's start")  # saved before it runs, running now
    assert host.process.stdin is not None
    host.process.stdin.close()  # the host goes away mid-program
    started = time.monotonic()
    host.process.wait(EXIT_BOUND)
    assert time.monotonic() - started < EXIT_BOUND
    assert not process_runs(kernel_pid)
    assert code in saved_programs(host.session_dir)


def test_a_host_that_closes_the_servers_stdout_ends_it_cleanly_with_its_kernel(
    own_server: tuple[RawStdioServer, int],
) -> None:
    host, kernel_pid = own_server
    host.send_call(2, json.dumps({"code": "import time\ntime.sleep(1)\n42"}))
    assert host.process.stdout is not None
    host.process.stdout.close()  # stdin stays open: the result has nowhere to go
    host.process.wait(EXIT_BOUND)
    assert host.process.returncode == 0, host.errlog.read_text()
    assert "Traceback" not in host.errlog.read_text()
    assert not process_runs(kernel_pid)
