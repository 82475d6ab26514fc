"""What the backend offers a model and what it gives back: the ``run_code`` tool (its
definition and texts, the checks of its arguments) and ``RunResult``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core import sentences as said
from ..core.schema import tool_schema
from ..core.status import ResultStatus
from ..core.time_limit import read_limit

__all__ = [
    "NATIVE_RUN_CODE_DESCRIPTION",
    "RESULT_STATUSES",
    "RUN_CODE",
    "RUN_CODE_DESCRIPTION",
    "RUN_CODE_PARAMETERS",
    "CallOptions",
    "RunCode",
    "RunResult",
    "Tool",
]

#: The values of ``ResultStatus``, the statuses of a ``RunResult``.
RESULT_STATUSES = tuple(status.value for status in ResultStatus)

RUN_CODE = "run_code"
#: ``run_code``'s description in code mode (``sentences.RUN_CODE_DESCRIPTION``).
RUN_CODE_DESCRIPTION = said.RUN_CODE_DESCRIPTION.render()


def run_code_description(tools: Sequence[str] = ()) -> str:
    """``run_code``'s description; with host ``tools``, it says programs can call them."""
    if not tools:
        return RUN_CODE_DESCRIPTION
    names = ", ".join(f"tools.{name}" for name in tools)
    return f"{RUN_CODE_DESCRIPTION} {said.RUN_CODE_TOOLS.render(names=names)}"


RUN_CODE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python program to run."}},
    "required": ["code"],
    "additionalProperties": False,
}
#: ``run_code`` in native mode: the fix goes through the edit tool, never ``ptc_retry.replay``.
NATIVE_RUN_CODE_DESCRIPTION = said.NATIVE_RUN_CODE_DESCRIPTION.render()


@dataclass
class RunResult:
    """What one ``run_code`` gave back. ``text`` is what the model should read.

    A kernel without ptc-retry's reply metadata (another IPython kernel given the extension
    through its argv) leaves ``metadata`` None; ``call_id``, ``checkpoint``, ``reference``
    and ``notice`` are then derived from the id the backend sent and the traceback's notice.
    """

    status: ResultStatus
    text: str
    value: str | None = None  # text/plain of the execute_result
    call_id: str | None = None  # the checkpoint id the kernel used
    checkpoint: str | None = None  # path of by-id/<call_id>.json, as the kernel sees it
    reference: str | None = None  # the short reference ("#7") the notice names the program by
    notice: str | None = None  # the kernel's failure notice (also the traceback's last item)
    metadata: dict[str, Any] | None = None  # the reply's metadata["ptc_retry"]
    outputs: list[dict[str, Any]] = field(default_factory=list)  # nbformat v4 outputs, bounded
    ename: str | None = None
    evalue: str | None = None
    execution_count: int | None = None
    duration: float = 0.0  # seconds, from sending the request to the result
    output_chars: int = 0  # characters the outputs came to, before truncation
    truncated: bool = False  # text (or outputs) lost their middle to the size limits
    restarted: bool = False  # the kernel was restarted during this call: its state is gone

    @property
    def ok(self) -> bool:
        return self.status == ResultStatus.OK


@dataclass(frozen=True)
class CallOptions:
    """A tool call's own options, as ``handle_tool_call`` takes them (None: the default)."""

    turn: int | None = None
    step: int | None = None
    timeout: float | None = None


class RunCode(Protocol):
    """``KernelBackend.run_code``, as the tools that run programs call it."""

    def __call__(
        self,
        code: str,
        *,
        call_id: str | None = None,
        arguments: str | None = None,
        turn: int | None = None,
        step: int | None = None,
        timeout: float | None = None,
        partial: bool = False,
    ) -> Awaitable[RunResult]: ...


class ToolHandler(Protocol):
    """Runs a tool call: decoded arguments, the raw string, the call id -> text for the model."""

    def __call__(
        self, arguments: dict[str, Any], raw: str, call_id: str | None, options: CallOptions
    ) -> Awaitable[str]: ...


@dataclass
class Tool:
    """A tool the backend offers the model: its definition and what runs it."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    handler: ToolHandler

    def schema(self, format: str = "openai") -> dict[str, Any]:
        """The definition in a function-calling format: ``"openai"`` or ``"anthropic"``."""
        return tool_schema(self.name, self.description, self.parameters, format)


def decode_arguments(
    name: str, raw_arguments: str | Mapping[str, Any]
) -> tuple[dict[str, Any], str]:
    """``(arguments, raw)`` of a code-mode tool call: the decoded object and its JSON text.

    ValueError holds the text the model reads when they are not a JSON object.
    """
    if isinstance(raw_arguments, Mapping):
        arguments = dict(raw_arguments)
        return arguments, json.dumps(arguments, ensure_ascii=False)
    try:
        arguments = json.loads(raw_arguments)
    except (TypeError, ValueError) as exc:
        raise ValueError(said.ARGUMENTS_NOT_JSON.render(tool=name, problem=exc)) from None
    if not isinstance(arguments, dict):
        raise ValueError(said.ARGUMENTS_NOT_OBJECT.render(tool=name, kind=json_kind(arguments)))
    return arguments, raw_arguments


def run_code_problem(arguments: dict[str, Any]) -> str | None:
    """What is wrong with run_code's decoded arguments, or None."""
    extra = sorted(set(arguments) - {"code"})
    if "code" not in arguments:
        got = f"; it got {', '.join(map(repr, extra))}" if extra else ""
        return said.NO_CODE.render(got=got)
    code = arguments["code"]
    if not isinstance(code, str):
        return said.CODE_NOT_STRING.render(kind=json_kind(code))
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        return said.CODE_LONE_SURROGATE.render(reason=exc.reason, index=exc.start)
    return None


def ignored_keys_line(arguments: dict[str, Any]) -> str | None:
    """The line that names the keys beside ``"code"`` run_code ignored, or None."""
    ignored = sorted(set(arguments) - {"code"})
    if not ignored:
        return None
    keys = ", ".join(json.dumps(key, ensure_ascii=False) for key in ignored)
    return said.IGNORED_KEYS.render(keys=keys)


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words."""
    kinds = {bool: "a boolean", dict: "an object", list: "an array", str: "a string"}
    for kind, word in kinds.items():
        if isinstance(value, kind):
            return word
    return "null" if value is None else "a number"


def join_notes(parts: list[str]) -> str:
    """The non-blank ``parts``, a line each, without their trailing newlines."""
    return "\n".join(part.rstrip("\n") for part in parts if part.strip())


def check_timeout(timeout: object) -> float | None:
    """``timeout`` in seconds, None for no limit (None, or too long ever to pass, such as
    ``inf``); ValueError, one line, for anything else (see ``read_limit``)."""
    return read_limit(timeout, "timeout")


def require_utf8(text: str, what: str) -> None:
    """ValueError when ``text`` cannot be encoded (a lone surrogate): it cannot be sent."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            said.CANNOT_SEND.render(what=what, reason=exc.reason, index=exc.start)
        ) from None
