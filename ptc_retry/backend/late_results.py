"""The host's record of tool calls it completed whose results the kernel may never have
taken: the program stopped waiting (its time limit, an interrupt, its caller gave up) or the
kernel died while a result was in flight. The kernel then recorded the call as failed, or
not at all, and a resume would make it again.

The backend keeps each such result until its next program's execute_request has carried it
to the kernel (``metadata["ptc_retry"]["tool_results"]``, see ``core.protocol.host_result``),
which appends it to the program's recording, where it supersedes the kernel's line. It
travels with the request, so it works the same through a gateway. It lives in the backend's
memory only: a backend that is itself restarted has nothing to send, and those calls stay
failed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["LateResults"]

log = logging.getLogger(__name__)

#: A result's place: the program's call id and the call's ``k``.
Key = tuple[str, int]

#: At most this many bytes of results (as JSON) ride on one request, the rest on the next
#: ones, so that a request stays well within what a gateway's websocket carries (10 MiB);
#: a single result larger than this is left out.
REQUEST_BUDGET = 4 * 1024 * 1024


class LateResults:
    """One backend's results still to be carried to its kernel."""

    def __init__(self) -> None:
        self._kept: dict[Key, dict[str, Any]] = {}
        self._sizes: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, entry: dict[str, Any]) -> None:
        """Carry ``entry`` (a ``host_result``) with the next request; a later entry for the
        same call replaces an earlier one. An entry that no message can carry (a lone
        surrogate, nesting too deep to encode) is left out: it would stop every request."""
        key = (entry["program"], entry["k"])
        try:
            size = len(json.dumps(entry, ensure_ascii=False).encode("utf-8"))
        except (TypeError, ValueError, RecursionError) as exc:
            log.info("the result of call %d of %s cannot be sent (%s): left out", *key[::-1], exc)
            return
        if size > REQUEST_BUDGET:
            log.info("the result of call %d of %s is too large to carry: left out", *key[::-1])
            return
        self._kept.pop(key, None)  # a replaced entry goes to the end: the order they came in
        self._kept[key] = entry
        self._sizes[key] = size
        log.info("kept the result of call %d of %s for the kernel's recording", key[1], key[0])

    def entries(self) -> list[dict[str, Any]]:
        """What the next request carries, in the order the results came: as many as fit in
        ``REQUEST_BUDGET``; the others wait for the requests after it."""
        carried, total = [], 0
        for key, entry in self._kept.items():
            total += self._sizes[key]
            if total > REQUEST_BUDGET:
                break
            carried.append(entry)
        return carried

    def delivered(self, entries: list[dict[str, Any]]) -> None:
        """The kernel replied to a request that carried ``entries``: it has them (or, without
        ptc-retry, never will), so they are not sent again."""
        for entry in entries:
            key = (entry["program"], entry["k"])
            if self._kept.get(key) is entry:
                del self._kept[key], self._sizes[key]
