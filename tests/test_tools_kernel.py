"""Programs that call the agent's tools, on real kernels without a backend: the test plays
the backend's part on the stdin channel (it answers each tool request itself and counts
them), so these tests pin down the kernel side: the ``tools`` namespace, batching, the
recording, reuse by replays and resumes, ``@ptc_retry.recorded`` and the listings."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.cli import main as cli
from ptc_retry.core.protocol import (
    METADATA_KEY,
    ToolCancel,
    execute_request,
    parse_tool_request,
    tool_reply,
)

from .helpers import (
    Execution,
    Kernel,
    StartKernel,
    latest_line_of,
    latest_tool_calls,
    tool_call_lines,
    wait_until,
)
from .test_faults_kernel import SUBSHELLS, create_subshell

#: The host's tools, as a backend sends them with each program.
CATALOG = [
    {
        "name": "double",
        "description": "Twice x.",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "integer", "description": "the number"}},
            "required": ["x"],
            "additionalProperties": False,
        },
    },
    {
        "name": "count",
        "description": "Counts its calls for a name: a side effect.",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
    {
        "name": "flaky",
        "description": "Fails the first time for a key the test names, then answers.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
    },
    {
        "name": "slow",
        "description": "Answers after s seconds.",
        "parameters": {"type": "object", "properties": {"s": {"type": "number"}}},
    },
    {
        "name": "big",
        "description": "A string of n bytes.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
]


class Host:
    """The agent's side of tool calls, played by the test: the functions behind ``CATALOG``,
    and every batch the kernel asked for (one input_request each)."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.counts: Counter[str] = Counter()
        self.failing: set[str] = set()  # flaky keys that fail once more
        self.cancels: list[ToolCancel] = []
        self.typed = "\x04"  # what a person answers to input(): end of input
        self.parentless = False
        self.catalog = CATALOG  # the tools sent with each program
        self._stop = threading.Event()

    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(call["tool"], call["arguments"]) for batch in self.batches for call in batch]

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        name, arguments = call["tool"], call["arguments"]
        try:
            if name == "double":
                result: Any = arguments["x"] * 2
            elif name == "count":
                self.counts[arguments["name"]] += 1
                result = self.counts[arguments["name"]]
            elif name == "flaky":
                if arguments["key"] in self.failing:
                    self.failing.discard(arguments["key"])
                    raise ConnectionError(f"{arguments['key']} is down")
                result = f"{arguments['key']}: up"
            elif name == "slow":
                self._stop.wait(arguments["s"])
                result = "slept"
            else:
                result = "x" * arguments["n"]
        except Exception as exc:
            return {"id": call["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"id": call["id"], "ok": True, "result": result}

    def run(
        self,
        kernel: Kernel,
        code: str,
        *,
        catalog: bool = True,
        allow_stdin: bool = True,
        **fields: Any,
    ) -> Execution:
        """Run ``code`` as a backend with these tools would send it, answering its calls."""
        with self._serving(kernel):
            return kernel.collect(self._send(kernel, code, catalog, allow_stdin, fields))

    def run_interrupted(self, kernel: Kernel, code: str) -> tuple[Execution, float]:
        """Run ``code`` and interrupt the kernel once it has asked for its first batch of
        tool calls; the execution and how long the program went on after the interrupt."""
        asked = len(self.batches)
        with self._serving(kernel):
            msg_id = self._send(kernel, code, True, True, {})
            wait_until(lambda: len(self.batches) > asked, 30, "a batch of tool calls")
            kernel.manager.interrupt_kernel()
            interrupted_at = time.monotonic()
            execution = kernel.collect(msg_id, timeout=30)
            return execution, time.monotonic() - interrupted_at

    def run_dying(self, kernel: Kernel, code: str) -> None:
        """Run ``code``, which kills its kernel, answering its calls until it has."""
        with self._serving(kernel):
            self._send(kernel, code, True, True, {})
            kernel.wait_for_end()

    def run_at_once(self, kernel: Kernel, *programs: tuple[str, str | None]) -> list[Execution]:
        """Run ``(code, subshell_id)`` programs at once (None: the main shell), answering
        their calls; their executions, in the same order."""
        with self._serving(kernel):
            sent = [
                self._send(kernel, code, True, True, {}, subshell) for code, subshell in programs
            ]
            return [kernel.collect(msg_id) for msg_id in sent]

    def _send(
        self,
        kernel: Kernel,
        code: str,
        catalog: bool,
        allow_stdin: bool,
        fields: dict[str, Any],
        subshell: str | None = None,
    ) -> str:
        if catalog:
            fields["tools"] = self.catalog
        content = execute_request(code, allow_stdin=allow_stdin)
        metadata = {METADATA_KEY: fields}
        msg = kernel.client.session.msg("execute_request", content, metadata=metadata)
        if subshell is not None:
            msg["header"]["subshell_id"] = subshell
        kernel.client.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    @contextlib.contextmanager
    def _serving(self, kernel: Kernel) -> Iterator[None]:
        self._stop.clear()
        serving = threading.Thread(target=self._serve, args=(kernel,), daemon=True)
        serving.start()
        try:
            yield
        finally:
            self._stop.set()
            serving.join()

    def _serve(self, kernel: Kernel) -> None:
        while not self._stop.is_set():
            try:
                request = kernel.client.get_stdin_msg(timeout=0.05)
            except queue.Empty:
                continue
            calls = parse_tool_request(request["content"]["prompt"])
            if calls is None:  # input(): a person's answer, end of input unless one is set
                self._reply(kernel, request, self.typed)
            elif isinstance(calls, ToolCancel):  # a program stopped waiting for these calls
                self.cancels.append(calls)
                self._reply(kernel, request, tool_reply([]))
            else:
                self.batches.append(calls)
                self._reply(kernel, request, tool_reply([self.answer(call) for call in calls]))

    def _reply(self, kernel: Kernel, request: dict[str, Any], value: str) -> None:
        """Answer ``request`` as the backend does (naming it as the parent), or as
        jupyter_client's ``kc.input()`` does (no parent) when ``parentless``."""
        if self.parentless:
            kernel.client.input(value)
            return
        reply = kernel.client.session.msg("input_reply", {"value": value}, parent=request)
        kernel.client.stdin_channel.send(reply)


@pytest.fixture(scope="module")
def shared(start_shared_kernel: StartKernel) -> Kernel:
    """One ptc-retry kernel for the module, session ``tools``."""
    return start_shared_kernel("tools")


@pytest.fixture
def host() -> Host:
    return Host()


_turns = iter(range(1, 10_000))

# -- calls and their errors ----------------------------------------------------------------------


def test_a_call_returns_the_host_result(shared: Kernel, host: Host) -> None:
    executed = host.run(shared, "a = await tools.double(x=21)\nb = await tools.double(4)\na + b")
    assert executed.status == "ok", executed.error
    assert executed.result == "50"
    assert host.calls() == [("double", {"x": 21}), ("double", {"x": 4})]  # positional by order
    assert executed.ptc is not None and executed.ptc["tool_calls"] == {"reused": 0, "live": 2}


def test_gather_of_three_calls_is_one_batch(shared: Kernel, host: Host, module_root: Path) -> None:
    code = "import asyncio\nawait asyncio.gather(*(tools.double(x=i) for i in (1, 2, 3)))"
    executed = host.run(shared, code, call_id="gathered")
    assert executed.result == "[2, 4, 6]"
    assert len(host.batches) == 1
    assert [call["arguments"] for call in host.batches[0]] == [{"x": 1}, {"x": 2}, {"x": 3}]
    # Made by tasks gather started, each call still knows the statement that awaits them.
    assert [line["statement"] for line in tool_call_lines(module_root / "tools", "gathered")] == [
        1,
        1,
        1,
    ]


def test_a_failed_host_call_raises_tool_error_naming_the_tool(shared: Kernel, host: Host) -> None:
    host.failing.add("db")
    executed = host.run(shared, "await tools.flaky(key='db')")
    assert executed.error is not None and executed.error["ename"] == "ToolError"
    assert executed.error["evalue"] == "tools.flaky: ConnectionError: db is down"


def test_an_unknown_tool_is_an_attribute_error_listing_the_tools(
    shared: Kernel, host: Host
) -> None:
    executed = host.run(shared, "await tools.dubble(x=1)")
    assert executed.error is not None
    assert executed.error["traceback"] == [
        "AttributeError: there is no tool 'dubble'; the tools are: big, count, double, flaky, slow"
    ]
    assert host.batches == []
    assert host.run(shared, "hasattr(tools, 'dubble'), sorted(dir(tools))").result == (
        "(False, ['big', 'count', 'double', 'flaky', 'slow'])"
    )


def test_arguments_that_do_not_fit_are_refused_in_the_kernel(shared: Kernel, host: Host) -> None:
    too_many = host.run(shared, "await tools.double(1, 2)")
    not_json = host.run(shared, "await tools.double(x={1, 2})")
    assert too_many.error is not None and not_json.error is not None
    assert too_many.error["evalue"] == "tools.double(x: int): too many positional arguments"
    assert "argument 'x' is a set, not JSON" in not_json.error["evalue"]
    assert host.batches == []


def test_help_shows_the_signature_and_description(shared: Kernel, host: Host) -> None:
    executed = host.run(shared, "help(tools.double)")
    # pydoc indents blank lines up to Python 3.12 and leaves them empty from 3.13 on.
    shown = "\n".join(line.rstrip() for line in executed.stdout.splitlines())
    assert "async double(x: int)\n    Twice x.\n\n    x: the number" in shown


def test_without_a_catalog_a_call_says_no_backend_is_attached(shared: Kernel, host: Host) -> None:
    executed = host.run(shared, "await tools.double(x=1)", catalog=False)
    assert executed.error is not None and executed.error["ename"] == "ToolError"
    assert "no agent backend is attached to this kernel" in executed.error["evalue"]
    assert host.batches == []


def test_a_request_without_stdin_gets_a_clear_tool_error(shared: Kernel, host: Host) -> None:
    executed = host.run(shared, "await tools.double(x=1)", allow_stdin=False)
    assert executed.error is not None and executed.error["ename"] == "ToolError"
    assert "allow_stdin=True" in executed.error["evalue"]


def test_a_time_limit_stops_a_program_waiting_for_its_tools(shared: Kernel, host: Host) -> None:
    for code in (
        "await tools.slow(s=30)",
        "await asyncio.gather(tools.slow(s=30), tools.slow(s=30))",
    ):
        started = time.monotonic()
        executed = host.run(shared, f"import asyncio\n{code}", time_limit=1)
        assert executed.ptc is not None and executed.ptc["status"] == "interrupted", code
        assert executed.ptc["time_limit"] == 1
        assert time.monotonic() - started < 10
    after = host.run(shared, "await tools.double(x=5)")  # the late answers are not taken
    assert after.result == "10"


def test_an_interrupt_while_awaiting_a_tool_is_a_keyboard_interrupt_offering_resume(
    shared: Kernel, host: Host
) -> None:
    padding = "# " + "padding to pass notice_min_bytes " * 6 + "\n"
    code = f"{padding}print('asking')\nanswer = await tools.slow(s=30)\nprint('never')\n"

    stopped, after = host.run_interrupted(shared, code)

    assert after < 5, f"the program went on for {after:.1f} s after the interrupt"
    assert stopped.error is not None and stopped.error["ename"] == "KeyboardInterrupt"
    assert stopped.ptc is not None and stopped.ptc["status"] == "interrupted"
    assert "To go on:\nawait ptc_retry.resume(" in stopped.ptc["notice"]
    assert stopped.stdout == "asking\n"
    assert host.run(shared, "await tools.double(x=5)").result == "10"


def test_an_interrupt_while_a_gather_of_tools_waits_stops_the_program(
    shared: Kernel, host: Host
) -> None:
    code = "import asyncio\nawait asyncio.gather(tools.slow(s=30), tools.slow(s=30))\n"

    stopped, after = host.run_interrupted(shared, code)

    assert after < 5, f"the program went on for {after:.1f} s after the interrupt"
    assert stopped.status == "error"
    assert host.run(shared, "await tools.double(x=5)").result == "10"


@pytest.mark.skipif(not SUBSHELLS, reason="ipykernel subshells exist from ipykernel 7 on")
def test_a_subshell_and_the_main_shell_calling_tools_at_once_get_their_own_results(
    shared: Kernel, host: Host
) -> None:
    subshell = create_subshell(shared)
    main = "slept = await tools.slow(s=1)\nslept, await tools.double(x=3)"
    # It asks while the main shell's call waits, and ends well after it (the executions
    # are collected in that order).
    aside = "import asyncio\nawait asyncio.sleep(0.3)\ntwice = await tools.double(x=2)\n"
    aside += "await asyncio.sleep(1.5)\ntwice"

    main_run, aside_run = host.run_at_once(shared, (main, None), (aside, subshell))

    assert (main_run.result, aside_run.result) == ("('slept', 6)", "4")


def test_a_reply_without_a_parent_answers_the_oldest_request(shared: Kernel, host: Host) -> None:
    host.typed, host.parentless = "ada", True  # as jupyter_client's kc.input() answers

    executed = host.run(
        shared, "name = input('your name? ')\ndouble = await tools.double(x=2)\nname, double"
    )

    assert executed.result == "('ada', 4)", executed.error


def test_a_user_variable_named_tools_is_left_alone(start_kernel: Any, host: Host) -> None:
    kernel = start_kernel()
    host.run(kernel, "tools = ['mine']")
    second = host.run(kernel, "print(tools); await ptc_retry.tools.double(x=3)")
    third = host.run(kernel, "await ptc_retry.tools.double(x=4)")
    assert second.stdout == "['mine']\n"
    assert second.result == "6" and third.result == "8"
    said = "`tools` is a name of this kernel's own, so the agent's tools are at `ptc_retry.tools`"
    assert said in second.stderr and third.stderr == ""


# -- the recording -------------------------------------------------------------------------------


def test_the_recording_has_a_line_per_call(shared: Kernel, host: Host, module_root: Path) -> None:
    host.failing.add("line")
    code = (
        "a = await tools.double(x=2)\n"
        "try:\n    await tools.flaky(key='line')\nexcept ptc_retry.ToolError:\n    pass"
    )
    executed = host.run(shared, code, call_id="lines")
    assert executed.status == "ok", executed.error
    ok, failed = tool_call_lines(module_root / "tools", "lines")
    assert ok.keys() == {
        "k", "tool", "arguments", "ok", "result", "duration", "reused", "statement", "time",
        "schema",
    }  # fmt: skip
    assert (ok["k"], ok["tool"], ok["arguments"], ok["ok"], ok["result"]) == (
        1, "double", {"x": 2}, True, 4
    )  # fmt: skip
    assert ok["reused"] is False and ok["statement"] == 0 and ok["duration"] >= 0
    assert (failed["k"], failed["ok"], failed["statement"]) == (2, False, 1)
    assert failed["error"] == "ConnectionError: line is down"
    assert (
        oct((module_root / "tools" / "tool-calls" / "lines.jsonl").stat().st_mode & 0o777)
        == "0o600"
    )
    assert latest_line_of(module_root / "tools", "lines")["tool_calls"] == {"reused": 0, "live": 2}


def test_programs_without_tool_calls_record_nothing(shared: Kernel, module_root: Path) -> None:
    executed = shared.execute("x = 1", {"call_id": "plain"})
    assert executed.ptc is not None and "tool_calls" not in executed.ptc
    assert "tool_calls" not in latest_line_of(module_root / "tools", "plain")
    assert not (module_root / "tools" / "tool-calls" / "plain.jsonl").exists()


def test_ptc_show_lists_the_tool_calls_after_the_program(
    shared: Kernel, host: Host, module_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host.failing.add("show")
    code = "await tools.double(x=1)\nawait tools.flaky(key='show')"
    failed = host.run(shared, code, call_id="shown")
    assert failed.ptc is not None
    reference = failed.ptc["reference"]

    shown = shared.execute(f"%ptc_show {reference}").stdout

    assert shown.startswith(f"# {reference} (shown): ")
    table = shown.split(code + "\n", 1)[1]
    rows = table.strip("\n").splitlines()
    assert rows[0] == "# tool calls: 2 (tool-calls/shown.jsonl)"
    assert rows[1].split() == ["#", "k", "tool", "status", "seconds", "reused"]
    assert rows[2].split()[:4] == ["#", "1", "double", "ok"]
    assert rows[3].split()[:4] == ["#", "2", "flaky", "error"]
    capsys.readouterr()
    assert cli(["show", reference, "--root", str(module_root), "--session", "tools"]) == 0
    out, err = capsys.readouterr()
    assert out == code + "\n"  # stdout stays the program
    assert err.splitlines()[1:] == rows


# -- reuse -----------------------------------------------------------------------------------------

COUNTING = """\
first = await tools.count(name="{name}")
second = await tools.count(name="{name}")
print(first, second)
print(undefined_name)
"""


def test_a_replay_reuses_the_recorded_results(
    shared: Kernel, host: Host, module_root: Path
) -> None:
    failed = host.run(shared, COUNTING.format(name="reuse"))
    assert failed.ptc is not None and failed.stdout == "1 2\n"
    reference, requests = failed.ptc["reference"], len(host.batches)

    fixed = host.run(
        shared, f"await ptc_retry.replay({reference!r}, 'print(undefined_name)', 'pass')"
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 2\n"  # the recorded results, not 3 4
    assert len(host.batches) == requests and host.counts["reuse"] == 2
    assert (
        fixed.stderr == f"ptc-retry: 2 tool results reused from {reference}; 0 calls made live.\n"
    )
    assert fixed.ptc is not None
    assert latest_line_of(module_root / "tools", fixed.ptc["call_id"])["tool_calls"] == {
        "reused": 2,
        "live": 0,
    }
    reused = tool_call_lines(module_root / "tools", fixed.ptc["call_id"])
    assert [line["reused"] for line in reused] == [True, True]
    assert {line["reused_from"] for line in reused} == {failed.ptc["call_id"]}


def test_an_edited_call_and_every_later_one_go_live(shared: Kernel, host: Host) -> None:
    program = "".join(
        f"{v} = await tools.double(x={x})\n" for v, x in zip("abc", (1, 2, 3), strict=True)
    )
    program += "print(a, b, c, d)"
    failed = host.run(shared, program)
    assert failed.ptc is not None
    host.batches.clear()

    fixed = host.run(
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, edits=[('x=2', 'x=20'), "
        "(', d)', ')')])",
    )

    assert fixed.stdout == "2 40 6\n"
    assert host.calls() == [("double", {"x": 20}), ("double", {"x": 3})]
    assert "1 tool result reused" in fixed.stderr and "2 calls made live" in fixed.stderr


def test_fresh_makes_every_call_live(shared: Kernel, host: Host) -> None:
    failed = host.run(shared, COUNTING.format(name="fresh"))
    assert failed.ptc is not None

    fixed = host.run(
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, 'print(undefined_name)', 'pass', "
        "fresh=True)",
    )

    assert fixed.stdout == "3 4\n" and host.counts["fresh"] == 4
    assert fixed.stderr == ""  # nothing reused, nothing to say
    assert fixed.ptc is not None and fixed.ptc["tool_calls"] == {"reused": 0, "live": 2}


def test_a_failed_call_goes_live_again(shared: Kernel, host: Host) -> None:
    host.failing.add("retry")
    program = (
        "# try 1\nn = await tools.count(name='failed')\ns = await tools.flaky(key='retry')\n"
        "print(n, s)"
    )
    failed = host.run(shared, program)
    assert failed.error is not None and failed.error["ename"] == "ToolError"
    assert failed.ptc is not None
    host.batches.clear()

    fixed = host.run(
        shared, f"await ptc_retry.replay({failed.ptc['reference']!r}, 'try 1', 'try 2')"
    )

    assert fixed.stdout == "1 retry: up\n"
    assert host.calls() == [("flaky", {"key": "retry"})]


def test_a_chained_replay_uses_the_recording_of_the_program_it_replays(
    shared: Kernel, host: Host, module_root: Path
) -> None:
    program = (
        "a = await tools.count(name='chain')\nb = await tools.double(x=2)\nprint(a, b)\n"
        "print(one)\nprint(two)"
    )
    first = host.run(shared, program)
    assert first.ptc is not None
    second = host.run(
        shared,
        f"await ptc_retry.replay({first.ptc['reference']!r}, edits=[('x=2', 'x=7'), "
        "('print(one)', 'pass')])",
    )
    assert second.ptc is not None and second.stdout == "1 14\n"
    assert second.ptc["tool_calls"] == {"reused": 1, "live": 1}
    host.batches.clear()

    third = host.run(
        shared, f"await ptc_retry.replay({second.ptc['reference']!r}, 'print(two)', 'pass')"
    )

    assert third.status == "ok", third.error
    assert third.stdout == "1 14\n" and host.batches == [] and host.counts["chain"] == 1
    assert third.ptc is not None
    assert {
        line["reused_from"] for line in tool_call_lines(module_root / "tools", third.ptc["call_id"])
    } == {second.ptc["call_id"]}


def test_a_resume_reuses_the_calls_of_the_statement_it_restarts(shared: Kernel, host: Host) -> None:
    host.failing.add("k2")
    program = """\
base = await tools.double(x=1)
out = {}
for key in ("k0", "k1", "k2", "k3"):
    out[key] = await tools.flaky(key=key)
print(base, list(out.values()))
"""
    failed = host.run(shared, program, turn=next(_turns))
    assert failed.error is not None and failed.error["ename"] == "ToolError"
    assert failed.ptc is not None
    host.batches.clear()

    resumed = host.run(shared, f"await ptc_retry.resume({failed.ptc['reference']!r})")

    assert resumed.status == "ok", resumed.error
    assert resumed.stdout == "2 ['k0: up', 'k1: up', 'k2: up', 'k3: up']\n"
    # Statement 0 did not run again; in the loop, k0 and k1 came from the recording.
    assert host.calls() == [("flaky", {"key": "k2"}), ("flaky", {"key": "k3"})]
    assert "2 tool results reused" in resumed.stderr


def test_a_resume_that_skips_a_statement_does_not_take_its_results(
    shared: Kernel, host: Host
) -> None:
    # The same call in a skipped statement and in the resumed one: positions count by
    # statement, so the resumed call is not given the skipped one's result.
    program = (
        "a = await tools.count(name='same')\nb = await tools.count(name='same')\nprint(a, b, c)"
    )
    failed = host.run(shared, program, turn=next(_turns))
    assert failed.ptc is not None and host.counts["same"] == 2

    resumed = host.run(
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, ', c)', ')', resume=True)",
    )

    assert resumed.stdout == "1 2\n"  # statement 2 only: a and b are still there
    assert host.counts["same"] == 2


# -- recorded functions ----------------------------------------------------------------------------

RECORDED = """\
import asyncio
LOG = {log!r}

def note(what):
    with open(LOG, "a") as log:
        log.write(what + "\\n")

@ptc_retry.recorded
def lookup(key, *, upper=False):
    note(f"lookup {{key}}")
    return {{"key": key.upper() if upper else key}}

@ptc_retry.recorded
async def fetch(key):
    note(f"fetch {{key}}")
    await asyncio.sleep(0)
    return [key]

@ptc_retry.recorded
def pair(key):
    note(f"pair {{key}}")
    return (key, 1)  # a tuple would come back a list from JSON: not reused

a = lookup("a", upper=True)
b = await fetch("b")
c = pair("c")
print(a, b, c)
print(missing)
"""


def test_recorded_functions_are_reused_in_a_load_ext_kernel(
    start_kernel: Any, checkpoint_root: Path, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    kernel = start_kernel("python3")  # the stock kernel: no backend, no reply metadata
    kernel.execute("%load_ext ptc_retry")
    failed = kernel.execute(RECORDED.format(log=str(log)))  # program #1, c1
    assert failed.error is not None and failed.error["ename"] == "NameError"
    assert failed.stdout == "{'key': 'A'} ['b'] ('c', 1)\n"

    fixed = kernel.execute("await ptc_retry.replay('#1', 'print(missing)', 'c')")

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "{'key': 'A'} ['b'] ('c', 1)\n" and fixed.result == "('c', 1)"
    assert fixed.stderr == "ptc-retry: 2 tool results reused from #1; 1 call made live.\n"
    # Only pair ran again: its tuple was not reusable.
    assert log.read_text().splitlines() == ["lookup a", "fetch b", "pair c", "pair c"]
    assert kernel.execute("lookup('z')['key']").result == "'z'"  # not a replay: a plain call
    assert log.read_text().splitlines()[-1] == "lookup z"

    lines = latest_tool_calls(checkpoint_root / "test", "c1")
    assert [line["tool"] for line in lines] == [
        "recorded:__main__.lookup", "recorded:__main__.fetch", "recorded:__main__.pair"
    ]  # fmt: skip
    assert lines[0]["arguments"] == {"key": "a", "upper": True}
    assert lines[2]["reusable"] is False and lines[2]["result"] is None


def test_editing_a_recorded_function_calls_it_again(start_kernel: Any) -> None:
    kernel = start_kernel("python3")
    kernel.execute("%load_ext ptc_retry")
    program = "@ptc_retry.recorded\ndef f(x):\n    return x + 1\n\nprint(f(1))\nboom"
    assert kernel.execute(program).stdout == "2\n"  # program #1

    fixed = kernel.execute("await ptc_retry.replay('#1', edits=[('x + 1', 'x + 2'), ('boom', '')])")

    assert fixed.stdout == "3\n" and fixed.stderr == ""


# What a recorded function's result depends on besides its arguments: each test's program
# fails on its last line, and the fix is what the notice offers. The functions count their
# live calls on the host (a host tool called inside a live recorded call is part of it).

CONVERT = """\
RATE = 0.5

@ptc_retry.recorded
async def convert(amount):
    print("convert ran")
    return amount * RATE

first = await convert(100.0)
await tools.count(name="email")
second = await convert(10.0)
assert first > 100, f"converted {first}"
"""


def fix(executed: Execution, old: str, new: str) -> str:
    """The replay line the notice of ``executed`` offers, with ``old`` and ``new`` filled in."""
    assert executed.ptc is not None and executed.ptc["notice"] is not None, executed.error
    return f"await ptc_retry.replay({executed.ptc['reference']!r}, {old!r}, {new!r})"


def test_a_fix_to_a_global_a_recorded_function_reads_takes_effect(
    shared: Kernel, host: Host
) -> None:
    failed = host.run(shared, CONVERT)
    assert failed.error is not None and failed.error["evalue"] == "converted 50.0"

    fixed = host.run(shared, fix(failed, "RATE = 0.5", "RATE = 2.0") + "\nfirst, second")

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "(200.0, 20.0)"  # not the recorded 50.0 and 5.0
    # Both conversions ran again; the email between them was not sent again.
    assert fixed.stdout == "convert ran\nconvert ran\n" and host.counts == {"email": 1}
    assert fixed.ptc is not None and fixed.ptc["tool_calls"] == {"reused": 1, "live": 2}


def test_an_unchanged_recorded_function_with_unchanged_globals_is_reused(
    shared: Kernel, host: Host
) -> None:
    failed = host.run(shared, CONVERT)

    fixed = host.run(shared, fix(failed, "first > 100", "first < 100") + "\nfirst, second")

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "(50.0, 5.0)"
    assert fixed.stdout == "" and host.counts == {"email": 1}  # nothing ran twice


def test_a_recorded_function_made_with_exec_goes_live_when_its_body_is_edited(
    shared: Kernel, host: Host
) -> None:
    program = (
        "exec('async def scale(x):\\n"
        '    print("scale ran")\\n'
        "    return x * 2\\n', globals())\n"
        "scale = ptc_retry.recorded(scale)\n"
        "result = await scale(5)\n"
        "await tools.count(name='email')\n"
        "assert result == 15, result\n"
    )
    failed = host.run(shared, program)
    assert failed.error is not None and failed.error["evalue"] == "10"

    fixed = host.run(shared, fix(failed, "x * 2", "x * 3") + "\nresult")

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "15"
    assert fixed.stdout == "scale ran\n" and host.counts == {"email": 1}


def test_a_left_out_default_argument_keeps_the_reuse_of_the_later_calls(
    shared: Kernel, host: Host
) -> None:
    program = (
        "@ptc_retry.recorded\n"
        "async def page(number, size=10):\n"
        "    await tools.count(name=f'page {number}')\n"
        "    return list(range(number * size, number * size + 2))\n"
        "\n"
        "first = await page(1, size=10)\n"
        "rest = [await page(2), await page(3, 10)]\n"
        "print(frist, rest)\n"
    )
    failed = host.run(shared, program)

    fixed = host.run(
        shared,
        fix(
            failed,
            "page(1, size=10)\nrest = [await page(2), await page(3, 10)]\nprint(frist",
            "page(1)\nrest = [await page(2, size=10), await page(3)]\nprint(first",
        ),
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "[10, 11] [[20, 21], [30, 31]]\n"
    assert host.counts == {"page 1": 1, "page 2": 1, "page 3": 1}


def test_a_changed_closure_cell_makes_a_recorded_function_go_live(
    shared: Kernel, host: Host
) -> None:
    program = (
        "def scaler(factor):\n"
        "    @ptc_retry.recorded\n"
        "    async def scale(x):\n"
        "        print('scale ran')\n"
        "        return x * factor\n"
        "    return scale\n"
        "\n"
        "result = await scaler(2)(5)\n"
        "assert result == 15, result\n"
    )
    failed = host.run(shared, program)

    fixed = host.run(shared, fix(failed, "scaler(2)", "scaler(3)") + "\nresult")

    assert fixed.status == "ok", fixed.error
    assert fixed.result == "15" and fixed.stdout == "scale ran\n"


def test_a_global_that_cannot_be_fingerprinted_makes_a_recorded_function_go_live(
    shared: Kernel, host: Host, module_root: Path
) -> None:
    # An array keeps its numbers where no fingerprint can see them: the call cannot tell
    # whether its result would be the same, so it goes live.
    program = (
        "import array\n"
        "RATES = array.array('d', [0.5])\n"
        "\n"
        "@ptc_retry.recorded\n"
        "async def convert(amount):\n"
        "    print('convert ran')\n"
        "    return amount * RATES[0]\n"
        "\n"
        "first = await convert(100.0)\n"
        "await tools.count(name='email')\n"
        "print(frist)\n"
    )
    failed = host.run(shared, program, call_id="array-rates")

    fixed = host.run(shared, fix(failed, "print(frist)", "print(first)"))

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "convert ran\n50.0\n"  # it ran again
    assert host.counts == {"email": 1}
    convert, email = latest_tool_calls(module_root / "tools", "array-rates")
    assert convert["reusable"] is False and "reads" not in convert
    assert "reusable" not in email


def test_a_recorded_function_outside_a_program_is_a_plain_call() -> None:
    import ptc_retry

    calls: list[int] = []

    @ptc_retry.recorded
    def twice(x: int) -> int:
        calls.append(x)
        return x * 2

    assert twice(3) == 6 and twice(3) == 6 and calls == [3, 3]


def test_a_full_disk_never_fails_a_program_that_calls_tools(
    start_kernel: Any, tmpfs: Callable[[str], Path], host: Host
) -> None:
    disk = tmpfs("size=64k")
    kernel = start_kernel(root=disk / "root")
    code = "[len(await tools.big(n=40_000)) for _ in range(3)]"

    executed = host.run(kernel, code)

    assert executed.status == "ok", executed.error
    assert executed.result == "[40000, 40000, 40000]"
    assert executed.stderr.count("could not record the tool calls of c1") == 1


def test_after_a_kernel_died_a_resume_reuses_the_results_it_had_got(
    start_kernel: Any, host: Host
) -> None:
    kernel = start_kernel()
    program = "import os\nn = await tools.count(name='died')\nos._exit(1)\nprint(n)"
    host.run_dying(kernel, program)
    kernel.restart()

    resumed = host.run(kernel, "await ptc_retry.replay('#1', 'os._exit(1)', 'pass', resume=True)")

    assert resumed.status == "ok", resumed.error
    assert resumed.stdout == "1\n" and host.counts["died"] == 1
    assert "the kernel restarted" in resumed.stderr and "1 tool result reused" in resumed.stderr
