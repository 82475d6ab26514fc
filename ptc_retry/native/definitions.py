"""What a model is told about native-mode tools: the ``editPreviousToolCalling`` definition,
and the definitions of a loop's own tools (read from their signatures when none is given)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.schema import tool_schema

__all__ = ["EDIT_TOOL", "EDIT_TOOL_DESCRIPTION", "EDIT_TOOL_PARAMETERS", "tool_definitions"]

#: The name of the replay tool, as the model sees it.
EDIT_TOOL = "editPreviousToolCalling"

EDIT_TOOL_DESCRIPTION = """\
Re-run one of your earlier tool calls with a small fix instead of re-sending all its \
arguments. Name the call by call_id, or by previous_ordinal (n-th call of your previous \
message, from 1); not both. The patch entries apply in order to the call's JSON arguments:
- {path, old_string, new_string}: replace text inside the string at path; old_string must \
occur exactly once (replace_all: true replaces every occurrence)
- {path, value}: replace the whole value (any JSON type)
- {path}: delete the key (or array item)
A path names a value from the top-level keys: content, config.mode, items[0].name.
For a call cut off mid-string, give append: the rest, exactly as it goes on (a patch may \
follow).
Only for a small correction; otherwise call the tool again with fresh arguments."""

#: JSON schema of the replay tool's arguments.
EDIT_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "previous_ordinal": {
            "type": "integer",
            "minimum": 1,
            "description": "Position of the call in your previous message, from 1.",
        },
        "call_id": {
            "type": "string",
            "minLength": 1,
            "description": "Id of the call to fix, e.g. call_3.",
        },
        "patch": {
            "type": "array",
            "minItems": 1,
            "description": "Entries applied in order to the call's arguments.",
            "items": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Value to change: content, config.mode, items[0].name.",
                    },
                    "value": {"description": "New whole value, any JSON type."},
                    "old_string": {
                        "type": "string",
                        "description": "Exact text to replace inside the string at path.",
                    },
                    "new_string": {"type": "string", "description": "Replacement text."},
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace every occurrence of old_string.",
                    },
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        },
        "append": {
            "type": "string",
            "description": "Rest of the string a cut-off call stopped in.",
        },
    },
    "additionalProperties": False,
}

_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def tool_definitions(
    format: str = "openai", tools: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Tool definitions to hand to a model: each of ``tools``, then ``editPreviousToolCalling``.

    ``tools`` are the loop's own tools as ``{"name", "description", "parameters"}`` (a
    JSON schema). ``format`` is ``"openai"`` or ``"anthropic"``, as
    :func:`ptc_retry.core.schema.tool_schema` takes it. Returns new dicts.
    """
    edit = {"name": EDIT_TOOL, "description": EDIT_TOOL_DESCRIPTION}
    definitions = []
    for spec in [*tools, {**edit, "parameters": EDIT_TOOL_PARAMETERS}]:
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool_definitions: a tool needs a non-empty name, got {spec!r}")
        description = str(spec.get("description") or "")
        parameters = spec.get("parameters") or {"type": "object"}
        definitions.append(tool_schema(name, description, parameters, format))
    return definitions


def first_paragraph(function: Callable[..., Any]) -> str:
    """The first paragraph of ``function``'s docstring, on one line: its default description."""
    doc = inspect.getdoc(function) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def signature_schema(function: Callable[..., Any]) -> dict[str, Any]:
    """A JSON schema of the keyword arguments ``function`` takes, typed where that is plain."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return {"type": "object"}
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable annotations (e.g. "str | None" on Python 3.9)
        hints = {}
    properties: dict[str, Any] = {}
    required = []
    extra = False
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            extra = True
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.POSITIONAL_ONLY):
            continue  # cannot be passed by keyword
        hint = hints.get(parameter.name)
        json_type = _JSON_TYPES.get(hint) if isinstance(hint, type) else None
        properties[parameter.name] = {"type": json_type} if json_type else {}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema
