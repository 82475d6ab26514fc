"""``ptc-retry mcp`` on stdio, as a host starts it, driven by the official MCP client on a
real kernel: what the host lists, what a failure, its one-line fix, a timeout, a
cancellation, a kernel's death and a long program look like from the host's side.

One server (one kernel) serves the whole module, started with ``--timeout`` and
``--progress-every`` short enough for the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.core.notice import parse_notice, prompt_section

from .helpers import DYING, ORDERS, ORDERS_FIX, OnLoop, history
from .mcp_servers import CALL_TIMEOUT, StdioServer, cancel_once_printed, stdio_server

if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK (the mcp extra) is not installed here", allow_module_level=True)

pytestmark = pytest.mark.kernel

#: The server's time limit for a program, and how often it reports progress.
TIME_LIMIT = 6
PROGRESS_EVERY = 1
#: A program of more than 1 KB (ORDERS and the comment lines a model writes) that fails on
#: one wrong key; FIXED_OUTPUT is what its corrected version prints last.
PROGRAM = (
    "# Regional order totals, for the weekly report.\n"
    + "".join(
        f"# step {n}: check the figures of region group {n} against the ledger.\n" for n in range(6)
    )
    + ORDERS
)
FIXED_OUTPUT = "mean order: 113.70"


@pytest.fixture(scope="module")
def server(
    on_loop: OnLoop[Any], jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StdioServer]:
    options = ("--timeout", str(TIME_LIMIT), "--progress-every", str(PROGRESS_EVERY))
    with stdio_server(on_loop, tmp_path_factory.mktemp("mcp-stdio-root"), *options) as started:
        yield started


def test_the_host_lists_run_code_with_annotations_that_tell_the_truth(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    tools = on_loop(server.client.list_tools()).tools
    assert [tool.name for tool in tools] == ["run_code"]
    (tool,) = tools
    assert tool.input_schema["required"] == ["code"]
    hints = tool.annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.idempotent_hint, hints.open_world_hint) == (
        False,
        False,
        True,
    )
    assert hints.destructive_hint is True


def test_the_instructions_are_the_prompt_section_of_the_session(server: StdioServer) -> None:
    assert server.client.instructions == prompt_section("code", server.session_dir)


def test_a_failing_1kb_program_ends_with_the_notice_and_is_an_error(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    assert len(PROGRAM.encode()) > 1024
    text, error = server.call(on_loop, PROGRAM)
    assert error is True
    assert "KeyError: 'regoin'" in text
    assert parse_notice("\n".join(text.splitlines()[-2:])) is not None  # the notice ends it


def test_the_one_line_replay_the_notice_teaches_fixes_it(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    text, error = server.call(on_loop, PROGRAM)
    reference = parse_notice("\n".join(text.splitlines()[-2:]))
    old, new = (json.dumps(part) for part in ORDERS_FIX)
    replay = f"await ptc_retry.replay({json.dumps(reference)}, {old}, {new})"
    assert len(replay) < 100
    fixed, error = server.call(on_loop, replay)
    assert error is False
    assert FIXED_OUTPUT in fixed
    assert "Traceback" not in fixed


def test_names_persist_between_calls(on_loop: OnLoop[Any], server: StdioServer) -> None:
    assert server.call(on_loop, "kept = [1, 2, 3]") == ("[no output]", False)
    assert server.call(on_loop, "sum(kept)") == ("6", False)


def test_arguments_without_a_program_are_an_error_and_run_nothing(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    before = len(history(server.session_dir))
    for arguments in ({}, {"source": "print(1)"}, {"code": 42}):
        text, error = server.call(on_loop, arguments)
        assert error is True
        assert '"code"' in text and "Nothing ran" in text
    assert len(history(server.session_dir)) == before


def test_a_timeout_stops_the_program_and_keeps_its_output(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    text, error = server.call(
        on_loop, "import time\nprint('started the slow part')\ntime.sleep(120)"
    )
    assert error is True
    assert "started the slow part" in text
    assert f"time limit of {TIME_LIMIT} s" in text
    assert server.call(on_loop, "'still here'") == ("'still here'", False)


def test_a_long_program_sends_progress_with_what_it_printed(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    code = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.8)"
    text, error = server.call(on_loop, code, progress_callback=progress)
    assert (text, error) == ("tick 0\ntick 1\ntick 2\ntick 3", False)
    assert len(messages) >= 2
    assert "tick 0" in messages[0]
    assert messages[-1].count("tick") > messages[0].count("tick")


def test_a_cancelled_call_interrupts_the_program_which_can_be_resumed(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    code = (
        "steps = []\n"
        "steps.append('first')\n"
        "print('waiting', flush=True)\n"
        "import time\n"
        "while not globals().get('go_on'):\n"
        "    time.sleep(0.1)\n"
        "steps.append('second')\n"
        "steps\n"
    )

    on_loop(cancel_once_printed(server.client, code, "waiting"))
    # The kernel is free at once: the interrupt stopped the program.
    assert on_loop(
        asyncio.wait_for(server.client.call_tool("run_code", {"code": "go_on = True"}), 10)
    )
    line = history(server.session_dir)[-2]
    assert line["status"] == "interrupted"
    text, error = server.call(on_loop, f'await ptc_retry.resume("#{line["n"]}")')
    assert error is False
    assert "['first', 'second']" in text  # the completed statements did not run again


def test_a_kernel_death_is_an_error_and_the_next_call_runs_on_a_new_kernel(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    server.call(on_loop, "before_death = 1")
    text, error = server.call(on_loop, DYING)
    assert error is True
    assert "partial 12" in text and "kernel died" in text
    text, error = server.call(on_loop, "'before_death' in globals(), 6 * 7")
    assert (text, error) == ("(False, 42)", False)


def test_a_call_cancelled_while_its_dead_kernel_restarts_leaves_the_next_call_a_kernel(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    dying = "import os, time\ntime.sleep(0.2)\nos._exit(1)"

    async def cancel_during_restart(seconds: float) -> None:
        # The kernel dies at once and the backend restarts it for seconds: a cancellation
        # then must not interrupt (and so kill) the kernel that is starting.
        call = asyncio.ensure_future(server.client.call_tool("run_code", {"code": dying}))
        await asyncio.sleep(seconds)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(call, CALL_TIMEOUT)

    for seconds in (0.8, 1.5):
        on_loop(cancel_during_restart(seconds))
        text, error = server.call(on_loop, "'alive'")
        assert (text.splitlines()[-1], error) == ("'alive'", False), text


def test_a_program_printing_megabytes_gets_a_bounded_result(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    text, error = server.call(on_loop, "print('x' * 4_000_000)\nprint('the end')")
    assert error is False
    assert len(text) < 25_000
    assert "characters cut" in text and text.endswith("the end")


def test_stdout_carries_only_the_protocol(on_loop: OnLoop[Any], server: StdioServer) -> None:
    code = (
        "import os, subprocess\n"
        "os.write(1, b'raw fd write\\n')\n"
        "subprocess.run(['echo', 'child process output'])\n"
        "'done'"
    )
    assert server.call(on_loop, code) == ("'done'", False)
    assert server.call(on_loop, "'the protocol still works'")[1] is False
    logged = server.errlog.read_text()
    assert "child process output" in logged or "raw fd write" in logged


def test_calls_sent_at_once_each_get_their_own_result_and_progress(
    on_loop: OnLoop[Any], server: StdioServer
) -> None:
    first = (
        "import time\nfor i in range(3):\n    print('first at', i, flush=True)\n    time.sleep(0.8)"
    )
    second = "import time\nprint('second', flush=True)\ntime.sleep(1.5)\n1 / 0"
    progress: list[str] = []

    async def note(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def at_once() -> list[Any]:
        return list(
            await asyncio.gather(
                server.client.call_tool("run_code", {"code": first}),
                server.client.call_tool("run_code", {"code": second}, progress_callback=note),
            )
        )

    results = on_loop(asyncio.wait_for(at_once(), CALL_TIMEOUT))
    assert [result.is_error for result in results] == [False, True]
    assert results[0].content[0].text == "first at 0\nfirst at 1\nfirst at 2"
    assert "ZeroDivisionError" in results[1].content[0].text
    # The second call waited for the first: its progress is about its own program only.
    assert progress and all("first at" not in message for message in progress), progress
    assert any("second" in message for message in progress)
