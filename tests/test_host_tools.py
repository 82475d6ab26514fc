"""Host tools: the agent's own functions, called by programs as ``await tools.<name>(...)``.

The registry, the catalog, the prompt text and the answers to bad calls are pure. The wire
runs on real kernels, once locally and once behind a real Jupyter Kernel Gateway: a
program asks with ``kernel.raw_input(tool_request(...))`` (the protocol itself, whatever the
kernel side builds on it) or through the ``tools`` object the kernel side gives programs.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import KernelBackend, RunResult
from ptc_retry.backend.host_tools import HostTools
from ptc_retry.backend.input_requests import stdin_connected
from ptc_retry.backend.results import RUN_CODE_DESCRIPTION
from ptc_retry.core.notice import prompt_section
from ptc_retry.core.sentences import CODE_PROMPT, TOOLS_PROMPT

from .gateway_server import KERNEL_GATEWAY
from .helpers import (
    OnLoop,
    StartBackend,
    cancel_when,
    follow,
    history,
    line_of,
    raw,
    tool_call_lines,
)

#: Each test that uses a backend runs on a local kernel and behind a real Kernel Gateway.
TRANSPORTS = ["local", KERNEL_GATEWAY]


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

    async def cancellations(self, tool: str) -> int:
        """How many calls of ``tool`` the host saw cancelled."""
        return self.cancelled[tool]

    def tools(self) -> list[Any]:
        return [
            self.add,
            self.nap,
            self.sleep,
            self.fail,
            self.unjson,
            self.hang,
            self.cancellations,
        ]


class Halt(BaseException):
    """A tool's own BaseException, as some libraries raise to stop everything."""


class Odd:
    """Tools whose outcome the wire cannot carry as it is, or that raise what ``Exception``
    does not catch; and one that echoes what a program sends, counting its calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.released = threading.Event()

    def cut_emoji(self) -> str:
        return "Great job \ud83d"  # the first half of an emoji's UTF-16 pair

    def undecodable(self) -> str:
        return b"caf\xe9".decode("utf-8", "surrogateescape")

    def raw_bytes(self) -> bytes:
        return b"caf\xe9"

    def nested(self, depth: int) -> Any:
        value: Any = 0
        for _ in range(depth):
            value = [value]
        return value

    async def cancels(self) -> None:
        raise asyncio.CancelledError

    def exits(self) -> None:
        sys.exit(2)  # what argparse does on arguments it refuses

    def interrupts(self) -> None:
        raise KeyboardInterrupt

    async def halts(self) -> None:
        raise Halt("stop here")

    def says_oddly(self) -> None:
        raise ValueError("no \ud83d here")

    def int_keys(self) -> Any:
        return {"rows": [{1: "a"}]}

    def floats(self) -> list[float]:
        return [math.nan, math.inf, -math.inf]

    def echo(self, s: Any) -> Any:
        self.calls["echo"] += 1
        return s

    def keywords(self, **named: Any) -> Any:
        self.calls["echo"] += 1
        return named

    def big(self, mb: float) -> str:
        return "x" * int(mb * 1_000_000)

    def blocks(self) -> str:
        """A sync tool that never returns, until the test ends."""
        self.calls["blocks"] += 1
        self.released.wait(120)
        return "released"

    def tools(self) -> list[Any]:
        return [
            self.cut_emoji,
            self.undecodable,
            self.raw_bytes,
            self.nested,
            self.cancels,
            self.exits,
            self.interrupts,
            self.halts,
            self.says_oddly,
            self.int_keys,
            self.floats,
            self.echo,
            self.keywords,
            self.big,
            self.blocks,
        ]


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


def finished(backend: KernelBackend, on_loop: OnLoop[Any], program: str, call_id: str) -> RunResult:
    """The result of ``program``, which must end well within 20 s: a hang fails here."""
    result = on_loop(asyncio.wait_for(backend.run_code(program, call_id=call_id), 20))
    assert result.status == "ok", result.text
    return result


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
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
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

    assert prompt == CODE_PROMPT.render(session_dir=kb.session_dir) + TOOLS_PROMPT.render() + (
        "await tools.add(a: int, b: int = 2)  # Add two numbers.\n"
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
    takes = "it takes (a: int, b: int = 2)"

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
            "unjson, hang, cancellations",
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
def odd(transport: str) -> Iterator[Odd]:
    """The odd tools of this transport's backend."""
    odd = Odd()
    yield odd
    odd.released.set()  # a worker thread still blocked in ``blocks`` ends


@pytest.fixture(scope="module")
def backend(
    start_backend: StartBackend, host: Host, odd: Odd, options: dict[str, Any]
) -> KernelBackend:
    return start_backend(tools=host.tools() + odd.tools(), interrupt_grace=2, **options)


def test_requests_allow_stdin_and_carry_the_catalog_only_with_tools(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    show = (
        "_parent = get_ipython().kernel.get_parent()\n"
        "_tools = _parent['metadata']['ptc_retry'].get('tools', [])\n"
        "(_parent['content']['allow_stdin'], [tool['name'] for tool in _tools])"
    )

    result = on_loop(backend.run_code(show, call_id="call_w1"))

    names = [function.__name__ for function in Host().tools() + Odd().tools()]
    assert result.value is not None and ast.literal_eval(result.value) == (True, names)


def test_a_batch_is_answered_in_one_reply(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    before = host.calls["add"]
    program = ask(("add", {"a": 40}), ("nope", {}), ("fail", {"message": "no"}))

    result = on_loop(backend.run_code(program, call_id="call_w2"))

    assert result.status == "ok", result.text
    results, _ = answered(result.text)
    assert [r["ok"] for r in results] == [True, False, False]
    assert results[0]["result"] == 42
    assert results[1]["error"].startswith("there is no tool named 'nope'; the tools are: add")
    assert results[2]["error"] == "LookupError: no"
    assert host.calls["add"] == before + 1


def test_the_calls_of_a_batch_run_at_once(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    program = ask(
        ("nap", {"seconds": 0.5}), ("sleep", {"seconds": 0.5}), ("sleep", {"seconds": 0.5})
    )

    result = on_loop(backend.run_code(program, call_id="call_w3"))

    results, seconds = answered(result.text)
    assert [r["result"] for r in results] == ["napped 0.5", "slept 0.5", "slept 0.5"]
    assert 0.5 <= seconds < 1.2


def test_an_empty_or_malformed_tool_request_gets_a_reply_without_results(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    for n, body in enumerate(['{"calls": []}', "{not json"]):
        program = (
            "from ptc_retry.core.protocol import TOOL_PROMPT\n"
            f"get_ipython().kernel.raw_input(TOOL_PROMPT + {body!r})"
        )

        result = finished(backend, on_loop, program, f"call_w9{n}")

        assert result.value == repr('{"results": []}'), body


def test_input_gets_end_of_file(backend: KernelBackend, on_loop: OnLoop[Any]) -> None:
    result = on_loop(backend.run_code("input('your name? ')", call_id="call_w4", timeout=20))

    assert (result.status, result.ename) == ("error", "EOFError")


def test_a_tool_awaited_past_the_time_limit_is_cancelled_and_the_next_call_works(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    started = time.monotonic()
    result = on_loop(backend.run_code("await tools.hang()", call_id="call_w5", timeout=1))

    assert result.status == "timeout" and not result.restarted
    assert result.ename == "KeyboardInterrupt"
    assert time.monotonic() - started < 5
    assert host.cancelled["hang"] == host.calls["hang"] == 1
    after = on_loop(backend.run_code("await tools.add(a=1)", call_id="call_w6", timeout=20))
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
    backend: KernelBackend, on_loop: OnLoop[Any], program: str
) -> None:
    started = time.monotonic()
    result = on_loop(backend.run_code(program, call_id=f"call_l{len(program)}", timeout=1))

    assert time.monotonic() - started < 5
    assert result.ename in ("KeyboardInterrupt", "CancelledError")
    assert result.evalue == "time limit of 1 s reached"
    assert f"{result.ename}: time limit of 1 s reached" in result.text
    assert "[ptc-retry] Stopped by the time limit (1 s)" in result.text


def test_an_interrupted_replay_awaiting_tools_is_offered_going_on(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    on_loop(backend.run_code("import asyncio\nnaps = 0.1", call_id="call_i1"))
    replay = (
        "await ptc_retry.replay('call_i1', 'naps = 0.1', "
        "'await asyncio.gather(tools.nap(seconds=30))')"
    )
    naps = host.calls["nap"]
    # The caller gives up once the replay awaits its tool: the backend interrupts.
    on_loop(
        cancel_when(backend.run_code(replay, call_id="call_i2"), lambda: host.calls["nap"] > naps)
    )

    deadline = time.monotonic() + 20  # the kernel records it once the interrupt reached it
    while not any(h["id"] == "call_i2" for h in history(backend.session_dir)):
        assert time.monotonic() < deadline, "the interrupted replay was never recorded"
        time.sleep(0.1)
    line = line_of(backend.session_dir, "call_i2")
    assert (line["status"], line["ename"]) == ("interrupted", "CancelledError")


def test_a_call_cancelled_by_its_caller_cancels_its_tools(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    before, hangs = host.cancelled["hang"], host.calls["hang"]
    running = backend.run_code(ask(("hang", {})), call_id="call_w7")
    on_loop(cancel_when(running, lambda: host.calls["hang"] > hangs))

    assert host.cancelled["hang"] == before + 1
    after = on_loop(backend.run_code(ask(("add", {"a": 2})), call_id="call_w8", timeout=20))
    assert answered(after.text)[0] == [{"id": 0, "ok": True, "result": 4}]


# -- through the kernel's ``tools`` object ------------------------------------------------


def test_a_program_awaits_a_tool_and_uses_its_result(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    result = on_loop(
        backend.run_code("total = await tools.add(a=1, b=41)\ntotal * 2", call_id="call_t1")
    )

    assert (result.status, result.value) == ("ok", "84"), result.text


def test_gather_of_three_half_second_tools_takes_about_half_a_second(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "import asyncio, time\n"
        "started = time.monotonic()\n"
        "done = await asyncio.gather(tools.nap(seconds=0.5), tools.sleep(seconds=0.5), "
        "tools.sleep(seconds=0.5))\n"
        "print(done)\n"
        "time.monotonic() - started"
    )

    result = on_loop(backend.run_code(program, call_id="call_t2"))

    assert result.status == "ok", result.text
    assert result.text.startswith("['napped 0.5', 'slept 0.5', 'slept 0.5']")
    assert result.value is not None and 0.5 <= float(result.value) < 1.2


def test_a_host_error_reaches_the_program_as_a_tool_error(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "try:\n"
        "    await tools.fail(message='no order 7')\n"
        "except ptc_retry.ToolError as error:\n"
        "    print(error)"
    )
    caught = on_loop(backend.run_code(program, call_id="call_t3"))
    assert caught.status == "ok", caught.text
    assert "fail" in caught.text and "LookupError: no order 7" in caught.text

    unknown = on_loop(backend.run_code("await tools.search(q='x')", call_id="call_t40"))
    assert unknown.status == "error" and unknown.evalue is not None
    assert "'search'" in unknown.evalue and "hang" in unknown.evalue  # it lists the tools
    for n, (call, said) in enumerate(
        [("tools.add(a='x')", ["add", "'a'", "integer"]), ("tools.unjson()", ["unjson", "JSON"])]
    ):
        failed = on_loop(backend.run_code(f"await {call}", call_id=f"call_t4{n + 1}"))
        assert (failed.status, failed.ename) == ("error", "ToolError"), failed.text
        assert all(words in failed.evalue for words in said), failed.evalue

    after = on_loop(backend.run_code("await tools.add(a=1)", call_id="call_t5"))
    assert after.value == "3"  # the agent's process went on


def test_a_replay_reuses_the_recorded_results(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    program = (
        "first = await tools.add(a=10)\n"
        "second = await tools.add(a=20)\n"
        "print(first + second)\n"
        "first / zero\n"
    )
    failed = on_loop(backend.handle_tool_call("run_code", raw(program), "call_t6"))
    assert "NameError" in failed
    calls = host.calls["add"]

    line = "await ptc_retry.replay('call_t6', 'first / zero', 'first / 2')"
    replayed = on_loop(backend.run_code(line, call_id="call_t7"))

    assert replayed.status == "ok", replayed.text
    assert replayed.text.startswith("34")
    assert host.calls["add"] == calls  # no call made again
    if backend.gateway_url is None:
        assert line_of(backend.session_dir, "call_t7")["replay_of"] == "call_t6"


def test_a_tool_registered_again_with_another_signature_is_called_live_by_the_fix(
    on_loop: OnLoop[Any], options: dict[str, Any]
) -> None:
    # The agent's process restarts between the failure and its fix, with the tool changed:
    # it takes an order number now. The recorded result is of a call it would refuse.
    made: list[str] = []

    def price(item: str) -> str:
        made.append("before")
        return f"{item}: 10 USD"

    def price_now(item: int, currency: str = "EUR") -> str:
        made.append("now")
        return f"item {item}: 9 {currency}"

    program = "# Price the widget for the invoice.\n" * 6 + (
        "quoted = await tools.price(item='widget')\nprint(quoted, totl)\n"
    )

    async def across_a_restart() -> str:
        first = KernelBackend(session_id="registered-again", tools=[price], **options)
        async with first:
            failed = await first.run_code(program, call_id="call_price_1")
            await first.shutdown(keep=True)
        again = KernelBackend(session_id="registered-again", **options)
        again.register_tool(price_now, name="price")
        async with again:
            line = follow(failed.notice, old="totl", new="''")
            return (await again.run_code(line, call_id="call_price_2")).text

    text = on_loop(across_a_restart())

    assert "the argument 'item' must be an integer, not a string" in text
    assert made == ["before"]  # not the old result, and not a call the tool refuses


CHAIN = """\
# Email the order confirmation, wait for the slow warehouse service, then check the totals.
sent = await tools.add(a=1, b=100)
stock = await tools.nap(seconds=1.05)
total = sent + lenn(stock)
check = await tools.add(a=totl)
print(sent, stock, check, reprot)
"""


def test_a_chain_of_fixes_the_notices_offer_makes_no_host_call_twice(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    before = Counter(host.calls)
    first = on_loop(backend.run_code(CHAIN, call_id="call_r1", turn=21))
    assert first.ename == "NameError" and first.notice is not None
    offered = follow(first.notice, old="lenn", new="len")
    assert offered.endswith(", resume=True)")  # it ran for over a second

    resumed = on_loop(backend.run_code(offered, call_id="call_r2", turn=21))
    assert resumed.evalue == "name 'totl' is not defined"
    replayed = on_loop(
        backend.run_code(follow(resumed.notice, old="totl", new="total"), call_id="call_r3")
    )
    assert replayed.evalue == "name 'reprot' is not defined"
    # The fix the notice offers next is cut off mid-stream, and the rest sent with extend.
    fix = follow(replayed.notice, old=", reprot)", new=")")
    cut = fix.index("reprot") + 3
    arrived = '{"code": ' + json.dumps(fix[:cut])[:-1]
    saved = on_loop(backend.handle_partial_tool_call("run_code", arrived, "call_r4"))
    extended = on_loop(backend.run_code(follow(saved, rest=fix[cut:]), call_id="call_r5"))

    assert extended.status == "ok", extended.text
    assert extended.text.startswith("101 napped 1.05 114\n")
    assert host.calls - before == Counter({"add": 2, "nap": 1})  # each made once, all along
    sentence = f"ptc-retry: 3 tool results reused from {replayed.reference}; 0 calls made live."
    assert sentence in extended.text


# -- odd outcomes: each reaches the program as a ToolError, and the agent's loop goes on ------

#: (the call, what its ToolError says after ``tools.<name>: ``).
ODD_OUTCOMES = [
    (
        "cut_emoji()",
        "its result holds a lone surrogate '\\ud83d' at index 10 of 'Great job \\ud83d': half "
        "of a UTF-16 pair (an emoji cut in two, or undecodable bytes), which UTF-8 cannot "
        "encode; the tool must return valid text",
    ),
    ("undecodable()", "its result holds a lone surrogate '\\udce9' at index 3 of 'caf\\udce9'"),
    (
        "raw_bytes()",
        "its result is not JSON (Object of type bytes is not JSON serializable): a host tool "
        "must return str, int, float, bool, None, or lists and dicts of them",
    ),
    (
        "nested(depth=20000)",
        "its result is nested too deeply for JSON (Python's json raised RecursionError); "
        "flatten it",
    ),
    ("cancels()", "CancelledError (the tool raised it; nothing cancelled the call)"),
    ("exits()", "SystemExit: 2 (the tool exited, as argparse does on arguments it refuses)"),
    ("interrupts()", "KeyboardInterrupt (the tool was interrupted)"),
    ("halts()", "Halt: stop here"),
    ("says_oddly()", "ValueError: no \\ud83d here"),
    (
        "int_keys()",
        "its result has the dict key 1 (int at ['rows'][0]), which JSON would turn into the "
        'string "1"; use str keys',
    ),
]


@pytest.mark.parametrize(("call", "said"), ODD_OUTCOMES, ids=[c for c, _ in ODD_OUTCOMES])
def test_an_odd_outcome_reaches_the_program_as_a_tool_error(
    backend: KernelBackend, on_loop: OnLoop[Any], call: str, said: str
) -> None:
    """None of these may hang the program or end the agent's loop (this module's loop: a
    SystemExit or KeyboardInterrupt that escaped would end the test instead)."""
    name = call.split("(")[0]
    program = (
        f"try:\n    await tools.{call}\nexcept ptc_retry.ToolError as error:\n    print(error)"
    )

    result = on_loop(asyncio.wait_for(backend.run_code(program, timeout=20), 30))

    assert result.status == "ok", result.text
    assert result.text.startswith(f"tools.{name}: {said}"), result.text
    after = on_loop(asyncio.wait_for(backend.run_code("await tools.add(a=1)", timeout=20), 30))
    assert after.value == "3"


def test_nan_and_infinity_reach_the_program_as_floats(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    result = on_loop(asyncio.wait_for(backend.run_code("await tools.floats()", timeout=20), 30))

    assert (result.status, result.value) == ("ok", "[nan, inf, -inf]"), result.text


def test_arguments_the_wire_cannot_carry_are_refused_before_the_host_is_called(
    backend: KernelBackend, odd: Odd, on_loop: OnLoop[Any]
) -> None:
    before = odd.calls["echo"]
    program = (
        "deep = 0\n"
        "for _ in range(20000):\n"
        "    deep = [deep]\n"
        "for s in ['Great job \\ud83d', {'k': ['ok', '\\udce9']}, deep, float('nan'), {2: 'b'},\n"
        "          {'a': [{'b': 1, 3: 'c'}]}]:\n"
        "    try:\n"
        "        await tools.echo(s=s)\n"
        "    except ptc_retry.ToolError as error:\n"
        "        print(error)\n"
        "for call in (tools.keywords, tools.echo):\n"
        "    try:\n"
        "        await call(s=1, **{'s\\ud83d': 1})\n"
        "    except ptc_retry.ToolError as error:\n"
        "        print(error)\n"
    )

    result = on_loop(asyncio.wait_for(backend.run_code(program, timeout=20), 30))

    assert result.status == "ok", result.text
    assert result.text.splitlines() == [
        "tools.echo: argument 's' holds a lone surrogate '\\ud83d' at index 10 of 'Great job "
        "\\ud83d': half of a UTF-16 pair (an emoji cut in two, or undecodable bytes), which "
        "UTF-8 cannot encode; send valid text, e.g. s.encode('utf-8', 'replace').decode()",
        "tools.echo: argument 's' holds a lone surrogate '\\udce9' at index 0 of '\\udce9' (at "
        "['k'][1]): half of a UTF-16 pair (an emoji cut in two, or undecodable bytes), which "
        "UTF-8 cannot encode; send valid text, e.g. s.encode('utf-8', 'replace').decode()",
        "tools.echo: argument 's' is nested too deeply for JSON (Python's json raised "
        "RecursionError); flatten it",
        "tools.echo: argument 's' holds NaN or Infinity, which are not JSON; pass finite "
        "numbers (or None)",
        "tools.echo: argument 's' has the dict key 2 (int), which JSON would turn into the "
        'string "2"; use str keys',
        "tools.echo: argument 's' has the dict key 3 (int at ['a'][0]), which JSON would turn "
        'into the string "3"; use str keys',
        "tools.keywords: an argument's name holds a lone surrogate '\\ud83d' at index 1 of "
        "'s\\ud83d': half of a UTF-16 pair (an emoji cut in two, or undecodable bytes), which "
        "UTF-8 cannot encode; send valid text, e.g. s.encode('utf-8', 'replace').decode()",
        "tools.echo(s): got an unexpected keyword argument 's\\ud83d'",
    ]
    assert odd.calls["echo"] == before  # none reached the host
    echoed = on_loop(backend.run_code("await tools.echo(s='Great job \\U0001f600')", timeout=20))
    assert echoed.value == "'Great job \U0001f600'"  # the whole emoji travels


def test_a_sync_tool_that_never_returns_ends_at_the_time_limit(
    backend: KernelBackend, odd: Odd, on_loop: OnLoop[Any]
) -> None:
    started = time.monotonic()

    result = on_loop(asyncio.wait_for(backend.run_code("await tools.blocks()", timeout=1), 15))

    # The time limit (1 s), the backend's margin (1 s) and the interrupt's grace (2 s), at most.
    assert time.monotonic() - started < 1 + 1 + 2
    assert (result.status, result.restarted, result.ename) == (
        "timeout",
        False,
        "KeyboardInterrupt",
    )
    assert odd.calls["blocks"] == 1
    # The next program waits for the stalled thread at most its own timeout, then runs.
    after = on_loop(asyncio.wait_for(backend.run_code("await tools.add(a=2)", timeout=5), 30))
    assert after.value == "4"


def test_a_result_over_a_gateways_limit_arrives_locally(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    if backend.gateway_url is not None:
        pytest.skip("through a gateway such a result gets a ToolError: test_gateway.py")
    program = "text = await tools.big(mb=12)\nlen(text)"

    result = on_loop(asyncio.wait_for(backend.run_code(program, timeout=30), 40))

    assert (result.status, result.value) == ("ok", "12000000"), result.text


# -- a call that waits blocks nothing ----------------------------------------------------


def test_wait_for_around_a_slow_tool_times_out_on_time_and_cancels_it_on_the_host(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    before = host.cancelled["hang"]
    program = (
        "import asyncio, time\n"
        "started = time.monotonic()\n"
        "try:\n"
        "    await asyncio.wait_for(tools.hang(), timeout=1)\n"
        "except asyncio.TimeoutError:\n"
        "    print('timed out after', round(time.monotonic() - started, 1))\n"
        "await tools.cancellations(tool='hang')"
    )

    result = finished(backend, on_loop, program, "call_b1")

    seconds = float(result.text.split("timed out after ")[1].split()[0])
    assert 1 <= seconds < 2
    # The host had cancelled the call before the program's next call reached it.
    assert result.value == str(before + 1)


def test_a_call_in_a_background_task_lets_the_other_tasks_run(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "import asyncio, time\n"
        "call = asyncio.ensure_future(tools.nap(seconds=2))\n"
        "started = time.monotonic()\n"
        "await asyncio.sleep(0.2)\n"
        "slept = time.monotonic() - started\n"
        "print(await call)\n"
        "slept"
    )

    result = finished(backend, on_loop, program, "call_b2")

    assert result.text.startswith("napped 2")
    assert result.value is not None and 0.2 <= float(result.value) < 1


def test_cancelling_a_task_cancels_its_call_and_a_late_result_answers_nothing_else(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    hangs, cancelled, sleeps = host.calls["hang"], host.cancelled["hang"], host.calls["sleep"]
    # One batch of three calls; the program cancels two of them and awaits the third.
    program = (
        "import asyncio\n"
        "made = (tools.hang(), tools.sleep(seconds=1), tools.nap(seconds=1))\n"
        "*cancelled, kept = [asyncio.ensure_future(call) for call in made]\n"
        "await asyncio.sleep(0.5)\n"
        "for call in cancelled:\n"
        "    call.cancel()\n"
        "done = await asyncio.gather(*cancelled, return_exceptions=True)\n"
        "print([type(outcome).__name__ for outcome in done], await kept)\n"
        "seen = await tools.cancellations(tool='hang')\n"
        "await asyncio.sleep(1)  # the sync tool ends on the host meanwhile\n"
        "seen, await tools.add(a=5)"
    )

    result = finished(backend, on_loop, program, "call_b3")

    assert result.text.startswith("['CancelledError', 'CancelledError'] napped 1")
    assert result.value == f"({cancelled + 1}, 7)"  # the sleep's late 'slept 1' went nowhere
    assert (host.calls["hang"], host.calls["sleep"]) == (hangs + 1, sleeps + 1)


def test_input_from_a_thread_during_a_call_gets_its_own_answer(
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    program = (
        "import asyncio, threading\n"
        "answers = []\n"
        "def ask():\n"
        "    try:\n"
        "        answers.append(input('your name? '))\n"
        "    except EOFError:\n"
        "        answers.append('end of file')\n"
        "thread = threading.Thread(target=ask)\n"
        "asyncio.get_running_loop().call_later(0.3, thread.start)\n"
        "napped = await tools.nap(seconds=1)\n"
        "thread.join(10)\n"
        "napped, answers"
    )

    result = finished(backend, on_loop, program, "call_b4")

    assert result.value == "('napped 1', ['end of file'])"


def test_an_interrupt_while_awaiting_a_tool_stops_the_program_and_cancels_the_call(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    hangs, cancelled = host.calls["hang"], host.cancelled["hang"]
    padding = "# " + "padding to pass notice_min_bytes " * 6 + "\n"
    program = f"{padding}print('asking')\nanswer = await tools.hang()\nprint('never')\n"

    async def interrupted() -> RunResult:
        running = asyncio.ensure_future(backend.run_code(program, call_id="call_b5"))
        while host.calls["hang"] == hangs:  # until the call reached the host
            await asyncio.sleep(0.05)
        await backend.transport.interrupt()
        return await running

    result = on_loop(asyncio.wait_for(interrupted(), 20))

    assert (result.ename, result.restarted) == ("KeyboardInterrupt", False), result.text
    assert result.notice is not None and "To go on:\nawait ptc_retry.resume(" in result.notice
    assert result.text.startswith("asking")
    assert host.cancelled["hang"] == cancelled + 1
    assert on_loop(backend.run_code("await tools.add(a=2)", call_id="call_b6")).value == "4"


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
    backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    assert on_loop(backend.run_code(DROP_ONE_INPUT_REQUEST, call_id="call_d1")).status == "ok"

    tries = on_loop(stdin_connected(backend.transport, 30))

    assert tries == 2  # the first request was dropped: interrupted and asked again
    after = on_loop(backend.run_code("await tools.add(a=4)", call_id="call_d2"))
    assert after.value == "6"
    assert on_loop(backend.run_code("len(dropped)", call_id="call_d3")).value == "1"


# -- last: the kernel dies ----------------------------------------------------------------


def test_the_kernel_dying_during_a_tool_call_cancels_it(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    before = host.cancelled["hang"]
    dying = "import os, threading\nthreading.Timer(1, os._exit, (3,)).start()\nawait tools.hang()"

    result = on_loop(backend.run_code(dying, call_id="call_x1", timeout=60))

    assert (result.status, result.restarted) == ("died", True)
    assert host.cancelled["hang"] == before + 1
    after = on_loop(backend.run_code("await tools.add(a=3)", call_id="call_x2", timeout=20))
    assert after.value == "5"


def test_every_cut_off_call_still_running_is_kept_for_its_retry() -> None:
    # More cut-off sync calls than the host keeps of those that returned (32), all still
    # running or waiting for a worker thread: the retry of each is given its outcome.
    made: Counter[int] = Counter()
    let_go = threading.Event()

    def charge(order: int) -> str:
        """Charge an order."""
        made[order] += 1
        let_go.wait(10)
        return f"receipt {order}"

    host = HostTools()
    host.register(charge)
    calls = [
        {"id": i, "tool": "charge", "arguments": {"order": i}, "program": "call_1", "k": i + 1}
        for i in range(48)
    ]
    retries = [dict(call, program="call_2", retry_of=["call_1", call["k"]]) for call in calls]

    async def cut_off_then_retry() -> list[dict[str, Any]]:
        first = asyncio.ensure_future(host.answer(calls))
        while not made:  # the first calls run, the others wait for a worker thread
            await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        retried = asyncio.ensure_future(host.answer(retries))
        await asyncio.sleep(0.2)
        let_go.set()
        return await retried

    answers = asyncio.run(asyncio.wait_for(cut_off_then_retry(), 30))

    assert [answer["result"] for answer in answers] == [f"receipt {i}" for i in range(48)]
    assert all(answer.get("joined") is True for answer in answers)
    assert made == {i: 1 for i in range(48)}


def test_a_task_that_outlives_its_program_is_refused_its_tool_calls(
    backend: KernelBackend, host: Host, on_loop: OnLoop[Any]
) -> None:
    # Its call must not land in the recording of the program running then, nor wait for it.
    host.calls.clear()
    started = on_loop(
        backend.run_code(
            "import asyncio\n"
            "outcomes = []\n"
            "async def later():\n"
            "    await asyncio.sleep(0.5)\n"
            "    try:\n"
            "        outcomes.append(await tools.add(a=1))\n"
            "    except Exception as error:\n"
            "        outcomes.append(str(error))\n"
            "task = asyncio.create_task(later())",
            call_id="call_bg1",
        )
    )
    assert started.status == "ok", started.text

    running = on_loop(
        backend.run_code(
            "await asyncio.sleep(1.5)\nawait tools.add(a=5)", call_id="call_bg2", timeout=20
        )
    )
    said = on_loop(backend.run_code("print(task.done(), outcomes)", timeout=20))

    assert running.value == "7", running.text
    assert said.text.startswith("True ['tools.add: the program that started this task has ended")
    assert host.calls["add"] == 1
    (line,) = tool_call_lines(backend.session_dir, "call_bg2")
    assert (line["tool"], line["arguments"]) == ("add", {"a": 5})
