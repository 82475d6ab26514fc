"""The agent side's kernel backend: ``KernelBackend`` runs each program in a ptc-retry
kernel it owns, reached through a transport: ``LocalKernel`` (started here through
jupyter_client) or ``GatewayKernel`` (behind a Jupyter Kernel Gateway).
"""

from __future__ import annotations

from ..core.errors import BackendError, GatewayError, KernelStartError, MessageTooLarge
from .capture import MAX_RAW_OUTPUT_CHARS
from .facade import MODES, KernelBackend
from .gateway import GatewayKernel
from .local import LocalKernel
from .results import (
    NATIVE_RUN_CODE_DESCRIPTION,
    RESULT_STATUSES,
    RUN_CODE,
    RUN_CODE_DESCRIPTION,
    RUN_CODE_PARAMETERS,
    RunResult,
    Tool,
)
from .transport import KernelSetup, Transport

__all__ = [
    "MAX_RAW_OUTPUT_CHARS",
    "MODES",
    "NATIVE_RUN_CODE_DESCRIPTION",
    "RESULT_STATUSES",
    "RUN_CODE",
    "RUN_CODE_DESCRIPTION",
    "RUN_CODE_PARAMETERS",
    "BackendError",
    "GatewayError",
    "GatewayKernel",
    "KernelBackend",
    "KernelSetup",
    "KernelStartError",
    "LocalKernel",
    "MessageTooLarge",
    "RunResult",
    "Tool",
    "Transport",
]
