"""The agent side's kernel backend: ``KernelBackend`` runs each program in a ptc-retry
kernel it owns (local through jupyter_client, or behind a Kernel Gateway).
"""

from __future__ import annotations

from ..core.errors import BackendError, GatewayError, KernelStartError
from .facade import (
    MAX_RAW_OUTPUT_CHARS,
    NATIVE_RUN_CODE_DESCRIPTION,
    RUN_CODE,
    RUN_CODE_DESCRIPTION,
    RUN_CODE_PARAMETERS,
    KernelBackend,
    RunResult,
    Tool,
)

__all__ = [
    "MAX_RAW_OUTPUT_CHARS",
    "NATIVE_RUN_CODE_DESCRIPTION",
    "RUN_CODE",
    "RUN_CODE_DESCRIPTION",
    "RUN_CODE_PARAMETERS",
    "BackendError",
    "GatewayError",
    "KernelBackend",
    "KernelStartError",
    "RunResult",
    "Tool",
]
