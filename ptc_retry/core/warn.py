"""Warn once per distinct problem: an agent pays for every line it reads."""

from __future__ import annotations

from collections.abc import Callable


class WarnOnce:
    """Calls ``emit(message)`` unless ``message`` is the one it emitted last."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._last: str | None = None

    def __call__(self, message: str) -> None:
        if message != self._last:
            self._last = message
            self._emit(message)

    def reset(self) -> None:
        """Forget the last message: the problem went away, so its return is news."""
        self._last = None
