"""``Call``: one checkpointed call as the store saved it, what its caller passes back to
``CheckpointStore.finish``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .layout import reference

__all__ = ["Call"]


@dataclass
class Call:
    """One checkpointed call, as ``begin`` saved it; pass it to ``finish``."""

    id: str  # the sanitized, de-duplicated id actually used: the file name stem
    sent_id: str | None  # the id the caller asked for, when it differs from ``id``
    tool: str
    turn: int
    step: int | None  # None: the call was a step of its own
    ordinal: int  # 1-based position of the call within its step
    path: Path  # by-id/<id>.json
    bytes: int  # UTF-8 size of the saved arguments
    started: float  # time.time() at begin
    replay_of: str | None = None
    extend_of: str | None = None  # the cut-off call this one completes (``ptc_retry.extend``)
    n: int = 0  # the call's number in its session: its short reference is "#<n>"
    code_bytes: int | None = None  # UTF-8 size of the program, when the caller knows it

    @property
    def reference(self) -> str:
        return reference(self.n)
