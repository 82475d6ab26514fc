"""ptc-retry as an MCP server: ``ptc-retry mcp`` gives any MCP host a ``run_code`` tool on a
persistent kernel that saves every program, with the one-line replay of a failed one.

    claude mcp add ptc-retry -- ptc-retry mcp

stdio is the default (one kernel for the host's session); ``--http HOST:PORT`` serves
Streamable HTTP with one kernel per MCP session; ``--config FILE`` / ``--upstream
NAME=COMMAND`` let programs call other MCP servers' tools (``upstream``), each session
starting its own. docs/mcp.md is the manual. The server is
built on the official ``mcp`` SDK, an optional extra (``pip install 'ptc-retry[mcp]'``):
this package imports it only in ``serve``, so the rest of ptc-retry works without it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .http import HttpOptions
    from .server import ServerOptions

__all__ = ["MISSING_SDK", "sdk_missing", "serve"]

#: What ``ptc-retry mcp`` says when the SDK is not installed.
MISSING_SDK = (
    "the MCP server needs the official MCP SDK, which is not installed; install it with "
    "pip install 'ptc-retry[mcp]'"
)


def sdk_missing() -> str | None:
    """``MISSING_SDK`` when the ``mcp`` SDK cannot be imported here, else None."""
    try:
        found = importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a broken install, or one blocked in sys.modules
        found = False
    return None if found else MISSING_SDK


async def serve(options: ServerOptions, http: HttpOptions | None = None) -> None:
    """Serve MCP: on stdio, or on Streamable HTTP when ``http`` is given, until the host
    closes stdin (stdio) or the process is interrupted (HTTP)."""
    if http is None:
        from .stdio import serve_stdio

        await serve_stdio(options)
    else:
        from .http import serve_http

        await serve_http(options, http)
