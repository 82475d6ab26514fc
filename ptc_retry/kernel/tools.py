"""``tools``: the agent's tools inside the kernel, as awaitable functions of one namespace
object (``await tools.search_orders(customer="acme")``), the tools of the catalog the running
program's request brought (see :mod:`.catalog`). Without a catalog (a notebook, no backend)
calling a tool raises ``ToolError``."""

from __future__ import annotations

from ..core.errors import PtcRetryError
from .catalog import Catalog, ToolFunction, unattached
from .host import current_host


def current_catalog() -> Catalog | None:
    """The catalog of this thread's running program (None when its request brought none);
    outside a program, the latest one (for completion and ``dir``)."""
    try:
        host = current_host()
    except PtcRetryError:
        return None
    running = host.programs.outermost()
    return running.catalog if running is not None else host.tool_catalogs.latest


class UnknownTool(AttributeError):
    """``tools.<name>`` for a name that is no tool of the program's request."""

    def _render_traceback_(self) -> list[str]:
        # As ptc-retry's own errors: the message says what to do, the frames of this file
        # would only cost the model tokens.
        return [f"AttributeError: {self}"]


class Tools:
    """The agent's tools: ``await tools.<name>(...)`` calls one; ``dir(tools)`` lists them,
    ``help(tools.<name>)`` shows its signature and description."""

    __slots__ = ()

    def __getattr__(self, name: str) -> ToolFunction:
        if name.startswith("_"):  # IPython's display and completion probe such names
            raise AttributeError(name)
        catalog = current_catalog()
        if catalog is None:
            return unattached(name)
        if name not in catalog.specs:
            error = UnknownTool(
                f"there is no tool {name!r}; the tools are: {', '.join(catalog.names) or 'none'}"
            )
            error.name, error.obj = name, self  # Python 3.10+ adds "Did you mean ...?"
            raise error
        return catalog.function(name)

    def __dir__(self) -> list[str]:
        catalog = current_catalog()
        return catalog.names if catalog is not None else []

    def __repr__(self) -> str:
        catalog = current_catalog()
        if catalog is None:
            return "<tools: none (no agent backend attached)>"
        return f"<tools: {', '.join(catalog.names) or 'none'}>"


#: The ``tools`` of every kernel with ptc-retry: also ``ptc_retry.tools``.
TOOLS = Tools()
