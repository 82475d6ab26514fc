"""The agent side's kernel backend, for the loop that calls a model and runs its tool calls.

``KernelBackend`` runs each program in a ptc-retry kernel it owns and returns a
``RunResult``, or the text the model reads next; ``RUN_CODE`` is the name of the tool it
offers, and ``HostTool`` a tool for programs described by a JSON schema
(``KernelBackend.add_tool``). The kernel is reached through a
transport: ``LocalKernel`` (started here through jupyter_client) or ``GatewayKernel``
(behind a Jupyter Kernel Gateway or Enterprise Gateway); a new way to reach a kernel
implements ``Transport``, started with a ``KernelSetup``. Its errors are ``BackendError``
and the kinds a loop may tell apart: ``KernelStartError``, ``GatewayError``,
``MessageTooLarge`` and ``ApprovalError``. A tool call that waits for a person's approval is
a ``PendingApproval`` (``KernelBackend.pending_approvals``). ``Telemetry`` says where its
OpenTelemetry spans and metrics go (docs/operators.md). Everything else in this package is
its inside.
"""

from __future__ import annotations

from ..core.approvals import PendingApproval
from ..core.errors import (
    ApprovalError,
    BackendError,
    GatewayError,
    KernelStartError,
    MessageTooLarge,
)
from .facade import KernelBackend
from .gateway import GatewayKernel
from .host_tools import HostTool
from .local import LocalKernel
from .results import RUN_CODE, RunResult
from .tracing import Telemetry
from .transport import KernelSetup, Transport

__all__ = [
    "RUN_CODE",
    "ApprovalError",
    "BackendError",
    "GatewayError",
    "GatewayKernel",
    "HostTool",
    "KernelBackend",
    "KernelSetup",
    "KernelStartError",
    "LocalKernel",
    "MessageTooLarge",
    "PendingApproval",
    "RunResult",
    "Telemetry",
    "Transport",
]
