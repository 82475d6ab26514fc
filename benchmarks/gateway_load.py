"""A load test through one gateway: concurrent KernelBackends on one Jupyter Kernel Gateway,
then on one Jupyter Enterprise Gateway, and a check that nothing crossed.

    python benchmarks/gateway_load.py [--backends 8] [--calls 120] [--runs 3]

Each gateway runs on a free loopback port with a token and starts ptc-retry kernels on this
machine (Enterprise Gateway: its local process proxy). ``--backends`` backends start at once,
each in its own session, and each runs ``--calls`` calls back to back, all backends at the same
time, in a cycle of three:

1. a program of its own (it names its backend and call) that fails on one wrong key, over
   ``notice_min_bytes``, so its traceback ends with the notice;
2. the one-line replay the notice teaches, ``await ptc_retry.replay("#n", old, new)``;
3. a program that succeeds.

Figures: calls per second over all backends, and the 50th, 95th and 99th percentile of a
call's latency (from ``run_code`` to its result), each as its spread over ``--runs`` runs.
Checks, before the sessions are removed:

- every call got one result, for its own call id, with the text it expects: no call was lost
  or answered twice, and no answer went to another call;
- every replay ran its own session's failed program: its output names that backend and call,
  and its history line's ``replay_of`` is that call's id;
- every session's checkpoints hold exactly its own programs: ``by-id/`` has one file per call
  the backend made, holding that call's arguments byte for byte, and ``history.jsonl`` one line
  per call, in order.

The same sessions on local kernels, without a gateway, come first: the baseline. Enterprise
Gateway comes from the venv the tests use (``.venv-enterprise-gateway/``, or
``$PTC_RETRY_ENTERPRISE_GATEWAY``); without it, only Kernel Gateway is measured.

A script that prints figures, not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jupyter_client
from spread import spread

from ptc_retry import kernelspec
from ptc_retry.backend import KernelBackend, RunResult
from ptc_retry.core.notice import parse_notice

TOKEN = "bench-token"
ENTERPRISE_GATEWAY_VENV = Path(__file__).resolve().parent.parent / ".venv-enterprise-gateway"
FIX = ('row["regoin"]', 'row["region"]')


def failing(backend: int, call: int) -> str:
    """A program of ``backend``'s ``call`` that fails with KeyError: 'regoin'."""
    return (
        f"# backend {backend}, call {call}: totals by region, with one wrong key\n"
        f'rows = [{{"region": "north", "amount": {call}}}, '
        f'{{"region": "south", "amount": {backend}}}]\n'
        "totals = {}\n"
        "for row in rows:\n"
        '    totals[row["regoin"]] = totals.get(row["region"], 0) + row["amount"]\n'
        f'print("backend {backend} call {call}:", sorted(totals.items()))\n'
    )


def fixed_output(backend: int, call: int) -> str:
    """What ``failing(backend, call)`` prints once fixed."""
    return f"backend {backend} call {call}: [('north', {call}), ('south', {backend})]"


@dataclass
class Call:
    call_id: str
    kind: str  # "fail", "replay" or "ok"
    arguments: str
    expected: str  # the text a "replay" or "ok" call must return; a "fail" call's KeyError
    replay_of: str | None = None
    saved: str | None = None  # the program a replay's checkpoint holds: the corrected one
    results: list[RunResult] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Session:
    index: int
    kb: KernelBackend
    calls: list[Call] = field(default_factory=list)


async def drive(session: Session, calls: int) -> None:
    """Run ``calls`` calls in the cycle fail, replay, succeed."""
    b = session.index
    failed: Call | None = None
    reference: str | None = None
    for c in range(calls):
        call_id = f"call_b{b}_c{c}"
        if c % 3 == 0:
            code = failing(b, c)
            call = Call(call_id, "fail", "", "KeyError: 'regoin'")
        elif c % 3 == 1 and failed is not None and reference is not None:
            code = f"await ptc_retry.replay({reference!r}, {FIX[0]!r}, {FIX[1]!r})"
            origin = int(failed.call_id.rsplit("_c", 1)[1])
            call = Call(call_id, "replay", "", fixed_output(b, origin), failed.call_id)
            call.saved = failing(b, origin).replace(*FIX)
        else:
            code = f"print('backend {b} call {c}: ok')"
            call = Call(call_id, "ok", "", f"backend {b} call {c}: ok")
        call.arguments = json.dumps({"code": code})
        started = time.perf_counter()
        result = await session.kb.run_code(code, call_id=call_id, arguments=call.arguments)
        call.seconds = time.perf_counter() - started
        call.results.append(result)
        session.calls.append(call)
        if call.kind == "fail":
            failed, reference = call, parse_notice(result.text)
        else:
            failed = reference = None


def problems(session: Session) -> list[str]:
    """What crossed or went missing in ``session``; empty when nothing did."""
    found = []
    b = session.index
    for call in session.calls:
        if len(call.results) != 1:
            found.append(f"{call.call_id}: {len(call.results)} results")
            continue
        result = call.results[0]
        if result.call_id != call.call_id or (result.metadata or {}).get("call_id") != call.call_id:
            found.append(f"{call.call_id}: answered as {result.call_id}")
        if call.kind == "fail":
            if result.status != "error" or call.expected not in result.text:
                found.append(f"{call.call_id}: {result.status} {result.text[-200:]!r}")
            if not (result.notice or "").startswith("[ptc-retry]"):
                found.append(f"{call.call_id}: no notice")
        elif (result.status, result.text) != ("ok", call.expected):
            found.append(f"{call.call_id}: {result.status} {result.text[-200:]!r}")
    session_dir = session.kb.session_dir
    assert session_dir is not None
    history = [
        json.loads(line)
        for line in (session_dir / "history.jsonl").read_text("utf-8").splitlines()
        if line
    ]
    sent = [call.call_id for call in session.calls]
    if [line["id"] for line in history] != sent:
        found.append(f"backend {b}: history {[line['id'] for line in history]} != sent {sent}")
    for line, call in zip(history, session.calls):
        if line.get("replay_of") != call.replay_of:
            found.append(f"{call.call_id}: replay_of {line.get('replay_of')!r}")
    # A call's checkpoint holds its arguments byte for byte; a replay's, the corrected program.
    saved = {path.name: path.read_text("utf-8") for path in (session_dir / "by-id").iterdir()}
    expected = {f"{call.call_id}.json": call for call in session.calls}
    extra, missing = sorted(set(saved) - set(expected)), sorted(set(expected) - set(saved))
    changed = [
        name
        for name, call in expected.items()
        if name in saved
        and saved[name] != call.arguments
        and (call.saved is None or json.loads(saved[name]).get("code") != call.saved)
    ]
    if extra or missing or changed:
        found.append(f"backend {b}: by-id extra {extra}, missing {missing}, changed {changed}")
    return found


async def load(options: dict[str, Any], backends: int, calls: int) -> dict[str, Any]:
    sessions = [Session(n, KernelBackend(**options)) for n in range(backends)]
    started = time.perf_counter()
    await asyncio.gather(*(s.kb.start() for s in sessions))
    start_seconds = time.perf_counter() - started
    try:
        started = time.perf_counter()
        await asyncio.gather(*(drive(s, calls) for s in sessions))
        elapsed = time.perf_counter() - started
        found = [problem for s in sessions for problem in problems(s)]
        dirs = {s.kb.session_dir for s in sessions}
        if len(dirs) != backends:
            found.append(f"{backends} backends share {len(dirs)} session directories")
    finally:
        await asyncio.gather(*(s.kb.shutdown() for s in sessions))
    latencies = sorted(call.seconds for s in sessions for call in s.calls)
    percentiles = statistics.quantiles(latencies, n=100, method="inclusive")
    kinds = {
        kind: statistics.median(c.seconds for s in sessions for c in s.calls if c.kind == kind)
        for kind in ("fail", "replay", "ok")
    }
    return {
        "start": start_seconds,
        "calls": len(latencies),
        "rate": len(latencies) / elapsed,
        "p50": percentiles[49],
        "p95": percentiles[94],
        "p99": percentiles[98],
        "kinds": kinds,
        "problems": found,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def gateway(kind: str, prefix: str, root: str) -> Iterator[tuple[dict[str, Any], str] | None]:
    """KernelBackend options for a gateway of ``kind`` on loopback that sees the ptc-retry
    kernelspec and gives its kernels ``root``, with the gateway's version; None when it is
    not installed. ``kind`` "local": no gateway, local kernels (the baseline)."""
    if kind == "local":
        yield {"root": root}, "Local kernels, no gateway (the baseline)"
        return
    port = free_port()
    env = dict(os.environ, JUPYTER_PATH=os.path.join(prefix, "share", "jupyter"))
    env.update(PTC_RETRY_ROOT=root)
    options: dict[str, Any] = {"gateway_url": f"http://127.0.0.1:{port}", "token": TOKEN}
    if kind == "kernel":
        try:
            import kernel_gateway
        except ImportError:
            yield None
            return
        version = f"Kernel Gateway {kernel_gateway.__version__}"
        python, app, module = sys.executable, "KernelGatewayApp", "kernel_gateway"
        extra: list[str] = []
    else:
        venv = Path(os.environ.get("PTC_RETRY_ENTERPRISE_GATEWAY") or ENTERPRISE_GATEWAY_VENV)
        python, app, module = (
            str(venv / "bin" / "python"),
            "EnterpriseGatewayApp",
            "enterprise_gateway",
        )
        if not os.path.exists(python):
            yield None
            return
        said = subprocess.run(
            [python, "-c", "import enterprise_gateway as e; print(e.__version__)"],
            capture_output=True,
            text=True,
        )
        if said.returncode != 0:
            yield None
            return
        version = f"Enterprise Gateway {said.stdout.strip()}"
        # It refuses kernels for root unless the client names its user, as a deployment does;
        # a client's env replaces the kernel's environment but for these names.
        env["EG_INHERITED_ENVS"] = "PTC_RETRY_ROOT,PATH"
        options["env"] = {"KERNEL_USERNAME": "bench"}
        extra = [f"--{app}.default_kernel_name=ptc-retry"]
    command = [
        python,
        "-m",
        module,
        f"--{app}.ip=127.0.0.1",
        f"--{app}.port={port}",
        f"--{app}.port_retries=0",
        f"--{app}.auth_token={TOKEN}",
        *extra,
    ]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        request = urllib.request.Request(
            f"{options['gateway_url']}/api", headers={"Authorization": f"token {TOKEN}"}
        )
        for _ in range(300):
            try:
                urllib.request.urlopen(request, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield options, version
    finally:
        process.terminate()
        process.wait(10)


def machine() -> str:
    with open("/proc/meminfo") as meminfo:
        total = int(meminfo.readline().split()[1]) * 1024
    return (
        f"{os.cpu_count()} CPUs, {total / 2**30:.0f} GiB of memory, python "
        f"{platform.python_version()}, jupyter_client {jupyter_client.__version__}"
    )


async def main(args: argparse.Namespace) -> None:
    print(machine())
    print(
        f"{args.backends} backends at once on one gateway, {args.calls} calls each "
        f"(fail, replay, succeed, ...), {args.runs} runs on each"
    )
    prefix = tempfile.mkdtemp(prefix="ptc-bench-kernelspec-")
    kernelspec.install(prefix=prefix)
    failed = False
    for kind in ("local", "kernel", "enterprise"):
        root = tempfile.mkdtemp(prefix="ptc-bench-")
        with gateway(kind, prefix, root) as found:
            if found is None:
                print(f"\n({kind} gateway not installed: no figures for it)")
                continue
            options, version = found
            runs = [await load(options, args.backends, args.calls) for _ in range(args.runs)]
        print(f"\n{version}:")
        report(runs, args.backends)
        crossed = [problem for figures in runs for problem in figures["problems"]]
        if crossed:
            failed = True
            print(f"  CROSSED OR LOST ({len(crossed)}):")
            for problem in crossed[:20]:
                print(f"    {problem}")
        else:
            print(
                "  nothing crossed: every call answered once, for itself; every replay ran "
                "its own session's program; every session holds exactly its own programs"
            )
    if failed:
        sys.exit(1)


def report(runs: list[dict[str, Any]], backends: int) -> None:
    """Each figure of one gateway's runs, as its spread over them."""

    def over(key: str, scale: float = 1.0, digits: int = 0) -> str:
        return spread([figures[key] * scale for figures in runs], digits=digits)

    def by_kind(kind: str) -> str:
        return spread([figures["kinds"][kind] * 1000 for figures in runs], "ms", digits=0)

    print(f"  {backends} kernels started in {over('start', digits=1)} s")
    print(f"  {runs[0]['calls']} calls a run, calls/s {over('rate')}")
    for percentile in ("p50", "p95", "p99"):
        print(f"  latency of a call, {percentile}: {over(percentile, 1000)} ms")
    for kind, label in (("fail", "failing"), ("replay", "replay"), ("ok", "succeeding")):
        print(f"  median {label} call: {by_kind(kind)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", type=int, default=8, help="backends (kernels) at once")
    parser.add_argument("--calls", type=int, default=120, help="calls per backend")
    parser.add_argument("--runs", type=int, default=3, help="runs on each gateway")
    asyncio.run(main(parser.parse_args()))
