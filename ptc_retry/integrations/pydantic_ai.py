"""pydantic-ai on a ptc-retry kernel: ``Agent(model, capabilities=[PtcRetry(kb)])``.

``PtcRetry`` is a pydantic-ai capability, the framework's unit for what brings tools,
instructions and hooks together: it gives the agent the ``run_code`` tool, whose every call
runs in ``kb``'s kernel under the model's tool-call id, and the prompt section as
instructions. A failed program's result ends with the notice, and the model's next call can
be the one-line replay. ``pip install 'ptc-retry[pydantic-ai]'`` brings ``pydantic-ai-slim``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import CallDeferred, ModelRetry, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset
from pydantic_core import ValidationError

from ..backend import KernelBackend
from .run_code import RunCodeTool

__all__ = ["PtcRetry"]

#: ``ModelResponse.finish_reason`` of a reply that stopped at the output-token limit.
CUT_OFF = "length"


@dataclass(init=False)
class PtcRetry(AbstractCapability[Any]):
    """A capability that runs the model's programs in ``backend``'s kernel.

    - Tools: ``run_code``, described as ``backend.tool_schema()`` describes it (host tools
      included: register them first, or pass ``tools=`` to ``KernelBackend``). Each call
      goes to ``backend.handle_tool_call`` with the call's ``tool_call_id``; the tool's
      return is the text the model reads.
    - Instructions: the prompt section (``backend.system_prompt()``), beside the agent's own.
    - Each run of the agent is a new turn (``backend.new_turn()``): a person's message.
    - A ``run_code`` call cut off by the output-token limit (``finish_reason='length'``: its
      arguments no JSON yet, or the reply's last part, decoded by the provider as far as it
      arrived) goes to ``backend.handle_partial_tool_call``: saved, not run; the tool's
      return is its text, which teaches ``ptc_retry.extend``. Any other call whose
      arguments do not validate gets pydantic-ai's own retry prompt.

    - ``defer_approvals=True``: a program that pauses before a host tool that waits for a
      person (``register_tool(..., approval=True)``) defers its ``run_code`` call, as a tool
      raising pydantic-ai's ``CallDeferred`` does: the run ends with ``DeferredToolRequests``
      (the agent's ``output_type`` must include it), whose ``metadata`` for the call holds
      the program's ``reference``, the waiting ``tool`` and its ``arguments`` (``pending``:
      every call that waits) and ``text``, the pause line. The person decides with
      ``backend.approve(reference)`` or ``backend.deny(reference, reason)``, and the next run
      gets the continuation's text as the call's result
      (``DeferredToolResults(calls={tool_call_id: result.text})``). Without it, the tool's
      return is the pause line, and the run goes on.

    The backend is the caller's to start and shut down (``async with KernelBackend(...)``).
    """

    backend: KernelBackend
    defer_approvals: bool

    def __init__(self, backend: KernelBackend, *, defer_approvals: bool = False) -> None:
        self.backend = backend
        self.defer_approvals = defer_approvals
        self._tool = RunCodeTool(backend)
        # What each cut-off call's tool return says, by tool-call id, from its validation
        # (where the cut shows) to its execution (which returns it).
        self._cut_off: dict[str, str] = {}

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a running backend: not for an agent spec file

    def get_instructions(self) -> Any:
        # A callable, read for each request: behind a gateway, the session directory the
        # prompt section names is known once the backend has started.
        return self._prompt_section

    def get_toolset(self) -> FunctionToolset[Any]:
        run_code = Tool.from_schema(
            self._run_code,
            name=self._tool.name,
            description=self._tool.description,
            json_schema=self._tool.parameters,
            takes_ctx=True,
        )
        return FunctionToolset([run_code])

    async def before_run(self, ctx: RunContext[Any]) -> None:
        self.backend.new_turn()

    async def on_tool_validate_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: str | dict[str, Any],
        error: ValidationError | ModelRetry,
    ) -> dict[str, Any]:
        if call.tool_name == self._tool.name and isinstance(args, str) and _cut_off(ctx, call):
            text = await self._tool(args, call.tool_call_id, cut_off=True)
            self._cut_off[call.tool_call_id] = text
            return {}  # executed as _run_code, which returns the text
        raise error

    def _prompt_section(self, ctx: RunContext[Any]) -> str:
        return self._tool.prompt_section()

    async def _run_code(self, ctx: RunContext[Any], **arguments: Any) -> str:
        if ctx.tool_call_id is not None and ctx.tool_call_id in self._cut_off:
            return self._cut_off.pop(ctx.tool_call_id)
        # The last call of a reply cut off at the limit, decoded as far as it arrived (a
        # provider's decoded input, such as Anthropic's non-streamed one): saved, not run.
        cut = _last_call_cut_off(ctx)
        text = await self._tool(arguments, ctx.tool_call_id, cut_off=cut)
        if self.defer_approvals:
            _defer_if_waiting(self.backend, ctx.tool_call_id, text)
        return text


def _cut_off(ctx: RunContext[Any], call: ToolCallPart) -> bool:
    """Whether the model's reply that holds ``call`` stopped at the output-token limit."""
    for message in reversed(ctx.messages):
        if isinstance(message, ModelResponse) and any(part is call for part in message.parts):
            return message.finish_reason == CUT_OFF
    return False


def _last_call_cut_off(ctx: RunContext[Any]) -> bool:
    """Whether the call running is the last part of a reply that stopped at the output-token
    limit and reached pydantic-ai decoded (its arguments a mapping, not a string)."""
    for message in reversed(ctx.messages):
        if isinstance(message, ModelResponse):
            last = message.parts[-1] if message.parts else None
            return (
                message.finish_reason == CUT_OFF
                and isinstance(last, ToolCallPart)
                and last.tool_call_id == ctx.tool_call_id
                and not isinstance(last.args, str)
            )
    return False


def _defer_if_waiting(backend: KernelBackend, call_id: str | None, text: str) -> None:
    """Raise ``CallDeferred`` when the program of ``call_id`` waits for a person's decision,
    with what waits as its metadata."""
    waiting = [call for call in backend.pending_approvals() if call.call_id == call_id]
    if not waiting:
        return
    first = waiting[0]
    pending = [
        {"ref": call.ref, "tool": call.tool, "arguments": call.arguments} for call in waiting
    ]
    raise CallDeferred(
        metadata={
            "reference": first.reference,
            "tool": first.tool,
            "arguments": first.arguments,
            "pending": pending,
            "text": text,
        }
    )
