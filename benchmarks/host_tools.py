"""What a program's call of a host tool costs: the round trip, and calls per second.

    python benchmarks/host_tools.py [--rounds 5] [--calls 200]

A program calls a host tool that returns its argument (``echo``), ``--calls`` times in a
row, timed inside the kernel; each figure is printed as its spread over ``--rounds``. Two ways of
calling, where both exist:

- ``wire``: ``kernel.raw_input(tool_request(...))``, the protocol itself: what the
  transport and the backend's answering cost;
- ``tools``: ``await tools.echo(x=...)``, what a program writes (the kernel side's batching
  and recording on top).

The floor: a program's ``input()`` answered by a bare jupyter_client loop on the same
kernel. Each is measured with batches of 1 (one call per request) and of 10 (ten calls in one
request; ``asyncio.gather`` of ten with ``tools``), on a local kernel and, when
jupyter-kernel-gateway is installed, through a Kernel Gateway on loopback. The ratios
compare figures of this one run.

Last, the cost of recording: a function called in a loop, plain and under
``@ptc_retry.recorded`` (one line appended a call), in the same program.

A script that prints figures, not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import median
from typing import Any

import ipykernel
import jupyter_client
from spread import spread

from ptc_retry import kernelspec
from ptc_retry.backend import KernelBackend

TOKEN = "bench-token"
BATCHES = (1, 10)


def echo(x: int) -> int:
    """Return x."""
    return x


def program(way: str, batch: int, calls: int) -> str:
    """A program that makes ``calls`` tool calls in requests of ``batch``; its value is the
    seconds they took."""
    requests = calls // batch
    if way == "wire":
        body = (
            "from ptc_retry.core.protocol import tool_request as _request\n"
            "_kernel = get_ipython().kernel\n"
            "_calls = [{'id': i, 'tool': 'echo', 'arguments': {'x': i}}"
            f" for i in range({batch})]\n"
            f"for _ in range({requests}):\n"
            "    _kernel.raw_input(_request(_calls))\n"
        )
    else:
        body = (
            "import asyncio as _asyncio\n"
            f"for _ in range({requests}):\n"
            f"    await _asyncio.gather(*(tools.echo(x=i) for i in range({batch})))\n"
        )
    start = "import time as _time\n_started = _time.perf_counter()\n"
    return f"{start}{body}_time.perf_counter() - _started"


async def measure(kb: KernelBackend, way: str, batch: int, calls: int, rounds: int) -> list[float]:
    """Seconds per call, one figure a round."""
    await kb.run_code(program(way, batch, batch * 5))  # warm up
    per_call = []
    for _ in range(rounds):
        result = await kb.run_code(program(way, batch, calls))
        assert result.status == "ok" and result.value is not None, result.text
        per_call.append(float(result.value) / (calls // batch * batch))
    return per_call


RECORDING = """\
import time as _time
def _plain(x):
    return x
@ptc_retry.recorded
def _kept(x):
    return x
def _per_call(function):
    started = _time.perf_counter()
    for i in range({calls}):
        function(x=i)
    return (_time.perf_counter() - started) / {calls}
(_per_call(_plain), _per_call(_kept))
"""


async def recording_cost(
    kb: KernelBackend, calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Seconds per call of a plain function and of the same function under
    ``@ptc_retry.recorded`` in one program (each recorded call appends one line to the
    program's ``tool-calls/`` file), one figure a round each."""
    plain, kept = [], []
    for _ in range(rounds + 1):  # the first warms up
        result = await kb.run_code(RECORDING.format(calls=calls))
        assert result.status == "ok" and result.value is not None, result.text
        a, b = (float(x) for x in result.value.strip("()").split(","))
        plain.append(a)
        kept.append(b)
    return plain[1:], kept[1:]


async def bare_input(kb: KernelBackend, calls: int, rounds: int) -> list[float]:
    """Seconds per ``input()`` round trip of a program answered by a bare jupyter_client loop
    (``execute_interactive`` with a ``stdin_hook``) on the same kernel: the floor."""
    client = kb.kernel_client
    code = (
        "import time as _time\n_started = _time.perf_counter()\n"
        f"for _ in range({calls}):\n    input()\n"
        f"print((_time.perf_counter() - _started) / {calls})"
    )
    printed: list[str] = []

    def output(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])

    def answer(msg: dict[str, Any]) -> None:
        client.input("1")

    for _ in range(rounds + 1):  # the first warms up
        await client.execute_interactive(
            code, allow_stdin=True, stdin_hook=answer, output_hook=output, timeout=120
        )
    return [float(text) for text in printed[1:]]


Figures = dict[tuple[str, int], list[float]]


async def figures(kb: KernelBackend, args: argparse.Namespace) -> Figures:
    found = await kb.run_code("'tools' in globals()")
    ways = ["wire", "tools"] if found.value == "True" else ["wire"]
    return {
        (way, batch): await measure(kb, way, batch, args.calls, args.rounds)
        for way in ways
        for batch in BATCHES
    }


@contextmanager
def gateway(prefix: str) -> Iterator[str | None]:
    """A Kernel Gateway on a free loopback port that sees the ptc-retry kernelspec; None
    when jupyter-kernel-gateway is not installed."""
    try:
        import kernel_gateway  # noqa: F401
    except ImportError:
        yield None
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, JUPYTER_PATH=os.path.join(prefix, "share", "jupyter"))
    command = [
        sys.executable,
        "-m",
        "kernel_gateway",
        "--KernelGatewayApp.ip=127.0.0.1",
        f"--KernelGatewayApp.port={port}",
        f"--KernelGatewayApp.auth_token={TOKEN}",
    ]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        request = urllib.request.Request(f"{url}/api", headers={"Authorization": f"token {TOKEN}"})
        for _ in range(300):
            try:
                urllib.request.urlopen(request, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def report(name: str, found: Figures) -> None:
    print(f"\n{name}:")
    for (way, batch), seconds in found.items():
        print(f"  {way:5}  batch {batch:2}  {spread(seconds, 'ms/call', 1e3, 3)}")
    for way in dict.fromkeys(way for way, _ in found):
        ratio = median(found[(way, 1)]) / median(found[(way, 10)])
        print(f"  {way:5}  batch of 10 vs 1: {ratio:.1f}x the calls per second (medians)")


async def main(args: argparse.Namespace) -> None:
    print(
        f"python {platform.python_version()}, ipykernel {ipykernel.__version__}, "
        f"jupyter_client {jupyter_client.__version__}, {os.cpu_count()} CPUs; "
        f"{args.calls} calls a round, {args.rounds} rounds"
    )
    root = tempfile.mkdtemp(prefix="ptc-bench-")
    prefix = tempfile.mkdtemp(prefix="ptc-bench-kernelspec-")
    kernelspec.install(prefix=prefix)
    env = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    results: dict[str, Figures] = {}
    async with KernelBackend(root=root, env=env, tools=[echo]) as kb:
        results["local kernel"] = await figures(kb, args)
        floor = await bare_input(kb, args.calls, args.rounds)
        plain, kept = await recording_cost(kb, args.calls, args.rounds)
    report("local kernel", results["local kernel"])
    wire = median(results["local kernel"][("wire", 1)])
    print(
        f"  bare jupyter_client input() round trip: {spread(floor, 'ms', 1e3, 3)}; one tool "
        f"call (wire, batch 1) costs {wire / median(floor):.2f}x that (medians)"
    )
    print(f"  recording a call: a plain function {spread(plain, 'us a call', 1e6, 1)}")
    print(f"    the same under @ptc_retry.recorded {spread(kept, 'us a call', 1e6, 1)}")
    added = [k - p for k, p in zip(kept, plain, strict=True)]
    print(f"    recording adds {spread(added, 'us a call', 1e6, 1)}")
    with gateway(prefix) as url:
        if url is None:
            print("\n(jupyter-kernel-gateway is not installed: no gateway figures)")
            return
        async with KernelBackend(gateway_url=url, token=TOKEN, tools=[echo]) as kb:
            results["gateway"] = await figures(kb, args)
    report("through a Kernel Gateway on loopback", results["gateway"])
    local, remote = results["local kernel"], results["gateway"]
    print("\ngateway vs local, the round trip of one call (batch 1):")
    for way in dict.fromkeys(way for way, _ in remote):
        print(f"  {way:5}  {median(remote[(way, 1)]) / median(local[(way, 1)]):.2f}x (medians)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="tool calls per round")
    asyncio.run(main(parser.parse_args()))
