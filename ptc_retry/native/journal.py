"""The journal of an agent loop's direct tool calls: each call's raw arguments saved byte for
byte before the tool runs, and its history line after, on the kernel's checkpoint store."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.layout import previous_count
from ..core.store import Call, CheckpointStore

__all__ = ["Position", "ToolJournal"]


@dataclass(frozen=True)
class Position:
    """Where a call sits in the conversation: the person's ``turn`` and the model message
    (``step``) it belongs to; ``step`` None makes the call a message of its own."""

    turn: int = 0
    step: int | None = None


class ToolJournal:
    """Every direct tool call of an agent loop, on a :class:`CheckpointStore`.

    ``begin`` saves a call's raw argument string byte for byte as ``by-id/<id>.json``
    before the tool runs; ``finish`` appends its history line. Give either an open
    ``store`` or the ``root``/``session`` to open one with (both optional, as for the
    store). Call :meth:`new_message` before the calls of each model message, or give
    each call its :class:`Position`.
    """

    def __init__(
        self,
        store: CheckpointStore | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        session: str | None = None,
    ) -> None:
        if store is not None and (root is not None or session is not None):
            raise ValueError("ToolJournal: give an open store, or root/session, not both")
        self.store = store if store is not None else CheckpointStore(root, session)
        #: The current message, set by ``new_message``: calls begun without a position
        #: belong to it. ``step`` None: each call is a message of its own.
        self.turn = 0
        self.step: int | None = None
        # Steps count up across the session, also across a reopen, so a new message never
        # joins the last message of an earlier process.
        steps = [line.get("step") for line in self.store.history()]
        self._last_step = max((s for s in steps if type(s) is int), default=0)
        self._tools: dict[str, str] = {}  # call id -> the tool its checkpoint is for

    @property
    def session_dir(self) -> Path:
        return self.store.session_dir

    def next_step(self) -> int:
        """A step number no message of this session has had: for a new model message."""
        self._last_step += 1
        return self._last_step

    def new_message(self, *, turn: int | None = None) -> int:
        """Start a model message; returns its step number.

        The calls recorded until the next ``new_message`` share one step, in the order
        they begin, and become ``previous/1.json``, ``previous/2.json``, ... when the next
        message's first call begins. ``turn`` (a user turn number) is recorded as is.
        """
        if turn is not None:
            self.turn = turn
        self.step = self.next_step()
        return self.step

    def begin(
        self,
        raw_arguments: str,
        *,
        tool: str,
        call_id: str | None = None,
        position: Position | None = None,
    ) -> Call:
        """Save ``raw_arguments`` byte for byte before ``tool`` runs; see ``CheckpointStore.begin``.

        ``position``: the call's turn and message; default the current message.
        Raises ``OSError`` or ``StoreError`` when the store cannot save.
        """
        at = position if position is not None else Position(self.turn, self.step)
        call = self.store.begin(
            raw_arguments, call_id=call_id, tool=tool, turn=at.turn, step=at.step
        )
        self._tools[call.id] = tool
        return call

    def finish(self, call: Call, status: str, *, ename: str | None = None) -> dict[str, Any]:
        """Append the call's history line (``status`` ok / error / interrupted) and return it."""
        extra = {"ename": ename} if ename is not None else {}
        return self.store.finish(call, status, **extra)

    def save_replay(self, call: Call, arguments: str, *, tool: str, replay_of: str) -> None:
        """Make ``arguments`` (a patched copy of ``replay_of``'s) the checkpoint of ``call``.

        From then on ``call`` counts as a call of ``tool``: a later edit of it re-runs
        ``tool`` with these arguments, and its history line names ``tool`` and ``replay_of``.
        """
        self.store.replace_arguments(call, arguments, replay_of=replay_of)
        call.tool = tool
        self._tools[call.id] = tool

    def tool_of(self, call_id: str) -> str | None:
        """The tool whose arguments ``by-id/<call_id>.json`` holds, or None if unknown.

        Calls of this journal are known from ``begin`` on, even while they still run;
        older ones (another process, a reopened session) from their history line.
        """
        tool = self._tools.get(call_id)
        if tool is not None:
            return tool
        for line in reversed(self.store.history()):
            if line.get("id") == call_id and isinstance(line.get("tool"), str):
                return line["tool"]
        return None

    def load(self, target: str | int) -> tuple[str, str, dict[str, Any]]:
        """``(call_id, raw, decoded)`` of a call id or ``previous/<n>.json``; see ``store.load``."""
        return self.store.load(target)

    def previous_count(self) -> int:
        """How many calls ``previous/`` holds: those of the previous model message."""
        return previous_count(self.store.session_dir)

    def latest_ids(self, n: int = 5, *, besides: str | None = None) -> list[str]:
        """The ``n`` most recent call ids, newest first, without ``besides``."""
        return [i for i in self.store.latest_ids(n + 1) if i != besides][:n]

    def close(self) -> None:
        """Close the store (its history file). Idempotent."""
        self.store.close()
