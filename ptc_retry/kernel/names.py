"""The names the extension puts into a shell, and takes out again on unload: ``ptc_retry``
(the package's public API) and ``tools`` in the user's namespace (hidden from ``%who``),
and the magics. A name that is the user's own is never replaced or removed."""

from __future__ import annotations

import sys
import types
from typing import Any

from ..core import sentences
from .magics import MAGIC_NAMES
from .tools import TOOLS

__all__ = ["add_names", "offer_tools", "remove_magics", "remove_names", "restore_names"]


def add_names(shell: Any, api: types.ModuleType) -> None:
    """``ptc_retry`` (``api``) in the namespace, and ``tools`` unless that name is taken."""
    shell.user_ns["ptc_retry"] = shell.user_ns_hidden["ptc_retry"] = api
    if "tools" not in shell.user_ns:
        shell.user_ns["tools"] = shell.user_ns_hidden["tools"] = TOOLS


def restore_names(shell: Any, api: types.ModuleType) -> bool:
    """Put the names back if ``%reset`` took them: whether it had. IPython's reset empties
    ``user_ns_hidden`` as well as the namespace, which a person's ``del ptc_retry`` does not,
    so that is what tells a reset."""
    if "ptc_retry" in shell.user_ns_hidden:
        return False
    add_names(shell, api)
    return True


def offer_tools(shell: Any, *, said: bool) -> bool:
    """Put ``tools`` in the namespace before a program with host tools runs, unless that
    name is the user's own: then say once on stderr (unless ``said`` already) where the
    tools are instead. Whether it has been said now."""
    user_ns = shell.user_ns
    if "tools" not in user_ns:
        user_ns["tools"] = shell.user_ns_hidden["tools"] = TOOLS
        return said
    if user_ns["tools"] is not TOOLS and not said:
        print(sentences.TOOLS_NAME_TAKEN.render(), file=sys.stderr)
        return True
    return said


def remove_names(shell: Any, api: types.ModuleType) -> None:
    """Take out the names ``add_names`` and ``offer_tools`` put in, where they are still ours."""
    if shell.user_ns.get("ptc_retry") is api:
        del shell.user_ns["ptc_retry"]
    shell.user_ns_hidden.pop("ptc_retry", None)
    for space in (shell.user_ns, shell.user_ns_hidden):
        if space.get("tools") is TOOLS:
            del space["tools"]


def remove_magics(shell: Any, magics: object) -> None:
    """Unregister ``magics`` (a ``PtcRetryMagics``) and the magic names it registered."""
    registry = shell.magics_manager.registry
    if registry.get(type(magics).__name__) is magics:
        del registry[type(magics).__name__]
    for kind, names in MAGIC_NAMES.items():
        for name in names:
            shell.magics_manager.magics[kind].pop(name, None)
