"""What ``ptc-retry mcp`` costs a host, and how it holds up with many sessions.

    python benchmarks/mcp_server.py [--rounds 15] [--batch 20] [--no-sessions]
                                    [--sessions 16] [--calls 10]

1. Overhead: a trivial ``run_code`` through ``ptc-retry mcp`` on stdio (the official MCP
   client, as a host drives it) against the same call on ``KernelBackend.handle_tool_call``
   in this process, in one run. Each has a ptc-retry kernel of its own. The floor, measured
   in the same run: the same client against a bare SDK server on the same pipes whose
   ``run_code`` answers at once (``--floor-server``), the MCP round trip that no server on
   the SDK can go below. Batches alternate so drift hits all three alike; the figures are
   medians of the rounds, with their quartiles: the ratio (target <= 1.15), the milliseconds
   of each, and what ``ptc-retry mcp`` adds beyond the floor.
2. Sessions: ``ptc-retry mcp --http`` with ``--sessions`` MCP sessions (one kernel each)
   making ``--calls`` calls each at once: calls per second, the p50 and p99 latency of a
   call, and how many results named another session's value (crossed; must be 0).

A script that prints figures, not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from ptc_retry.backend import KernelBackend

PROGRAM = {"code": "x = 1 + 1"}
PTC_RETRY = str(Path(sys.executable).with_name("ptc-retry"))


async def serve_floor() -> None:
    """A bare SDK server on stdio, on the pipes ``ptc-retry mcp`` uses, whose ``run_code``
    answers ``[no output]`` at once: what a call costs the SDK's client and server alone."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from ptc_retry.mcp.stdio import protocol_pipes, protocol_streams

    async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"code": {"type": "string"}}}
        return types.ListToolsResult(tools=[types.Tool(name="run_code", input_schema=schema)])

    async def call_tool(ctx: object, params: object) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="[no output]")])

    server = Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)
    with protocol_pipes() as (wire_in, wire_out):
        async with protocol_streams(wire_in, wire_out) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    first, median, third = statistics.quantiles(values, n=4, method="inclusive")
    return first, median, third


async def overhead(
    kb: KernelBackend, host: Client, floor: Client, rounds: int, batch: int
) -> dict[str, tuple[float, float, float]]:
    def timed(call: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[float]]:
        async def one_batch() -> float:
            started = time.perf_counter()
            for _ in range(batch):
                await call()
            return (time.perf_counter() - started) / batch * 1000

        return one_batch

    async def backend_call() -> None:
        await kb.handle_tool_call("run_code", PROGRAM)
        assert kb.last_result is not None and kb.last_result.ok

    async def mcp_call() -> None:
        result = await host.call_tool("run_code", PROGRAM)
        assert not result.is_error, result

    async def floor_call() -> None:
        result = await floor.call_tool("run_code", PROGRAM)
        assert not result.is_error, result

    batches = {"backend": timed(backend_call), "mcp": timed(mcp_call), "floor": timed(floor_call)}
    for one_batch in batches.values():  # warm every path up
        await one_batch()
    ms: dict[str, list[float]] = {name: [] for name in batches}
    for _ in range(rounds):
        for name, one_batch in batches.items():
            ms[name].append(await one_batch())
    pairs = list(zip(ms["mcp"], ms["backend"], ms["floor"]))
    return {
        **{f"{name}_ms": quartiles(values) for name, values in ms.items()},
        "ratio": quartiles([mcp / backend for mcp, backend, _ in pairs]),
        "added_ms": quartiles([mcp - backend for mcp, backend, _ in pairs]),
        "beyond_floor_ms": quartiles([mcp - backend - floor for mcp, backend, floor in pairs]),
    }


def spread(figure: tuple[float, float, float], digits: int = 2) -> str:
    first, median, third = figure
    return f"{median:.{digits}f} ({first:.{digits}f}-{third:.{digits}f})"


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
        bare = StdioServerParameters(
            command=sys.executable, args=[__file__, "--floor-server"], env=dict(os.environ)
        )
        with open(os.devnull, "w") as quiet:
            async with (
                KernelBackend() as kb,
                Client(stdio_client(stdio, errlog=quiet)) as host,
                Client(stdio_client(bare, errlog=quiet)) as floor,
            ):
                figures = await overhead(kb, host, floor, args.rounds, args.batch)
        print(
            f"trivial run_code, median (quartiles) of {args.rounds} rounds of {args.batch} "
            f"calls: MCP stdio {spread(figures['mcp_ms'])} ms, KernelBackend "
            f"{spread(figures['backend_ms'])} ms, ratio {spread(figures['ratio'], 3)} (target "
            f"<= 1.15); MCP adds {spread(figures['added_ms'])} ms, of which the SDK's floor "
            f"(a bare SDK server answering at once) is {spread(figures['floor_ms'])} ms and "
            f"ptc-retry mcp's own part {spread(figures['beyond_floor_ms'])} ms"
        )
        if args.no_sessions:
            return
        process, url = start_http(root, args.sessions)
        try:
            load = await many_sessions(url, args.sessions, args.calls)
        finally:
            process.terminate()
            process.wait(60)
    print(
        f"{args.sessions} HTTP sessions at once ({load['startup_s']:.1f} s to open them all, "
        f"one kernel each): {load['calls']:.0f} calls, {load['calls_per_s']:.1f} calls/s, "
        f"p50 {load['p50_ms']:.1f} ms, p99 {load['p99_ms']:.1f} ms, "
        f"crossed {load['crossed']:.0f}"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--floor-server"]:
        asyncio.run(serve_floor())
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--no-sessions", action="store_true", help="measure the overhead only")
    asyncio.run(main(parser.parse_args()))
