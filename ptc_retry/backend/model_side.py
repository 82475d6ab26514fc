"""The model's side of ``KernelBackend``: the system prompt, the tool definitions, and the
tool calls a model makes, which become programs (code mode) or calls of ``kb.native``."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..core import sentences as said
from ..core.approvals import Approval
from ..core.errors import BackendError
from ..core.notice import prompt_section
from ..core.status import Mode, Refusal
from ..native import NativeTools, ToolResult
from .code_mode import CodeSession
from .host_tools import HostTool
from .native_mode import NativeSession, native_definitions
from .results import RUN_CODE, CallOptions, RunResult, check_timeout, require_utf8

__all__ = ["NOT_RUNNING", "ModelSide"]

NOT_RUNNING = "the kernel is not running; call start() or use `async with`"
F = TypeVar("F", bound=Callable[..., Any])


class ModelSide:
    """What a model's tool calls go through; ``KernelBackend`` is made of it and sets the
    attributes declared here (see its docstring for what each means)."""

    mode: Mode
    session_dir: Path | None
    turn: int
    last_result: RunResult | None
    last_tool_result: ToolResult | None
    _code: CodeSession
    _native: NativeSession | None
    _running: bool

    @property
    def native(self) -> NativeTools | None:
        """Native mode: the tool registry and journal, made by ``start()`` (None before, and
        always None in code mode). Add the loop's own tools with ``kb.native.register``."""
        return self._native.tools if self._native is not None else None

    def system_prompt(self) -> str:
        """The static prompt section for this session; byte-identical for its whole life."""
        if self.session_dir is None:
            raise BackendError(
                "the session directory is on the kernel's host behind the gateway: call "
                "start() (or use `async with`) before system_prompt()"
            )
        return prompt_section(self.mode, self.session_dir, tools=self._code.host_tools.catalog())

    def register_tool(
        self,
        function: F,
        name: str | None = None,
        description: str | None = None,
        *,
        approval: Approval = False,
    ) -> F:
        """Let programs call ``function`` as ``await tools.<name>(...)``; returns it unchanged.

        Before or after ``start()``: every later program can call it. A sync function runs
        in a worker thread, an async one on the backend's loop; both take JSON keyword
        arguments and return JSON. ``name`` defaults to its ``__name__``, ``description``
        to its docstring's first paragraph; the schema comes from its type hints. The
        prompt section and ``run_code``'s description name the tools registered so far.
        ``approval``: True, or a policy (a function of the call's arguments that returns
        whether this call needs a person), makes a program that reaches such a call stop
        before the tool runs, until ``approve`` or ``deny`` (or the ``approver``) decides it.
        TypeError or ValueError when it cannot be a tool (see ``HostTools.register``).
        """
        self._check_code_mode()
        self._code.register(function, name, description, approval)
        return function

    def add_tool(self, tool: HostTool) -> None:
        """Let programs call ``tool`` as ``await tools.<tool.name>(...)``: a tool described by
        a JSON schema instead of a Python signature (``ptc_retry.mcp.upstream`` makes one
        for each tool of an upstream MCP server). Otherwise as ``register_tool``.
        """
        self._check_code_mode()
        self._code.add(tool)

    def _check_code_mode(self) -> None:
        if self.mode == Mode.NATIVE:
            raise ValueError(
                "tools in programs need mode='code'; in native mode the model calls a "
                "function directly: register it on kb.native"
            )

    def tool_schemas(self, format: str = "openai") -> list[dict[str, Any]]:
        """Every tool's definition, to pass as the model's ``tools``.

        ``format``: ``"openai"`` (``{"type": "function", "function": {...}}``) or
        ``"anthropic"`` (``{"name", "description", "input_schema"}``). In native mode:
        ``run_code``, any tool registered on ``kb.native``, then ``editPreviousToolCalling``.
        """
        if self.native is not None:
            return self.native.definitions(format)
        if self.mode == Mode.NATIVE:  # before start(): no journal yet, the same definitions
            return native_definitions(format)
        return self._code.schemas(format)

    def tool_schema(self, format: str = "openai", name: str = RUN_CODE) -> dict[str, Any]:
        """One tool's definition (default ``run_code``), in the given ``format``."""
        schemas = self.tool_schemas(format)
        names = [schema.get("name", schema.get("function", {}).get("name")) for schema in schemas]
        if name not in names:
            raise ValueError(f"no tool {name!r}; this backend offers {', '.join(names)}")
        return schemas[names.index(name)]

    async def handle_tool_call(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any],
        call_id: str | None = None,
        *,
        turn: int | None = None,
        step: int | None = None,
        timeout: float | None = None,
    ) -> str:
        """Run one tool call of the model and return the text the model reads next.

        ``raw_arguments`` is the arguments string exactly as the model sent it (it becomes
        the checkpoint byte for byte); an already decoded mapping (Anthropic's ``input``) is
        accepted and saved as its JSON. An unknown tool or malformed arguments give an error
        text that says what to send instead, and never reach the kernel. Raises BackendError
        only when the kernel is not running or cannot be restarted, or its gateway cannot be
        reached (GatewayError): nothing the model can fix.

        Native mode: every call, also a malformed one or one of an unknown tool, goes to
        ``kb.native`` and is journaled (its refusal text is the journal's); ``name`` may be
        ``editPreviousToolCalling``. Calls with the same ``step`` are one model message (see
        ``next_step``); ``turn``, ``step`` and ``timeout`` also apply to the program an edit
        re-runs.
        """
        self.last_result = None  # a call refused below ran nothing: no result of its own
        options = CallOptions(turn, step, timeout)
        if isinstance(raw_arguments, (bytes, bytearray)):
            try:
                raw_arguments = bytes(raw_arguments).decode("utf-8")
            except UnicodeDecodeError as exc:
                text = said.ARGUMENTS_NOT_UTF8.render(tool=name, problem=exc)
                return self._code.refuse(name, call_id, Refusal.BAD_ARGUMENTS, text)
        if self.mode == Mode.NATIVE:
            if not isinstance(raw_arguments, (str, Mapping)):
                kind = type(raw_arguments).__name__
                text = said.NATIVE_ARGUMENTS_NOT_OBJECT.render(tool=name, kind=kind)
                return self._code.refuse(name, call_id, Refusal.BAD_ARGUMENTS, text)
            if self._native is None or not self._running:
                raise BackendError(NOT_RUNNING)
            check_timeout(timeout)
            result, error = await self._native.invoke(
                name,
                raw_arguments,
                call_id,
                turn=self.turn if turn is None else turn,
                options=options,
            )
            self.last_tool_result = result
            if error is not None:  # the kernel is gone and cannot restart: raise it
                raise error
            return result.text
        return await self._code.invoke(name, raw_arguments, call_id, options)

    async def handle_partial_tool_call(
        self,
        name: str,
        partial_raw_arguments: str,
        call_id: str | None = None,
        *,
        turn: int | None = None,
        step: int | None = None,
    ) -> str:
        """Save a tool call whose arguments stopped part-way and return the text the model
        reads: where the saved part ends, and the call that sends only the rest.

        ``partial_raw_arguments`` is the arguments string exactly as far as it arrived (an
        output-token limit, a dropped stream); the cut may fall anywhere. Code mode saves
        the longest decodable start of its ``"code"`` (and the arguments as they arrived,
        beside it) and runs nothing; ``await ptc_retry.extend("#n", "<rest>")`` then runs
        the whole program. When ``"code"`` arrived whole (the cut fell in a later key, or
        before the final ``}``), the program runs as an ordinary call and the text starts
        with one line naming what was cut. When not even the start of ``"code"`` arrived,
        nothing is saved and the text says to send the call again. Native mode: see
        ``NativeTools.call_partial``.

        Bytes are taken as UTF-8 up to a character the cut split (it is left out, so the
        saved arguments are the bytes that arrived without it); bytes that are not UTF-8
        before that, or a str holding a lone surrogate, get a text asking for the whole call.
        """
        self.last_result = None
        if isinstance(partial_raw_arguments, (bytes, bytearray)):
            try:
                decoder = codecs.getincrementaldecoder("utf-8")()
                partial_raw_arguments = decoder.decode(bytes(partial_raw_arguments), final=False)
            except UnicodeDecodeError as exc:
                text = said.CUT_NOT_UTF8.render(tool=name, problem=exc)
                return self._code.refuse(name, call_id, Refusal.CUT_OFF, text)
        if not isinstance(partial_raw_arguments, str):
            raise TypeError(
                "partial_raw_arguments must be the str that arrived, not "
                f"{type(partial_raw_arguments).__name__}"
            )
        try:
            require_utf8(partial_raw_arguments, f"the arguments of {name}")
        except ValueError as exc:
            text = said.CUT_NOT_SENT.render(problem=exc)
            return self._code.refuse(name, call_id, Refusal.CUT_OFF, text)
        options = CallOptions(self.turn if turn is None else turn, step, None)
        if self.mode == Mode.NATIVE:
            if self._native is None or not self._running:
                raise BackendError(NOT_RUNNING)
            result, error = await self._native.invoke_partial(
                name, partial_raw_arguments, call_id, options
            )
            self.last_tool_result = result
            if error is not None:  # the kernel is gone and cannot restart: raise it
                raise error
            return result.text
        return await self._code.invoke_partial(name, partial_raw_arguments, call_id, options)
