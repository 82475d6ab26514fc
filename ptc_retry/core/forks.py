"""What a forked child does with the sessions its parent holds open: it lets go of them.

A child made by ``fork`` (multiprocessing's fork) inherits the parent's descriptors; it must
neither write to the parent's session nor keep it locked once the parent dies. Each open
store is remembered here, and the child drops its copies of their descriptors.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["Abandonable", "forget", "remember"]


class Abandonable(Protocol):
    def abandon(self) -> None:
        """In a forked child: drop this process's copies of the descriptors, write nothing."""


_OPEN: weakref.WeakSet[Abandonable] = weakref.WeakSet()


def remember(holder: Abandonable) -> None:
    """Have a forked child call ``holder.abandon()``, while ``holder`` lives or until
    ``forget``."""
    _OPEN.add(holder)


def forget(holder: Abandonable) -> None:
    """``holder`` closed its descriptors itself: a child has nothing of it to drop."""
    _OPEN.discard(holder)


def _abandon_all() -> None:
    for holder in list(_OPEN):
        holder.abandon()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_all)
