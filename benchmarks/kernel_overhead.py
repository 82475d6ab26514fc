"""What ptc-retry costs per cell: the stock IPython kernel against the ptc-retry kernel.

Run: ``python benchmarks/kernel_overhead.py [--cells 300] [--rounds 6] [--long 4000] [--otel]``

Prints three figures, each measured in this one run with batches interleaved
(stock, ptc-retry, stock, ...), so that a busy machine slows both alike:

1. kernel CPU per trivial cell (utime + stime of the kernel process, from
   /proc/<pid>/stat): the figure that matters on a shared host, and far less
   noisy than wall time;
2. round-trip wall time per cell through jupyter_client;
3. growth: the ptc-retry kernel's CPU per cell over cells 3,000-4,000 of one
   session against its first 1,000 (the history must not make cells slower).

Each is the ratio of one round's pair of batches, printed as its spread over the rounds
(``spread.py``), with each kernel's milliseconds.

``--otel``: what OpenTelemetry installed in a kernel costs when nothing configures it there.
Two ptc-retry kernels instead, one where ``opentelemetry`` cannot be imported (hidden by a
package of that name that raises ImportError, first on its path) and one with the API as
installed (``pip install 'ptc-retry[otel]'``) and no SDK set up; every cell's request
carries a W3C ``traceparent``, as ``KernelBackend`` sends while its application traces.
Figures 1 and 2 only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import KernelManager
from spread import ratios, spread

from kernel_ext.kernelspec import kernel_spec_manager
from ptc_retry.core.protocol import METADATA_KEY, TRACEPARENT, execute_request

TICKS = os.sysconf("SC_CLK_TCK")
CELL = "x = 1"
#: The trace context of each ``--otel`` cell (an example id of the W3C specification).
TRACED = {METADATA_KEY: {TRACEPARENT: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
#: The two kernels of each comparison: (name, kernelspec), the baseline first.
STOCK_AGAINST_OURS = (("stock", "python3"), ("ptc-retry", "ptc-retry"))
HIDDEN_AGAINST_API = (("no otel", "ptc-retry"), ("otel api", "ptc-retry"))


def start(name: str, spec: str, root: Path, **env: str) -> KernelManager:
    km = KernelManager(kernel_name=spec, kernel_spec_manager=kernel_spec_manager())
    session = f"bench-{name.replace(' ', '-')}"
    km.start_kernel(
        env=dict(os.environ, PTC_RETRY_ROOT=str(root), PTC_RETRY_SESSION=session, **env)
    )
    return km


def hide_opentelemetry(directory: Path) -> dict[str, str]:
    """The environment of a kernel in which ``import opentelemetry`` fails."""
    package = directory / "opentelemetry"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('hidden by the benchmark')\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(directory), os.getenv("PYTHONPATH")]))}


def cpu_seconds(km: KernelManager) -> float:
    pid = km.provisioner.process.pid  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def batch(km: KernelManager, client, cells: int, traced: bool = False) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Run ``cells`` trivial cells (``traced``: each with ``TRACED`` as its metadata);
    return (kernel CPU s, wall s) per cell."""
    cpu, wall = cpu_seconds(km), time.perf_counter()
    for _ in range(cells):
        reply = run_traced(client) if traced else run_plain(client)
        assert reply["content"]["status"] == "ok", reply
    return (cpu_seconds(km) - cpu) / cells, (time.perf_counter() - wall) / cells


def run_plain(client):  # type: ignore[no-untyped-def]
    return client.execute_interactive(CELL, timeout=60, output_hook=lambda msg: None)


def run_traced(client):  # type: ignore[no-untyped-def]
    """One cell sent with ``TRACED`` (execute_interactive sends no metadata): its reply,
    once its outputs are read too, as execute_interactive reads them."""
    msg = client.session.msg("execute_request", execute_request(CELL), metadata=TRACED)
    client.shell_channel.send(msg)
    msg_id = msg["header"]["msg_id"]
    while True:
        output = client.get_iopub_msg(timeout=60)
        idle = output["msg_type"] == "status" and output["content"]["execution_state"] == "idle"
        if idle and output["parent_header"].get("msg_id") == msg_id:
            break
    while True:
        reply = client.get_shell_msg(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=300, help="cells per batch")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved batches per kernel")
    parser.add_argument("--long", type=int, default=4000, help="cells in the growth session")
    parser.add_argument(
        "--otel",
        action="store_true",
        help="compare a ptc-retry kernel without opentelemetry and one with its API, unused",
    )
    parser.add_argument(
        "--root",
        help="directory to hold the checkpoint root (default: the system temp directory, "
        "where ptc-retry saves by default)",
    )
    args = parser.parse_args()
    if args.long < 3250:
        parser.error(
            "--long must be at least 3250: growth compares cells 3,000 on with the first 1,000"
        )

    pair = HIDDEN_AGAINST_API if args.otel else STOCK_AGAINST_OURS
    (base, _), (ours, _) = pair
    with tempfile.TemporaryDirectory(dir=args.root) as tmp:
        print(f"checkpoint root in {tmp}")
        hidden = Path(tmp, "hidden")
        hidden.mkdir()
        kernels = {
            name: start(
                name, spec, Path(tmp), **(hide_opentelemetry(hidden) if name == "no otel" else {})
            )
            for name, spec in pair
        }
        clients = {}
        for name, km in kernels.items():
            clients[name] = km.client()
            clients[name].start_channels()
            clients[name].wait_for_ready(timeout=60)
            batch(km, clients[name], 50, args.otel)  # warm up imports and caches
        cpu: dict[str, list[float]] = {name: [] for name in kernels}
        wall: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, km in kernels.items():
                c, w = batch(km, clients[name], args.cells, args.otel)
                cpu[name].append(c)
                wall[name].append(w)

        print(f"{args.rounds} interleaved batches of {args.cells} cells ({CELL!r}) per kernel")
        for label, data in (("kernel CPU per cell", cpu), ("round trip per cell", wall)):
            ratio = ratios(data[ours], data[base])
            print(f"  {label}, {ours} / {base}: {spread(ratio, digits=3)}")
            print(f"    {base:<10} {spread(data[base], 'ms', 1e3, 3)}")
            print(f"    {ours:<10} {spread(data[ours], 'ms', 1e3, 3)}")
        if args.otel:
            shut_down(kernels, clients)
            return

        # Growth: both kernels go on to cell 4,000 in lock-step batches of 250. The
        # ratio to the stock kernel in the same batches cancels out the machine's load.
        step = 250
        per_batch: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.long // step):
            for name, km in kernels.items():
                per_batch[name].append(batch(km, clients[name], step)[0])
        early = slice(0, 1000 // step)
        late = slice(3000 // step, args.long // step)

        def relative(part: slice) -> list[float]:
            return ratios(per_batch[ours][part], per_batch[base][part])

        print(
            f"  growth, ptc-retry / stock CPU per cell in the same batches of {step}:\n"
            f"    cells 3,000-{args.long:,}  {spread(relative(late), digits=3)}\n"
            f"    cells 0-1,000      {spread(relative(early), digits=3)}"
        )
        shut_down(kernels, clients)


def shut_down(kernels: dict[str, KernelManager], clients: dict[str, object]) -> None:
    for name, km in kernels.items():
        clients[name].stop_channels()  # type: ignore[attr-defined]
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    sys.exit(main())
