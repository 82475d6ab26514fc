"""The OpenAI Agents SDK on a ptc-retry kernel: ``Agent(tools=[run_code_tool(kb)], ...)``.

``run_code_tool(kb)`` is an Agents SDK ``FunctionTool`` that runs each program the model
sends in ``kb``'s kernel, under the call id the model gave it, so a failed program's result
ends with the notice and the model's next call can be the one-line replay.
``instructions(kb, own)`` is the agent's ``instructions=``: the caller's own, then the prompt
section. ``pip install 'ptc-retry[openai-agents]'`` brings the SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from ..backend import KernelBackend
from .run_code import RunCodeTool

__all__ = ["instructions", "run_code_tool"]

#: What ``ResponseFunctionToolCall.status`` says of a call the model's reply stopped inside.
CUT_OFF = "incomplete"


def run_code_tool(backend: KernelBackend) -> FunctionTool:
    """``run_code`` as an Agents SDK tool, for ``Agent(tools=[...])``.

    Each call runs through ``backend.handle_tool_call`` with the SDK's ``tool_call_id`` and
    the arguments string exactly as the model sent it; the tool's output is the text the
    model reads (the program's output, or its traceback ending in the notice). A call whose
    item the Responses API marks ``incomplete`` (the reply hit ``max_output_tokens`` inside
    it) goes to ``handle_partial_tool_call``: saved, not run. The backend is the caller's to
    start and shut down; register its host tools before making the tool (see
    ``RunCodeTool``).
    """
    tool = RunCodeTool(backend)

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        call = context.tool_call
        cut_off = call is not None and call.status == CUT_OFF
        return await tool(arguments, context.tool_call_id, cut_off=cut_off)

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.parameters,
        on_invoke_tool=invoke,
        strict_json_schema=True,
    )


def instructions(
    backend: KernelBackend, own: str | None = None
) -> Callable[[RunContextWrapper[Any], Agent[Any]], str]:
    """A dynamic ``instructions=`` for an ``Agent``: ``own`` (the agent's own instructions),
    a blank line, then the prompt section. It is read at each run, so it works for a backend
    behind a gateway too, whose session directory is known once it has started."""
    tool = RunCodeTool(backend)

    def agent_instructions(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        return tool.instructions(own)

    return agent_instructions
