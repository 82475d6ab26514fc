"""One fix's trace in Arize Phoenix, run locally, and a screenshot of it (docs/operators.md).

A program calls a host tool twice and a ``@ptc_retry.recorded`` function, and fails; the model
sends the one-line replay the notice offers, inside one span of the agent's turn. The
backend exports its spans over OTLP to Phoenix, and so does the kernel, set up by
``docs/otel_startup.py``; headless Chromium then takes the trace's page.

Run it from a venv of its own (Phoenix brings many packages; keep them out of the
project's), with the checkout on the path::

    python3 -m venv /tmp/phoenix
    /tmp/phoenix/bin/pip install arize-phoenix playwright opentelemetry-sdk \\
        opentelemetry-exporter-otlp-proto-http ipykernel jupyter_client nbformat
    apt-get install chromium
    PYTHONPATH=. /tmp/phoenix/bin/python benchmarks/phoenix_trace.py docs/images/phoenix-trace.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from ptc_retry.backend import KernelBackend, Telemetry

STARTUP = Path(__file__).resolve().parent.parent / "docs" / "otel_startup.py"
PROGRAM = """\
# A basket: each price comes from the shop's API (a host tool); the tax is added here.
@ptc_retry.recorded
def with_tax(amount, rate=0.2):
    return round(amount * (1 + rate), 2)

books = await tools.lookup(item="book")
pens = await tools.lookup(item="pen")
total = with_tax(books["price"] + pens["prcie"])
print(f"total {total}")
"""
FIX = ('pens["prcie"]', 'pens["price"]')
#: Chromium's flags for a headless run that reaches nothing but the local server.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def lookup(item: str) -> dict[str, Any]:
    """Look an item up in the shop."""
    return {"item": item, "price": 7}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_phoenix(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Phoenix on free loopback ports, its data in ``workdir``; (process, its URL)."""
    port = free_port()
    env = dict(
        os.environ,
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_WORKING_DIR=str(workdir),
        PHOENIX_TELEMETRY_ENABLED="false",
    )
    log = open(workdir / "phoenix.log", "wb")  # noqa: SIM115  (the server's, for its life)
    command = [sys.executable, "-m", "phoenix.server.main", "serve"]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"Phoenix did not answer within 120 s; see {workdir / 'phoenix.log'}")


async def fix_one_program(url: str, ipython: Path) -> str:
    """The failed program and its replay, in one span of the agent's turn; its trace id."""
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{url}/v1/traces")))
    kernel_env = {
        "IPYTHONDIR": str(ipython),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    backend = KernelBackend(
        tools=[lookup], telemetry=Telemetry(tracer_provider=provider), env=kernel_env
    )
    async with backend:
        with provider.get_tracer("agent").start_as_current_span("agent turn") as turn:
            await backend.run_code(PROGRAM, call_id="call_checkout")
            failed = backend.last_result
            assert failed is not None and failed.reference is not None, failed
            old, new = (json.dumps(text) for text in FIX)
            fix = f'await ptc_retry.replay("{failed.reference}", {old}, {new})'
            await backend.run_code(fix, call_id="call_fix")
            assert backend.last_result is not None and backend.last_result.ok
    provider.force_flush()  # the kernel sent its spans as it exited
    return f"{turn.get_span_context().trace_id:032x}"


def screenshot(url: str, trace_id: str, path: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_FLAGS
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        # Phoenix's first project ("default") has the id "Project:1", base64-encoded.
        page.goto(f"{url}/projects/UHJvamVjdDox/traces/{trace_id}", wait_until="networkidle")
        page.wait_for_timeout(2000)
        # The replay's span: its attributes show what it saved and reused.
        page.get_by_text("execute_tool run_code").nth(1).click()
        page.wait_for_timeout(3000)
        if not page.get_by_text("ptc_retry.bytes_saved").is_visible():
            page.get_by_text("Attributes", exact=True).last.click()  # the folded panel
            page.wait_for_timeout(1000)
        # Phoenix fades its panels in: without animations the page is taken as it ends.
        page.screenshot(path=str(path), animations="disabled")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("png", type=Path, help="where the screenshot goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        startup = work / "ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True)
        shutil.copy(STARTUP, startup / "00-otel.py")
        phoenix, url = start_phoenix(work)
        try:
            trace_id = asyncio.run(fix_one_program(url, work / "ipython"))
            time.sleep(2)  # Phoenix writes what it received
            screenshot(url, trace_id, args.png)
        finally:
            phoenix.terminate()
            phoenix.wait(30)
    print(f"trace {trace_id}: {args.png} ({args.png.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
