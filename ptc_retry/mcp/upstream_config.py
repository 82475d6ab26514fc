"""Which upstream MCP servers to start: the ``{"mcpServers": {...}}`` configuration MCP hosts
use (Claude Desktop, Claude Code, Cursor; VS Code's ``{"servers": {...}}`` too), and the
``NAME=COMMAND ARGS...`` shortcut for one server. Pure: nothing here starts a process.

A stdio server is ``{"command": str, "args": [str, ...], "env": {str: str}, "cwd": str}``
(only ``command`` required); an HTTP one (streamable HTTP) is ``{"url": str, "headers":
{str: str}}``. ``"type"`` may say ``"stdio"`` or ``"http"`` (also ``"streamable-http"``);
``"disabled": true`` leaves a server out. Other keys hosts keep there are ignored. In the
strings, ``${NAME}`` and ``${NAME:-default}`` are the environment's variables, as hosts read them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["UpstreamConfig", "UpstreamConfigError", "parse_spec", "read_config"]

#: The keys that hold the servers, in the order they are looked for.
SERVERS_KEYS = ("mcpServers", "servers")
#: ``"type"`` values for a server started as a process, and for one reached by URL.
STDIO_TYPES = ("stdio",)
HTTP_TYPES = ("http", "streamable-http", "streamableHttp")

#: ``${NAME}`` or ``${NAME:-default}`` in a value (Claude Code's spelling; VS Code's is
#: ``${env:NAME}``): a variable of the environment.
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")

EXAMPLE = '{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}'


class UpstreamConfigError(ValueError):
    """The configuration cannot be used; the message names the file, line and key."""


@dataclass(frozen=True)
class UpstreamConfig:
    """One upstream server: started as ``command args`` (stdio), or reached at ``url``."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """How it is started (``uvx mcp-server-time``) or reached (its URL), for errors."""
        if self.url is not None:
            return self.url
        return shlex.join([self.command or "", *self.args])


def read_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> list[UpstreamConfig]:
    """The enabled servers of a configuration file (a path) or of its parsed content.

    UpstreamConfigError, naming the file, the line and the key, for what does not fit.
    """
    if isinstance(source, Mapping):
        return _Reader("the configuration", None).servers(source)
    path = Path(source)
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UpstreamConfigError(f"cannot read the MCP configuration {path}: {exc}") from None
    try:
        content = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UpstreamConfigError(
            f"{path}, line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg}); an MCP "
            f"configuration looks like {EXAMPLE}"
        ) from None
    return _Reader(str(path), text).servers(content)


def parse_spec(spec: str) -> UpstreamConfig:
    """``NAME=COMMAND ARGS...`` (split as a shell would) or ``NAME=URL``, as one server."""
    name, sep, rest = spec.partition("=")
    words = _split(spec, rest)
    if not sep or not name.strip() or not words:
        raise UpstreamConfigError(
            f"--upstream {spec!r}: expected NAME=COMMAND ARGS..., such as "
            "--upstream 'time=uvx mcp-server-time', or NAME=URL"
        )
    name = name.strip()
    if len(words) == 1 and re.match(r"https?://", words[0]):
        return UpstreamConfig(name, url=words[0])
    return UpstreamConfig(name, command=words[0], args=tuple(words[1:]))


def _split(spec: str, rest: str) -> list[str]:
    try:
        return shlex.split(rest)
    except ValueError as exc:
        raise UpstreamConfigError(f"--upstream {spec!r}: {exc}") from None


class _Reader:
    """Reads one configuration's servers; ``text`` (a file's) gives its errors their line."""

    def __init__(self, where: str, text: str | None) -> None:
        self.where = where
        self.text = text

    def servers(self, content: Any) -> list[UpstreamConfig]:
        key = next((k for k in SERVERS_KEYS if isinstance(content, dict) and k in content), None)
        if key is None:
            raise self._error((), f'there is no "mcpServers" object; expected {EXAMPLE}')
        servers = content[key]
        if not isinstance(servers, dict):
            raise self._error((key,), f"{key} must be an object of servers, {_not(servers)}")
        return [
            self._server(key, name, entry)
            for name, entry in servers.items()
            if not (isinstance(entry, dict) and entry.get("disabled") is True)
        ]

    def _server(self, key: str, name: str, entry: Any) -> UpstreamConfig:
        at = (key, name)
        if not name.strip():
            raise self._error(at, "a server needs a name")
        if not isinstance(entry, dict):
            raise self._error(at, f"{key}.{name} must be an object, {_not(entry)}")
        kind = entry.get("type")
        if kind is not None and kind not in (*STDIO_TYPES, *HTTP_TYPES):
            raise self._error(
                (*at, "type"),
                f'{key}.{name}.type {kind!r} is not supported here; use "stdio" (with '
                '"command") or "http" (streamable HTTP, with "url")',
            )
        if "url" in entry and "command" in entry:
            raise self._error(at, f'{key}.{name} has both "command" and "url"; keep one')
        if "url" in entry or kind in HTTP_TYPES:
            return UpstreamConfig(
                name,
                url=self._string(entry, (*at, "url")),
                headers=self._strings(entry, (*at, "headers")),
            )
        if "command" not in entry:
            raise self._error(
                at, f'{key}.{name} needs a "command" (a stdio server) or a "url" (HTTP)'
            )
        return UpstreamConfig(
            name,
            command=self._string(entry, (*at, "command")),
            args=tuple(self._list(entry, (*at, "args"))),
            env=self._strings(entry, (*at, "env")),
            cwd=self._string(entry, (*at, "cwd")) if "cwd" in entry else None,
        )

    def _string(self, entry: dict[str, Any], at: tuple[str, ...]) -> str:
        value = entry.get(at[-1])
        if not isinstance(value, str) or not value:
            raise self._error(at, f"{'.'.join(at)} must be a non-empty string, {_not(value)}")
        return self._expand(value, at)

    def _list(self, entry: dict[str, Any], at: tuple[str, ...]) -> list[str]:
        value = entry.get(at[-1], [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._error(at, f"{'.'.join(at)} must be a list of strings, {_not(value)}")
        return [self._expand(item, at) for item in value]

    def _strings(self, entry: dict[str, Any], at: tuple[str, ...]) -> dict[str, str]:
        value = entry.get(at[-1], {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._error(at, f"{'.'.join(at)} must be an object of strings, {_not(value)}")
        return {key: self._expand(item, (*at, key)) for key, item in value.items()}

    def _expand(self, value: str, at: tuple[str, ...]) -> str:
        """``value`` with each ``${NAME}`` (or ``${NAME:-default}``) replaced by the variable
        of this process's environment, as hosts do (a token kept out of the file)."""

        def variable(found: re.Match[str]) -> str:
            name, default = found.group(1), found.group(3)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise self._error(
                at,
                f"{'.'.join(at)} uses ${{{name}}}, which is not set in the environment; set it, "
                f"or write ${{{name}:-default}}",
            )

        return _VARIABLE.sub(variable, value)

    def _error(self, at: tuple[str, ...], message: str) -> UpstreamConfigError:
        line = f", line {_line_of(self.text, at)}" if self.text is not None else ""
        return UpstreamConfigError(f"{self.where}{line}: {message}")


def _line_of(text: str | None, at: tuple[str, ...]) -> int:
    """The line of the last key of ``at`` found in ``text``, each searched after the one
    before (so ``("mcpServers", "time", "args")`` finds that server's ``"args"``)."""
    position = 0
    for key in at:
        found = re.compile(re.escape(json.dumps(key)) + r"\s*:").search(text or "", position)
        if found is None:
            break
        position = found.start()
    return (text or "").count("\n", 0, position) + 1


def _not(value: Any) -> str:
    return (
        f"not {json.dumps(value, default=repr)[:60]}" if value is not None else "but it is missing"
    )


def combined(configs: Sequence[UpstreamConfig]) -> list[UpstreamConfig]:
    """``configs`` with one server per name; UpstreamConfigError names one given twice."""
    names: set[str] = set()
    for config in configs:
        if config.name in names:
            raise UpstreamConfigError(
                f"two upstream servers are named {config.name!r}; give each its own name"
            )
        names.add(config.name)
    return list(configs)
