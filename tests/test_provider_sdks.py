"""The provider adapters (``ptc_retry.integrations.openai``, ``.anthropic``) driven through the
official ``openai`` and ``anthropic`` clients against a scripted model that speaks each API's
wire format (``tests/model_server.py``), on one real kernel with a host tool.

Each test plays Chat Completions, Responses and Messages, streamed and not where both apply:
what the model reads, what the next request carries, and how a stream the network cuts is
continued (``Continuation``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="openai is an optional extra (ptc-retry[openai])")
anthropic = pytest.importorskip(
    "anthropic", reason="anthropic is an optional extra (ptc-retry[anthropic])"
)

from ptc_retry.backend import KernelBackend  # noqa: E402
from ptc_retry.core import sentences as said  # noqa: E402
from ptc_retry.core.partial import cut_arguments  # noqa: E402
from ptc_retry.integrations.anthropic import Messages  # noqa: E402
from ptc_retry.integrations.openai import ChatCompletions, Responses  # noqa: E402
from ptc_retry.integrations.replies import (  # noqa: E402
    Continuation,
    ProviderAdapter,
    Reply,
    Step,
    Stop,
    ToolCall,
)

from .helpers import (  # noqa: E402
    OnLoop,
    StartBackend,
    follow,
    history,
    notices_in,
    raw,
    until_printed,
)
from .model_server import FIX, PROGRAM, TOTAL, Call, ModelServer  # noqa: E402
from .model_server import Reply as Scripted  # noqa: E402

pytestmark = pytest.mark.kernel

#: Every host call the module's programs made, in order.
HOST_CALLS: list[str] = []


def price(item: str) -> float:
    """The price of one item."""
    HOST_CALLS.append(item)
    return {"tea": 3.0, "milk": 2.0, "bread": 4.5}[item]


@dataclass
class Api:
    """One API as a loop uses it: its adapter, its client's create method, the request's
    parameters, and the conversation so far."""

    name: str
    streamed: bool
    make: Callable[..., ProviderAdapter[Any]]
    adapter: ProviderAdapter[Any]
    create: Callable[..., Any]
    conversation: list[dict[str, Any]] = field(default_factory=list)

    def params(self) -> dict[str, Any]:
        tools = self.adapter.backend.tool_schemas(
            "anthropic" if self.name == "messages" else "openai"
        )
        if self.name == "responses":
            return {"model": "m", "input": list(self.conversation), "tools": _flat(tools)}
        params = {"model": "m", "messages": list(self.conversation), "tools": tools}
        return {**params, "max_tokens": 1024} if self.name == "messages" else params

    async def reply(self) -> Reply:
        if self.streamed:
            return await self.adapter.stream(self.create, **self.params())
        return self.adapter.reply_of(await self.create(**self.params()))

    async def turn(self, task: str | None = None) -> Step:
        """A person's message (when ``task``), one request, its step; the conversation
        takes the step's messages."""
        if task is not None:
            self.conversation.append(self.adapter.user(task))
        step = await self.adapter.step(await self.reply())
        self.conversation += step.messages
        return step


def _flat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat's tool definitions in the Responses API's flat shape."""
    return [{"type": "function", **tool["function"]} for tool in tools]


API_NAMES = ["chat", "responses", "messages"]
SHAPES = [(name, streamed) for name in API_NAMES for streamed in (True, False)]


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture(scope="module")
def kb(start_backend: StartBackend, options: dict[str, Any]) -> KernelBackend:
    return start_backend(tools=[price], **options)


@pytest.fixture
def make_api(server: ModelServer, kb: KernelBackend) -> Callable[..., Api]:
    def make(name: str, streamed: bool = True, **continuation: Any) -> Api:
        settings = Continuation(**{"sleep": _no_wait, **continuation})
        if name == "messages":
            client: Any = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
            return Api(name, streamed, Messages, Messages(kb, settings), client.messages.create)
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
        if name == "chat":
            adapter: ProviderAdapter[Any] = ChatCompletions(kb, settings)
            return Api(name, streamed, ChatCompletions, adapter, client.chat.completions.create)
        return Api(name, streamed, Responses, Responses(kb, settings), client.responses.create)

    return make


SLEPT: list[float] = []


async def _no_wait(seconds: float) -> None:
    """The backoff, recorded instead of waited (the real one is ``asyncio.sleep``)."""
    SLEPT.append(seconds)


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    HOST_CALLS.clear()
    SLEPT.clear()
    SLEEPING.clear()


SLEEPING: list[float] = []


async def _sleep(seconds: float) -> None:
    """The real backoff, saying that it began."""
    SLEEPING.append(seconds)
    await asyncio.sleep(seconds)


def _rest(arrived: str) -> str:
    """What the model sends after a cut: the fixed program from where the saved part ends
    (the longest start of ``"code"`` that decoded, as the kernel saves it)."""
    saved = cut_arguments(arrived).open_prefix
    fixed = PROGRAM.replace(*FIX)
    assert fixed.startswith(saved)
    return fixed[len(saved) :]


def _notice(text: str) -> str:
    (notice,) = notices_in(text)
    return notice


def _bounded(on_loop: OnLoop[Any], coroutine: Any, seconds: float = 30) -> Any:
    return on_loop(asyncio.wait_for(coroutine, seconds))


# -- the path the notice teaches -------------------------------------------------------------


@pytest.mark.parametrize(("name", "streamed"), SHAPES)
def test_a_failed_program_is_fixed_by_the_one_line_replay_without_calling_the_host_again(
    name: str, streamed: bool, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name, streamed)
    call_id = f"call_{name}{int(streamed)}" if name != "messages" else f"toolu_01{int(streamed)}"
    server.script(Scripted(text="Computing.", calls=[Call("run_code", raw(PROGRAM), call_id)]))
    first = _bounded(on_loop, api.turn("What do the orders cost?"))
    (failed,) = first.results
    assert failed.status == "error" and "KeyError: 'qyt'" in failed.text
    assert HOST_CALLS == ["tea", "milk", "bread"]
    fix = follow(_notice(failed.text), old=FIX[0], new=FIX[1])
    server.script(Scripted(calls=[Call("run_code", json.dumps({"code": fix}))]), Scripted("73.5"))
    second = _bounded(on_loop, api.turn())
    (fixed,) = second.results
    assert fixed.status == "ok" and TOTAL in fixed.text
    assert HOST_CALLS == ["tea", "milk", "bread"]  # the replay reused every recorded result
    # The request after the failure carried the notice as the API's tool result for that id.
    sent = json.dumps(server.requests[0].body)
    assert call_id in sent and json.dumps(_notice(failed.text))[1:-1] in sent
    last = _bounded(on_loop, api.turn())
    assert last.reply.stop == Stop.END and last.reply.text == "73.5" and not last.results
    assert last.reply.tokens.input_tokens == 120 and last.reply.tokens.output_tokens == 30


def test_the_tool_results_have_each_apis_shape(
    make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    shapes = {}
    for name in API_NAMES:
        api = make_api(name)
        server.script(Scripted(calls=[Call("run_code", raw("print(6 * 7)"), f"toolu_01{name}")]))
        shapes[name] = _bounded(on_loop, api.turn("go")).messages
    chat, responses, messages = shapes["chat"], shapes["responses"], shapes["messages"]
    assert chat[0]["tool_calls"][0]["function"] == {
        "name": "run_code",
        "arguments": raw("print(6 * 7)"),
    }
    assert chat[1] == {"role": "tool", "tool_call_id": "toolu_01chat", "content": "42"}
    assert (
        responses[0]["type"] == "function_call" and responses[0]["call_id"] == "toolu_01responses"
    )
    assert responses[1] == {
        "type": "function_call_output",
        "call_id": "toolu_01responses",
        "output": "42",
    }
    assert messages[0]["content"][0]["input"] == {"code": "print(6 * 7)"}
    assert messages[1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01messages",
                "content": "42",
                "is_error": False,
            }
        ],
    }


@pytest.mark.parametrize("name", API_NAMES)
def test_parallel_calls_of_one_message_are_one_step(
    name: str, make_api: Callable[..., Api], server: ModelServer, kb: KernelBackend, on_loop: Any
) -> None:
    api = make_api(name, streamed=name != "chat")
    calls = [Call("run_code", raw(f"print({n} + 1)"), f"call_par_{name}{n}") for n in (1, 2)]
    server.script(Scripted(calls=calls))
    step = _bounded(on_loop, api.turn("two at once"))
    assert [result.text for result in step.results] == ["2", "3"]
    lines = [line for line in history(kb.session_dir) if line["id"].startswith(f"call_par_{name}")]
    assert len(lines) == 2 and lines[0]["step"] == lines[1]["step"]
    assert lines[0]["ordinal"] != lines[1]["ordinal"]


@pytest.mark.parametrize(("name", "streamed"), SHAPES)
def test_a_call_cut_by_the_length_stop_is_saved_and_extended(
    name: str, streamed: bool, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    if name == "messages" and not streamed:
        pytest.skip(
            "the scripted non-streamed Message gives a cut tool_use no input; a decoded input "
            "is saved as cut (test_a_cut_call_whose_arguments_came_decoded_...)"
        )
    api = make_api(name, streamed)
    whole = raw(PROGRAM.replace(*FIX))
    cut = whole.index("orders = [") + 40
    server.script(
        Scripted(
            calls=[Call("run_code", whole[:cut], f"call_len_{name}{int(streamed)}")], stop="length"
        )
    )
    step = _bounded(on_loop, api.turn("long program"))
    assert step.reply.stop == Stop.LENGTH and step.reply.tool_calls[0].cut
    (saved,) = step.results
    assert saved.status == "partial" and "extend" in saved.text and HOST_CALLS == []
    line = follow(_notice(saved.text), rest=_rest(whole[:cut]))
    server.script(Scripted(calls=[Call("run_code", json.dumps({"code": line}))]))
    (extended,) = _bounded(on_loop, api.turn()).results
    assert extended.status == "ok" and TOTAL in extended.text, extended.text
    assert HOST_CALLS == ["tea", "milk", "bread"]


def test_a_cut_call_whose_arguments_came_decoded_is_saved_not_run_cut_short(
    make_api: Callable[..., Api], on_loop: Any, kb: KernelBackend
) -> None:
    """Anthropic's ``input`` is already decoded: for a call cut by ``max_tokens`` its last
    string was cut inside, and the program in it is not whole."""
    api = make_api("messages", streamed=False)
    cut = ToolCall("toolu_01decodedcut", "run_code", {"code": 'print("never run'}, cut=True)
    step = _bounded(on_loop, api.adapter.step(Reply(tool_calls=[cut], stop=Stop.LENGTH)))
    (saved,) = step.results
    assert saved.status == "partial" and "extend" in saved.text
    assert history(kb.session_dir)[-1]["status"] == "partial"


@pytest.mark.parametrize("name", API_NAMES)
def test_of_two_calls_the_length_stop_cut_only_the_last_is_saved_and_the_first_runs(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    whole = raw(PROGRAM.replace(*FIX))
    calls = [
        Call("run_code", raw("print(6 * 7)"), f"call_two_{name}0"),
        Call("run_code", whole[:200], f"call_two_{name}1"),
    ]
    server.script(Scripted(calls=calls, stop="length"))
    step = _bounded(on_loop, api.turn("two calls, the second too long"))
    assert [call.cut for call in step.reply.tool_calls] == [False, True]
    assert [result.status for result in step.results] == ["ok", "partial"]
    assert step.results[0].text == "42" and "extend" in step.results[1].text
    assert HOST_CALLS == []


@pytest.mark.parametrize("name", API_NAMES)
def test_a_reply_the_loop_builds_itself_goes_back_with_its_calls(
    name: str, make_api: Callable[..., Api], on_loop: Any
) -> None:
    # As ``eval --live`` puts a program in the conversation as the model's own call.
    api = make_api(name)
    call = ToolCall("toolu_01" + "a" * 22, "run_code", raw('print("hi")'))
    built = Reply(text="Running it.", tool_calls=[call], stop=Stop.TOOL_CALLS)
    step = on_loop(api.adapter.step(built))
    sent = json.dumps(step.messages[:-1] if name != "chat" else step.messages[0])
    assert "Running it." in sent and call.id in sent and "print" in sent
    assert step.results[0].text.strip() == "hi"


@pytest.mark.parametrize(("name", "streamed"), SHAPES)
def test_a_refusal_is_a_reply_with_no_tool_call(
    name: str, streamed: bool, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name, streamed)
    server.script(Scripted(text="I can't help with that.", stop="refusal"))
    step = _bounded(on_loop, api.turn("something refused"))
    assert step.reply.stop == Stop.REFUSAL and step.reply.text == "I can't help with that."
    assert not step.results
    if name == "chat":
        assert step.messages[0]["refusal"] == "I can't help with that."


@pytest.mark.parametrize(("name", "streamed"), [s for s in SHAPES if s != ("messages", False)])
def test_arguments_that_are_not_json_run_nothing_and_say_what_to_send(
    name: str,
    streamed: bool,
    make_api: Callable[..., Api],
    server: ModelServer,
    kb: KernelBackend,
    on_loop: Any,
) -> None:
    api = make_api(name, streamed)
    before = len(history(kb.session_dir))
    server.script(Scripted(calls=[Call("run_code", "print(1)", f"call_bad_{name}{int(streamed)}")]))
    (refused,) = _bounded(on_loop, api.turn("bad arguments")).results
    assert refused.text.startswith("Error") and "JSON" in refused.text
    assert len(history(kb.session_dir)) == before


# -- a stream the network cuts ---------------------------------------------------------------

#: How many events each API sends before its text starts (chat: the role chunk; responses:
#: created, in_progress, item added, part added; messages: message_start, ping, block start).
TEXT_AFTER = {"chat": 1, "responses": 4, "messages": 3}
TEXT = "The orders cost 91.5 in all: tea 27, milk 42, bread 22.5, over twelve rows."
REASONING = "First the prices: three host calls. Then the sum over every row, qty times price."


def _continuation_of(api: Api, body: dict[str, Any]) -> str:
    """What the continuation request added after the conversation, as text."""
    key = "input" if api.name == "responses" else "messages"
    return json.dumps(body[key][len(api.conversation) :])


#: How a stream is cut: the connection closed part-way, or the body ended cleanly without
#: its final event (a proxy that ends it at its read timeout).
CUTS = ["drop_after", "end_after"]


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("name", API_NAMES)
def test_a_stream_cut_after_text_is_continued_and_the_reply_is_whole(
    name: str, cut: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    api.conversation.append(api.adapter.user("what do they cost?"))
    events = TEXT_AFTER[name] + 3  # three pieces of 16 characters arrive
    arrived = TEXT[:48]
    server.script(Scripted(text=TEXT, **{cut: events}), Scripted(text=TEXT[48:]))
    reply = _bounded(on_loop, api.reply())
    assert reply.text == TEXT and reply.stop == Stop.END
    (resume,) = reply.resumes
    assert resume.continued and resume.text_chars == 48 and resume.delay == 2.0 and SLEPT == [2.0]
    added = _continuation_of(api, server.requests[1].body)
    assert json.dumps(arrived)[1:-1] in added
    if name == "messages":  # a prefill: the partial text is the assistant's, nothing else
        assert server.requests[1].body["messages"][-1] == {"role": "assistant", "content": arrived}
    else:
        assert "cut off by a network error" in added
    assert [u.output_tokens for u in reply.usage] == [None, 30]


#: What Claude 4.6 and later answer a request that ends with the assistant's message.
NO_PREFILL = (
    "This model does not support assistant message prefill. The conversation must end with a "
    "user message."
)


def _refusing_prefill(reply: Scripted) -> Callable[[Any], Scripted]:
    """A model that refuses a prefill, as Claude 4.6 does, and else answers ``reply``."""

    def answer(request: Any) -> Scripted:
        if request.body["messages"][-1]["role"] == "assistant":
            return Scripted(status=400, error=NO_PREFILL)
        return reply

    return answer


def test_a_model_that_refuses_a_prefill_gets_the_partial_text_quoted_instead(
    make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api("messages")
    api.conversation.append(api.adapter.user("what do they cost?"))
    rest = _refusing_prefill(Scripted(text=TEXT[48:]))
    cut = Scripted(text=TEXT, drop_after=TEXT_AFTER["messages"] + 3)
    server.script(cut, rest, rest, Scripted(text=TEXT, drop_after=TEXT_AFTER["messages"] + 3), rest)
    reply = _bounded(on_loop, api.reply())
    assert reply.text.startswith(TEXT[:48].rstrip()) and reply.text.endswith(TEXT[48:])
    (resume,) = reply.resumes
    assert resume.continued and SLEPT == [2.0]
    asked = server.requests[2].body["messages"][-1]
    assert asked["role"] == "user" and json.dumps(TEXT[:48].rstrip())[1:-1] in json.dumps(asked)
    # The adapter remembers: the next cut's continuation quotes at once.
    reply = _bounded(on_loop, api.reply())
    assert reply.text.endswith(TEXT[48:]) and len(server.requests) == 5
    assert server.requests[4].body["messages"][-1]["role"] == "user"


@pytest.mark.parametrize("name", API_NAMES)
def test_a_stream_cut_after_reasoning_is_continued_quoting_it(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    api.conversation.append(api.adapter.user("think first"))
    before = {"chat": 1, "responses": 4, "messages": 3}[name]
    server.script(
        Scripted(reasoning=REASONING, text=TEXT, drop_after=before + 2),
        Scripted(reasoning=REASONING[32:], text=TEXT),
    )
    reply = _bounded(on_loop, api.reply())
    assert reply.reasoning == REASONING and reply.text == TEXT
    (resume,) = reply.resumes
    assert resume.continued and resume.reasoning_chars == 32 and resume.text_chars == 0
    added = _continuation_of(api, server.requests[1].body)
    assert "while you were reasoning" in added and json.dumps(REASONING[:32])[1:-1] in added


@pytest.mark.parametrize("name", ["responses", "messages"])
def test_a_continued_replys_own_reasoning_goes_back_before_its_calls(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    call = Call("run_code", raw("print(6 * 7)"), f"call_think_{name}")
    before = {"responses": 4, "messages": 3}[name]
    server.script(
        Scripted(reasoning=REASONING, drop_after=before + 2),
        Scripted(reasoning=REASONING[32:], calls=[call]),
    )
    step = _bounded(on_loop, api.turn("think, then compute"))
    assert step.reply.continued and step.results[0].text.endswith("42")
    if name == "messages":  # the continuation's signed thinking block, first
        content = step.messages[0]["content"]
        assert [block["type"] for block in content] == ["thinking", "tool_use"]
        assert content[0]["thinking"] == REASONING[32:] and content[0]["signature"]
    else:  # the continuation's reasoning item, as it came
        kinds = [item.get("type") for item in step.messages]
        assert kinds == ["reasoning", "function_call", "function_call_output"]
        assert step.messages[0]["summary"][0]["text"] == REASONING[32:]


@pytest.mark.parametrize("name", API_NAMES)
def test_the_budget_and_the_backoff_are_kept_and_a_new_turn_renews_the_budget(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name, budget=5)
    api.conversation.append(api.adapter.user("flaky"))
    cut = Scripted(text=TEXT, drop_after=TEXT_AFTER[name] + 1)
    server.script(*[cut] * 6)
    with pytest.raises(Exception) as raised:
        _bounded(on_loop, api.reply())
    assert not isinstance(raised.value, (AssertionError, asyncio.TimeoutError))
    assert SLEPT == [2.0, 4.0, 8.0, 16.0, 30.0] and len(server.requests) == 6
    api.adapter.user("try again")  # a person spoke: a new turn, a new budget
    # A prefill leaves out the blank that ends what arrived: the model writes it again.
    arrived = TEXT[:16].rstrip() if name == "messages" else TEXT[:16]
    server.script(cut, Scripted(text=TEXT[len(arrived) :]))
    assert _bounded(on_loop, api.reply()).text == TEXT and SLEPT[-1] == 2.0


@pytest.mark.parametrize("name", API_NAMES)
def test_with_nothing_arrived_the_same_request_is_sent_again_and_the_reply_says_so(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    api.conversation.append(api.adapter.user("unlucky"))
    status = 529 if name == "messages" else 503
    server.script(Scripted(status=status), Scripted(text="x", drop_after=1), Scripted(text="fine"))
    reply = _bounded(on_loop, api.reply())
    assert reply.text == "fine" and [r.continued for r in reply.resumes] == [False, False]
    assert server.requests[2].body == server.requests[0].body


@pytest.mark.parametrize("name", API_NAMES)
def test_the_users_cancel_is_not_resumed(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name, sleep=_sleep, backoff=20.0)
    api.conversation.append(api.adapter.user("cancel me"))
    server.script(Scripted(text=TEXT, drop_after=TEXT_AFTER[name] + 1), Scripted(text="never"))

    async def cancel_in_the_backoff() -> float:
        task = asyncio.ensure_future(api.reply())
        while not SLEEPING:  # the cut has arrived: the 20 s backoff has begun
            await asyncio.sleep(0.01)
        started = asyncio.get_running_loop().time()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return asyncio.get_running_loop().time() - started

    assert _bounded(on_loop, cancel_in_the_backoff(), 10) < 1
    assert len(server.requests) == 1 and server.unplayed == 1


@pytest.mark.parametrize("name", API_NAMES)
def test_a_cancel_while_the_stream_arrives_is_not_resumed(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    api.conversation.append(api.adapter.user("a long answer, cancelled"))
    server.script(Scripted(text=TEXT, stall_after=TEXT_AFTER[name] + 2), Scripted(text="never"))

    async def cancel_mid_stream() -> None:
        task = asyncio.ensure_future(api.reply())
        while not server.stalled.is_set():  # two pieces of text are out; no more will come
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _bounded(on_loop, cancel_mid_stream(), 10)
    assert len(server.requests) == 1 and server.unplayed == 1 and SLEPT == []


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("name", API_NAMES)
def test_a_stream_cut_inside_a_tool_call_is_saved_and_extended(
    name: str, cut: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    whole = raw(PROGRAM.replace(*FIX))
    call = Call("run_code", whole, f"call_drop_{name}")
    start = {"chat": 2, "responses": 3, "messages": 3}[name]  # the first piece of the call
    server.script(Scripted(calls=[call], **{cut: start + 10}))
    step = _bounded(on_loop, api.turn("long program, flaky network"))
    assert step.reply.stop == Stop.DROPPED and step.reply.dropped and not step.reply.resumes
    (saved,) = step.results
    assert "extend" in saved.text and len(server.requests) == 1
    line = follow(_notice(saved.text), rest=_rest(whole[: 10 * 16]))
    server.script(Scripted(calls=[Call("run_code", json.dumps({"code": line}))]))
    (extended,) = _bounded(on_loop, api.turn()).results
    assert extended.status == "ok" and TOTAL in extended.text, extended.text
    assert HOST_CALLS == ["tea", "milk", "bread"]


@pytest.mark.parametrize("name", API_NAMES)
def test_a_stream_cut_twice_carries_all_that_arrived_and_joins_the_three_parts(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    api.conversation.append(api.adapter.user("very flaky"))
    before = TEXT_AFTER[name]
    server.script(
        Scripted(text=TEXT, drop_after=before + 1),  # "The orders cost "
        Scripted(text=TEXT[16:], drop_after=before + 1),  # "91.5 in all: tea"
        Scripted(text=TEXT[32:]),
    )
    if name == "messages":  # each prefill leaves out the blank that ends it: it comes again
        server.script(
            Scripted(text=TEXT, drop_after=before + 1),
            Scripted(text=TEXT[15:], drop_after=before + 1),  # " 91.5 in all: te"
            Scripted(text=TEXT[31:]),
        )
    reply = _bounded(on_loop, api.reply())
    assert reply.text == TEXT and [r.continued for r in reply.resumes] == [True, True]
    assert SLEPT == [2.0, 4.0]
    arrived = reply.resumes[1].text_chars
    assert json.dumps(TEXT[:arrived])[1:-1] in _continuation_of(api, server.requests[2].body)


@pytest.mark.parametrize("name", API_NAMES)
def test_only_the_end_of_a_long_partial_reply_is_quoted(
    name: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name, quote_limit=20)
    api.conversation.append(api.adapter.user("long answer"))
    server.script(Scripted(text=TEXT, drop_after=TEXT_AFTER[name] + 4), Scripted(text=TEXT[64:]))
    reply = _bounded(on_loop, api.reply())
    assert reply.text == TEXT and reply.resumes[0].quoted_chars == 20
    added = _continuation_of(api, server.requests[1].body)
    assert json.dumps(TEXT[44:64])[1:-1] in added and TEXT[:44] not in added


#: Where a stream is cut after a whole call's arguments, by the events that arrived: after
#: the last piece (Chat), their done event (Responses), the block's stop (Messages); or
#: after the last piece, before those events ("last piece").
WHOLE_CALL_CUTS = {
    ("chat", "ended"): 4,
    ("responses", "ended"): 6,
    ("messages", "ended"): 6,
    ("responses", "last piece"): 5,
    ("messages", "last piece"): 5,
}


@pytest.mark.parametrize(("name", "where"), list(WHOLE_CALL_CUTS))
def test_a_stream_cut_after_a_whole_tool_call_runs_it_and_asks_nothing_again(
    name: str, where: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api(name)
    call = Call("run_code", raw("print(40 + 2)"), f"call_whole_{name}")
    events = WHOLE_CALL_CUTS[name, where]  # the call is whole, the stop has not arrived
    server.script(Scripted(text="", calls=[call], drop_after=events))  # before the stop
    step = _bounded(on_loop, api.turn("one call, then the network goes"))
    assert step.reply.stop == Stop.DROPPED and len(server.requests) == 1
    (result,) = step.results
    told = said.CUT_AFTER_CALL.render()
    assert result.status == "ok" and result.text.endswith("42" + told)
    if name == "responses":  # the item the cut left in_progress goes back as it ran
        (item,) = [m for m in step.messages if m.get("type") == "function_call"]
        assert item["status"] == "completed"


@pytest.mark.parametrize("cut", CUTS)
def test_an_empty_chat_delta_inside_a_call_does_not_hide_the_cut(
    cut: str, make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api("chat")
    call = Call("run_code", raw(PROGRAM.replace(*FIX)), "call_empty_delta")
    # The role chunk, the call's start, then two pieces each followed by an empty delta.
    server.script(Scripted(calls=[call], empty_deltas=True, **{cut: 2 + 4}))
    step = _bounded(on_loop, api.turn("a server that sends empty deltas"))
    assert step.reply.stop == Stop.DROPPED and len(server.requests) == 1
    (saved,) = step.results
    assert saved.call.cut and saved.status == "partial" and "extend" in saved.text
    assert HOST_CALLS == []


def test_chat_parallel_calls_without_an_index_are_told_apart_by_their_ids(
    make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api("chat")
    calls = [Call("run_code", raw(f"print({n} * 7)"), f"call_noindex{n}") for n in (2, 3)]
    server.script(Scripted(calls=calls, indexless=True))
    step = _bounded(on_loop, api.turn("two calls from a server without indexes"))
    assert [r.call.id for r in step.results] == ["call_noindex2", "call_noindex3"]
    assert [r.text.strip()[-2:] for r in step.results] == ["14", "21"]


def test_a_step_cancelled_part_way_keeps_the_results_of_the_calls_that_ran(
    make_api: Callable[..., Api], kb: KernelBackend, on_loop: Any
) -> None:
    api = make_api("chat")
    api.adapter.user("two calls, the loop's own timeout in between")
    charged = 'p = await tools.price(item="tea")\nprint("charged", p)'
    slow = 'import time\nprint("slow", flush=True)\ntime.sleep(1.5)\nprint("slow done")'
    reply = Reply(
        tool_calls=[
            ToolCall("call_charge", "run_code", raw(charged)),
            ToolCall("call_slow", "run_code", raw(slow)),
        ],
        stop=Stop.TOOL_CALLS,
    )

    async def cancel_in_the_second_call() -> Step:
        task = asyncio.ensure_future(api.adapter.step(reply))
        await until_printed(kb, "slow")  # the first call has ended, the slow one begun
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await api.adapter.step(reply)

    step = _bounded(on_loop, cancel_in_the_second_call())
    assert [r.status for r in step.results] == ["ok", "ok"] and HOST_CALLS == ["tea"]
    assert "charged" in step.results[0].text and "slow done" in step.results[1].text


def test_a_responses_stream_that_fails_part_way_is_continued_not_taken_whole(
    make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    api = make_api("responses")
    api.conversation.append(api.adapter.user("what do they cost?"))
    events = TEXT_AFTER["responses"] + 2  # two pieces of text, then response.failed
    server.script(Scripted(text=TEXT, end_after=events, failed=True), Scripted(text=TEXT[32:]))
    reply = _bounded(on_loop, api.reply())
    assert reply.text == TEXT and reply.stop == Stop.END and len(server.requests) == 2
    (resume,) = reply.resumes
    assert resume.continued and resume.text_chars == 32 and "response.failed" in resume.error


@pytest.mark.parametrize(
    "settings",
    [
        {"budget": -1},
        {"budget": 1.5},
        {"backoff": float("inf")},
        {"max_backoff": -2},
        {"quote_limit": "x"},
        {"quote_limit": 0},
    ],
)
def test_continuation_settings_that_cannot_hold_are_refused_by_name(
    settings: dict[str, Any],
) -> None:
    (key,) = settings
    with pytest.raises(ValueError, match=f"Continuation\\({key}="):
        Continuation(**settings)


def test_a_loop_that_iterates_the_sdks_stream_helpers_itself_gets_the_same_reply(
    make_api: Callable[..., Api], server: ModelServer, on_loop: Any
) -> None:
    """``client.chat.completions.stream()``, ``client.responses.stream()`` and
    ``client.messages.stream()`` yield events of their own beside the API's."""

    async def through_helper(name: str) -> Step:
        api = make_api(name)
        collector = api.adapter.collector()
        params = {k: v for k, v in api.params().items() if k != "tools"}
        if name == "chat":  # Chat sends its usage only when asked
            params["stream_options"] = {"include_usage": True}
        helper = api.create.__self__.stream
        async with helper(**params) as events:
            async for event in events:
                collector.add(event)
        return await api.adapter.step(collector.reply())

    for name in API_NAMES:
        call = Call("run_code", raw("print(6 * 7)"), f"call_helper_{name}")
        server.script(Scripted(text="Running it.", calls=[call]))
        step = _bounded(on_loop, through_helper(name))
        assert step.reply.text == "Running it." and step.reply.stop == Stop.TOOL_CALLS, name
        assert [result.text for result in step.results] == ["42"], name
        assert step.reply.tokens.output_tokens == 30, name


def test_a_sync_clients_stream_is_continued_too(
    kb: KernelBackend, server: ModelServer, on_loop: Any
) -> None:
    client = openai.OpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
    chat = ChatCompletions(kb, Continuation(sleep=_no_wait))
    server.script(Scripted(text=TEXT, drop_after=3), Scripted(text=TEXT[32:]))
    messages = [chat.user("sync")]
    reply = _bounded(
        on_loop, chat.stream(client.chat.completions.create, model="m", messages=messages)
    )
    assert reply.text == TEXT and reply.resumes[0].text_chars == 32
