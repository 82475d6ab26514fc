"""What the backend costs on top of jupyter_client, and how four backends scale.

    python benchmarks/backend_overhead.py [--rounds 15] [--batch 40] [--calls 150]

1. Overhead: ``KernelBackend.run_code`` of a trivial program against a bare
   ``AsyncKernelClient.execute_interactive`` of the same program on the same kernel
   (the ``ptc-retry`` kernel, so both are checkpointed). Batches alternate so drift
   hits both alike; the figure is the per-round ratio's spread (target <= 1.10).
2. Scaling: calls per second of one backend running calls back to back, against four
   backends (four kernels) doing the same at once in one event loop: first with one
   IPYTHONDIR for all (the default: every kernel commits each cell to the same IPython
   history.sqlite), then with one IPYTHONDIR per kernel.

A script that prints figures, not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from typing import Any

import jupyter_client
from spread import spread

from ptc_retry.backend import KernelBackend

PROGRAM = "x = 1 + 1"


def _quiet(msg: dict[str, Any]) -> None:
    """execute_interactive's output hook: drop outputs (the default prints them)."""


async def overhead(kb: KernelBackend, rounds: int, batch: int) -> dict[str, list[float]]:
    """Seconds per call of each round's batch, ``run_code`` and bare, and their ratios."""
    client = kb.kernel_client

    async def backend_batch() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            result = await kb.run_code(PROGRAM)
            assert result.status == "ok", result.text
        return (time.perf_counter() - started) / batch

    async def bare_batch() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            reply = await client.execute_interactive(PROGRAM, output_hook=_quiet, timeout=60)
            assert reply["content"]["status"] == "ok"
        return (time.perf_counter() - started) / batch

    await backend_batch()  # warm both paths up
    await bare_batch()
    ours, bare, ratios = [], [], []
    for n in range(rounds):
        # Alternate which goes first, so neither always runs on a warmer kernel.
        if n % 2:
            b, o = await bare_batch(), await backend_batch()
        else:
            o, b = await backend_batch(), await bare_batch()
        ours.append(o)
        bare.append(b)
        ratios.append(o / b)
    return {"backend": ours, "bare": bare, "ratio": ratios}


async def throughput(backends: list[KernelBackend], calls: int) -> float:
    async def drive(kb: KernelBackend) -> None:
        for _ in range(calls):
            await kb.run_code(PROGRAM)

    started = time.perf_counter()
    await asyncio.gather(*(drive(kb) for kb in backends))
    return len(backends) * calls / (time.perf_counter() - started)


async def started(root: str, ipython_dirs: list[str]) -> list[KernelBackend]:
    backends = [
        KernelBackend(
            root=root,
            env={"IPYTHONDIR": ipython_dir, "PYDEVD_DISABLE_FILE_VALIDATION": "1"},
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
        for ipython_dir in ipython_dirs
    ]
    await asyncio.gather(*(kb.start() for kb in backends))
    return backends


async def main(args: argparse.Namespace) -> None:
    root = tempfile.mkdtemp(prefix="ptc-bench-")
    print(
        f"python {platform.python_version()}, jupyter_client {jupyter_client.__version__}, "
        f"{os.cpu_count()} CPUs, {platform.platform()}"
    )
    shared = tempfile.mkdtemp(prefix="ptc-bench-ipython-")
    backends = await started(root, [shared] * 4)
    try:
        o = await overhead(backends[0], args.rounds, args.batch)
        print(
            f"\nrun_code vs execute_interactive, {PROGRAM!r}, {args.rounds} rounds x "
            f"{args.batch} calls each:"
        )
        print(f"  run_code             {spread(o['backend'], 'ms/call', 1e3)}")
        print(f"  execute_interactive  {spread(o['bare'], 'ms/call', 1e3)}")
        print(f"  ratio                {spread(o['ratio'], digits=3)}; target <= 1.10")
        one = await throughput(backends[:1], args.calls)
        four = await throughput(backends, args.calls)
    finally:
        await asyncio.gather(*(kb.shutdown() for kb in backends))
    backends = await started(root, [tempfile.mkdtemp(prefix="ptc-bench-ipython-") for _ in "1234"])
    try:
        own_one = await throughput(backends[:1], args.calls)
        own_four = await throughput(backends, args.calls)
    finally:
        await asyncio.gather(*(kb.shutdown() for kb in backends))
    print(f"\nthroughput, {args.calls} calls per backend, back to back:")
    print("                         1 backend    4 backends")
    for label, a, b in [("one IPYTHONDIR", one, four), ("IPYTHONDIR each", own_one, own_four)]:
        print(f"  {label:<20} {a:7.0f}/s   {b:7.0f}/s  ({b / a:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="alternating batch pairs")
    parser.add_argument("--batch", type=int, default=40, help="calls per batch")
    parser.add_argument("--calls", type=int, default=150, help="calls per backend (scaling)")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
