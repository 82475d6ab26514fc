"""The Jupyter messages on a gateway's websocket, in the JSON protocol (one text frame a
message, its channel named inside), and the socket option that keeps their replies fast."""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from datetime import datetime, timezone
from typing import Any

__all__ = ["CLOSED", "acknowledge_now", "encode_message", "frame_bytes", "read_frame"]

#: What ``read_frame`` gives for the end of the websocket.
CLOSED = object()
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def encode_message(
    msg_type: str,
    session: str,
    content: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    parent: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """``(msg_id, frame)`` of a shell request of the websocket session ``session``, or with
    ``parent`` (an input_request) the stdin reply to it. The frame holds text outside ASCII
    as it is (a websocket text frame is UTF-8, so "é" is two bytes on the wire, not the six of
    ``\u00e9``); one that UTF-8 cannot encode (a lone surrogate) is sent escaped instead."""
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": msg_type,
        "username": "ptc-retry",
        "session": session,
        "date": datetime.now(timezone.utc).isoformat(),
        "version": "5.3",
    }
    message: dict[str, Any] = {
        "header": header,
        "msg_id": msg_id,
        "msg_type": msg_type,
        "parent_header": (parent or {}).get("header") or {},
        "metadata": metadata or {},
        "content": content,
        "channel": "shell" if parent is None else "stdin",
        "buffers": [],
    }
    frame = json.dumps(message, ensure_ascii=False)
    try:
        frame.encode("utf-8")
    except UnicodeEncodeError:
        frame = json.dumps(message)
    return msg_id, frame


def frame_bytes(frame: str) -> int:
    """How many bytes ``frame`` is on the websocket (a text frame is UTF-8)."""
    return len(frame.encode("utf-8"))


def read_frame(raw: str | bytes | None) -> Any:
    """The message a frame holds (with its ``msg_type`` at the top), ``CLOSED`` for the end
    of the websocket (None), or None for a frame that is no message of ours."""
    if raw is None:
        return CLOSED
    if isinstance(raw, bytes):  # binary frames belong to the v1 protocol we never ask for
        return None
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    message.setdefault("msg_type", (message.get("header") or {}).get("msg_type"))
    return message


def acknowledge_now(ws: Any) -> None:
    """Have the system acknowledge at once what came on the websocket ``ws`` (Linux).

    A gateway answers an execute_request with several small frames (status, outputs, reply)
    and does not turn off Nagle's algorithm on its side (neither Kernel Gateway nor Enterprise
    Gateway does): each frame after the first waits for the acknowledgement of the one
    before, which Linux delays by up to 40 ms. Acknowledging at once takes a trivial call
    through a gateway on loopback from about 50 ms to about 10.
    """
    if _QUICKACK is None or ws is None:
        return
    with contextlib.suppress(AttributeError, OSError):
        ws.stream.socket.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
