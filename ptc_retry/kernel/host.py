"""The extension loaded in a shell, as replay, the magics and the remote entry point see
it: the :class:`Host` interface and the registry of loaded extensions. They reach the
extension through here, so that imports go one way (the extension imports them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..core.errors import PtcRetryError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..core.guard import RepeatedFailureGuard
    from .catalog import Catalogs
    from .checkpoints import Checkpoints
    from .resume import ResumePolicy
    from .running import Programs
    from .stdin import StdinChannel


class Host(Protocol):
    """What the loaded extension offers the code that runs inside programs."""

    shell: InteractiveShell
    checkpoints: Checkpoints
    programs: Programs
    resumes: ResumePolicy

    @property
    def guard(self) -> RepeatedFailureGuard:
        """Replaced when a guard option changes: read it, do not keep it."""
        ...

    #: The tool catalogs requests brought (the latest, for ``dir(tools)`` between programs).
    tool_catalogs: Catalogs
    #: The kernel's stdin channel, which tool calls travel on; None outside ipykernel.
    stdin: StdinChannel | None


_loaded: dict[int, Host] = {}


def add(shell: Any, host: Host) -> None:
    """Register ``host`` as the extension loaded in ``shell``."""
    _loaded[id(shell)] = host


def remove(shell: Any) -> Host | None:
    """Forget ``shell``'s extension, and return it."""
    return _loaded.pop(id(shell), None)


def loaded(shell: Any) -> Host | None:
    """The extension loaded in ``shell``, if any."""
    return _loaded.get(id(shell))


def current_host() -> Host:
    """The extension loaded in the running IPython shell; PtcRetryError if none."""
    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    host = loaded(shell) if shell is not None else None
    if host is None:
        raise PtcRetryError(
            "ptc-retry is not loaded in this kernel: run `%load_ext ptc_retry` first, "
            "or start the `ptc-retry` kernel"
        )
    return host
