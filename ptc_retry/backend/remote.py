"""The backend's side of the kernel's versioned entry point (``ptc_retry.kernel.remote``):
the user expression that calls it, and the reading of its answer."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from ..core.errors import KernelStartError
from ..core.version import __version__

__all__ = ["REMOTE_API", "connect_expression", "remote_session_dir"]

#: The protocol this backend speaks with the remote kernel's ptc_retry.kernel.remote.connect.
REMOTE_API = 1


def connect_expression(session_id: str, root: str | None) -> str:
    """The user expression that sets up ptc-retry in a remote kernel and describes it."""
    arguments = f"{REMOTE_API}, session_id={session_id!r}, root_dir={root!r}"
    return f"__import__('ptc_retry.kernel.remote', fromlist=['connect']).connect({arguments})"


def remote_session_dir(content: Mapping[str, Any], printed: str, kernel_name: str) -> str:
    """The session directory the remote kernel's ``connect`` answered in the reply
    ``content`` (its user expression ``remote``); KernelStartError says why there is none:
    no ptc-retry there, another ptc-retry version or protocol, or no usable store.
    ``printed``: what the kernel printed meanwhile, for the reason."""
    found = (content.get("user_expressions") or {}).get("remote") or {}
    if content.get("status") != "ok" or found.get("status") != "ok":
        ename = found.get("ename") or content.get("ename")
        evalue = found.get("evalue") or content.get("evalue")
        if ename in ("ModuleNotFoundError", "ImportError", "AttributeError"):
            raise KernelStartError(
                f"the {kernel_name!r} kernel behind the gateway has no ptc-retry "
                f"{__version__} ({ename}: {evalue}); install ptc-retry {__version__} in the "
                "kernel's image and start the ptc-retry kernel"
            )
        raise KernelStartError(
            f"the {kernel_name!r} kernel behind the gateway cannot load ptc_retry "
            f"({ename}: {evalue}); install ptc-retry in the kernel's image and start the "
            "ptc-retry kernel"
        )
    text = (found.get("data") or {}).get("text/plain", "")
    try:
        answer = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        answer = {}  # not an answer this backend knows: another version's entry point
    if answer.get("version") != __version__ or answer.get("api") != REMOTE_API:
        raise KernelStartError(
            f"the kernel behind the gateway runs ptc-retry {answer.get('version')} "
            f"(protocol {answer.get('api')}) and this backend ptc-retry {__version__} "
            f"(protocol {REMOTE_API}); install the same ptc-retry version on both sides"
        )
    if not answer.get("session_dir"):
        said = answer.get("problem") or printed.strip() or "no session directory"
        raise KernelStartError(
            f"the {kernel_name!r} kernel behind the gateway cannot keep checkpoints ({said})"
        )
    return str(answer["session_dir"])
