"""What ``ptc-retry mcp`` costs a host, and how it holds up with many sessions.

    python benchmarks/mcp_server.py [--rounds 10] [--batch 20] [--sessions 16] [--calls 10]

1. Overhead: a trivial ``run_code`` through ``ptc-retry mcp`` on stdio (the official MCP
   client, as a host drives it) against the same call on ``KernelBackend.handle_tool_call``
   in this process, in one run. Each has a ptc-retry kernel of its own; batches alternate so
   drift hits both alike; the figure is the per-round ratio's spread (target <= 1.15),
   with the milliseconds of each.
2. Sessions: ``ptc-retry mcp --http`` with ``--sessions`` MCP sessions (one kernel each)
   making ``--calls`` calls each at once: calls per second, the p50 and p99 latency of a
   call, and how many results named another session's value (crossed; must be 0), each over
   ``--runs`` servers.

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
import urllib.error
import urllib.request
from pathlib import Path

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from spread import spread

from ptc_retry.backend import KernelBackend

PROGRAM = {"code": "x = 1 + 1"}
PTC_RETRY = str(Path(sys.executable).with_name("ptc-retry"))


async def overhead(
    kb: KernelBackend, host: Client, rounds: int, batch: int
) -> dict[str, list[float]]:
    """Seconds per call of each round's batch, through MCP and direct, and their ratios."""

    async def backend_batch() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            await kb.handle_tool_call("run_code", PROGRAM)
            assert kb.last_result is not None and kb.last_result.ok
        return (time.perf_counter() - started) / batch

    async def mcp_batch() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            result = await host.call_tool("run_code", PROGRAM)
            assert not result.is_error, result
        return (time.perf_counter() - started) / batch

    await backend_batch()  # warm both paths up
    await mcp_batch()
    ours, direct, ratios = [], [], []
    for _ in range(rounds):
        b = await backend_batch()
        m = await mcp_batch()
        direct.append(b)
        ours.append(m)
        ratios.append(m / b)
    return {"backend": direct, "mcp": ours, "ratio": ratios}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_http(root: str, sessions: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PTC_RETRY_ROOT": root}
    command = [PTC_RETRY, "mcp", "--http", f"127.0.0.1:{port}", "--max-sessions", str(sessions)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=2)
        except urllib.error.HTTPError:
            return process, url
        except OSError:
            time.sleep(0.1)
    raise SystemExit("ptc-retry mcp --http did not answer")


async def many_sessions(url: str, sessions: int, calls: int) -> dict[str, float]:
    latencies: list[float] = []
    crossed = 0
    opened = 0
    all_open = asyncio.Event()
    timing: dict[str, float] = {}

    async def session(name: str) -> None:
        nonlocal crossed, opened
        async with Client(url) as client:  # its own task: a client's scopes stay in one
            await client.call_tool("run_code", {"code": f"mine = {name!r}"})
            opened += 1
            if opened == sessions:
                timing["started"] = time.perf_counter()
                all_open.set()
            await all_open.wait()
            for _ in range(calls):
                started = time.perf_counter()
                result = await client.call_tool("run_code", {"code": "mine"})
                latencies.append(time.perf_counter() - started)
                crossed += result.content[0].text != repr(name)
            timing["ended"] = time.perf_counter()

    begun = time.perf_counter()
    await asyncio.gather(*(session(f"session-{n}") for n in range(sessions)))
    elapsed = timing["ended"] - timing["started"]
    latencies.sort()
    return {
        "startup_s": timing["started"] - begun,
        "calls_per_s": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "crossed": crossed,
        "calls": len(latencies),
    }


async def main(args: argparse.Namespace) -> None:
    print(f"Python {platform.python_version()} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as root:
        os.environ["PTC_RETRY_ROOT"] = root
        stdio = StdioServerParameters(command=PTC_RETRY, args=["mcp"], env=dict(os.environ))
        with open(os.devnull, "w") as quiet:
            from mcp.client.stdio import stdio_client

            async with KernelBackend() as kb, Client(stdio_client(stdio, errlog=quiet)) as host:
                figures = await overhead(kb, host, args.rounds, args.batch)
        print(f"trivial run_code, {args.rounds} rounds of {args.batch} calls:")
        print(f"  MCP stdio      {spread(figures['mcp'], 'ms', 1e3)}")
        print(f"  KernelBackend  {spread(figures['backend'], 'ms', 1e3)}")
        print(f"  ratio          {spread(figures['ratio'], digits=3)}; target <= 1.15")
        runs = []
        for _ in range(args.runs):
            process, url = start_http(root, args.sessions)
            try:
                runs.append(await many_sessions(url, args.sessions, args.calls))
            finally:
                process.terminate()
                process.wait(60)
    print(
        f"{args.sessions} HTTP sessions at once, one kernel each, {args.calls} calls each, "
        f"{args.runs} runs (a server each):"
    )
    for key, label in [
        ("startup_s", "s to open them all"),
        ("calls_per_s", "calls/s"),
        ("p50_ms", "ms, p50 of a call"),
        ("p99_ms", "ms, p99 of a call"),
    ]:
        print(f"  {spread([run[key] for run in runs], label, digits=1)}")
    print(f"  results crossed into another session: {sum(run['crossed'] for run in runs):.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="servers started for the sessions")
    asyncio.run(main(parser.parse_args()))
