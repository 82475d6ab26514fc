"""pydantic-ai on a ptc-retry kernel: a real ``Agent`` with the ``PtcRetry`` capability,
pydantic-ai's ``FunctionModel`` playing the model (no network), a real kernel."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai is an optional extra (pydantic-ai)")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from ptc_retry.backend import KernelBackend  # noqa: E402
from ptc_retry.integrations.pydantic_ai import PtcRetry  # noqa: E402

from .helpers import (  # noqa: E402
    CUT_ARGUMENTS,
    CUT_REST,
    MODEL_CALL_ID,
    PRICED_ORDERS,
    PRICED_TOTAL,
    OnLoop,
    PriceList,
    StartBackend,
    check_extended,
    check_fixed_by_one_replay,
    fix_line,
    follow,
    line_of,
    printed_total,
)

pytestmark = pytest.mark.kernel

#: One reply of the scripted model, made from the messages so far.
Step = Callable[[list[ModelMessage]], ModelResponse]


class Script:
    """The model: answers each request with the next of ``steps``, and keeps what it read
    (``read``: the text of each tool result or retry prompt) and its ``instructions``."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.read: list[str] = []
        self.instructions: list[str | None] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                self.read.append(part.model_response_str())
            elif isinstance(part, RetryPromptPart):
                self.read.append(part.model_response())
        return self.steps.pop(0)(messages)

    def agent(self, backend: KernelBackend) -> Agent[None, str]:
        return Agent(
            FunctionModel(self),
            instructions="You answer questions about orders.",
            capabilities=[PtcRetry(backend)],
        )


def run_code(code: str, call_id: str, **response: Any) -> Step:
    return lambda messages: ModelResponse(
        parts=[ToolCallPart("run_code", json.dumps({"code": code}), tool_call_id=call_id)],
        **response,
    )


def answer(messages: list[ModelMessage]) -> ModelResponse:
    """The model's last step: the total its last program printed."""
    (part,) = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    return ModelResponse(parts=[TextPart(f"The orders cost {printed_total(str(part.content))}.")])


def test_a_failed_program_is_fixed_by_the_one_line_replay_and_no_host_call_is_repeated(
    priced_backend: KernelBackend, prices: PriceList, on_loop: OnLoop[Any]
) -> None:
    script = Script(run_code(PRICED_ORDERS, MODEL_CALL_ID), lambda m: fix(script), answer)

    def fix(script: Script) -> ModelResponse:
        return run_code(fix_line(script.read[-1]), "call_fix1")([])

    before = len(prices.calls)

    result = on_loop(script.agent(priced_backend).run("What do the orders cost?"))

    assert result.output == f"The orders cost {PRICED_TOTAL}."
    check_fixed_by_one_replay(script.read[0], prices.calls[before:], priced_backend)
    turns = {line_of(priced_backend.session_dir, i)["turn"] for i in (MODEL_CALL_ID, "call_fix1")}
    assert turns == {priced_backend.turn}  # the run's calls are one turn


def test_the_instructions_hold_the_agent_s_own_and_the_prompt_section_and_each_run_is_a_turn(
    priced_backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    script = Script(lambda m: ModelResponse(parts=[TextPart("Hello.")]))
    turn = priced_backend.turn

    on_loop(script.agent(priced_backend).run("Hi."))

    (instructions,) = script.instructions
    assert instructions is not None
    assert "You answer questions about orders." in instructions
    assert priced_backend.system_prompt().strip() in instructions
    assert priced_backend.turn == turn + 1


@pytest.mark.parametrize(
    ("arguments", "tag"),
    [(CUT_ARGUMENTS, "raw"), (json.loads(CUT_ARGUMENTS + '"}'), "decoded")],
    ids=["as-it-arrived", "decoded-by-the-provider"],
)
def test_a_call_cut_off_by_the_token_limit_is_saved_and_the_rest_sent_with_extend(
    priced_backend: KernelBackend,
    prices: PriceList,
    on_loop: OnLoop[Any],
    arguments: str | dict[str, Any],
    tag: str,
) -> None:
    """The arguments as they arrived (no JSON yet), or as some providers decode them as far
    as they arrived (Anthropic's non-streamed ``input``): a mapping that validates, whose
    program, run, would stop after line 3 having called the host twice."""
    ids = (f"call_cut_{tag}", f"call_rest_{tag}")

    def cut(messages: list[ModelMessage]) -> ModelResponse:
        call = ToolCallPart("run_code", arguments, tool_call_id=ids[0])
        return ModelResponse(parts=[call], finish_reason="length")

    def rest(messages: list[ModelMessage]) -> ModelResponse:
        return run_code(follow(script.read[-1], rest=CUT_REST), ids[1])([])

    script = Script(cut, rest, answer)
    before = len(prices.calls)

    result = on_loop(script.agent(priced_backend).run("What do the orders cost?"))

    assert result.output == f"The orders cost {PRICED_TOTAL}."
    check_extended(script.read[0], prices.calls[before:], priced_backend, ids)


def test_malformed_arguments_without_a_cut_get_pydantic_ai_s_own_retry_prompt(
    priced_backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    def malformed(messages: list[ModelMessage]) -> ModelResponse:
        call = ToolCallPart("run_code", '{"code": "print(1)"', tool_call_id="call_bad1")
        return ModelResponse(parts=[call])

    script = Script(malformed, lambda m: ModelResponse(parts=[TextPart("Done.")]))

    on_loop(script.agent(priced_backend).run("Print one."))

    assert '"type":"json_invalid"' in script.read[0] and "[ptc-retry]" not in script.read[0]
    with pytest.raises(ValueError):
        line_of(priced_backend.session_dir, "call_bad1")  # nothing was saved


def test_a_cut_off_call_decoded_before_its_program_began_says_so(
    priced_backend: KernelBackend, on_loop: OnLoop[Any]
) -> None:
    def cut(messages: list[ModelMessage]) -> ModelResponse:
        call = ToolCallPart("run_code", {}, tool_call_id="call_dcut2")
        return ModelResponse(parts=[call], finish_reason="length")

    script = Script(cut, lambda m: ModelResponse(parts=[TextPart("Done.")]))

    on_loop(script.agent(priced_backend).run("Print one."))

    assert script.read[0].startswith("[ptc-retry] The call was cut off before its program began")


#: Looks up a price, then sends an email, which waits for a person, then prints.
EMAILING = """\
price = await tools.lookup_price(item="tea")
sent = await tools.send_email(to="ann@example.com", body=f"Tea costs {price}.")
print("sent:", sent, "price:", price)"""


def test_a_paused_program_defers_its_call_and_the_person_s_decision_is_its_result(
    start_backend: StartBackend, on_loop: OnLoop[Any]
) -> None:
    """``defer_approvals=True``: the run ends with pydantic-ai's ``DeferredToolRequests``
    (the program waits in the kernel), the person decides with ``kb.approve``, and the next
    run gets the continuation's text as the call's result: the model never reads a pause,
    and nothing before it runs again."""
    prices, outbox = PriceList(), []

    def send_email(to: str, body: str) -> str:
        """Send an email."""
        outbox.append(to)
        return "ok"

    backend = start_backend(tools=[prices.lookup_price])
    backend.register_tool(send_email, approval=True)
    script = Script(run_code(EMAILING, "call_mail1"), answer_sent)
    agent = Agent(
        FunctionModel(script),
        output_type=[str, DeferredToolRequests],
        capabilities=[PtcRetry(backend, defer_approvals=True)],
    )

    first = on_loop(agent.run("Tell Ann what tea costs."))

    assert isinstance(first.output, DeferredToolRequests) and script.read == []
    (call,) = first.output.calls
    waiting = first.output.metadata[call.tool_call_id]
    assert call.tool_call_id == "call_mail1" and waiting["tool"] == "send_email"
    assert (prices.calls, outbox) == (["tea"], [])
    continued = on_loop(backend.approve(waiting["reference"]))
    assert continued is not None
    results = DeferredToolResults(calls={call.tool_call_id: continued.text})

    second = on_loop(agent.run(message_history=first.all_messages(), deferred_tool_results=results))

    assert second.output == "Sent: ok."
    assert script.read == [continued.text] and "sent: ok price: 3.0" in continued.text
    assert (prices.calls, outbox) == (["tea"], ["ann@example.com"])


def answer_sent(messages: list[ModelMessage]) -> ModelResponse:
    (part,) = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    sent = str(part.content).split("sent: ")[1].split()[0]
    return ModelResponse(parts=[TextPart(f"Sent: {sent}.")])
