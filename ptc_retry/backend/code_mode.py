"""Code mode's glue between ``KernelBackend`` and the model: the tool it offers the model
(``run_code``) and a call of it, and the host's tools its programs call as
``await tools.<name>(...)``, which ``run_code``'s description names."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..core import sentences as said
from ..core.approvals import Approval
from ..core.notice import cut_after_arguments
from ..core.partial import CutArguments, CutPlace, cut_arguments
from ..core.status import Refusal, ResultStatus
from .host_tools import HostTool, HostTools
from .late_results import LateResults
from .results import (
    RUN_CODE,
    RUN_CODE_DESCRIPTION,
    RUN_CODE_PARAMETERS,
    CallOptions,
    RunCode,
    Tool,
    decode_arguments,
    ignored_keys_line,
    join_notes,
    require_utf8,
    run_code_description,
    run_code_problem,
)
from .tracing import Tracing

__all__ = ["CodeSession"]

#: The cell a cut-off call is sent as: a kernel without ptc-retry runs nothing either.
CUT_OFF_CELL = "# ptc-retry: a tool call cut off mid-stream (saved, not run)"


class CodeSession:
    """A code-mode backend's tools: ``run_code`` (running programs with ``run``) for the
    model, and ``host_tools`` for its programs, with ``late_results``, what they completed
    that the kernel never took."""

    def __init__(self, run: RunCode, tracing: Tracing | None = None) -> None:
        self.run = run
        self.tracing = tracing
        self.host_tools = HostTools(tracing)
        self.late_results = LateResults()
        self.tools = {
            RUN_CODE: Tool(RUN_CODE, RUN_CODE_DESCRIPTION, RUN_CODE_PARAMETERS, self._run_code)
        }

    def register(
        self,
        function: Callable[..., Any],
        name: str | None,
        description: str | None,
        approval: Approval = False,
    ) -> None:
        """Add a host tool (``HostTools.register``); ``run_code``'s description names it."""
        self.host_tools.register(function, name, description, approval)
        self._name_tools()

    def add(self, tool: HostTool) -> None:
        """Add a host tool built from a JSON schema (``HostTools.add``), named as ``register``."""
        self.host_tools.add(tool)
        self._name_tools()

    def _name_tools(self) -> None:
        described = run_code_description(self.host_tools.names)
        self.tools[RUN_CODE] = dataclasses.replace(self.tools[RUN_CODE], description=described)

    def schemas(self, format: str) -> list[dict[str, Any]]:
        return [tool.schema(format) for tool in self.tools.values()]

    async def invoke(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any],
        call_id: str | None,
        options: CallOptions,
    ) -> str:
        """One tool call of the model: the text it reads next. An unknown tool or arguments
        that are not a JSON object get an error text and run nothing."""
        tool = self.tools.get(name)
        if tool is None:
            return self._no_such_tool(name, call_id)
        try:
            arguments, raw = decode_arguments(name, raw_arguments)
        except ValueError as exc:
            return self.refuse(name, call_id, Refusal.BAD_ARGUMENTS, str(exc))
        return await tool.handler(arguments, raw, call_id, options)

    def refuse(self, name: str, call_id: str | None, refusal: Refusal, text: str) -> str:
        """``text``, the answer to a call refused for ``refusal``, once its trace has it."""
        if self.tracing is not None:
            self.tracing.refused(name, call_id, refusal)
        return text

    async def invoke_partial(
        self, name: str, raw: str, call_id: str | None, options: CallOptions
    ) -> str:
        """A ``run_code`` call cut off mid-stream. Cut inside its program: the start of the
        program saved, nothing run; the text the model reads says how to send the rest. Cut
        after the program ended (inside a later key, or before the final ``}``): the program
        runs as the whole call would, and the text says first, in one line, what was cut."""
        if name not in self.tools:
            return self._no_such_tool(name, call_id)
        try:
            cut = cut_arguments(raw)
        except ValueError as exc:
            return self.refuse(
                name, call_id, Refusal.CUT_OFF, said.CUT_NOT_JSON.render(problem=exc)
            )
        code = cut.string("code")
        if code is None:
            return self.refuse(name, call_id, Refusal.CUT_OFF, said.CUT_BEFORE_CODE.render())
        try:
            require_utf8(code[0], '"code"')
        except ValueError as exc:
            text = said.CUT_LONE_SURROGATE.render(problem=exc)
            return self.refuse(name, call_id, Refusal.CUT_OFF, text)
        if code[1]:
            return await self._run_whole_program(cut, raw, call_id, options)
        result = await self.run(
            CUT_OFF_CELL,  # the kernel decodes the program from the arguments; none runs
            call_id=call_id,
            arguments=raw,
            turn=options.turn,
            step=options.step,
            partial=True,
        )
        if result.status != ResultStatus.PARTIAL:  # a kernel without ptc-retry ran the placeholder
            return said.CUT_NOT_KEPT.render()
        return result.notice or result.text

    def _no_such_tool(self, name: str, call_id: str | None) -> str:
        text = said.NO_SUCH_TOOL.render(name=name, offered=", ".join(self.tools))
        return self.refuse(name, call_id, Refusal.UNKNOWN_TOOL, text)

    async def _run_whole_program(
        self, cut: CutArguments, raw: str, call_id: str | None, options: CallOptions
    ) -> str:
        """A call whose ``"code"`` arrived whole: ``run_code`` takes nothing else, so what was
        cut after it changes nothing, and the program runs as an uncut call's would (saved as
        ``{"code": ...}``: the arguments as they arrived are no JSON)."""
        if cut.place is CutPlace.WHOLE:  # the closing brace arrived: nothing was cut
            return await self.invoke(RUN_CODE, raw, call_id, options)
        program = cut.values["code"]
        arguments = {"code": program}
        text = await self._run_code(
            arguments, json.dumps(arguments, ensure_ascii=False), call_id, options
        )
        ignored = [key for key in cut.values if key != "code"]
        return join_notes([cut_after_arguments(RUN_CODE, ["code"], ignored, cut.cut_key), text])

    async def _run_code(
        self, arguments: dict[str, Any], raw: str, call_id: str | None, options: CallOptions
    ) -> str:
        problem = run_code_problem(arguments)
        if problem is not None:
            return self.refuse(
                RUN_CODE, call_id, Refusal.BAD_ARGUMENTS, said.NOT_RUN.render(problem=problem)
            )
        result = await self.run(
            arguments["code"],
            call_id=call_id,
            arguments=raw,
            turn=options.turn,
            step=options.step,
            timeout=options.timeout,
        )
        # A stray key is no reason to re-send the program: it ran, and the model is told once.
        ignored = ignored_keys_line(arguments)
        return result.text if ignored is None else join_notes([ignored, result.text])
