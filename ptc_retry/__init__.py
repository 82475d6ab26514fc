"""ptc-retry: keep every program a Jupyter kernel runs, and replay a failed one with a small fix.

In a kernel with the extension loaded (``%load_ext ptc_retry``, or the
``ptc-retry`` kernel), a failed program's traceback ends with a notice naming
its checkpoint, and the model fixes it with one line::

    await ptc_retry.replay("c3", "retries=3", "retries=5")

Importing this package needs no running kernel: the store, the replay text
logic and the prompt text are plain Python. The IPython parts load with the
extension.
"""

from __future__ import annotations

import sys
from typing import Any

from .core.errors import CheckpointError, PtcRetryError, ReplayError, StoreError, ToolError
from .core.notice import failure_notice, prompt_section
from .core.store import CheckpointStore
from .core.version import __version__
from .kernel.recorded import recorded
from .kernel.replay import extend, replay, resume
from .kernel.tools import TOOLS as tools

__all__ = [
    "CheckpointError",
    "CheckpointStore",
    "PtcRetryError",
    "ReplayError",
    "StoreError",
    "ToolError",
    "extend",
    "failure_notice",
    "load_ipython_extension",
    "prompt_section",
    "recorded",
    "replay",
    "resume",
    "tools",
    "unload_ipython_extension",
    "__version__",
]


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext ptc_retry``. IPython is imported here, not when the package is."""
    from .kernel.extension import load_ipython_extension as load

    load(shell, sys.modules[__name__])


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext ptc_retry``."""
    from .kernel.extension import unload_ipython_extension as unload

    unload(shell)
