"""What resume saves: fixing a slow program that fails in its last statement.

Run: ``python benchmarks/resume.py [--seconds 4] [--rounds 3]``

The program spends ``--seconds`` (half waiting, as a download does; half computing)
and then fails on a misspelt key in its last statement. Three ways to fix it,
timed in one run on one ptc-retry kernel, rounds interleaved:

1. re-sending the corrected program (what a model does without ptc-retry);
2. ``await ptc_retry.replay(id, old, new)``: a one-line fix, the whole program runs again;
3. ``await ptc_retry.replay(id, old, new, resume=True)``: only the failed statement runs.

Each fix is timed from the request to the reply; the failing run before it is not.
Also printed: the bytes the model sends for each fix. A script that prints figures,
not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from jupyter_client.manager import KernelManager
from spread import spread

from kernel_ext.kernelspec import kernel_spec_manager

PROGRAM = """\
import statistics
import time

def fetch(n):
    \"\"\"Stands for a download: the kernel waits.\"\"\"
    time.sleep({wait})
    return list(range(n))

rows = fetch(200_000)

def crunch(values):
    \"\"\"Stands for a computation: the kernel works.\"\"\"
    deadline = time.perf_counter() + {work}
    total = 0
    while time.perf_counter() < deadline:
        total += sum(values[:1000])
    return total

score = crunch(rows)
summary = {{"rows": len(rows), "score": score, "mean": statistics.mean(rows)}}
print(f"rows={{summary['rows']}} mean={{summary['meen']:.1f}}")
"""
OLD, NEW = "summary['meen']", "summary['mean']"


def run(client: Any, code: str) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    reply = client.execute_interactive(
        code, timeout=600, stop_on_error=False, output_hook=lambda msg: None
    )
    return reply, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time the program spends")
    parser.add_argument("--rounds", type=int, default=3, help="fixes timed per way")
    args = parser.parse_args()
    program = PROGRAM.format(wait=args.seconds / 2, work=args.seconds / 2)
    fixes = {
        "re-send the program": lambda call_id: program.replace(OLD, NEW),
        "replay": lambda call_id: f'await ptc_retry.replay("{call_id}", "{OLD}", "{NEW}")',
        "replay, resume=True": lambda call_id: (
            f'await ptc_retry.replay("{call_id}", "{OLD}", "{NEW}", resume=True)'
        ),
    }

    with tempfile.TemporaryDirectory() as tmp:
        km = KernelManager(kernel_name="ptc-retry", kernel_spec_manager=kernel_spec_manager())
        km.start_kernel(env=dict(os.environ, PTC_RETRY_ROOT=tmp, PTC_RETRY_SESSION="bench"))
        client = km.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        try:
            times: dict[str, list[float]] = {name: [] for name in fixes}
            sent: dict[str, int] = {}
            failing = []
            for _ in range(args.rounds):
                for name, fix in fixes.items():
                    reply, seconds = run(client, program)
                    assert reply["content"]["status"] == "error", reply["content"]
                    failing.append(seconds)
                    call_id = reply["metadata"]["ptc_retry"]["call_id"]
                    code = fix(call_id)
                    reply, seconds = run(client, code)
                    assert reply["content"]["status"] == "ok", reply["content"]
                    times[name].append(seconds)
                    sent[name] = len(code.encode())
        finally:
            client.stop_channels()
            km.shutdown_kernel(now=True)

    print(
        f"A program that spends {args.seconds:g} s, then fails in its last statement "
        f"(failing run: {spread(failing, 's')}). Wall time of the fix:"
    )
    slowest = statistics.median(times["re-send the program"])
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"  {name:22} {spread(values, 's', digits=3)}   median {slowest / median:6.1f}x "
            f"faster than re-sending   sends {sent[name]:4d} bytes"
        )


if __name__ == "__main__":
    sys.exit(main())
