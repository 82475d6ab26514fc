"""What the tests share besides fixtures: a real kernel driven through jupyter_client
(``Kernel``, ``spawn``), what it sent back (``Execution``), and sample programs."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import socket
import string
import subprocess
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from ptc_retry.backend import KernelBackend
from ptc_retry.core.protocol import METADATA_KEY, execute_request
from ptc_retry.core.session_files import latest_calls
from ptc_retry.core.store import Call, CheckpointStore

KERNEL_TIMEOUT = 60

T = TypeVar("T")
#: The ``on_loop`` fixture: runs a coroutine to completion on the module's event loop.
OnLoop = Callable[[Coroutine[Any, Any, T]], T]
#: The ``start_backend`` fixture: ``start_backend(**keywords)`` is a started ``KernelBackend``.
StartBackend = Callable[..., KernelBackend]
#: The ``start_kernel`` and ``start_shared_kernel`` fixtures: each call starts a ``Kernel``.
StartKernel = Callable[..., "Kernel"]

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
    # The call is a line of its own, the first that starts with it.
    call = next(line for line in notice.splitlines() if line.startswith("await ptc_retry."))
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


def finished_call(store: CheckpointStore, code: str = "x = 1", **begin: Any) -> Call:
    """A call of ``store`` begun with ``raw(code)`` as its arguments (and ``begin``'s
    keywords), then finished ``ok``."""
    call = store.begin(raw(code), **begin)
    store.finish(call, "ok")
    return call


def long_program(*lines: str) -> str:
    """The program of ``lines`` under a head that takes it over ``notice_min_bytes``, so that
    its notice names it and offers ``resume``."""
    head = "# Every tool call below has a side effect on the host: none may be made twice.\n" * 3
    return head + "\n".join(lines) + "\n"


def free_port() -> int:
    """A loopback port free now, for a server the test starts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[Any], seconds: float = KERNEL_TIMEOUT) -> None:
    """Terminate ``process``, and kill it when it has not exited ``seconds`` later."""
    process.terminate()
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()


def process_runs(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def model_call_id(prefix: str, length: int, seed: int) -> str:
    """A tool-call id of the shape a model sends: ``prefix`` and ``length`` random letters and
    digits, the same for the same ``seed``."""
    rng = random.Random(seed)
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


#: A minute's blocking wait (``import time`` first) that an interrupt stops within 0.05 s. One
#: ``time.sleep(60)`` sleeps on when the SIGINT lands just before its system call: CPython
#: looks for a signal only once the call is interrupted, and the C handler already ran.
BLOCKING_MINUTE = "for _ in range(1200):\n    time.sleep(0.05)\n"


def wait_until(condition: Callable[[], object], seconds: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds} s"
        time.sleep(0.05)


async def until_printed(backend: KernelBackend, text: str, seconds: float = KERNEL_TIMEOUT) -> None:
    """Wait until the program ``backend`` runs has printed ``text`` (its ``running_output``),
    so that what comes next (a kill, a cancel) finds it running past that line."""
    deadline = time.monotonic() + seconds
    while text not in (backend.running_output() or ""):
        assert time.monotonic() < deadline, f"the program did not print {text!r} in {seconds} s"
        await asyncio.sleep(0.05)


async def cancel_when(
    running: Coroutine[Any, Any, Any], ready: Callable[[], object], seconds: float = KERNEL_TIMEOUT
) -> None:
    """Run ``running`` (a call of the backend's) until ``ready()`` holds, then cancel it as a
    caller that gives up does, and wait until the cancel has gone through."""
    task = asyncio.ensure_future(running)
    deadline = time.monotonic() + seconds
    while not ready():
        assert not task.done(), "the call ended before what it waited for happened"
        assert time.monotonic() < deadline, f"what the call waited for took over {seconds} s"
        await asyncio.sleep(0.05)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("the call ended instead of being cancelled")


def latest_line_of(directory: Path | None, call_id: str) -> dict[str, Any]:
    """The last history line of ``call_id`` (a call under a reused id adds one each time)."""
    return [h for h in history(directory) if h["id"] == call_id][-1]


def tool_call_lines(directory: Path | None, call_id: str) -> list[dict[str, Any]]:
    """The lines of ``directory/tool-calls/<call_id>.jsonl``: the calls its program made."""
    assert directory is not None
    path = directory / "tool-calls" / f"{call_id}.jsonl"
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def latest_tool_calls(directory: Path | None, call_id: str) -> list[dict[str, Any]]:
    """The last line of each call in ``directory/tool-calls/<call_id>.jsonl``, in ``k``
    order: what counts (a recorded function's call also has a line as it starts)."""
    return latest_calls(tool_call_lines(directory, call_id))


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
    def displayed(self) -> str:
        """The text/plain of what the cell displayed (``display``), in order."""
        return "".join(
            o["content"]["data"].get("text/plain", "")
            for o in self.outputs
            if o["msg_type"] == "display_data"
        )

    @property
    def result(self) -> str | None:
        for out in self.outputs:
            if out["msg_type"] == "execute_result":
                return out["content"]["data"]["text/plain"]
        return None


class Kernel:
    """A real kernel and a blocking client, with an ``execute`` that can send metadata."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        extra_arguments: list[str],
        session_dir: Path | None = None,
    ) -> None:
        #: Where its checkpoints go, when the session was chosen (``spawn``).
        self.session_dir = session_dir
        self.manager = KernelManager(kernel_name=name)
        self.manager.start_kernel(env=env, extra_arguments=extra_arguments)
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)
        #: iopub messages read by ``wait_for_output``, for ``collect`` to read first.
        self._held: list[dict[str, Any]] = []

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

    def execute_call(
        self, code: str, *, timeout: float = KERNEL_TIMEOUT, **metadata: Any
    ) -> Execution:
        """Run ``code`` as an agent's call whose request metadata are ``metadata``'s keywords
        (``call_id``, ``turn``...; none: a request without ptc-retry metadata)."""
        return self.execute(code, metadata or None, timeout)

    def send(self, code: str, metadata: dict[str, Any] | None = None, **header: Any) -> str:
        """Send an execute_request without waiting for it; its msg_id. ``header`` adds
        fields to the message's header (``subshell_id``)."""
        request_md = {METADATA_KEY: metadata} if metadata is not None else {}
        msg = self.client.session.msg("execute_request", execute_request(code), metadata=request_md)
        msg["header"].update(header)
        self.client.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    def wait_for_output(
        self, msg_id: str, text: str, stream: str = "stdout", timeout: float = KERNEL_TIMEOUT
    ) -> None:
        """Wait until the program of ``msg_id`` has printed ``text`` to ``stream`` (flushed),
        so that what
        comes next (an interrupt, a kill) finds it running past that line; ``collect``
        still gets every message. Raises ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        printed = ""
        while text not in printed:
            try:
                msg = self.client.get_iopub_msg(timeout=self._left(deadline))
            except queue.Empty:
                msg = None
            if msg is None or time.monotonic() > deadline:
                raise TimeoutError(f"{msg_id} did not print {text!r} within {timeout}s")
            self._held.append(msg)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                printed += msg["content"]["text"] if msg["content"]["name"] == stream else ""

    def collect(self, msg_id: str, timeout: float = KERNEL_TIMEOUT) -> Execution:
        deadline = time.monotonic() + timeout
        outputs: list[dict[str, Any]] = []
        idle = False
        while not idle:
            try:
                msg = (
                    self._held.pop(0)
                    if self._held
                    else self.client.get_iopub_msg(timeout=self._left(deadline))
                )
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

    def wait_for_end(self, seconds: float = 30) -> None:
        """Wait until the kernel's process has ended (it died, or was shut down)."""
        wait_until(lambda: not self.manager.is_alive(), seconds, "the kernel's end")

    def restart(self) -> None:
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=KERNEL_TIMEOUT)
        self._wait_for_iopub()

    def _wait_for_iopub(self) -> None:
        """Until the restarted kernel's status reaches this client on IOPub: its channel
        subscribes again after a restart, and a status the kernel publishes before then is
        lost (jupyter_client 8.0 on a loaded machine), so the next program's idle would never
        come. Each kernel_info request publishes one."""
        deadline = time.monotonic() + KERNEL_TIMEOUT
        while time.monotonic() < deadline:
            msg_id = self.client.kernel_info()
            seen = time.monotonic() + 1
            while time.monotonic() < seen:
                try:
                    msg = self.client.get_iopub_msg(timeout=self._left(seen))
                except queue.Empty:
                    break
                if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status":
                    return
        raise TimeoutError(f"no status on IOPub within {KERNEL_TIMEOUT}s of a restart")

    def shutdown(self) -> None:
        self.client.stop_channels()
        if self.manager.has_kernel:
            # Killed, a kernel that coverage.py measures (.ci/run) would lose its data: while
            # coverage runs (its subprocess patch sets this variable), it is asked to stop.
            self.manager.shutdown_kernel(now="COVERAGE_PROCESS_CONFIG" not in os.environ)


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
    session_dir = root / session if session is not None else None
    return Kernel(name, kernel_env, list(args), session_dir)


# -- an agent framework's run on a real kernel (tests/test_<framework>.py) ------------------

_PRICED_LINES = "\n".join(
    f'    {{"item": "{item}", "qty": {qty}, "note": "order {n} for the weekly delivery run"}},'
    for n, (item, qty) in enumerate([("tea", 2), ("milk", 3), ("tea", 1), ("milk", 4)] * 3)
)
#: About 1 KB: asks the host for two prices (``await tools.lookup_price``), then reads a
#: misspelled key; ``PRICED_FIX`` corrects it, and the program then prints ``PRICED_TOTAL``.
PRICED_ORDERS = f"""\
prices = {{}}
for item in ["tea", "milk"]:
    prices[item] = await tools.lookup_price(item=item)
orders = [
{_PRICED_LINES}
]
total = 0
for order in orders:
    total += prices[order["item"]] * order["qyt"]
print("total:", total)"""
#: The replacement that fixes ``PRICED_ORDERS``: (old, new).
PRICED_FIX = ('order["qyt"]', 'order["qty"]')
#: What the fixed program prints: ``total: 69.0``.
PRICED_TOTAL = 3 * (3.0 * 2 + 2.0 * 3 + 3.0 * 1 + 2.0 * 4)
#: ``PRICED_ORDERS`` fixed, and where a reply is cut off inside a call of it: after line 3.
_PRICED_FIXED = PRICED_ORDERS.replace(*PRICED_FIX)
_CUT_AT = _PRICED_FIXED.index("orders = [")
#: The arguments of that cut-off ``run_code`` call, as far as they arrived.
CUT_ARGUMENTS = '{"code": ' + json.dumps(_PRICED_FIXED[:_CUT_AT])[:-1]
#: The rest of its program, which the model sends with ``ptc_retry.extend``.
CUT_REST = _PRICED_FIXED[_CUT_AT:]
#: A call id as OpenAI's models send it (``call_`` + 24 characters).
MODEL_CALL_ID = "call_" + "a1B2c3D4e5F6g7H8i9J0k1L2"


class PriceList:
    """The host tool of ``PRICED_ORDERS``: ``lookup_price``, each call of which is kept in
    ``calls`` (the item asked for), so a test counts what the host really did."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def lookup_price(self, item: str) -> float:
        """The price of one item."""
        self.calls.append(item)
        return {"tea": 3.0, "milk": 2.0}.get(item, 1.0)


def notices_in(text: str) -> list[str]:
    """The notices in ``text`` (what a model read), in order: each ``[ptc-retry] `` line with
    the call to send on the line after it, where it offers one."""
    lines = text.splitlines()
    return [
        line + ("\n" + lines[i + 1] if lines[i + 1 : i + 2] and _is_call(lines[i + 1]) else "")
        for i, line in enumerate(lines)
        if line.startswith("[ptc-retry] ")
    ]


def _is_call(line: str) -> bool:
    return line.startswith("await ptc_retry.")


def fix_line(text: str) -> str:
    """What a model sends after reading ``text``, a failed program's result: the replay
    line its notice offers, filled with ``PRICED_FIX``."""
    notices = notices_in(text)
    assert notices, f"no notice in what the model read: {text[-300:]!r}"
    old, new = PRICED_FIX
    return follow(notices[-1], old=old, new=new)


def check_fixed_by_one_replay(
    failed: str,
    host_calls: list[str],
    backend: KernelBackend,
    ids: tuple[str, str] = (MODEL_CALL_ID, "call_fix1"),
) -> None:
    """What the model read of ``PRICED_ORDERS`` (called ``ids[0]``) is its traceback ending in
    the notice, and the replay it sent (``ids[1]``) reused both host results: ``host_calls``,
    the host's calls since the run began, are the program's first two."""
    assert "KeyError: 'qyt'" in failed and "\x1b" not in failed
    said, call = failed.rstrip().splitlines()[-2:]  # the notice: its sentence, then the call
    assert said.startswith("[ptc-retry] Saved as #") and _is_call(call)
    assert host_calls == ["tea", "milk"]
    replayed = line_of(backend.session_dir, ids[1])
    assert replayed["replay_of"] == ids[0]
    assert replayed["tool_calls"] == {"reused": 2, "live": 0}


def check_extended(
    first: str,
    host_calls: list[str],
    backend: KernelBackend,
    ids: tuple[str, str] = ("call_cut1", "call_rest1"),
) -> None:
    """What the model read of a call cut off (``ids[0]``, ``CUT_ARGUMENTS``) says where the
    cut fell, the rest it sent (``ids[1]``) ran the whole program, and the host was called
    only then, once per item."""
    assert first.startswith("[ptc-retry] Cut off after line 3; saved as #")
    assert host_calls == ["tea", "milk"]
    assert line_of(backend.session_dir, ids[0])["status"] == "partial"
    assert line_of(backend.session_dir, ids[1])["extend_of"] == ids[0]


def printed_total(text: str) -> float:
    """The total a ``PRICED_ORDERS`` run printed, read from what the model read."""
    lines = [line for line in text.splitlines() if line.startswith("total: ")]
    assert lines, f"no total in {text!r}"
    return float(lines[-1].removeprefix("total: "))
