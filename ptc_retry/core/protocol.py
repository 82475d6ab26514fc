"""What ptc-retry puts on the Jupyter wire: the execute_request content and the
metadata key its requests and replies carry."""

from __future__ import annotations

from typing import Any

#: The key of ptc-retry's part of an execute_request's and an execute_reply's metadata.
METADATA_KEY = "ptc_retry"


def execute_request(code: str, *, silent: bool = False, **fields: Any) -> dict[str, Any]:
    """The content of an execute_request for ``code``, as an agent backend sends it.

    ``stop_on_error`` is False: each program is a call of its own, and one failure
    must not abort the calls queued behind it. A silent request stores no history.
    ``fields`` (such as ``user_expressions``) are added as given.
    """
    return {
        "code": code,
        "silent": silent,
        "store_history": not silent,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": False,
        **fields,
    }
