"""What an approval costs: a pause before a tool call and the continuation after it, against
the same program run without approval.

    python benchmarks/approvals.py [--rounds 5] [--calls 10]

The program makes ``--calls`` host tool calls (``lookup``), then one call of ``send_email``,
then prints. Timed in one run on one local ptc-retry kernel, rounds interleaved:

- ``plain``: the program on a backend whose ``send_email`` needs no approval;
- ``pause``: the same program where ``send_email`` needs approval, up to its pause;
- ``approve``: ``kb.approve(reference)``, the continuation from the paused statement;
- ``pause + approve``: the two together, against ``plain``.

Also printed: the host calls each way made (the calls a re-run from the top would repeat,
against the continuation's). A script that prints figures, not a test: the numbers depend on
the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from typing import Any

from spread import ratios, spread

from ptc_retry.backend import KernelBackend

CALLS: Counter[str] = Counter()


def lookup(n: int) -> str:
    """The address of customer n."""
    CALLS["lookup"] += 1
    return f"customer-{n}@example.com"


def send_email(to: str, body: str) -> str:
    """Send an email."""
    CALLS["send_email"] += 1
    return f"sent to {to}"


def program(calls: int) -> str:
    return (
        f"addresses = [await tools.lookup(n=n) for n in range({calls})]\n"
        'sent = await tools.send_email(to=addresses[-1], body="Your invoice is due.")\n'
        "print(len(addresses), sent)\n"
    )


async def timed(call: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await call
    return result, time.perf_counter() - started


async def measure(rounds: int, calls: int, root: str) -> None:
    code = program(calls)
    plain = KernelBackend(root=root, tools=[lookup, send_email])
    guarded = KernelBackend(root=root, tools=[lookup])
    guarded.register_tool(send_email, approval=True)
    times: dict[str, list[float]] = {"plain": [], "pause": [], "approve": []}
    made: dict[str, Counter[str]] = {}
    async with plain, guarded:
        await plain.run_code(code)  # warm both kernels up
        paused = await guarded.run_code(code)
        await guarded.approve(paused.reference or "")
        for _ in range(rounds):
            CALLS.clear()
            result, seconds = await timed(plain.run_code(code))
            assert result.ok, result.text
            times["plain"].append(seconds)
            made["plain"] = Counter(CALLS)
            CALLS.clear()
            paused, seconds = await timed(guarded.run_code(code))
            assert paused.status == "paused", paused.text
            times["pause"].append(seconds)
            made["pause"] = Counter(CALLS)
            CALLS.clear()
            went_on, seconds = await timed(guarded.approve(paused.reference or ""))
            assert went_on is not None and went_on.ok, went_on and went_on.text
            times["approve"].append(seconds)
            made["approve"] = Counter(CALLS)
    both = [a + b for a, b in zip(times["pause"], times["approve"], strict=True)]
    print(f"{calls} tool calls before the pause, {rounds} rounds, one local kernel each way")
    for name, values in [*times.items(), ("pause + approve", both)]:
        print(f"  {name:16} {spread(values, 'ms', 1000, 1)}")
    print(f"  pause + approve / plain: {spread(ratios(both, times['plain']), 'x')}")
    print(f"  host calls, plain:        {dict(made['plain'])}")
    print(f"  host calls, pause:        {dict(made['pause'])}")
    print(
        f"  host calls, continuation: {dict(made['approve'])} (a re-run from the top: "
        f"{calls} lookups again)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(measure(options.rounds, options.calls, root))


if __name__ == "__main__":
    main()
