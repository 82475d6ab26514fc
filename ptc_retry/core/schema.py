"""Tool definitions in the two function-calling formats models read."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

#: ``"openai"``: Chat Completions ``tools`` entries; ``"anthropic"``: Messages API entries.
FORMATS = ("openai", "anthropic")


def tool_schema(
    name: str, description: str, parameters: Mapping[str, Any], format: str = "openai"
) -> dict[str, Any]:
    """One tool's definition in ``format``; ``parameters`` (a JSON schema) is copied.

    ValueError names the formats when ``format`` is neither.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown tool schema format {format!r}; use 'openai' or 'anthropic'")
    schema = copy.deepcopy(dict(parameters))  # callers may edit theirs freely
    if format == "openai":
        function = {"name": name, "description": description, "parameters": schema}
        return {"type": "function", "function": function}
    return {"name": name, "description": description, "input_schema": schema}
