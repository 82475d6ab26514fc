"""The evaluation's host tools: the agent's functions that the tool scenarios' programs call
as ``await tools.<name>(...)``. Each waits like a remote API and counts its calls, so the
runner can tell how many calls a fix made again; the results are deterministic, so every
arm's program ends with the same value."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["TOOL_NAMES", "EvalTools"]

#: The tools' names, as programs call them.
TOOL_NAMES = ("fetch_orders", "fetch_stock", "send_email")

_SKUS = ("A-100", "A-101", "B-210", "C-007", "D-330", "E-512", "F-044", "G-918")


class EvalTools:
    """One backend's tools and their calls. ``delay`` scales the waits (0: none, for tests).

    ``fetch_orders`` waits 0.3 s, ``fetch_stock`` 0.4 s, ``send_email`` 0.2 s (its call is
    the side effect a repeat would do twice: an email sent again).
    """

    def __init__(self, delay: float = 1.0) -> None:
        self.delay = delay
        self.calls: Counter[str] = Counter()

    @property
    def total(self) -> int:
        """Every call made so far."""
        return sum(self.calls.values())

    def functions(self) -> list[Callable[..., Any]]:
        """The tools, to register on a backend."""
        return [getattr(self, name) for name in TOOL_NAMES]

    async def _wait(self, name: str, seconds: float) -> None:
        self.calls[name] += 1
        await asyncio.sleep(seconds * self.delay)

    async def fetch_orders(self, customer: str) -> list:
        """A customer's open orders: id, sku, qty, amount (EUR), days_open."""
        await self._wait("fetch_orders", 0.3)
        rng = random.Random(f"orders/{customer}")
        return [
            {
                "id": f"SO-{rng.randrange(10_000, 99_999)}",
                "sku": rng.choice(_SKUS),
                "qty": rng.randrange(5, 120),
                "amount": round(rng.uniform(80, 4_000), 2),
                "days_open": rng.randrange(1, 75),
            }
            for _ in range(rng.randrange(6, 12))
        ]

    async def fetch_stock(self, warehouse: str) -> dict:
        """Units on hand per SKU in a warehouse."""
        await self._wait("fetch_stock", 0.4)
        rng = random.Random(f"stock/{warehouse}")
        return {sku: rng.randrange(0, 400) for sku in _SKUS}

    async def send_email(self, to: str, subject: str, body: str) -> dict:
        """Send an email; returns its id and status."""
        await self._wait("send_email", 0.2)
        digest = hashlib.sha256(f"{to}\n{subject}\n{body}".encode()).hexdigest()
        return {"id": f"msg-{digest[:10]}", "status": "sent"}
