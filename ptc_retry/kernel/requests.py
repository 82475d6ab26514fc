"""What the execute_request that runs a cell tells ptc-retry: its ``metadata["ptc_retry"]``,
checked field by field (a backend's mistake never stops a program), and its msg_id."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..core.protocol import METADATA_KEY, TOOL_RESULTS, TRACEPARENT, TRACESTATE

# Request metadata fields and their types; a field of another type is ignored.
_REQUEST_FIELDS: dict[str, tuple[type, ...]] = {
    "call_id": (str,),
    "arguments": (str,),
    "tool": (str,),
    "turn": (int,),
    "step": (int,),
    "new_instruction": (bool,),
    "time_limit": (int, float),
    "tools": (list,),
    TOOL_RESULTS: (list,),
    "partial": (bool,),
    TRACEPARENT: (str,),
    TRACESTATE: (str,),
}


@dataclass(frozen=True)
class Request:
    """The request being run, as far as ptc-retry reads it."""

    #: The fields of ``metadata["ptc_retry"]`` that have the expected type.
    fields: dict[str, Any] = field(default_factory=dict)
    #: Whether the request carried ``metadata["ptc_retry"]`` at all (a dict): a backend's.
    from_backend: bool = False
    #: The request's msg_id (None outside a kernel).
    msg_id: str | None = None

    @property
    def tool(self) -> str:
        return str(self.fields.get("tool", "run_code"))

    @property
    def turn(self) -> int:
        return int(self.fields.get("turn", 0))


def read_request(shell: Any) -> Request:
    """The execute_request this thread runs; an empty one outside a kernel."""
    parent = _parent(shell)
    if parent is None:
        return Request()
    raw = (parent.get("metadata") or {}).get(METADATA_KEY)
    msg_id = (parent.get("header") or {}).get("msg_id")
    return Request(
        fields=checked_metadata(raw if isinstance(raw, dict) else None),
        from_backend=isinstance(raw, dict),
        msg_id=msg_id if isinstance(msg_id, str) else None,
    )


def _parent(shell: Any) -> dict[str, Any] | None:
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent("shell")
    except Exception:
        return None
    return parent if isinstance(parent, dict) else None


def checked_metadata(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The fields of request metadata that have the expected type (a bool is no int here)."""
    if not raw:
        return {}
    checked = {}
    for key, value in raw.items():
        types = _REQUEST_FIELDS.get(key)
        if types is None or not isinstance(value, types):
            continue
        if isinstance(value, bool) and bool not in types:
            continue
        checked[key] = value
    return checked


def checkpoint_arguments(source: str, arguments: str | None) -> str:
    """What ``by-id/<id>.json`` holds: the backend's raw arguments when their
    ``"code"`` is the source that runs, else ``{"code": source}``."""
    if arguments is not None:
        try:
            decoded = json.loads(arguments)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("code") == source:
            return arguments
    return json.dumps({"code": source}, ensure_ascii=False)
