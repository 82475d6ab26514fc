"""The ptc-retry kernel stays a compliant Jupyter kernel.

Every reply and iopub message is checked against the fields the messaging
specification (protocol 5.3) requires, and the kernel answers every request
with the same message types and content keys as the stock IPython kernel.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import BLOCKING_MINUTE, Kernel, spawn

HEADER = {"msg_id": str, "msg_type": str, "username": str, "session": str, "version": str}

# Required content fields of each message type, with their types.
CONTENT: dict[str, dict[str, Any]] = {
    "kernel_info_reply": {
        "status": str,
        "protocol_version": str,
        "implementation": str,
        "implementation_version": str,
        "language_info": dict,
        "banner": str,
    },
    "execute_reply": {"status": str, "execution_count": int},
    "complete_reply": {
        "status": str,
        "matches": list,
        "cursor_start": int,
        "cursor_end": int,
        "metadata": dict,
    },
    "inspect_reply": {"status": str, "found": bool, "data": dict, "metadata": dict},
    "is_complete_reply": {"status": str},
    "history_reply": {"status": str, "history": list},
    "comm_info_reply": {"status": str, "comms": dict},
    "shutdown_reply": {"status": str, "restart": bool},
    "interrupt_reply": {"status": str},
    "status": {"execution_state": str},
    "execute_input": {"code": str, "execution_count": int},
    "stream": {"name": str, "text": str},
    "execute_result": {"execution_count": int, "data": dict, "metadata": dict},
    "display_data": {"data": dict, "metadata": dict},
    "error": {"ename": str, "evalue": str, "traceback": list},
}
ERROR_REPLY = {"ename": str, "evalue": str, "traceback": list}

REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("kernel_info_request", {}),
    ("execute_request", {"code": "x = 1\nprint(x)\nx + 1"}),
    ("execute_request", {"code": "from IPython.display import display, HTML\ndisplay(HTML('<b>')"}),
    ("execute_request", {"code": "1/0"}),
    ("execute_request", {"code": "def broken(:\n    pass"}),
    ("complete_request", {"code": "import o", "cursor_pos": 8}),
    ("inspect_request", {"code": "len", "cursor_pos": 3, "detail_level": 0}),
    ("is_complete_request", {"code": "for i in range(3):"}),
    ("history_request", {"output": False, "raw": True, "hist_access_type": "tail", "n": 5}),
    ("comm_info_request", {}),
]

EXECUTE_DEFAULTS = {
    "silent": False,
    "store_history": True,
    "user_expressions": {},
    "allow_stdin": False,
    "stop_on_error": False,
}


def check_message(msg: dict[str, Any]) -> None:
    for key, kind in HEADER.items():
        assert isinstance(msg["header"][key], kind), (msg["header"], key)
    assert msg["header"]["version"].startswith("5.")
    assert isinstance(msg["parent_header"], dict) and isinstance(msg["metadata"], dict)
    msg_type = msg["header"]["msg_type"]
    assert msg_type == msg["msg_type"]
    required = dict(CONTENT.get(msg_type, {}))
    if msg_type.endswith("_reply") and msg["content"].get("status") == "error":
        required = {"status": str, **ERROR_REPLY}
    for key, kind in required.items():
        assert isinstance(msg["content"].get(key), kind), (msg_type, key, msg["content"])
    if msg_type == "error" or msg["content"].get("status") == "error":
        assert all(isinstance(line, str) for line in msg["content"]["traceback"])


def exchange(kernel: Kernel, msg_type: str, content: dict[str, Any]) -> list[dict[str, Any]]:
    """Send one request; return its reply followed by its iopub messages, all checked."""
    client = kernel.client
    if msg_type == "execute_request":
        content = {**EXECUTE_DEFAULTS, **content}
    channel = client.control_channel if msg_type == "interrupt_request" else client.shell_channel
    msg = client.session.msg(msg_type, content)
    channel.send(msg)
    msg_id = msg["header"]["msg_id"]
    get_reply = (
        client.get_control_msg if channel is client.control_channel else client.get_shell_msg
    )
    reply = get_reply(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = get_reply(timeout=30)
    iopub: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            out = client.get_iopub_msg(timeout=2)
        except queue.Empty:
            break
        if out["parent_header"].get("msg_id") == msg_id:
            iopub.append(out)
            if out["msg_type"] == "status" and out["content"]["execution_state"] == "idle":
                break
    for message in [reply, *iopub]:
        check_message(message)
    return [reply, *iopub]


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    return [(m["msg_type"], tuple(sorted(m["content"]))) for m in messages]


@pytest.fixture(scope="module")
def pair(jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A ptc-retry kernel and a stock one, shared by the comparisons."""
    root = tmp_path_factory.mktemp("protocol")
    kernels = (spawn("ptc-retry", root=root), spawn("python3", root=root))
    yield kernels
    for kernel in kernels:
        kernel.shutdown()


@pytest.mark.parametrize(("msg_type", "content"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_replies_match_the_stock_kernel(pair: tuple, msg_type: str, content: dict) -> None:
    ours = exchange(pair[0], msg_type, content)
    stock = exchange(pair[1], msg_type, content)
    assert shape(ours) == shape(stock)
    if msg_type == "execute_request":
        assert set(ours[0]["metadata"]) == set(stock[0]["metadata"]) | {"ptc_retry"}
        assert set(ours[0]["metadata"]["ptc_retry"]) == {
            "call_id",
            "reference",
            "checkpoint",
            "ordinal",
            "status",
            "notice",
            "guard",
        }


def test_kernel_info_describes_python(kernel: Kernel) -> None:
    reply = exchange(kernel, "kernel_info_request", {})[0]["content"]
    assert reply["language_info"]["name"] == "python"
    assert reply["implementation"] == "ipython"


def test_interrupt_stops_a_running_program_and_the_kernel_goes_on(kernel: Kernel) -> None:
    # stop_on_error False (kernel.send): ipykernel 6 may otherwise abort the next request.
    msg_id = kernel.send("import time\nprint('start', flush=True)\n" + BLOCKING_MINUTE)
    kernel.wait_for_output(msg_id, "start")
    kernel.manager.interrupt_kernel()
    executed = kernel.collect(msg_id, timeout=30)
    assert executed.error["ename"] == "KeyboardInterrupt"
    assert executed.ptc["status"] == "interrupted"
    assert "start" in executed.stdout
    assert kernel.execute("2 + 2").result == "4"


def test_shutdown_request_is_answered(kernel: Kernel) -> None:
    reply = exchange(kernel, "shutdown_request", {"restart": False})[0]
    assert reply["content"] == {"status": "ok", "restart": False}
    kernel.wait_for_end(15)
