"""What a model is told about native-mode tools: the ``editPreviousToolCalling`` definition,
and the definitions of a loop's own tools (read from their signatures when none is given)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..core import sentences as said
from ..core.schema import tool_schema
from ..core.sentences import EDIT_TOOL

__all__ = ["EDIT_TOOL", "EDIT_TOOL_DESCRIPTION", "EDIT_TOOL_PARAMETERS", "tool_definitions"]

#: ``editPreviousToolCalling``'s description (``sentences.EDIT_TOOL_DESCRIPTION``).
EDIT_TOOL_DESCRIPTION = said.EDIT_TOOL_DESCRIPTION.render()

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
