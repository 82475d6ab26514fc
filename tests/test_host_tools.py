"""Host tools: the agent's own functions, called by programs as ``await tools.<name>(...)``.

The registry, the catalog, the prompt text and the answers to bad calls are pure. The wire
runs on real kernels, once locally and once behind a real Jupyter Kernel Gateway: a
program asks with ``kernel.raw_input(tool_request(...))`` (the protocol itself, whatever the
kernel side builds on it) or through the ``tools`` object the kernel side gives programs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend
from ptc_retry.backend.host_tools import HostTools
from ptc_retry.backend.input_requests import stdin_connected
from ptc_retry.backend.results import RUN_CODE_DESCRIPTION
from ptc_retry.core.notice import CODE_PROMPT, TOOLS_PROMPT, prompt_section

from . import test_backend_transports as transports
from .helpers import Run, history, line_of, raw

# The transports' fixtures: each test below runs on a local kernel and behind a real gateway.
roots, gateway, transport, options = (
    transports.roots,
    transports.gateway,
    transports.transport,
    transports.options,
)


class Host:
    """The agent's side: tools that count their calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.cancelled: Counter[str] = Counter()

    async def add(self, a: int, b: int = 2) -> int:
        """Add two numbers.

        The second paragraph is not part of the description.
        """
        self.calls["add"] += 1
        return a + b

    async def nap(self, seconds: float) -> str:
        """Sleep asynchronously."""
        self.calls["nap"] += 1
        await asyncio.sleep(seconds)
        return f"napped {seconds}"

    def sleep(self, seconds: float) -> str:
        """Sleep in a worker thread."""
        self.calls["sleep"] += 1
        time.sleep(seconds)
        return f"slept {seconds}"

    def fail(self, message: str) -> None:
        self.calls["fail"] += 1
        raise LookupError(message)

    def unjson(self) -> Any:
        return {1, 2}

    async def hang(self) -> None:
        self.calls["hang"] += 1
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            self.cancelled["hang"] += 1
            raise

    def tools(self) -> list[Any]:
        return [self.add, self.nap, self.sleep, self.fail, self.unjson, self.hang]


def ask(*calls: tuple[str, dict[str, Any]]) -> str:
    """A program that sends ``calls`` as one tool request and prints the JSON reply."""
    batch = [
        {"id": n, "tool": tool, "arguments": arguments} for n, (tool, arguments) in enumerate(calls)
    ]
    return (
        "from ptc_retry.core.protocol import tool_request as _request\n"
        "import time as _time\n"
        "_started = _time.monotonic()\n"
        f"_reply = get_ipython().kernel.raw_input(_request({batch!r}))\n"
        "print(_reply)\n"
        "print(round(_time.monotonic() - _started, 3))\n"
    )


def answered(text: str) -> tuple[list[dict[str, Any]], float]:
    """What ``ask``'s program printed: the results and the seconds the request took."""
    reply, seconds = text.splitlines()[-2:]
    return json.loads(reply)["results"], float(seconds)


def answer(tools: HostTools, *calls: tuple[str, Any]) -> list[dict[str, Any]]:
    batch = [
        {"id": n, "tool": tool, "arguments": arguments} for n, (tool, arguments) in enumerate(calls)
    ]
    return asyncio.run(tools.answer(batch))


# -- registering -------------------------------------------------------------------------


def test_a_tool_is_described_by_its_hints_and_its_docstring() -> None:
    tools = HostTools()
    tools.register(Host().add)
    tools.register(Host().fail, name="lookup", description="Look  a\n thing up.")

    assert tools.catalog() == [
        {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            },
        },
        {
            "name": "lookup",
            "description": "Look a thing up.",
            "parameters": {
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"],
                "additionalProperties": False,
            },
        },
    ]


def test_what_cannot_be_a_tool_is_refused_clearly() -> None:
    tools = HostTools()
    tools.register(Host().add)

    def star(*names: str) -> None: ...

    def positional(a: int, /) -> None: ...

    with pytest.raises(TypeError, match="takes a function, not int"):
        tools.register(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered; pass name="):
        tools.register(Host().add)
    for name in ("not-a-name", "class", "_private", "2nd"):
        with pytest.raises(ValueError, match="must be a Python identifier"):
            tools.register(Host().nap, name=name)
    with pytest.raises(TypeError, match=r"star takes \*names, but programs pass"):
        tools.register(star)
    with pytest.raises(TypeError, match="'a' is positional-only"):
        tools.register(positional)
    assert tools.names == ["add"]


def test_native_mode_takes_no_tools_in_programs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tools in programs need mode='code'"):
        KernelBackend(mode="native", tools=[Host().add])
    with pytest.raises(ValueError, match="tools in programs need mode='code'"):
        KernelBackend(mode="native", root=tmp_path).register_tool(Host().add)
    with pytest.raises(ValueError, match="listed in code mode only"):
        prompt_section("native", tools=HostTools().catalog() + [{"name": "x"}])


def test_the_prompt_section_lists_each_tool_on_one_line(tmp_path: Path) -> None:
    kb = KernelBackend(root=tmp_path, tools=[Host().add])
    kb.register_tool(Host().fail, name="lookup")

    def anything(q: str, **extra: Any) -> None:
        """Search   for
        anything."""

    kb.register_tool(anything)
    prompt = kb.system_prompt()

    assert prompt == CODE_PROMPT.format(session_dir=kb.session_dir) + TOOLS_PROMPT + (
        "await tools.add(a: int, b: int = ...)  # Add two numbers.\n"
        "await tools.lookup(message: str)\n"
        "await tools.anything(q: str, **kwargs)  # Search for anything.\n"
    )
    assert kb.system_prompt() == prompt  # byte-identical for the session
    description = kb.tool_schema("anthropic")["description"]
    assert description == (
        f"{RUN_CODE_DESCRIPTION} Programs can call the host's tools with await: tools.add, "
        "tools.lookup, tools.anything."
    )


def test_without_tools_the_prompt_and_the_run_code_tool_are_unchanged(tmp_path: Path) -> None:
    kb = KernelBackend(root=tmp_path)
    assert kb.system_prompt() == prompt_section("code", session_dir=kb.session_dir)
    assert kb.tool_schema("openai")["function"]["description"] == RUN_CODE_DESCRIPTION


# -- answering bad calls -------------------------------------------------------------------


def test_bad_calls_get_an_error_that_says_what_to_send() -> None:
    tools = HostTools()
    for function in Host().tools():
        tools.register(function)
    takes = "it takes (a: int, b: int = ...)"

    results = answer(
        tools,
        ("add", {"a": 1}),
        ("search", {}),
        ("add", {}),
        ("add", {"a": 1, "c": 2}),
        ("add", {"a": "1"}),
        ("add", {"a": True}),
        ("add", [1, 2]),
        ("fail", {"message": "no order 7"}),
        ("unjson", {}),
    )

    assert results == [
        {"id": 0, "ok": True, "result": 3},
        {
            "id": 1,
            "ok": False,
            "error": "there is no tool named 'search'; the tools are: add, nap, sleep, fail, "
            "unjson, hang",
        },
        {"id": 2, "ok": False, "error": f"missing the argument 'a'; {takes}"},
        {"id": 3, "ok": False, "error": f"no argument named 'c'; {takes}"},
        {
            "id": 4,
            "ok": False,
            "error": f"the argument 'a' must be an integer, not a string; {takes}",
        },
        {
            "id": 5,
            "ok": False,
            "error": f"the argument 'a' must be an integer, not a boolean; {takes}",
        },
        {
            "id": 6,
            "ok": False,
            "error": f"its arguments must be keyword arguments (a JSON object); {takes}",
        },
        {"id": 7, "ok": False, "error": "LookupError: no order 7"},
        {
            "id": 8,
            "ok": False,
            "error": "its result is not JSON (Object of type set is not JSON serializable): a "
            "host tool must return str, int, float, bool, None, or lists and dicts of them",
        },
    ]


# -- on real kernels, local and behind a gateway -----------------------------------------


@pytest.fixture(scope="module")
def host(transport: str) -> Host:
    """The agent's side of this transport's backend."""
    return Host()


@pytest.fixture(scope="module")
def backend(host: Host, options: dict[str, Any], run: Run[Any]) -> Iterator[KernelBackend]:
    kb = KernelBackend(tools=host.tools(), interrupt_grace=2, **options)
    run(kb.start())
    yield kb
    run(kb.shutdown())


def test_requests_allow_stdin_and_carry_the_catalog_only_with_tools(
    backend: KernelBackend, run: Run[Any]
) -> None:
    show = (
        "_parent = get_ipython().kernel.get_parent()\n"
        "_tools = _parent['metadata']['ptc_retry'].get('tools', [])\n"
        "(_parent['content']['allow_stdin'], [tool['name'] for tool in _tools])"
    )

    result = run(backend.run_code(show, call_id="call_w1"))

    assert result.value == "(True, ['add', 'nap', 'sleep', 'fail', 'unjson', 'hang'])"


def test_a_batch_is_answered_in_one_reply(
    backend: KernelBackend, host: Host, run: Run[Any]
) -> None:
    before = host.calls["add"]
    program = ask(("add", {"a": 40}), ("nope", {}), ("fail", {"message": "no"}))

    result = run(backend.run_code(program, call_id="call_w2"))

    assert result.status == "ok", result.text
    results, _ = answered(result.text)
    assert [r["ok"] for r in results] == [True, False, False]
    assert results[0]["result"] == 42
    assert results[1]["error"].startswith("there is no tool named 'nope'; the tools are: add")
    assert results[2]["error"] == "LookupError: no"
    assert host.calls["add"] == before + 1


def test_the_calls_of_a_batch_run_at_once(backend: KernelBackend, run: Run[Any]) -> None:
    program = ask(
        ("nap", {"seconds": 0.5}), ("sleep", {"seconds": 0.5}), ("sleep", {"seconds": 0.5})
    )

    result = run(backend.run_code(program, call_id="call_w3"))

    results, seconds = answered(result.text)
    assert [r["result"] for r in results] == ["napped 0.5", "slept 0.5", "slept 0.5"]
    assert 0.5 <= seconds < 1.2


def test_input_gets_end_of_file(backend: KernelBackend, run: Run[Any]) -> None:
    result = run(backend.run_code("input('your name? ')", call_id="call_w4", timeout=20))

    assert (result.status, result.ename) == ("error", "EOFError")


def test_a_tool_awaited_past_the_time_limit_is_cancelled_and_the_next_call_works(
    backend: KernelBackend, host: Host, run: Run[Any]
) -> None:
    started = time.monotonic()
    result = run(backend.run_code("await tools.hang()", call_id="call_w5", timeout=1))

    assert result.status == "timeout" and not result.restarted
    assert result.ename == "KeyboardInterrupt"
    assert time.monotonic() - started < 5
    assert host.cancelled["hang"] == host.calls["hang"] == 1
    after = run(backend.run_code("await tools.add(a=1)", call_id="call_w6", timeout=20))
    assert after.value == "3"


@pytest.mark.parametrize(
    "program",
    [
        "await tools.sleep(seconds=5)",
        "import asyncio\nawait asyncio.gather(tools.nap(seconds=5))",
    ],
    ids=["awaited", "in a gather"],
)
def test_a_program_stopped_while_awaiting_a_tool_says_the_time_limit(
    backend: KernelBackend, run: Run[Any], program: str
) -> None:
    started = time.monotonic()
    result = run(backend.run_code(program, call_id=f"call_l{len(program)}", timeout=1))

    assert time.monotonic() - started < 5
    assert result.ename in ("KeyboardInterrupt", "CancelledError")
    assert result.evalue == "time limit of 1 s reached"
    assert f"{result.ename}: time limit of 1 s reached" in result.text
    assert "[ptc-retry] Stopped by the time limit (1 s)" in result.text


def test_an_interrupted_replay_awaiting_tools_is_offered_going_on(
    backend: KernelBackend, run: Run[Any]
) -> None:
    run(backend.run_code("import asyncio\nnaps = 0.1", call_id="call_i1"))
    replay = (
        "await ptc_retry.replay('call_i1', 'naps = 0.1', "
        "'await asyncio.gather(tools.nap(seconds=30))')"
    )
    with pytest.raises(asyncio.TimeoutError):  # the caller gives up: the backend interrupts
        run(asyncio.wait_for(backend.run_code(replay, call_id="call_i2"), 1.5))

    deadline = time.monotonic() + 20  # the kernel records it once the interrupt reached it
    while not any(h["id"] == "call_i2" for h in history(backend.session_dir)):
        assert time.monotonic() < deadline, "the interrupted replay was never recorded"
        time.sleep(0.1)
    line = line_of(backend.session_dir, "call_i2")
    assert (line["status"], line["ename"]) == ("interrupted", "CancelledError")


def test_a_call_cancelled_by_its_caller_cancels_its_tools(
    backend: KernelBackend, host: Host, run: Run[Any]
) -> None:
    before = host.cancelled["hang"]
    with pytest.raises(asyncio.TimeoutError):
        run(asyncio.wait_for(backend.run_code(ask(("hang", {})), call_id="call_w7"), 1))

    assert host.cancelled["hang"] == before + 1
    after = run(backend.run_code(ask(("add", {"a": 2})), call_id="call_w8", timeout=20))
    assert answered(after.text)[0] == [{"id": 0, "ok": True, "result": 4}]


# -- through the kernel's ``tools`` object ------------------------------------------------


def test_a_program_awaits_a_tool_and_uses_its_result(backend: KernelBackend, run: Run[Any]) -> None:
    result = run(
        backend.run_code("total = await tools.add(a=1, b=41)\ntotal * 2", call_id="call_t1")
    )

    assert (result.status, result.value) == ("ok", "84"), result.text


def test_gather_of_three_half_second_tools_takes_about_half_a_second(
    backend: KernelBackend, run: Run[Any]
) -> None:
    program = (
        "import asyncio, time\n"
        "started = time.monotonic()\n"
        "done = await asyncio.gather(tools.nap(seconds=0.5), tools.sleep(seconds=0.5), "
        "tools.sleep(seconds=0.5))\n"
        "print(done)\n"
        "time.monotonic() - started"
    )

    result = run(backend.run_code(program, call_id="call_t2"))

    assert result.status == "ok", result.text
    assert result.text.startswith("['napped 0.5', 'slept 0.5', 'slept 0.5']")
    assert result.value is not None and 0.5 <= float(result.value) < 1.2


def test_a_host_error_reaches_the_program_as_a_tool_error(
    backend: KernelBackend, run: Run[Any]
) -> None:
    program = (
        "try:\n"
        "    await tools.fail(message='no order 7')\n"
        "except ptc_retry.ToolError as error:\n"
        "    print(error)"
    )
    caught = run(backend.run_code(program, call_id="call_t3"))
    assert caught.status == "ok", caught.text
    assert "fail" in caught.text and "LookupError: no order 7" in caught.text

    unknown = run(backend.run_code("await tools.search(q='x')", call_id="call_t40"))
    assert unknown.status == "error" and unknown.evalue is not None
    assert "'search'" in unknown.evalue and "hang" in unknown.evalue  # it lists the tools
    for n, (call, said) in enumerate(
        [("tools.add(a='x')", ["add", "'a'", "integer"]), ("tools.unjson()", ["unjson", "JSON"])]
    ):
        failed = run(backend.run_code(f"await {call}", call_id=f"call_t4{n + 1}"))
        assert (failed.status, failed.ename) == ("error", "ToolError"), failed.text
        assert all(words in failed.evalue for words in said), failed.evalue

    after = run(backend.run_code("await tools.add(a=1)", call_id="call_t5"))
    assert after.value == "3"  # the agent's process went on


def test_a_replay_reuses_the_recorded_results(
    backend: KernelBackend, host: Host, run: Run[Any]
) -> None:
    program = (
        "first = await tools.add(a=10)\n"
        "second = await tools.add(a=20)\n"
        "print(first + second)\n"
        "first / zero\n"
    )
    failed = run(backend.handle_tool_call("run_code", raw(program), "call_t6"))
    assert "NameError" in failed
    calls = host.calls["add"]

    line = "await ptc_retry.replay('call_t6', 'first / zero', 'first / 2')"
    replayed = run(backend.run_code(line, call_id="call_t7"))

    assert replayed.status == "ok", replayed.text
    assert replayed.text.startswith("34")
    assert host.calls["add"] == calls  # no call made again
    if backend.gateway_url is None:
        assert line_of(backend.session_dir, "call_t7")["replay_of"] == "call_t6"


# The kernel's stdin socket drops the input_requests it sends before the client's stdin
# connection is through (after a restart, each socket reconnects on its own timer).
DROP_ONE_INPUT_REQUEST = """
kernel = get_ipython().kernel
send = kernel.session.send
dropped = []
def drop_one(stream, msg_or_type, *args, **kwargs):
    if msg_or_type == "input_request" and not dropped:
        dropped.append(msg_or_type)
        return None
    return send(stream, msg_or_type, *args, **kwargs)
kernel.session.send = drop_one
"""


def test_the_backend_waits_until_input_requests_come_through(
    backend: KernelBackend, run: Run[Any]
) -> None:
    assert run(backend.run_code(DROP_ONE_INPUT_REQUEST, call_id="call_d1")).status == "ok"

    tries = run(stdin_connected(backend.transport, 30))

    assert tries == 2  # the first request was dropped: interrupted and asked again
    after = run(backend.run_code("await tools.add(a=4)", call_id="call_d2"))
    assert after.value == "6"
    assert run(backend.run_code("len(dropped)", call_id="call_d3")).value == "1"


# -- last: the kernel dies ----------------------------------------------------------------


def test_the_kernel_dying_during_a_tool_call_cancels_it(
    backend: KernelBackend, host: Host, run: Run[Any]
) -> None:
    before = host.cancelled["hang"]
    dying = "import os, threading\nthreading.Timer(1, os._exit, (3,)).start()\nawait tools.hang()"

    result = run(backend.run_code(dying, call_id="call_x1", timeout=60))

    assert (result.status, result.restarted) == ("died", True)
    assert host.cancelled["hang"] == before + 1
    after = run(backend.run_code("await tools.add(a=3)", call_id="call_x2", timeout=20))
    assert after.value == "5"
