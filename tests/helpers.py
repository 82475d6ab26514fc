"""What the tests share besides fixtures: a real kernel driven through jupyter_client
(``Kernel``, ``spawn``), what it sent back (``Execution``), and sample programs."""

from __future__ import annotations

import json
import os
import queue
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from ptc_retry.core.protocol import METADATA_KEY, execute_request

KERNEL_TIMEOUT = 60

T = TypeVar("T")
#: The ``run`` fixture: runs a coroutine to completion on the module's event loop.
Run = Callable[[Coroutine[Any, Any, T]], T]

# A program that prints, then kills its kernel before it can finish.
DYING = """\
values = [3, 4, 5]
total = sum(values)
print('partial', total)
import os, sys, time
sys.stdout.flush()
time.sleep(0.5)
os._exit(1)
print('finished', total * 2)
"""


# A realistic agent program of about 700 bytes (over notice_min_bytes) with one wrong literal:
# the "region" key is spelled "regoin" in the lookup, so it fails with KeyError: 'regoin'.
ORDERS = """\
import statistics

orders = [
    {"id": 1, "region": "north", "amount": 120.5, "items": 3},
    {"id": 2, "region": "south", "amount": 80.0, "items": 1},
    {"id": 3, "region": "north", "amount": 42.25, "items": 2},
    {"id": 4, "region": "east", "amount": 310.0, "items": 7},
    {"id": 5, "region": "south", "amount": 15.75, "items": 1},
]

def by_region(rows):
    totals = {}
    for row in rows:
        totals.setdefault(row["regoin"], []).append(row["amount"])
    return {name: round(sum(values), 2) for name, values in totals.items()}

summary = by_region(orders)
mean_amount = statistics.mean(row["amount"] for row in orders)
print("regions:", sorted(summary))
print(f"mean order: {mean_amount:.2f}")
summary
"""
#: The replacement that fixes ``ORDERS``: (old, new).
ORDERS_FIX = ('row["regoin"]', 'row["region"]')


def raw(code: str) -> str:
    """A run_code tool call's arguments as a model writes them."""
    return json.dumps({"code": code}, ensure_ascii=False)


def follow(notice: str | None, **fill: str) -> str:
    """The call a notice tells the model to send, as the model sends it: the template's
    placeholders (``old``, ``new``, ``rest``) filled with ``fill``'s texts as string literals."""
    assert notice is not None, "the program got no notice"
    first = notice.splitlines()[0]  # the template ends it (a quoted program may precede it)
    call = first[first.rindex("await ptc_retry.") :]
    for name, text in fill.items():
        placeholder = f'"<{name}>"'
        assert placeholder in call, f"{placeholder} is not in {call!r}"
        call = call.replace(placeholder, json.dumps(text, ensure_ascii=False))
    return call


def history(directory: Path | None) -> list[dict[str, Any]]:
    """The lines of ``directory/history.jsonl`` (none when it does not exist yet)."""
    assert directory is not None
    path = directory / "history.jsonl"
    text = path.read_text("utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]


def line_of(directory: Path | None, call_id: str) -> dict[str, Any]:
    """The one history line of ``call_id``."""
    (line,) = [h for h in history(directory) if h["id"] == call_id]
    return line


@dataclass
class Execution:
    """Everything a kernel sent back for one execute_request."""

    reply: dict[str, Any]
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.reply["content"]["status"]

    @property
    def ptc(self) -> dict[str, Any] | None:
        return self.reply["metadata"].get("ptc_retry")

    @property
    def error(self) -> dict[str, Any] | None:
        errors = [out for out in self.outputs if out["msg_type"] == "error"]
        return errors[-1]["content"] if errors else None

    @property
    def stdout(self) -> str:
        return "".join(
            o["content"]["text"]
            for o in self.outputs
            if o["msg_type"] == "stream" and o["content"]["name"] == "stdout"
        )

    @property
    def stderr(self) -> str:
        return "".join(
            o["content"]["text"]
            for o in self.outputs
            if o["msg_type"] == "stream" and o["content"]["name"] == "stderr"
        )

    @property
    def result(self) -> str | None:
        for out in self.outputs:
            if out["msg_type"] == "execute_result":
                return out["content"]["data"]["text/plain"]
        return None


class Kernel:
    """A real kernel and a blocking client, with an ``execute`` that can send metadata."""

    def __init__(self, name: str, env: dict[str, str], extra_arguments: list[str]) -> None:
        self.manager = KernelManager(kernel_name=name)
        self.manager.start_kernel(env=env, extra_arguments=extra_arguments)
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)

    def execute(
        self,
        code: str,
        metadata: dict[str, Any] | None = None,
        timeout: float = KERNEL_TIMEOUT,
    ) -> Execution:
        """Run ``code``; ``metadata`` goes to ``metadata["ptc_retry"]`` of the request.

        Requests say ``stop_on_error: False``, as an agent backend's do: each program
        stands alone, and ipykernel 6 may abort a request that arrives just after an
        error reply otherwise (its abort window races).
        """
        return self.collect(self.send(code, metadata), timeout)

    def send(self, code: str, metadata: dict[str, Any] | None = None, **header: Any) -> str:
        """Send an execute_request without waiting for it; its msg_id. ``header`` adds
        fields to the message's header (``subshell_id``)."""
        request_md = {METADATA_KEY: metadata} if metadata is not None else {}
        msg = self.client.session.msg("execute_request", execute_request(code), metadata=request_md)
        msg["header"].update(header)
        self.client.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    def collect(self, msg_id: str, timeout: float = KERNEL_TIMEOUT) -> Execution:
        deadline = time.monotonic() + timeout
        outputs: list[dict[str, Any]] = []
        idle = False
        while not idle:
            try:
                msg = self.client.get_iopub_msg(timeout=self._left(deadline))
            except queue.Empty:
                raise TimeoutError(f"no idle status for {msg_id} within {timeout}s") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            elif msg["msg_type"] != "execute_input":
                outputs.append(msg)
        while True:
            reply = self.client.get_shell_msg(timeout=self._left(deadline))
            if reply["parent_header"].get("msg_id") == msg_id:
                return Execution(reply, outputs)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.1, deadline - time.monotonic())

    def restart(self) -> None:
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)

    def shutdown(self) -> None:
        self.client.stop_channels()
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=True)


def spawn(
    name: str = "ptc-retry",
    *,
    root: Path,
    session: str | None = "test",
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Kernel:
    """Start a real kernel whose checkpoints go to ``root/session``.

    ``session=None`` leaves the session to the kernel (derived from its connection file).
    """
    kernel_env = dict(os.environ)
    kernel_env["PTC_RETRY_ROOT"] = str(root)
    kernel_env.pop("PTC_RETRY_SESSION", None)
    if session is not None:
        kernel_env["PTC_RETRY_SESSION"] = session
    kernel_env.update(env or {})
    return Kernel(name, kernel_env, list(args))
