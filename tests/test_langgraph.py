"""LangChain's and LangGraph's prebuilt ReAct agents on a ptc-retry kernel
(``langchain.agents.create_agent`` and ``langgraph.prebuilt.create_react_agent``) with
``run_code_tool``, a scripted LangChain chat model that binds tools (no network), a real
kernel."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="LangChain and LangGraph are an optional extra (langgraph)")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

with warnings.catch_warnings():  # LangGraph 1.x: "moved to langchain.agents" (still served)
    warnings.simplefilter("ignore", DeprecationWarning)
    from langgraph.prebuilt import create_react_agent  # noqa: E402

from ptc_retry.backend import KernelBackend  # noqa: E402
from ptc_retry.integrations.langgraph import (  # noqa: E402
    CutOffCalls,
    cut_off_calls,
    instructions,
    run_code_tool,
)

from .helpers import (  # noqa: E402
    CUT_ARGUMENTS,
    CUT_REST,
    MODEL_CALL_ID,
    PRICED_ORDERS,
    PRICED_TOTAL,
    OnLoop,
    PriceList,
    check_extended,
    check_fixed_by_one_replay,
    fix_line,
    follow,
    printed_total,
)

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.filterwarnings("ignore:create_react_agent has been moved"),
]

#: One reply of the scripted model, made from the messages so far.
Step = Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers with the next of ``steps``, keeps what it read (``read``,
    the text of each ``ToolMessage`` since its last reply) and the tools it was bound to."""

    steps: list[Any]
    read: list[str] = []
    system: list[str] = []
    bound: list[dict[str, Any]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.bound = [convert_to_openai_tool(tool) for tool in tools]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.system.append(str(messages[0].content))
        after = max(i for i, m in enumerate(messages) if not isinstance(m, ToolMessage)) + 1
        self.read += [str(m.content) for m in messages[after:]]
        step: Step = self.steps.pop(0)
        return ChatResult(generations=[ChatGeneration(message=step(messages))])

    async def _astream(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The next step's reply as a provider streams it: its text, then each tool call's
        arguments string in pieces of 16 characters (a ``Streamed`` step's, as it arrived),
        and the reply's ``response_metadata`` with the last chunk."""
        result = self._generate(messages)
        message = result.generations[0].message
        assert isinstance(message, AIMessage)
        yield ChatGenerationChunk(message=AIMessageChunk(str(message.content)))
        raw = getattr(message, "raw_arguments", {})
        for index, call in enumerate(message.tool_calls):
            arguments = raw.get(call["id"]) or json.dumps(call["args"])
            for start in range(0, len(arguments), 16):
                first = start == 0
                piece = {
                    "name": call["name"] if first else None,
                    "args": arguments[start : start + 16],
                    "id": call["id"] if first else None,
                    "index": index,
                }
                yield ChatGenerationChunk(message=AIMessageChunk("", tool_call_chunks=[piece]))
        last = AIMessageChunk("", response_metadata=message.response_metadata)
        yield ChatGenerationChunk(message=last)


class Streamed(AIMessage):
    """A reply whose tool calls' arguments stream as ``raw_arguments`` holds them, by call
    id: a string the stream cut off, which no ``AIMessage`` can hold whole."""

    raw_arguments: dict[str, str] = {}


def run_code(code: str, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "run_code", "args": {"code": code}, "id": call_id}])


def answer(messages: list[BaseMessage]) -> AIMessage:
    """The model's last step: the total its last program printed."""
    return AIMessage(f"The orders cost {printed_total(str(messages[-1].content))}.")


OWN = "You answer questions about orders."


def langchain_agent(backend: KernelBackend, model: ScriptedChatModel) -> Any:
    return create_agent(
        model,
        [run_code_tool(backend)],
        system_prompt=instructions(backend, OWN),
        middleware=[CutOffCalls(backend)],
    )


def langgraph_agent(backend: KernelBackend, model: ScriptedChatModel) -> Any:
    return create_react_agent(
        model,
        [run_code_tool(backend)],
        prompt=instructions(backend, OWN),
        post_model_hook=cut_off_calls(backend),
    )


@dataclass(frozen=True)
class Prebuilt:
    """One of the two prebuilt ReAct agents, and the suffix of the call ids its runs send
    (the module's tests share one kernel, whose ids must stay apart)."""

    build: Callable[[KernelBackend, ScriptedChatModel], Any]
    tag: str

    def id(self, name: str) -> str:
        return f"{name}_{self.tag}"


@pytest.fixture(
    params=[Prebuilt(langchain_agent, "lc"), Prebuilt(langgraph_agent, "lg")],
    ids=["create_agent", "create_react_agent"],
)
def prebuilt(request: pytest.FixtureRequest) -> Prebuilt:
    """The agent the test runs: each of the two prebuilt ReAct agents in turn."""
    return request.param  # type: ignore[no-any-return]


def final(state: dict[str, Any]) -> str:
    return str(state["messages"][-1].content)


def test_a_failed_program_is_fixed_by_the_one_line_replay_and_no_host_call_is_repeated(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any], prebuilt: Prebuilt
) -> None:
    ids = (prebuilt.id(MODEL_CALL_ID), prebuilt.id("call_fix1"))
    model = ScriptedChatModel(steps=[lambda m: run_code(PRICED_ORDERS, ids[0])])
    model.steps += [lambda m: run_code(fix_line(model.read[-1]), ids[1]), answer]
    before = len(prices.calls)

    state = on_loop(
        prebuilt.build(priced_backend, model).ainvoke({"messages": ["What do the orders cost?"]})
    )

    assert final(state) == f"The orders cost {PRICED_TOTAL}."
    check_fixed_by_one_replay(model.read[0], prices.calls[before:], priced_backend, ids)
    # The failed program's ToolMessage is an error one (Anthropic's is_error), the fix's not.
    answered = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answered] == ["error", "success"]


def test_the_system_prompt_ends_with_the_prompt_section_and_the_model_sees_only_code(
    priced_backend: KernelBackend, on_loop: OnLoop[Any], prebuilt: Prebuilt
) -> None:
    model = ScriptedChatModel(steps=[lambda m: AIMessage("Hello.")])

    on_loop(prebuilt.build(priced_backend, model).ainvoke({"messages": ["Hi."]}))

    (system,) = model.system
    assert system.startswith("You answer questions about orders.\n\n")
    assert system.endswith(priced_backend.system_prompt())
    (bound,) = model.bound
    function = priced_backend.tool_schema("openai")["function"]
    assert bound["function"]["description"] == function["description"]
    assert list(bound["function"]["parameters"]["properties"]) == ["code"]  # not the call id


def test_a_call_cut_off_by_the_token_limit_is_saved_and_the_rest_sent_with_extend(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any], prebuilt: Prebuilt
) -> None:
    ids = (prebuilt.id("call_cut1"), prebuilt.id("call_rest1"))
    cut = AIMessage(
        "",
        invalid_tool_calls=[
            {"name": "run_code", "args": CUT_ARGUMENTS, "id": ids[0], "error": None}
        ],
        response_metadata={"finish_reason": "length"},
    )
    model = ScriptedChatModel(steps=[lambda m: cut])
    model.steps += [lambda m: run_code(follow(model.read[-1], rest=CUT_REST), ids[1])]
    model.steps += [answer]
    before = len(prices.calls)

    state = on_loop(
        prebuilt.build(priced_backend, model).ainvoke({"messages": ["What do the orders cost?"]})
    )

    check_extended(model.read[0], prices.calls[before:], priced_backend, ids)
    assert final(state) == f"The orders cost {PRICED_TOTAL}."


def test_a_streamed_call_cut_off_by_the_token_limit_is_saved_not_run_cut_short(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any], prebuilt: Prebuilt
) -> None:
    """Streamed, a cut-off call's arguments reach the agent decoded as far as they arrived
    (LangChain closes the open string): a call like any other, whose program, run, would
    stop after line 3 having called the host twice."""
    ids = (prebuilt.id("call_scut1"), prebuilt.id("call_srest1"))
    cut = Streamed(
        "",
        tool_calls=[{"name": "run_code", "args": {}, "id": ids[0]}],
        raw_arguments={ids[0]: CUT_ARGUMENTS},
        response_metadata={"finish_reason": "length"},
    )
    model = ScriptedChatModel(steps=[lambda m: cut])
    model.steps += [lambda m: run_code(follow(model.read[-1], rest=CUT_REST), ids[1])]
    model.steps += [answer]
    before = len(prices.calls)
    agent = prebuilt.build(priced_backend, model)

    async def stream() -> None:
        question = {"messages": ["What do the orders cost?"]}
        async for _ in agent.astream(question, stream_mode="messages"):
            pass

    on_loop(stream())

    check_extended(model.read[0], prices.calls[before:], priced_backend, ids)


@pytest.mark.parametrize("kept", [True, False], ids=["session-kept", "new-session"])
def test_a_checkpointed_thread_goes_on_after_the_process_restarts(
    jupyter_path: Path, tmp_path: Path, on_loop: OnLoop[Any], kept: bool
) -> None:
    """A LangGraph thread outlives the process that ran it; its messages name ``#1``. With
    the backend's session kept for the thread, the next process's backend replays it, its
    host results reused. On a new session, ``#1`` would be the replay itself: it says so."""
    prices, saver = PriceList(), InMemorySaver()
    thread = {"configurable": {"thread_id": "orders-1"}}
    model = ScriptedChatModel(steps=[lambda m: run_code(PRICED_ORDERS, "call_t1")])
    model.steps += [lambda m: AIMessage("It failed; shall I fix it?")]
    model.steps += [lambda m: run_code(fix_line(model.read[0]), "call_t2")]
    model.steps += [lambda m: AIMessage(str(m[-1].content))]

    async def one_process(question: str, session: dict[str, Any]) -> str:
        backend = KernelBackend(tools=[prices.lookup_price], **session)
        await backend.start()
        try:
            agent = create_agent(
                model,
                [run_code_tool(backend)],
                system_prompt=instructions(backend, OWN),
                middleware=[CutOffCalls(backend)],
                checkpointer=saver,
            )
            backend.new_turn()
            state = await agent.ainvoke({"messages": [question]}, thread)
            return final(state)
        finally:
            await backend.shutdown(keep=True)

    first = {"session_id": "orders-1", "root": tmp_path / "roots"}
    later = first if kept else {"session_id": "orders-1b", "root": tmp_path / "roots"}
    on_loop(one_process("What do the orders cost?", first))
    said = on_loop(one_process("Yes, fix it.", later))

    if kept:
        assert printed_total(said) == PRICED_TOTAL and prices.calls == ["tea", "milk"]
    else:
        assert said.startswith("ReplayError: no program before this one is #1 in this session")
        assert prices.calls == ["tea", "milk"]  # nothing ran again
