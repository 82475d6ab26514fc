"""A failing program fixed by a one-line replay, on the kernel the installed wheel put in place.

    cd "$(mktemp -d)" && VENV/bin/python -I /path/to/.ci/installed_kernel.py PREFIX

Run with the Python of a venv that has the built wheel installed, after
``ptc-retry install-kernel --prefix PREFIX``, from a directory outside the source
tree (the kernel is started with ``python -m kernel_ext``, which imports from its
working directory first). Through jupyter_client's KernelManager, with the kernelspec
found under PREFIX: a program fails with a KeyError and gets the notice, the replay
line runs the corrected program, and the kernel imported ptc_retry from the venv.
Exits non-zero, saying what differed.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

KERNEL = "ptc-retry"

# Long enough to get the notice (PtcRetry.notice_min_bytes is 200 by default).
PROGRAM = """\
orders = [
    {"month": "2024-01", "customer": "acme", "unit_price": 12.50, "quantity": 4},
    {"month": "2024-01", "customer": "globex", "unit_price": 3.20, "quantity": 10},
    {"month": "2024-02", "customer": "acme", "unit_price": 12.50, "quantity": 2},
    {"month": "2024-02", "customer": "initech", "unit_price": 40.00, "quantity": 1},
    {"month": "2024-03", "customer": "globex", "unit_price": 3.20, "quantity": 30},
]
revenue = {}
for row in orders:
    amount = row["unit_prcie"] * row["quantity"]
    revenue[row["month"]] = revenue.get(row["month"], 0.0) + amount
best = max(revenue, key=revenue.get)
print(f"best month {best}: {revenue[best]:.2f} of {sum(revenue.values()):.2f}")
"""
REPLAY = """await ptc_retry.replay("#1", 'row["unit_prcie"]', 'row["unit_price"]')"""
FIXED_OUTPUT = "best month 2024-03: 96.00 of 243.00\n"
NOTICE = "[ptc-retry] Saved as #1. Small fix? Send only:"
WHERE = "import ptc_retry, kernel_ext; print(ptc_retry.__file__); print(kernel_ext.__file__)"

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Mismatch(Exception):
    """What the installed kernel did differs from what a user is promised."""


def run(client: Any, code: str) -> tuple[dict[str, Any], str, list[str]]:
    """Execute ``code``: the reply content, its stdout, the traceback lines (ANSI removed)."""
    stdout: list[str] = []
    traceback: list[str] = []

    def output(msg: dict[str, Any]) -> None:
        content = msg["content"]
        if msg["msg_type"] == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif msg["msg_type"] == "error":
            traceback.extend(ANSI.sub("", line) for line in content["traceback"])

    reply = client.execute_interactive(code, output_hook=output, timeout=60)
    return reply["content"], "".join(stdout), traceback


def check(prefix: Path) -> None:
    specs = KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
    spec = specs.get_kernel_spec(KERNEL)
    if Path(sys.prefix) not in Path(spec.argv[0]).parents:
        raise Mismatch(f"the kernelspec starts {spec.argv[0]}, not a Python of {sys.prefix}")

    manager = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)

        reply, _, traceback = run(client, PROGRAM)
        if reply["status"] != "error" or reply.get("ename") != "KeyError":
            raise Mismatch(f"the program should fail with a KeyError, got {reply}")
        # The notice is the traceback's last two lines: its sentence, then the call to send.
        said, call = "\n".join(traceback).strip().splitlines()[-2:]
        if said != NOTICE or not call.startswith('await ptc_retry.replay("#1", '):
            raise Mismatch(f"the traceback should end with the notice, not {said!r} {call!r}")
        print(f"failed with the notice: {said} {call}")

        reply, stdout, traceback = run(client, REPLAY)
        if reply["status"] != "ok" or stdout != FIXED_OUTPUT:
            raise Mismatch(f"the replay printed {stdout!r} ({reply['status']}) {traceback}")
        print(f"replayed: {stdout.strip()}")

        _, stdout, traceback = run(client, WHERE)
        site_packages = Path(sysconfig.get_paths()["purelib"])
        modules = stdout.splitlines()
        if len(modules) != 2 or traceback:
            raise Mismatch(f"the kernel could not say where it imported from: {traceback}")
        for module in modules:
            if site_packages not in Path(module).parents:
                raise Mismatch(f"the kernel imported {module}, not from {site_packages}")
        print(f"imported from {site_packages}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        check(Path(argv[0]))
    except Mismatch as error:
        print(f"installed kernel: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
