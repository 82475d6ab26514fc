"""The journal of an agent loop's direct tool calls: each call's raw arguments saved byte for
byte before the tool runs, and its history line after, on the kernel's checkpoint store."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.layout import previous_count
from ..core.partial import CutArguments
from ..core.status import HistoryStatus
from ..core.store import Call, CheckpointStore
from .partial import partial_arguments

__all__ = ["Position", "ToolJournal", "arguments_text"]


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
        # Cut-off call id -> the key of the string it stopped in (None: outside any string).
        self._open: dict[str, str | None] = {}

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

    def begin_partial(
        self,
        raw_arguments: str,
        cut: CutArguments,
        *,
        tool: str,
        call_id: str | None = None,
        position: Position | None = None,
    ) -> Call:
        """Save a call cut off mid-stream (``cut``: what ``raw_arguments`` holds).

        ``by-id/<id>.json`` holds what the arguments decode to so far (the string it stopped
        in, if any, last), ``by-id/<id>.partial`` ``raw_arguments`` byte for byte; from here
        on :meth:`open_key` names that string and :meth:`was_cut_off` is true. ``finish`` it
        with status ``"partial"``. Raises ``OSError`` or ``StoreError`` when the store cannot
        save (a call that got its checkpoint is then finished as an error, where the history
        can still be written).
        """
        arguments = arguments_text(partial_arguments(cut))
        call = self.begin(arguments, tool=tool, call_id=call_id, position=position)
        try:
            self.store.save_partial(call, raw_arguments)
        except (OSError, StoreError) as exc:
            with contextlib.suppress(OSError, StoreError):
                self.finish(call, "error", ename=type(exc).__name__)
            raise
        self._open[call.id] = cut.open_key
        return call

    def finish(self, call: Call, status: str, *, ename: str | None = None) -> dict[str, Any]:
        """Append the call's history line (``status`` ok / error / interrupted / partial) and
        return it; a cut-off call's line also names its ``open_key``."""
        extra = {"ename": ename} if ename is not None else {}
        open_key = self._open.get(call.id)
        if status == HistoryStatus.PARTIAL and open_key is not None:
            extra["open_key"] = open_key
        return self.store.finish(call, status, **extra)

    def save_replay(
        self,
        call: Call,
        arguments: str,
        *,
        tool: str,
        replay_of: str | None = None,
        extend_of: str | None = None,
    ) -> None:
        """Make ``arguments`` (a patched copy of ``replay_of``'s, or the completed arguments
        of ``extend_of``, a call that was cut off) the checkpoint of ``call``.

        From then on ``call`` counts as a call of ``tool``: a later edit of it re-runs
        ``tool`` with these arguments, and its history line names ``tool`` and ``replay_of``
        or ``extend_of``.
        """
        self.store.replace_arguments(call, arguments, replay_of=replay_of, extend_of=extend_of)
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

    def open_key(self, call_id: str) -> str | None:
        """The key of the string value the call ``call_id`` was cut off in, or None when it
        was not cut off inside one (its arguments arrived whole, or it stopped elsewhere).

        Calls of this journal are known from ``begin_partial`` on; older ones from their
        history line (status ``partial``).
        """
        key = self._open.get(call_id)
        if key is not None or call_id in self._tools:
            return key
        for line in reversed(self.store.history()):
            if line.get("id") == call_id:
                key = line.get("open_key")
                partial = line.get("status") == HistoryStatus.PARTIAL
                return key if partial and isinstance(key, str) else None
        return None

    def was_cut_off(self, call_id: str) -> bool:
        """Whether the call ``call_id`` was cut off mid-stream (its history says ``partial``),
        inside a string value or not."""
        if call_id in self._open or call_id in self._tools:
            return call_id in self._open
        for line in reversed(self.store.history()):
            if line.get("id") == call_id:
                return bool(line.get("status") == HistoryStatus.PARTIAL)
        return False

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


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """The JSON text decoded ``arguments`` are saved as: UTF-8 where it can be, and escapes
    when a value holds a lone surrogate (UTF-8 cannot hold one; the escape reads back as
    the same value)."""
    text = json.dumps(dict(arguments), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(dict(arguments))
    return text
