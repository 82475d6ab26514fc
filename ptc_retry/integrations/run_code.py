"""The ``run_code`` tool of a ``KernelBackend``, as the framework adapters offer it.

Each adapter (``openai_agents``, ``pydantic_ai``, ``langgraph``) wraps one ``RunCodeTool`` in
its framework's own kind of tool: the name, description and parameters the model reads are
the backend's (``KernelBackend.tool_schema()``), the prompt section is
``KernelBackend.system_prompt()``, and a call goes to ``handle_tool_call`` (or, cut off,
``handle_partial_tool_call``) with the framework's tool-call id. Host tools are the backend's
(``KernelBackend(tools=...)``), recorded as in any loop.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..backend import RUN_CODE, KernelBackend
from ..core.partial import cut_json

__all__ = ["RunCodeTool"]


class RunCodeTool:
    """``run_code`` of a code-mode ``backend``, for a framework to describe and to call.

    The backend is the caller's: start it before the first call and shut it down after the
    last (``async with KernelBackend(...) as kb``); the tool neither starts nor stops it.
    ``description`` names the host tools registered when the tool is made, so register them
    first (or pass ``tools=`` to ``KernelBackend``). ValueError for a native-mode backend:
    there the model fixes a call with a tool of its own, which these adapters do not offer.
    """

    def __init__(self, backend: KernelBackend) -> None:
        if backend.mode != "code":
            raise ValueError(
                "the framework adapters offer run_code in code mode only; make the backend "
                "with KernelBackend(mode='code')"
            )
        function = backend.tool_schema("openai", RUN_CODE)["function"]
        self.backend = backend
        #: The tool's name as the model sees it (``run_code``).
        self.name: str = function["name"]
        #: The backend's description of the tool, host tools included.
        self.description: str = function["description"]
        #: The JSON schema of its arguments: one string, ``code``.
        self.parameters: dict[str, Any] = copy.deepcopy(function["parameters"])

    @property
    def code_description(self) -> str:
        """What the schema says of its one argument, ``code``."""
        return str(self.parameters["properties"]["code"]["description"])

    def prompt_section(self) -> str:
        """The system-prompt section that teaches the model the replay line; byte-identical
        for the session (``KernelBackend.system_prompt()``)."""
        return self.backend.system_prompt()

    def instructions(self, own: str | None = None) -> str:
        """``own`` instructions, then a blank line and the prompt section (the prompt section
        alone without ``own``)."""
        section = self.prompt_section()
        return f"{own.rstrip()}\n\n{section}" if own else section

    async def __call__(
        self,
        arguments: str | Mapping[str, Any],
        call_id: str | None,
        *,
        cut_off: bool = False,
    ) -> str:
        """Run one call of the tool and return the text the model reads next.

        ``arguments``: the arguments string as the model sent it (it becomes the checkpoint
        byte for byte), or the framework's decoded mapping. ``cut_off``: the model's reply
        stopped inside this call (an output-token limit); what arrived is saved, not run, and
        the text teaches ``ptc_retry.extend``. A cut-off call's mapping is what a provider
        or the framework decoded of it as far as it arrived (its last string cut inside:
        ``cut_json``). Raises ``BackendError`` only when the kernel is not running or cannot
        be restarted.
        """
        if cut_off:
            raw = arguments if isinstance(arguments, str) else cut_json(arguments)
            return await self.backend.handle_partial_tool_call(self.name, raw, call_id)
        return await self.backend.handle_tool_call(self.name, arguments, call_id)
