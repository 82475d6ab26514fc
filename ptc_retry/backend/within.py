"""An awaitable given a time limit in the task that awaits it.

``asyncio.wait_for`` on Python 3.10 runs the awaitable in a task of its own, and a task
whose coroutine raises ``KeyboardInterrupt`` or ``SystemExit`` re-raises it out of the
event loop: an approver that raises on Ctrl-C would end the agent's process instead of
reaching the ``except`` around it. ``asyncio.timeout`` (3.11 and later) runs it in the
awaiting task, as this does on 3.10.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["within"]

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """What ``awaitable`` gives, awaited in this task; ``asyncio.TimeoutError`` once
    ``seconds`` have passed (the awaitable is cancelled). What it raises passes as it is."""
    timeout: Any = getattr(asyncio, "timeout", None)
    if timeout is not None:
        async with timeout(seconds):
            return await awaitable
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    handle = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if expired:
            raise asyncio.TimeoutError from None
        raise
    finally:
        handle.cancel()
