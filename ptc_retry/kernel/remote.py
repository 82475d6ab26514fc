"""The stable entry point a backend calls in a kernel it reaches over the network.

A gateway backend cannot import anything in the remote kernel; it evaluates
``__import__("ptc_retry.kernel.remote", fromlist=["connect"]).connect(API, ...)``
as a user expression. This module's path and ``connect``'s signature do not
change; what ``connect`` does for a given ``api`` does not change either. A new
protocol gets a new ``API`` number, and a backend that asks for one this kernel
does not know gets a clear error instead of a silent misunderstanding.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.version import __version__
from .host import current_host

#: The protocol versions this kernel answers.
APIS = (1,)


def connect(api: int, *, session_id: str, root_dir: str | None = None) -> dict[str, Any]:
    """Load ptc-retry in this kernel, set its session, and describe what it became.

    Returns ``{"api", "version", "session_dir"}``; ``session_dir`` is ``""`` and
    ``problem`` says why when the checkpoint store cannot open.
    """
    if api not in APIS:
        return {
            "api": APIS[-1],
            "version": __version__,
            "session_dir": "",
            "problem": f"this kernel's ptc-retry {__version__} speaks protocol "
            f"{', '.join(map(str, APIS))}, not {api}",
        }
    from IPython import get_ipython

    shell = get_ipython()
    shell.extension_manager.load_extension("ptc_retry")
    settings = [f"PtcRetry.session_id = {session_id!r}"]
    if root_dir is not None:
        settings.append(f"PtcRetry.root_dir = {root_dir!r}")
    for line in settings:
        shell.run_line_magic("config", line)
    checkpoints = current_host().checkpoints
    store = checkpoints.open()
    answer: dict[str, Any] = {"api": api, "version": __version__, "session_dir": ""}
    if store is None:
        answer["problem"] = checkpoints.problem or "checkpoints are off"
    else:
        answer["session_dir"] = str(store.session_dir)
    return answer


#: The keys of a history line that say what waits for approval (``core.approvals``).
WAITING_KEYS = ("id", "n", "status", "replay_of", "pending")


def waiting(api: int) -> str:
    """The session's history lines, each cut to ``WAITING_KEYS``, as JSON text: what a
    backend that starts on a session another one left reads to list what waits for a
    person's approval (it takes them as an offer to decide, never as a decision)."""
    if api not in APIS:
        return "[]"
    store = current_host().checkpoints.open()
    lines = store.history() if store is not None else []
    return json.dumps([{key: line.get(key) for key in WAITING_KEYS} for line in lines])
