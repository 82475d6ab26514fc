"""The errors ptc-retry raises. Each message says what was wrong and what to do."""

from __future__ import annotations

from .protocol import sendable_text


class PtcRetryError(Exception):
    """Base class of every error ptc-retry raises on purpose."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of the traceback: the message says what to do, and the
        # frames of ptc-retry's own files would only cost the model tokens.
        return [f"{type(self).__name__}: {self}"]


class StoreError(PtcRetryError):
    """The checkpoint store cannot be used (unsafe root, bad session directory)."""


class SessionInUseError(StoreError):
    """The session asked for is held by another live process, and the store was asked not to
    move to ``<session>.2`` (a backend that must name the kernel's session exactly)."""


class CheckpointError(PtcRetryError):
    """A checkpoint is missing, unreadable, or not a JSON object with a ``"code"`` string."""


class AmbiguousReferenceError(CheckpointError):
    """A reference or call id names two programs or more: it is refused, never guessed."""


class ReplayError(PtcRetryError):
    """A replay cannot run as asked: unknown target, or an edit that does not match exactly once."""


class ToolError(PtcRetryError):
    """A program's tool call failed: the tool raised, its arguments or result were not JSON or
    did not fit, or no agent backend answers tool calls here. ``tool`` names the tool.

    A lone surrogate the message quotes (an argument's name, say) is written as its escape:
    the kernel could not send a traceback that holds one, and the model would read nothing.
    """

    def __init__(self, message: str, tool: str | None = None) -> None:
        super().__init__(sendable_text(message))
        self.tool = tool


class ToolDenied(ToolError):
    """A person denied this tool call (``kb.deny(reference, reason)``): the tool did not run.
    ``reason`` is what they said. A program may catch it; uncaught, it fails the program."""

    def __init__(self, reason: str, tool: str | None = None) -> None:
        said = f"tools.{tool} was denied: {reason}" if tool else reason
        super().__init__(said, tool=tool)
        self.reason = sendable_text(reason)


class ApprovalPending(BaseException):
    """Raised in a program at a tool call that needs a person's approval and has none: the
    tool did not run, and the program stops there (status ``paused``) until the host decides
    it. A BaseException, so that ``except Exception`` in the program cannot swallow the
    pause; its message is the one line the model reads. ``statement``: the top-level
    statement of the first paused call, where the program goes on from."""

    statement: int | None = None

    def _render_traceback_(self) -> list[str]:
        # The line says everything: the frames would only cost the model tokens.
        return [str(self)]


class PatchError(PtcRetryError):
    """A native-mode patch cannot apply: bad shape, bad path, or an edit that does not match."""


class BackendError(PtcRetryError):
    """The backend cannot do what was asked (not started, shut down, restart failed)."""


class ApprovalError(BackendError):
    """``approve`` or ``deny`` cannot decide what was named: nothing waits under that
    reference in this session, or it was decided already. The message says what waits."""


class KernelStartError(BackendError):
    """The kernel could not be started (unknown kernel name, crash at startup, no reply)."""


class GatewayError(BackendError):
    """The gateway cannot be reached, refused the token, or answered with an error."""


class MessageTooLarge(BackendError):
    """A message is larger than the transport carries in one piece, so nothing was sent; the
    message says how large it would be and the limit. ``size`` and ``limit`` are bytes."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit
