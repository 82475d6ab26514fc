"""An agent loop on the Anthropic Messages API and a ptc-retry kernel.

    pip install 'ptc-retry[anthropic]'
    ANTHROPIC_API_KEY=... python examples/anthropic_messages.py [--model M] [--base-url URL]

The model writes programs (``run_code``) that call ``tools.lookup_price`` on this host; a
failed one's ``tool_result`` ends with the notice (``is_error``), and the fix can be the
one-line replay. Each request's tokens are printed as the API reported them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from anthropic import AsyncAnthropic

from ptc_retry.backend import KernelBackend
from ptc_retry.integrations.anthropic import Messages

TASK = (
    "What do this week's orders cost in all? Orders: tea x2, milk x3, bread x1, milk x4. "
    "Look each price up with tools.lookup_price in one program, then answer with the total."
)
PRICES = {"tea": 3.0, "milk": 2.0, "bread": 4.5}


def lookup_price(item: str) -> float:
    """The price of one item, in EUR."""
    print(f"  host: lookup_price({item!r})")
    return PRICES[item]


async def run(model: str, base_url: str | None, max_steps: int) -> int:
    client = AsyncAnthropic(base_url=base_url)
    async with KernelBackend(tools=[lookup_price]) as kb:
        adapter = Messages(kb)
        system = "Answer by writing Python programs with run_code.\n" + kb.system_prompt()
        messages = [adapter.user(TASK)]
        for _ in range(max_steps):
            reply = await adapter.stream(
                client.messages.create,
                model=model,
                max_tokens=4096,
                system=system,
                messages=messages,
                tools=kb.tool_schemas("anthropic"),
            )
            step = await adapter.step(reply)
            messages += step.messages
            tokens = reply.tokens
            print(f"request: {tokens.input_tokens} in, {tokens.output_tokens} out", end="")
            print(f", {len(reply.resumes)} resumed" if reply.resumes else "")
            for result in step.results:
                last = (result.text.splitlines() or [""])[-1]
                print(f"  {result.call.id} [{result.status}]: {last}")
            if not step.results:
                print(f"answer: {reply.text}")
                return 0
    print(f"no answer after {max_steps} requests", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="claude-sonnet-4-5")
    parser.add_argument("--base-url", help="a compatible endpoint (default: Anthropic's)")
    parser.add_argument("--max-steps", type=int, default=6)
    args = parser.parse_args()
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("set ANTHROPIC_API_KEY to the endpoint's key", file=sys.stderr)
        return 2
    return asyncio.run(run(args.model, args.base_url, args.max_steps))


if __name__ == "__main__":
    sys.exit(main())
