"""The tools a request offers its program (``metadata["ptc_retry"]["tools"]``, sent by a
backend that has tools), each as the async function ``tools.<name>``: its signature and help
come from the tool's JSON schema and description, its arguments are checked and bound here."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..core.errors import ToolError
from ..core.protocol import TOO_DEEP, lone_surrogate, not_str_key
from ..core.schema import schema_signature
from .call_lines import canonical

ToolFunction = Callable[..., Coroutine[Any, Any, Any]]
#: What a tool function's call does with the bound arguments: ``call(name, arguments)``.
HostCall = Callable[[str, dict[str, Any]], Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool of a catalog: ``{"name", "description", "parameters"}``."""

    name: str
    description: str
    parameters: dict[str, Any]

    @property
    def schema_digest(self) -> str:
        """A digest of what the tool takes (its parameters' schema), which its recorded
        calls carry: a replay gives a recorded result only to a call of the same tool."""
        text = canonical(self.parameters) or repr(self.parameters)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]

    @property
    def defaults(self) -> dict[str, Any]:
        """``{property: default}`` for the properties whose schema gives a JSON default."""
        properties = self.parameters.get("properties")
        found: dict[str, Any] = {}
        for key, schema in (properties if isinstance(properties, dict) else {}).items():
            if isinstance(schema, dict) and "default" in schema:
                if canonical(schema["default"]) is not None:
                    found[key] = schema["default"]
        return found


class Catalog:
    """The tools one request offers, and their functions (made once each), which ``call``."""

    def __init__(self, raw: list[Any], call: HostCall) -> None:
        self._call = call
        self.specs: dict[str, ToolSpec] = {}
        for entry in raw:
            spec = _spec(entry)
            if spec is not None:
                self.specs[spec.name] = spec
        self._functions: dict[str, ToolFunction] = {}

    @property
    def names(self) -> list[str]:
        return sorted(self.specs)

    def function(self, name: str) -> ToolFunction:
        if name not in self._functions:
            self._functions[name] = tool_function(self.specs[name], self._call)
        return self._functions[name]


def _spec(entry: Any) -> ToolSpec | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    description = entry.get("description")
    parameters = entry.get("parameters")
    return ToolSpec(
        entry["name"],
        description if isinstance(description, str) else "",
        parameters if isinstance(parameters, dict) else {},
    )


class Catalogs:
    """The catalogs requests bring, each read once while it stays the same, and the latest."""

    def __init__(self, call: HostCall) -> None:
        self._call = call
        self._raw: list[Any] | None = None
        #: The catalog of the latest request that brought one.
        self.latest: Catalog | None = None

    def read(self, raw: list[Any]) -> Catalog:
        if self.latest is None or raw != self._raw:
            self._raw, self.latest = raw, Catalog(raw, self._call)
        return self.latest


# -- one tool as a function --------------------------------------------------------------------


def _doc(spec: ToolSpec) -> str:
    lines = [spec.description.strip() or f"The agent's tool {spec.name}."]
    properties = spec.parameters.get("properties")
    described = [
        f"{name}: {schema['description']}"
        for name, schema in (properties if isinstance(properties, dict) else {}).items()
        if isinstance(schema, dict) and isinstance(schema.get("description"), str)
    ]
    if described:
        lines += ["", *described]
    return "\n".join(lines)


def bind_arguments(
    name: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The JSON object of a call's arguments; ToolError when they do not fit or are not JSON.

    Positional arguments are taken in the order of the schema's properties: the order the
    signature (``help()``) and the prompt show, so ``tools.weather("Paris")`` means what it
    reads as.
    """
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ToolError(f"tools.{name}{signature}: {exc}", tool=name) from None
    arguments: dict[str, Any] = {}
    for key, value in bound.arguments.items():
        if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[key] = value
    for key, value in arguments.items():
        problem = _argument_problem(key)  # a name of **kwargs' own
        if problem is not None:
            raise ToolError(f"tools.{name}: an argument's name {problem}", tool=name)
        problem = _argument_problem(value)
        if problem is not None:
            raise ToolError(f"tools.{name}: argument {key!r} {problem}", tool=name)
    return arguments


def _argument_problem(value: Any) -> str | None:
    """Why ``value`` cannot be sent as a tool call's argument, as the words that follow its
    name (``is a set, not JSON ...``); None when it can: canonical JSON (no NaN, no
    Infinity) whose text UTF-8 can encode, as the Jupyter wire must."""
    text = canonical(value)
    if text is None:
        return _not_json(value)
    key = not_str_key(value)  # JSON would send {1: "a"} as {"1": "a"}
    if key is not None:
        return key
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return (
            f"{lone_surrogate(value)}; send valid text, e.g. s.encode('utf-8', 'replace').decode()"
        )
    return None


def _not_json(value: Any) -> str:
    """Why ``canonical`` refused ``value``: the error of the same encoding."""
    kinds = "a str, int, float, bool, None, or a list or dict of those"
    try:
        json.dumps(value, sort_keys=True, allow_nan=False)
    except RecursionError:
        return TOO_DEEP
    except ValueError as exc:  # NaN or Infinity, a circular reference, a huge int
        if _with_nan(value):
            return "holds NaN or Infinity, which are not JSON; pass finite numbers (or None)"
        return f"is not JSON ({exc}); pass {kinds}"
    except TypeError as exc:
        key = _unsortable_key(value)  # {1: "a", "b": 2}: sort_keys cannot order 1 and "b"
        if key is not None:
            return key
        if isinstance(value, (dict, list, tuple)):
            return f"is not JSON ({exc}); pass {kinds}"
    return f"is a {type(value).__name__}, not JSON ({kinds})"


def _unsortable_key(value: Any) -> str | None:
    """The words of :func:`not_str_key` when ``value`` is JSON but for keys of mixed types,
    which ``sort_keys`` cannot order; None otherwise (a circular value is never walked)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return None
    return not_str_key(value)


def _with_nan(value: Any) -> bool:
    """Whether ``value`` is JSON once NaN and Infinity are allowed (so they are what is not)."""
    try:
        json.dumps(value, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def tool_function(spec: ToolSpec, call: HostCall) -> ToolFunction:
    """``tools.<name>``: an async function with the tool's signature and description."""
    name = spec.name
    signature = schema_signature(spec.parameters)

    async def tool(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        return await call(name, bind_arguments(name, signature, args, kwargs))

    _present(tool, name, _doc(spec), signature)
    return tool


def unattached(name: str) -> ToolFunction:
    """``tools.<name>`` where no backend offers tools: calling it says so."""

    async def tool(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        raise ToolError(NO_BACKEND.format(name=name), tool=name)

    _present(tool, name, NO_BACKEND.format(name=name), None)
    return tool


NO_BACKEND = (
    "tools.{name}: no agent backend is attached to this kernel, so there are no tools to "
    "call (a ptc-retry KernelBackend with tools sends them with each program)"
)


def _present(tool: ToolFunction, name: str, doc: str, signature: inspect.Signature | None) -> None:
    tool.__name__ = name
    tool.__qualname__ = f"tools.{name}"
    tool.__module__ = "tools"
    tool.__doc__ = doc
    if signature is not None:
        tool.__signature__ = signature  # type: ignore[attr-defined]
