"""What ptc-retry costs per cell: the stock IPython kernel against the ptc-retry kernel.

Run: ``python benchmarks/kernel_overhead.py [--cells 300] [--rounds 6] [--long 4000]``

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

TICKS = os.sysconf("SC_CLK_TCK")
CELL = "x = 1"


def start(name: str, root: Path) -> KernelManager:
    km = KernelManager(kernel_name=name, kernel_spec_manager=kernel_spec_manager())
    env = dict(os.environ, PTC_RETRY_ROOT=str(root), PTC_RETRY_SESSION=f"bench-{name}")
    km.start_kernel(env=env)
    return km


def cpu_seconds(km: KernelManager) -> float:
    pid = km.provisioner.process.pid  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def batch(km: KernelManager, client, cells: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Run ``cells`` trivial cells; return (kernel CPU s, wall s) per cell."""
    cpu, wall = cpu_seconds(km), time.perf_counter()
    for _ in range(cells):
        reply = client.execute_interactive(CELL, timeout=60, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply
    return (cpu_seconds(km) - cpu) / cells, (time.perf_counter() - wall) / cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=300, help="cells per batch")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved batches per kernel")
    parser.add_argument("--long", type=int, default=4000, help="cells in the growth session")
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

    with tempfile.TemporaryDirectory(dir=args.root) as tmp:
        print(f"checkpoint root in {tmp}")
        kernels = {name: start(name, Path(tmp)) for name in ("python3", "ptc-retry")}
        clients = {}
        for name, km in kernels.items():
            clients[name] = km.client()
            clients[name].start_channels()
            clients[name].wait_for_ready(timeout=60)
            batch(km, clients[name], 50)  # warm up imports and caches
        cpu: dict[str, list[float]] = {name: [] for name in kernels}
        wall: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, km in kernels.items():
                c, w = batch(km, clients[name], args.cells)
                cpu[name].append(c)
                wall[name].append(w)

        print(f"{args.rounds} interleaved batches of {args.cells} cells ({CELL!r}) per kernel")
        for label, data in (("kernel CPU per cell", cpu), ("round trip per cell", wall)):
            ratio = ratios(data["ptc-retry"], data["python3"])
            print(f"  {label}, ptc-retry / stock: {spread(ratio, digits=3)}")
            print(f"    stock      {spread(data['python3'], 'ms', 1e3, 3)}")
            print(f"    ptc-retry  {spread(data['ptc-retry'], 'ms', 1e3, 3)}")

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
            return ratios(per_batch["ptc-retry"][part], per_batch["python3"][part])

        print(
            f"  growth, ptc-retry / stock CPU per cell in the same batches of {step}:\n"
            f"    cells 3,000-{args.long:,}  {spread(relative(late), digits=3)}\n"
            f"    cells 0-1,000      {spread(relative(early), digits=3)}"
        )
        for name, km in kernels.items():
            clients[name].stop_channels()
            km.shutdown_kernel(now=True)


if __name__ == "__main__":
    sys.exit(main())
