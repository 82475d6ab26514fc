"""LangChain and LangGraph on a ptc-retry kernel: ``create_react_agent(model, [run_code_tool(kb)],
prompt=instructions(kb))``.

``run_code_tool(kb)`` is a LangChain tool (a ``StructuredTool``, async) that runs each program
the model sends in ``kb``'s kernel under the model's tool-call id, so a failed program's
``ToolMessage`` ends with the notice and the model's next call can be the one-line replay.
``instructions(kb, own)`` is the system prompt. ``cut_off_calls(kb)`` is a
``post_model_hook`` that answers a ``run_code`` call cut off by the output-token limit.
``pip install 'ptc-retry[langgraph]'`` brings ``langchain-core`` and ``langgraph``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from pydantic import BaseModel, Field, create_model

from ..backend import KernelBackend
from .run_code import RunCodeTool

__all__ = ["cut_off_calls", "instructions", "run_code_tool"]

#: How each provider's ``response_metadata`` says the reply stopped at the output-token
#: limit: OpenAI's ``finish_reason``, Anthropic's ``stop_reason``.
CUT_OFF = {"finish_reason": "length", "stop_reason": "max_tokens"}


def run_code_tool(backend: KernelBackend) -> StructuredTool:
    """``run_code`` as a LangChain tool, for ``create_react_agent(model, tools=[...])`` (or
    any agent that runs LangChain tools from the model's tool calls).

    Each call goes to ``backend.handle_tool_call`` with the call's id (LangChain's
    ``InjectedToolCallId``); the ``ToolMessage`` holds the text the model reads. The tool is
    async only (``ainvoke``, ``astream``), as the backend is. The backend is the caller's to
    start and shut down; register its host tools before making the tool (see
    ``RunCodeTool``).
    """
    tool = RunCodeTool(backend)

    async def run_code(code: str, tool_call_id: str) -> str:
        return await tool({"code": code}, tool_call_id)

    return StructuredTool.from_function(
        coroutine=run_code,
        name=tool.name,
        description=tool.description,
        args_schema=_arguments(tool),
    )


def instructions(backend: KernelBackend, own: str | None = None) -> str:
    """The system prompt (``prompt=`` of ``create_react_agent``): ``own``, a blank line, then
    the prompt section. Behind a gateway, call it once the backend has started."""
    return RunCodeTool(backend).instructions(own)


def cut_off_calls(
    backend: KernelBackend,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, list[BaseMessage]]]]:
    """A ``post_model_hook`` for ``create_react_agent`` that answers cut-off calls.

    LangChain puts a tool call whose arguments are no JSON in the ``AIMessage``'s
    ``invalid_tool_calls``, which the agent does not run. When the reply stopped at the
    output-token limit, each such ``run_code`` call goes to
    ``backend.handle_partial_tool_call`` (saved, not run), and its ``ToolMessage`` holds the
    text that teaches ``ptc_retry.extend``: the agent then asks the model again.
    """
    tool = RunCodeTool(backend)

    async def answer_cut_off_calls(state: Mapping[str, Any]) -> dict[str, list[BaseMessage]]:
        messages = state["messages"]
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or not _cut_off(last):
            return {"messages": []}
        answers: list[BaseMessage] = []
        for call in last.invalid_tool_calls:
            if call.get("name") == tool.name and call.get("id") and call.get("args"):
                text = await tool(str(call["args"]), call["id"], cut_off=True)
                answers.append(ToolMessage(text, tool_call_id=call["id"], name=tool.name))
        return {"messages": answers}

    return answer_cut_off_calls


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
