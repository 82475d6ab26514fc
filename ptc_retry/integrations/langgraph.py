"""LangChain and LangGraph on a ptc-retry kernel: ``create_agent(model, [run_code_tool(kb)],
system_prompt=instructions(kb), middleware=[CutOffCalls(kb)])``, or LangGraph's
``create_react_agent(model, [run_code_tool(kb)], prompt=instructions(kb),
post_model_hook=cut_off_calls(kb))``.

``run_code_tool(kb)`` is a LangChain tool (a ``StructuredTool``, async) that runs each program
the model sends in ``kb``'s kernel under the model's tool-call id, so a failed program's
``ToolMessage`` ends with the notice and the model's next call can be the one-line replay.
``instructions(kb, own)`` is the system prompt. ``CutOffCalls(kb)`` (a middleware of
``langchain.agents.create_agent``) and ``cut_off_calls(kb)`` (a ``post_model_hook``) answer a
``run_code`` call cut off by the output-token limit. ``pip install 'ptc-retry[langgraph]'``
brings ``langchain``, ``langchain-core`` and ``langgraph``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from pydantic import BaseModel, Field, create_model

from ..backend import KernelBackend
from ..core.status import ResultStatus
from .run_code import RunCodeTool

__all__ = ["CutOffCalls", "cut_off_calls", "instructions", "run_code_tool"]

#: How each provider's ``response_metadata`` says the reply stopped at the output-token
#: limit: OpenAI's ``finish_reason``, Anthropic's ``stop_reason``.
CUT_OFF = {"finish_reason": "length", "stop_reason": "max_tokens"}
#: A program that ended so is an error ``ToolMessage`` (``status="error"``).
FAILED = (ResultStatus.ERROR, ResultStatus.TIMEOUT, ResultStatus.DIED)


def run_code_tool(backend: KernelBackend) -> StructuredTool:
    """``run_code`` as a LangChain tool, for ``create_agent(model, tools=[...])``,
    ``create_react_agent(model, tools=[...])`` or any agent that runs LangChain tools from the
    model's tool calls.

    Each call goes to ``backend.handle_tool_call`` with the call's id (LangChain's
    ``InjectedToolCallId``); the ``ToolMessage`` holds the text the model reads, and its
    ``status`` is ``"error"`` for a program that failed, timed out or killed its kernel
    (Anthropic's ``is_error``). The tool is
    async only (``ainvoke``, ``astream``), as the backend is. The backend is the caller's to
    start and shut down; register its host tools before making the tool (see
    ``RunCodeTool``).
    """
    tool = RunCodeTool(backend)

    async def run_code(code: str, tool_call_id: str) -> ToolMessage:
        before = backend.last_result
        text = await tool({"code": code}, tool_call_id)
        result = backend.last_result  # this call's, when its program ran
        failed = result is not before and result is not None and result.status in FAILED
        status = "error" if failed else "success"
        return ToolMessage(text, tool_call_id=tool_call_id, name=tool.name, status=status)

    return StructuredTool.from_function(
        coroutine=run_code,
        name=tool.name,
        description=tool.description,
        args_schema=_arguments(tool),
    )


def instructions(backend: KernelBackend, own: str | None = None) -> str:
    """The system prompt (``system_prompt=`` of ``create_agent``, ``prompt=`` of
    ``create_react_agent``): ``own``, a blank line, then the prompt section. Behind a
    gateway, call it once the backend has started."""
    return RunCodeTool(backend).instructions(own)


def cut_off_calls(
    backend: KernelBackend,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, list[BaseMessage]]]]:
    """A ``post_model_hook`` for ``create_react_agent`` that answers cut-off calls.

    When the reply stopped at the output-token limit, its cut-off ``run_code`` call goes to
    ``backend.handle_partial_tool_call`` (saved, not run), and its ``ToolMessage`` holds the
    text that teaches ``ptc_retry.extend``: the agent then asks the model again. That call
    is one LangChain put in the ``AIMessage``'s ``invalid_tool_calls`` (arguments that are no
    JSON), or else its last tool call: decoded as far as it arrived (a streamed reply, whose
    open string LangChain closes; Anthropic's non-streamed ``input``), which the agent would
    otherwise run cut short.
    """
    tool = RunCodeTool(backend)

    async def answer_cut_off_calls(state: Mapping[str, Any]) -> dict[str, list[BaseMessage]]:
        return {"messages": await _answers(tool, state["messages"])}

    return answer_cut_off_calls


class CutOffCalls(AgentMiddleware[AgentState[Any], Any]):
    """A middleware for ``langchain.agents.create_agent`` that answers cut-off calls, as
    ``cut_off_calls`` does for ``create_react_agent``: after a reply that stopped at the
    output-token limit, its cut-off ``run_code`` call (as ``cut_off_calls`` finds it) goes to
    ``backend.handle_partial_tool_call``, its ``ToolMessage`` holds the text that teaches
    ``ptc_retry.extend``, and the agent asks the model again."""

    def __init__(self, backend: KernelBackend) -> None:
        super().__init__()
        self._tool = RunCodeTool(backend)

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        answers = await _answers(self._tool, messages)
        if not answers:
            return None
        if messages[-1].tool_calls:  # the tools run first; the model is asked again after
            return {"messages": answers}
        return {"messages": answers, "jump_to": "model"}


async def _answers(tool: RunCodeTool, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """A ``ToolMessage`` for each ``run_code`` call the last reply holds cut off, each saved
    through ``handle_partial_tool_call``; none when the reply did not stop at the limit.

    Cut off are the calls whose arguments are no JSON (``invalid_tool_calls``, their string
    as it arrived) and, when there is none, the reply's last tool call: a streamed reply's
    cut call reaches ``tool_calls`` decoded as far as it arrived (LangChain closes its open
    string), as does a provider's that decodes it (Anthropic's non-streamed ``input``). Its
    answer keeps the agent from running it: the call is no longer pending.
    """
    last = messages[-1] if messages else None
    if not isinstance(last, AIMessage) or not _cut_off(last):
        return []
    cut: list[tuple[str, str | dict[str, Any]]] = [
        (str(call["id"]), str(call["args"]))
        for call in last.invalid_tool_calls
        if call.get("name") == tool.name and call.get("id") and call.get("args")
    ]
    if not last.invalid_tool_calls and last.tool_calls:
        call = last.tool_calls[-1]
        if call["name"] == tool.name and call.get("id"):
            cut.append((str(call["id"]), call["args"]))
    answers: list[BaseMessage] = []
    for call_id, arguments in cut:
        text = await tool(arguments, call_id, cut_off=True)
        answers.append(ToolMessage(text, tool_call_id=call_id, name=tool.name))
    return answers


def _arguments(tool: RunCodeTool) -> type[BaseModel]:
    """The arguments model of ``run_code``: its ``code``, described as the backend describes
    it, and the call's id, which LangChain fills in and the model does not see."""
    return create_model(
        "RunCodeArguments",
        code=(str, Field(description=tool.code_description)),
        tool_call_id=(Annotated[str, InjectedToolCallId], ...),
    )


def _cut_off(message: AIMessage) -> bool:
    """Whether the model's reply stopped at the output-token limit."""
    metadata = message.response_metadata or {}
    return any(metadata.get(key) == value for key, value in CUT_OFF.items())
