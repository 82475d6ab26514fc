"""How the backend reaches its kernel: the ``Transport`` interface, which ``LocalKernel``
(a kernel started here) and ``GatewayKernel`` (a kernel behind a gateway) implement.

Everything that is transport lives behind it; what the backend does with the messages
(capture, text, statuses, time limits) is shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["KernelSetup", "Transport"]


@dataclass(frozen=True)
class KernelSetup:
    """What the backend asks of the kernel a transport starts: where it keeps checkpoints."""

    session_id: str
    #: The checkpoint root as the kernel sees it; None: the kernel's own default.
    root: Path | None
    #: ``--PtcRetry...`` options for the kernel's command line (native mode's notice switch).
    options: tuple[str, ...] = ()


class Transport(Protocol):
    """One kernel, started and reached one way; each instance serves one backend."""

    #: Seconds a kernel gets to answer after it starts or restarts.
    startup_timeout: float

    @property
    def kernel_name(self) -> str:
        """The kernelspec the kernel runs."""

    @property
    def extension(self) -> bool:
        """False: the kernel runs without ptc-retry (a stock kernel, for comparisons)."""

    @property
    def url(self) -> str | None:
        """The gateway the kernel is reached through; None for a kernel started on this
        machine."""

    @property
    def checkpoints_here(self) -> bool:
        """Whether the kernel keeps its checkpoints on this machine, where the backend reads
        them and removes the session directory it made; False for a kernel on another host,
        which says where its session directory is when it starts (``start`` returns it)
        and removes it itself."""

    async def start(self, setup: KernelSetup) -> Path:
        """Start the kernel and wait until it answers; return its session directory as the
        kernel sees it. KernelStartError if it cannot start, GatewayError if the gateway
        cannot be reached."""

    async def send_execute(self, content: dict[str, Any], metadata: dict[str, Any]) -> str:
        """Send an execute_request with this content and metadata; return its msg_id.
        MessageTooLarge, and nothing sent, when it is larger than the transport carries."""

    async def receive(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        """The next iopub, stdin or shell message whose parent is ``msg_id``, in the order
        that ends a request (outputs and input_requests, then the idle status and the
        reply), or None when none came within ``timeout`` seconds; then ``is_alive()``
        tells whether to wait on."""

    async def send_input_reply(self, value: str, request: dict[str, Any]) -> None:
        """Answer the kernel's input_request ``request`` (a message ``receive`` returned)
        with ``value``, on the stdin channel. Only called for a request sent with
        ``allow_stdin`` (the backend has host tools). MessageTooLarge, and nothing sent, when
        the reply is larger than the transport carries (a gateway's websocket takes at most
        ``GatewayKernel.max_send_bytes`` a message; a local kernel's zmq socket has no limit)."""

    async def interrupt(self) -> None:
        """Interrupt the running program (SIGINT or an interrupt_request, as the kernel says)."""

    async def restart(self) -> None:
        """Restart the kernel and wait until it answers again, set up as after ``start``."""

    async def is_alive(self) -> bool:
        """Whether the kernel still runs; BackendError when that cannot be known."""

    async def exit_description(self) -> str:
        """How a kernel that is not alive ended, for the model: ``exit code 1``, ..."""

    async def shutdown(self, remove: str | None) -> None:
        """Stop the kernel (if it was started) and delete ``remove`` (this session's
        checkpoint directory, where the kernel keeps it) when given. Never raises for a
        kernel, or a gateway, that is already gone."""
