"""``previous/`` of a session: ``<n>.json`` stands for the n-th call of the step before the
current one, as a hard link to its checkpoint in ``by-id/`` (or a copy, which
``previous/.ids`` names), rebuilt whole when a step ends. The store keeps one and guards it
with its lock. Plain Python: this module knows nothing of IPython or Jupyter."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from .errors import CheckpointError
from .fs import Dir, Entry, Linker
from .layout import IDS, entry_number, link_text

__all__ = ["PreviousStep"]


class PreviousStep:
    """The ``previous/`` directory of a session, and which calls it holds."""

    def __init__(self, directory: Dir, by_id: Dir, linker: Linker) -> None:
        self.directory = directory
        self._by_id = by_id
        self._linker = linker
        #: What previous/ holds, when this process rebuilt it.
        self.ids: list[str] = []
        #: How many previous/<n>.json exist (n = 1..count).
        self.count = 0
        for name in directory.scan():
            self.count = max(self.count, entry_number(name) or 0)

    def rebuild(self, ids: list[str], write_file: Callable[[Entry, bytes], None]) -> None:
        """Make previous/<n>.json the n-th of ``ids``, and remove higher-numbered entries;
        ``write_file`` writes ``.ids`` (the store's seam)."""
        try:
            for n, cid in enumerate(ids, 1):
                # An entry that already is this call stays: renaming a hard link onto another
                # link of the same file would do nothing and leave the temp name behind.
                if self.ids[n - 1 : n] != [cid]:
                    self._link(f"{n}.json", cid)
            for n in range(len(ids) + 1, self.count + 1):
                with contextlib.suppress(FileNotFoundError):
                    self.directory.unlink(f"{n}.json")
            if self._linker.copies:  # a copy does not say which call it is: .ids does
                write_file(self.directory / IDS, "".join(f"{i}\n" for i in ids).encode())
        except BaseException:
            # previous/ is half rebuilt: say nothing of it, the next step rebuilds it whole.
            self.ids, self.count = [], max(self.count, len(ids))
            raise
        self.ids, self.count = list(ids), len(ids)

    def renew(self, call_id: str) -> None:
        """``call_id``'s checkpoint was replaced: a hard link or a copy here still holds the
        old content, so it is made again."""
        if call_id in self.ids and (self._linker.hard_links or self._linker.copies):
            self._link(f"{self.ids.index(call_id) + 1}.json", call_id)

    def _link(self, name: str, call_id: str) -> None:
        """Make ``name`` stand for ``by-id/<call_id>.json`` (see ``Linker``)."""
        source = f"{call_id}.json"
        self._linker.link(self.directory, name, self._by_id, source, link_text(call_id), hard=True)

    def path_for(self, n: int, advice: Callable[[int, int], str]) -> Path:
        """``previous/<n>.json``; CheckpointError when there is none (``advice(n, count)``:
        what to give instead, for the message)."""
        path = self.directory.path / f"{n}.json"
        # exists() looks at the entry itself: a link to a deleted checkpoint is reported
        # as deleted by load.
        if n < 1 or not self.directory.exists(f"{n}.json"):
            raise CheckpointError(
                f"no previous/{n}.json: previous/ holds the {self.count} call(s) "
                f"of the step before this one, numbered from 1{advice(n, self.count)}"
            )
        return path
