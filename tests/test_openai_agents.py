"""The OpenAI Agents SDK on a ptc-retry kernel: a real ``Agent`` and ``Runner``, the SDK's
own scripted model (``agents.testing.ScriptedModel``, no network), a real kernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK is an optional extra (openai-agents)")

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner  # noqa: E402
from agents.exceptions import ModelBehaviorError  # noqa: E402
from agents.testing import ModelCall, ModelStep, ScriptedModel, function_call  # noqa: E402
from agents.testing import assistant_message as reply  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall  # noqa: E402

from ptc_retry.backend import KernelBackend  # noqa: E402
from ptc_retry.integrations.openai_agents import instructions, run_code_tool  # noqa: E402

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
    line_of,
    printed_total,
)
from .model_server import Call, ModelServer, Reply  # noqa: E402

pytestmark = pytest.mark.kernel

#: Tracing would try to export the run: these tests make no network call.
OFFLINE = RunConfig(tracing_disabled=True)


def tool_result(call: ModelCall) -> str:
    """What the model reads of its latest tool call: the last ``function_call_output``."""
    outputs = [item for item in call.input if item.get("type") == "function_call_output"]
    assert outputs, "the model was called without a tool result"
    return str(outputs[-1]["output"])


def agent_on(backend: KernelBackend, steps: list[Any]) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(steps)
    agent = Agent(
        name="orders",
        instructions=instructions(backend, "You answer questions about orders."),
        tools=[run_code_tool(backend)],
        model=model,
    )
    return agent, model


def answer(call: ModelCall) -> Any:
    """The model's last step: the total its last program printed."""
    return [reply(f"The orders cost {printed_total(tool_result(call))}.")]


def test_a_failed_program_is_fixed_by_the_one_line_replay_and_no_host_call_is_repeated(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any]
) -> None:
    read: list[str] = []

    def fix(call: ModelCall) -> Any:
        read.append(tool_result(call))
        return [function_call("run_code", {"code": fix_line(read[-1])}, call_id="call_fix1")]

    agent, model = agent_on(
        priced_backend,
        [
            [function_call("run_code", {"code": PRICED_ORDERS}, call_id=MODEL_CALL_ID)],
            ModelStep.respond(fix),
            ModelStep.respond(answer),
        ],
    )
    before = len(prices.calls)

    result = on_loop(Runner.run(agent, "What do the orders cost?", run_config=OFFLINE))

    assert result.final_output == f"The orders cost {PRICED_TOTAL}."
    model.assert_complete()
    check_fixed_by_one_replay(read[0], prices.calls[before:], priced_backend)
    saved = priced_backend.session_dir / "by-id" / f"{MODEL_CALL_ID}.json"  # type: ignore[operator]
    # The arguments string as the model sent it, byte for byte (the SDK's compact JSON).
    assert saved.read_text() == json.dumps({"code": PRICED_ORDERS}, separators=(",", ":"))


def test_the_agent_s_instructions_end_with_the_prompt_section_and_the_tool_is_the_backend_s(
    priced_backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    agent, model = agent_on(priced_backend, [[reply("Nothing to run.")]])

    on_loop(Runner.run(agent, "Hello.", run_config=OFFLINE))

    call = model.last_call
    assert call is not None and call.system_instructions is not None
    assert call.system_instructions.startswith("You answer questions about orders.\n\n")
    assert call.system_instructions.endswith(priced_backend.system_prompt())
    (tool,) = call.tools
    function = priced_backend.tool_schema("openai")["function"]
    assert (tool.name, tool.description) == (function["name"], function["description"])
    assert "lookup_price" in tool.description


def test_a_call_cut_off_in_its_program_is_saved_and_the_rest_sent_with_extend(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any]
) -> None:
    read: list[str] = []

    def rest(call: ModelCall) -> Any:
        read.append(tool_result(call))
        code = follow(read[-1], rest=CUT_REST)
        return [function_call("run_code", {"code": code}, call_id="call_rest1")]

    cut = ResponseFunctionToolCall(
        id="fc_cut1",
        call_id="call_cut1",
        type="function_call",
        name="run_code",
        arguments=CUT_ARGUMENTS,
        status="incomplete",
    )
    agent, _ = agent_on(priced_backend, [[cut], ModelStep.respond(rest), ModelStep.respond(answer)])
    before = len(prices.calls)

    result = on_loop(Runner.run(agent, "What do the orders cost?", run_config=OFFLINE))

    assert result.final_output == f"The orders cost {PRICED_TOTAL}."
    check_extended(read[0], prices.calls[before:], priced_backend)


def test_arguments_that_are_not_json_get_a_text_saying_what_to_send(
    priced_backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    read: list[str] = []

    def done(call: ModelCall) -> Any:
        read.append(tool_result(call))
        return [reply("Done.")]

    bad = function_call("run_code", "print(1)", call_id="call_bad1")
    agent, _ = agent_on(priced_backend, [[bad], ModelStep.respond(done)])

    on_loop(Runner.run(agent, "Print one.", run_config=OFFLINE))

    assert read[0].startswith("Error:") and '{"code":' in read[0]


def test_a_native_mode_backend_is_refused_with_the_mode_to_use(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"KernelBackend\(mode='code'\)"):
        run_code_tool(KernelBackend(mode="native", root=tmp_path))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_the_sdk_s_responses_model_ends_a_run_whose_reply_reaches_the_output_limit(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any], streamed: bool
) -> None:
    """What docs/integrations.md says of a cut-off call with the SDK's own Responses model
    (the real client, a local server speaking the Responses wire format): the SDK raises
    before any tool runs, so nothing is saved and no host call is made."""
    with ModelServer() as server:
        server.script(Reply(calls=[Call("run_code", CUT_ARGUMENTS, "call_sdkcut1")], stop="length"))
        client = AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        agent, _ = agent_on(priced_backend, [])
        agent.model = OpenAIResponsesModel(model="scripted-model", openai_client=client)
        before = len(prices.calls)

        async def run() -> None:
            if not streamed:
                await Runner.run(agent, "What do the orders cost?", run_config=OFFLINE)
                return
            result = Runner.run_streamed(agent, "What do the orders cost?", run_config=OFFLINE)
            async for _ in result.stream_events():
                pass

        with pytest.raises(ModelBehaviorError, match=r"response\.incomplete"):
            on_loop(run())

    assert prices.calls[before:] == []
    with pytest.raises(ValueError):
        line_of(priced_backend.session_dir, "call_sdkcut1")  # nothing was saved
