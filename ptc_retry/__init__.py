"""ptc-retry: keep every program a Jupyter kernel runs, and replay a failed one with a small fix.

In a kernel with the extension loaded (``%load_ext ptc_retry``, or the
``ptc-retry`` kernel), a failed program's traceback ends with a notice naming
its checkpoint, and the model fixes it with one line::

    await ptc_retry.replay("#3", "retries=3", "retries=5")

This module has three audiences, each with its own list (``__all__`` is their union):

* ``PROGRAM_API``, what a program sees as ``ptc_retry`` (the extension puts this module in
  the kernel's namespace, so programs need no import): ``replay``, ``resume``, ``extend``,
  ``recorded``, ``tools`` (the agent's tools, when the program's own ``tools`` hides them),
  and the errors a program may catch: ``ReplayError``, ``ToolError`` (and its ``ToolDenied``,
  a call a person denied) and their base ``PtcRetryError``.
* ``LIBRARY_API``, for the host that runs programs: ``prompt_section`` (the system-prompt
  text), ``read_notice`` (the call a notice offers, an ``OfferedCall``, and the reference
  it names, from a traceback or a tool result), ``parse_notice`` (only the reference) and
  ``__version__``. The agent side has its own package, ``ptc_retry.backend``
  (``KernelBackend``), and so do ``ptc_retry.integrations`` and ``ptc_retry.mcp``.
* ``EXTENSION_API``, IPython's entry points: ``load_ipython_extension`` and
  ``unload_ipython_extension`` (``%load_ext ptc_retry``, ``%unload_ext ptc_retry``).

Importing this package needs no running kernel: the store, the replay text
logic and the prompt text are plain Python. The IPython parts load with the
extension.
"""

from __future__ import annotations

import sys
from typing import Any

from .core.errors import PtcRetryError, ReplayError, ToolDenied, ToolError
from .core.notice import OfferedCall, parse_notice, prompt_section, read_notice
from .core.version import __version__
from .kernel.recorded import recorded
from .kernel.replay import extend, replay, resume
from .kernel.tools import TOOLS as tools

#: What programs call: the helpers, the tools and the errors they raise.
PROGRAM_API = (
    "PtcRetryError",
    "ReplayError",
    "ToolDenied",
    "ToolError",
    "extend",
    "recorded",
    "replay",
    "resume",
    "tools",
)
#: What a host uses without a kernel.
LIBRARY_API = ("OfferedCall", "__version__", "parse_notice", "prompt_section", "read_notice")
#: What IPython calls.
EXTENSION_API = ("load_ipython_extension", "unload_ipython_extension")

__all__ = [
    "OfferedCall",
    "PtcRetryError",
    "ReplayError",
    "ToolDenied",
    "ToolError",
    "__version__",
    "extend",
    "load_ipython_extension",
    "parse_notice",
    "prompt_section",
    "read_notice",
    "recorded",
    "replay",
    "resume",
    "tools",
    "unload_ipython_extension",
]


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext ptc_retry``. IPython is imported here, not when the package is."""
    from .kernel.extension import load_ipython_extension as load

    load(shell, sys.modules[__name__])


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext ptc_retry``."""
    from .kernel.extension import unload_ipython_extension as unload

    unload(shell)
