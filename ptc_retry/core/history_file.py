"""A session's ``history.jsonl`` as its store holds it: open for appending for the store's
life, one write per line, a torn last line mended, and lines kept for the next write while
the disk is full."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from .fs import pread, write_all
from .layout import parse_records, split_lines

_MAX_PENDING = 1000  # history lines kept for the next write while the disk is full


class HistoryFile:
    """Appends lines to an open history file; the caller serializes the calls."""

    def __init__(self, fd: int, *, alone: bool) -> None:
        """``fd``: the file, open for appending, now this object's; ``alone``: no other
        process appends (the session is locked), so the file's size can be kept here."""
        self.fd: int | None = fd  # closed here if this raises
        self._alone = alone
        try:
            self._size = os.fstat(fd).st_size  # bytes in the file, kept while we alone append
            # The file ends in a torn line: start the next one fresh.
            self._torn = self._size > 0 and pread(fd, 1, self._size - 1) != b"\n"
        except BaseException:
            os.close(fd)
            raise
        #: Lines a write failed to add, for the next write.
        self.pending: list[bytes] = []

    def append(self, lines: list[bytes]) -> None:
        """Append ``lines`` (and any left pending) in one write, or leave the file as it was,
        keep them pending and raise. A write that fails part-way (a full disk) is taken back,
        so the lines after it stay whole."""
        self.pending.extend(lines)
        del self.pending[: -max(_MAX_PENDING, len(lines))]
        self._write_pending()

    def _write_pending(self) -> None:
        fd = self.fd
        assert fd is not None
        data = b"".join(self.pending)
        if self._torn:
            data = b"\n" + data
        # Locked, we alone append: the size kept here saves a system call on every line.
        size = self._size if self._alone else os.fstat(fd).st_size
        try:
            write_all(fd, data)
        except BaseException:
            # A partial write would leave a torn line for the next one to be glued to.
            try:
                os.ftruncate(fd, size)
            except OSError:
                self._torn = True
                with contextlib.suppress(OSError):
                    self._size = os.fstat(fd).st_size
            raise
        self._size = size + len(data)
        self.pending.clear()
        self._torn = False

    def records(self) -> list[dict[str, Any]]:
        """The records in the file, by the layout's parsing rules, read without moving the
        append position."""
        fd, offset = self.fd, 0
        assert fd is not None

        def read(size: int) -> bytes:
            nonlocal offset
            chunk = pread(fd, size, offset)
            offset += len(chunk)
            return chunk

        return parse_records(split_lines(read))

    def close(self) -> None:
        """Write what is pending if the disk lets us, then close the file (and free the lock)."""
        if self.fd is None:
            return
        if self.pending:
            with contextlib.suppress(OSError):
                self._write_pending()
        fd, self.fd = self.fd, None
        os.close(fd)

    def abandon(self) -> None:
        """In a forked child: drop this process's copy of the descriptor, write nothing."""
        self.pending.clear()
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
