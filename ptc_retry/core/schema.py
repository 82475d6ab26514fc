"""Tool definitions in the two function-calling formats models read."""

from __future__ import annotations

import copy
import inspect
import keyword
import math
import typing
from collections.abc import Callable, Mapping
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


# -- a tool's signature, as Python shows it --------------------------------------------------

JSON_TYPE_NAMES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}


class _Shown:
    """Shows as its text in a signature: an annotation or a default."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


#: The default a signature shows for an optional argument the host fills in itself.
OPTIONAL = _Shown("...")


def schema_signature(parameters: dict[str, Any]) -> inspect.Signature:
    """The Python signature of a tool whose arguments follow the JSON schema ``parameters``.

    Properties in the schema's order; an optional one shows ``= ...`` (the host fills it in)
    or its schema default. A required property after an optional one is keyword-only.
    ``**kwargs`` unless the schema says ``"additionalProperties": false``. A property that
    is no Python name leaves only ``**arguments``.
    """
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    listed = parameters.get("required")
    listed = listed if isinstance(listed, list) else []
    required = {name for name in listed if isinstance(name, str)}
    if not all(_is_name(name) for name in properties):
        return inspect.Signature([inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD)])
    params: list[inspect.Parameter] = []
    kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for name, schema in properties.items():
        schema = schema if isinstance(schema, dict) else {}
        default: Any = inspect.Parameter.empty
        if name not in required:
            default = _Shown(repr(schema["default"])) if "default" in schema else OPTIONAL
        elif params and params[-1].default is not inspect.Parameter.empty:
            kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(name, kind, default=default, annotation=_type(schema)))
    if parameters.get("additionalProperties") is not False:
        rest = "kwargs" if "kwargs" not in properties else "more"
        params.append(inspect.Parameter(rest, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def _is_name(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _type(schema: dict[str, Any]) -> Any:
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    known = [kind for kind in kinds if isinstance(kind, str) and kind in JSON_TYPE_NAMES]
    names = [JSON_TYPE_NAMES[kind] for kind in known]
    return _Shown(" | ".join(names)) if names else inspect.Parameter.empty


def signature_text(parameters: Mapping[str, Any]) -> str:
    """``a: int, b: str = ...``: the arguments of :func:`schema_signature`, without the
    parentheses, as the prompt and the backend's errors show them."""
    return str(schema_signature(dict(parameters)))[1:-1]


_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def first_paragraph(function: Callable[..., Any]) -> str:
    """The first paragraph of ``function``'s docstring, on one line: its default description."""
    doc = inspect.getdoc(function) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def signature_schema(function: Callable[..., Any], *, defaults: bool = False) -> dict[str, Any]:
    """A JSON schema of the keyword arguments ``function`` takes, typed where that is plain;
    with ``defaults``, the JSON defaults of those it gives one (a host tool's: a replay fills
    them in when it compares calls, and the prompt shows them)."""
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
        elif defaults and _is_json(parameter.default):  # a replay compares calls with it
            properties[parameter.name]["default"] = parameter.default
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema


def _is_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON (None, a bool, a finite number, a str, or lists and
    str-keyed dicts of them) that comes back from JSON as it is: a schema default."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_is_json(item) for item in value)
    if kind is dict:
        return all(type(key) is str and _is_json(item) for key, item in value.items())
    return False
