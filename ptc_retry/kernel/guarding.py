"""The repeated-failure guard of one kernel (the rules live in core/guard.py): built from the
``PtcRetry`` traits and built again when they change, asked from the threads of ipykernel
subshells under one lock. Kept in memory only: a kernel restart starts a fresh guard."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..core.guard import RepeatedFailureGuard
from .config import PtcRetry
from .running import Failure, Running

__all__ = ["KernelGuard"]


class KernelGuard:
    """``guard``: the kernel's ``RepeatedFailureGuard``, as ``config`` sets it up now."""

    def __init__(self, config: PtcRetry) -> None:
        self._config = config
        self._lock = threading.Lock()
        self.guard = self._new()
        config.observe(self._renew, names=["guard_mode", "failure_limit", "guard_exclude"])

    def _new(self) -> RepeatedFailureGuard:
        config = self._config
        return RepeatedFailureGuard(
            mode=config.guard_mode, limit=config.failure_limit, exclude=config.guard_exclude
        )

    def _renew(self, change: object = None) -> None:
        self.guard = self._new()

    def record(
        self, running: Running, error: BaseException | None, failure: Failure | None
    ) -> dict[str, Any] | None:
        """Tell the guard how an agent's call ended; its report, if it has one."""
        call = running.call
        with self._lock:
            return self.guard.record(
                failure.key if failure is not None else None,
                tool=running.tool,
                turn=running.turn,
                ename=type(error).__name__ if error is not None else None,
                call_id=call.id if call else None,
                when=call.started if call else time.time(),
            )

    def repeated(self, running: Running, failure: Failure) -> tuple[int, bool]:
        """``(repeated, paused)`` for the notice of ``failure``: the streak's length when
        this failure makes it reach the limit (else 0), and whether programs pause then."""
        guard = self.guard
        with self._lock:
            count = guard.count_if_failed(failure.key, running.tool, running.turn)
        repeated = count if count == guard.limit else 0
        return repeated, bool(repeated) and guard.mode == "pause"
