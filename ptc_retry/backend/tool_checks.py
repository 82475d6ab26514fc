"""What a host tool may be given and may return: the checks of its signature when it is
registered, of a call's arguments before it runs and of its result after, each refusal a
``Refused`` whose message the program's ``ToolError`` says."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..core.protocol import TOO_DEEP, lone_surrogate, not_str_key
from ..core.schema import signature_text
from .results import json_kind

__all__ = [
    "Refused",
    "check_arguments",
    "check_result",
    "check_signature",
    "is_async",
    "json_result",
    "raised",
]

#: JSON schema types, as a signature line shows them (and as the checks name them).
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "boolean": lambda value: isinstance(value, bool),
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


class Refused(Exception):
    """A call that gives the program an error instead of a result; the message says why.
    ``ename``: what the tool raised, or ``ToolError`` for a call refused before or after it
    ran (an unknown tool, bad arguments, a result that cannot travel)."""

    def __init__(self, message: str, *, ename: str = "ToolError") -> None:
        super().__init__(message)
        self.ename = ename


def raised(exc: BaseException) -> str:
    """What the program's ToolError says of ``exc``, which a tool raised."""
    try:
        said = str(exc)
    except Exception:  # an exception whose __str__ fails still names its type
        said = ""
    text = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    if isinstance(exc, SystemExit):
        return f"{text} (the tool exited, as argparse does on arguments it refuses)"
    if isinstance(exc, KeyboardInterrupt):
        return f"{text} (the tool was interrupted)"
    return text


def check_result(result: Any) -> None:
    """Refused, saying why, when ``result`` cannot travel to the program as JSON."""
    try:
        text = json.dumps(result, ensure_ascii=False)
    except RecursionError:
        raise Refused(f"its result {TOO_DEEP}") from None
    except (TypeError, ValueError) as exc:
        raise Refused(
            f"its result is not JSON ({exc}): a host tool must return str, int, float, "
            "bool, None, or lists and dicts of them"
        ) from None
    try:
        text.encode("utf-8")  # what the wire is; json.dumps lets a lone surrogate through
    except UnicodeEncodeError:
        raise Refused(
            f"its result {lone_surrogate(result)}; the tool must return valid text"
        ) from None
    key = not_str_key(result)  # json.dumps turns {1: "a"} into {"1": "a"} silently
    if key is not None:
        raise Refused(f"its result {key}")


def json_result(result: Any) -> Any:
    """``result``, once it is known to be JSON; Refused, saying what to return, if not."""
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise Refused(
            f"its result is not JSON ({exc}): a host tool must return str, int, float, "
            "bool, None, or lists and dicts of them"
        ) from None
    return result


def check_signature(function: Callable[..., Any], name: str) -> None:
    """TypeError when ``function`` cannot be called with keyword arguments only."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read (some builtins): its schema takes any keywords
    for parameter in parameters:
        if parameter.kind is parameter.VAR_POSITIONAL:
            raise TypeError(
                f"register_tool: {name} takes *{parameter.name}, but programs pass a tool "
                "keyword arguments only (a JSON object); give it named parameters"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"register_tool: {name}'s parameter {parameter.name!r} is positional-only, "
                "but programs pass a tool keyword arguments only (a JSON object)"
            )


def check_arguments(parameters: Mapping[str, Any], arguments: object) -> None:
    """Refused, saying what to send, when ``arguments`` do not fit ``parameters``, the
    tool's JSON schema."""
    takes = f"it takes ({signature_text(parameters)})"
    if not isinstance(arguments, dict):
        raise Refused(f"its arguments must be keyword arguments (a JSON object); {takes}")
    schema = parameters
    properties = schema.get("properties") or {}
    missing = [name for name in schema.get("required") or () if name not in arguments]
    if missing:
        raise Refused(f"missing the argument {', '.join(map(repr, missing))}; {takes}")
    if schema.get("additionalProperties") is False:
        unknown = [name for name in arguments if name not in properties]
        if unknown:
            raise Refused(f"no argument named {', '.join(map(repr, unknown))}; {takes}")
    for name, value in arguments.items():
        expected = (properties.get(name) or {}).get("type")
        if not isinstance(expected, str):
            continue
        check = _CHECKS.get(expected)
        if check is not None and not check(value):
            article = "an" if expected[0] in "aeiou" else "a"
            raise Refused(
                f"the argument {name!r} must be {article} {expected}, not {json_kind(value)}; "
                f"{takes}"
            )


def is_async(function: Callable[..., Any]) -> bool:
    """Whether calling ``function`` gives a coroutine (an async def, or an async ``__call__``)."""
    call = getattr(function, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)
