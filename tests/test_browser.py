"""What a person sees in JupyterLab and Notebook 7, in a real browser on real servers: every
notice's call to send stays on one rendered line at 700 px and at 1280 px (with JupyterLab's
file browser open), and ``%ptc_show 1`` shows the program that ``replay(1, ...)`` then runs.

One JupyterLab and one Notebook 7 server for the module, each on a ``ptc-retry`` kernel, and
headless Debian Chromium driven by Playwright (``pip install 'ptc-retry[browser]'`` and
``apt-get install chromium``). Each front end runs one notebook at 700 px; its outputs are
then read again at 1280 px, where they wrap anew. With ``PTC_RETRY_SCREENSHOTS`` set to a
directory, each view is saved there as a PNG too (``docs/screenshots/retake.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .helpers import free_port, stop_process

pytest.importorskip("jupyterlab", reason="the browser test needs jupyterlab ('.[browser]')")
pytest.importorskip("notebook", reason="the browser test needs notebook 7 ('.[browser]')")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs playwright ('.[browser]')"
)
CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)"),
]

WIDTHS = (700, 1280)
HEIGHT = 860
#: Bounds of every wait, in seconds: each fails on its own, not on the runner's timeout.
SERVER_START = 60
CELL_DONE = 45

# Over notice_min_bytes; fails at once on a misspelt key.
ORDERS = """\
orders = [
    {"id": 1, "region": "north", "amount": 120.5},
    {"id": 2, "region": "south", "amount": 80.0},
    {"id": 3, "region": "north", "amount": 42.25},
]
totals = {}
for row in orders:
    totals[row["regoin"]] = totals.get(row["regoin"], 0) + row["amount"]
print(totals)
"""
# Over notice_min_bytes; its first statement takes over resume_min_seconds (1 s), so its
# failure is offered resume=True. It prints which program ran, for %ptc_show's check.
SLOW = """\
import time

def fetch_prices():
    time.sleep(1.2)  # stands for a slow download
    return {"apple": 1.25, "pear": 0.8, "plum": 2.1}

prices = fetch_prices()
basket = ["apple", "pear", "plum", "apple"]
print("the slow program, total", round(sum(prices[item] for item in basket), 2))
print("basket of", len(basket), prices["mango"])
"""
# Over notice_min_bytes; fails on a misspelt name. Fixed, it runs for a minute.
LONG = """\
import time

pages = []
for page in range(120):
    pages.append(page)
    print("page", page, flush=True)
    time.slep(0.5)  # stands for a slow call per page
print("done", len(pages), "pages")
"""
#: The notebook's cells: a failure (#1), programs up to #9, a failure offered resume=True
#: (#10), %ptc_show 1 (no program), replay(1, ...) (#11), a failure (#12) and its replay
#: (#13), which is interrupted once it prints; then the history table.
CELLS = [
    ORDERS,
    *(f"step_{n} = {n}" for n in range(2, 10)),
    SLOW,
    "%ptc_show 1",
    "await ptc_retry.replay(1, 'prices[\"mango\"]', '\"the fix\"')",
    LONG,
    'await ptc_retry.replay("#12", "time.slep", "time.sleep")',
    "%ptc_history",
]
#: The calls the notices offer, in order, as they must read whole.
OFFERED = [
    'await ptc_retry.replay("#1", "<old>", "<new>")',
    'await ptc_retry.replay("#10", "<old>", "<new>", resume=True)',
    'await ptc_retry.replay("#12", "<old>", "<new>")',
    'await ptc_retry.resume("#13")',
]

# Each text node under an output's <pre>, with where each line starts: the call to send is
# found in the text, and a Range over it gives one client rect per line box it spans.
CALL_LINE_BOXES = """
(call) => {
  const found = [];
  for (const pre of document.querySelectorAll('.jp-OutputArea-output pre')) {
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    const nodes = [];
    let text = '';
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      nodes.push([node, text.length]);
      text += node.data;
    }
    let at = text.indexOf(call);
    while (at !== -1) {
      const range = document.createRange();
      const place = (offset) => {
        for (let i = nodes.length - 1; i >= 0; i--) {
          if (nodes[i][1] <= offset) return [nodes[i][0], offset - nodes[i][1]];
        }
      };
      range.setStart(...place(at));
      range.setEnd(...place(at + call.length));
      const tops = new Set();
      for (const rect of range.getClientRects()) {
        if (rect.width > 0) tops.add(Math.round(rect.top));
      }
      found.push({lines: tops.size, width: pre.clientWidth});
      at = text.indexOf(call, at + 1);
    }
  }
  return found;
}
"""

# Each cell of the history table that holds text: how many line boxes that text takes.
TABLE_CELL_LINES = """
() => Array.from(document.querySelectorAll('.jp-OutputArea-output table td, ' +
                                           '.jp-OutputArea-output table th'))
  .filter((cell) => cell.textContent.trim())
  .map((cell) => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return new Set(Array.from(range.getClientRects(), (rect) => Math.round(rect.top))).size;
  })
"""


@dataclass
class Server:
    """A running Jupyter server (JupyterLab or Notebook 7) with one notebook to open."""

    front_end: str  # "jupyterlab" or "notebook", the module that runs it
    base: str
    token: str
    root: Path
    checkpoints: Path
    process: subprocess.Popen[bytes]

    def api(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(
            f"{self.base}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method == "POST" else None,
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None


def _write_notebook(path: Path) -> None:
    cells = [
        {"cell_type": "code", "id": f"cell-{n}", "metadata": {}, "source": source,
         "outputs": [], "execution_count": None}
        for n, source in enumerate(CELLS, 1)
    ]  # fmt: skip
    kernelspec = {"name": "ptc-retry", "display_name": "Python 3 (ptc-retry)", "language": "python"}
    notebook = {"cells": cells, "metadata": {"kernelspec": kernelspec}}
    path.write_text(json.dumps({**notebook, "nbformat": 4, "nbformat_minor": 5}), "utf-8")


def _start_server(module: str, tmp: Path) -> Server:
    """``python -m jupyterlab`` or ``python -m notebook`` on a free port, its kernels'
    checkpoints under ``tmp``; returned once its API answers."""
    root, checkpoints = tmp / "root", tmp / "checkpoints"
    root.mkdir()
    _write_notebook(root / "person.ipynb")
    token, port = secrets.token_hex(16), free_port()
    env = {**os.environ, "PTC_RETRY_ROOT": str(checkpoints)}
    env.pop("PTC_RETRY_SESSION", None)
    command = [sys.executable, "-m", module, "--no-browser", f"--port={port}",
               "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root}", "--allow-root"]  # fmt: skip
    log = (tmp / "server.log").open("wb")
    process = subprocess.Popen(command, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(module, f"http://127.0.0.1:{port}", token, root, checkpoints, process)
    deadline = time.monotonic() + SERVER_START
    while True:
        try:
            server.api("status")
            return server
        except OSError:
            assert process.poll() is None, (tmp / "server.log").read_text("utf-8", "replace")
            assert time.monotonic() < deadline, f"{module} did not start in {SERVER_START} s"
            time.sleep(0.3)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"],
        )  # fmt: skip
        yield launched
        launched.close()


@pytest.fixture(scope="module", params=["jupyterlab", "notebook"])
def server(
    request: pytest.FixtureRequest, jupyter_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    started = _start_server(request.param, tmp_path_factory.mktemp(request.param))
    yield started
    stop_process(started.process, 15)


@dataclass
class Views:
    """A front end's notebook after its cells ran: what each width showed."""

    front_end: str
    #: For each width: for each offered call, the line boxes of each time it shows.
    call_lines: dict[int, list[list[dict[str, int]]]]
    #: How many line boxes each cell of the history table took, in every view.
    table_lines: list[int]
    texts: list[str]
    history: list[dict[str, Any]]


@pytest.fixture(scope="module")
def views(server: Server, browser: Any) -> Views:
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": HEIGHT})
    try:
        return _run_notebook(page, server, server.front_end)
    finally:
        page.close()


def _open(page: Any, server: Server, front_end: str) -> None:
    # jupyter-collaboration (which the jupyter-mcp-server extra brings) asks what to do when
    # a document's sync is slow, as on a loaded machine: a person would keep waiting.
    slow_load = page.locator(".jp-Dialog", has_text="taking some time to load")
    page.add_locator_handler(
        slow_load, lambda dialog: dialog.get_by_role("button", name="Continue waiting").click()
    )
    where = "lab/tree" if front_end == "jupyterlab" else "notebooks"
    page.goto(f"{server.base}/{where}/person.ipynb?token={server.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=SERVER_START * 1000)
    _wait_for_kernel(server)


def _wait_for_kernel(server: Server) -> str:
    deadline = time.monotonic() + SERVER_START
    while True:
        try:
            kernels = server.api("kernels")
        except urllib.error.HTTPError as exc:
            # jupyter_server can answer 500 while the kernel it lists is still starting, as on a
            # loaded machine: ask again, and name the answer if it never changes.
            if exc.code < 500:
                raise
            kernels = f"HTTP {exc.code}"
        if isinstance(kernels, list) and kernels and kernels[0]["execution_state"] == "idle":
            return str(kernels[0]["id"])
        if time.monotonic() > deadline:
            log = (server.root.parent / "server.log").read_text("utf-8", "replace")[-3000:]
            pytest.fail(f"no idle kernel within {SERVER_START} s: {kernels}\n{log}")
        time.sleep(0.3)


def _wait_for_idle(page: Any, server: Server) -> None:
    """Until the kernel is idle, as the server reports its ``execution_state``, and the page
    shows no cell waiting to run (``[*]``): every output of what ran has reached the front
    end, so what the DOM holds is all there is. Then two animation frames, in which the
    front end lays out what it was given."""
    _wait_for_kernel(server)
    page.wait_for_function(
        """() => !Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'))
            .some((prompt) => prompt.innerText.includes('[*]'))""",
        timeout=CELL_DONE * 1000,
    )
    _settle(page)


def _settle(page: Any) -> None:
    """Two animation frames: the front end has laid out the last change (a new width, a
    sidebar shown or hidden) before the DOM is read."""
    page.evaluate(
        "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )


def _wait_for_cell(page: Any, index: int) -> None:
    """Until cell ``index`` ran: its prompt shows its execution count."""
    page.wait_for_function(
        """(index) => {
          const prompt = document.querySelectorAll('.jp-Notebook .jp-Cell .jp-InputPrompt')[index];
          return prompt && /\\[\\d+\\]/.test(prompt.innerText);
        }""",
        arg=index,
        timeout=CELL_DONE * 1000,
    )


def _wait_for_text(page: Any, text: str) -> None:
    page.wait_for_function(
        "(text) => document.querySelector('.jp-Notebook').innerText.includes(text)",
        arg=text,
        timeout=CELL_DONE * 1000,
    )


def _run_notebook(page: Any, server: Server, front_end: str) -> Views:
    _open(page, server, front_end)
    _set_file_browser(page, front_end, show=False)
    page.click(".jp-Notebook .jp-Cell .cm-content")
    page.keyboard.press("Escape")
    # One cell at a time, as a person runs them: a front end drops the queued cells after
    # an error.
    interrupted = len(CELLS) - 2
    for index in range(len(CELLS)):
        page.keyboard.press("Shift+Enter")
        if index == interrupted:
            _wait_for_text(page, "page 1")  # only the fixed program gets there
            server.api(f"kernels/{_wait_for_running(server)}/interrupt", method="POST")
        _wait_for_cell(page, index)
    _wait_for_idle(page, server)
    call_lines: dict[int, list[list[dict[str, int]]]] = {}
    table_lines: list[int] = []
    for width, file_browser in [(WIDTHS[0], False), (WIDTHS[0], True), (WIDTHS[1], True)]:
        page.set_viewport_size({"width": width, "height": HEIGHT})
        _set_file_browser(page, front_end, show=file_browser)
        _wait_for_idle(page, server)  # and the outputs wrap again
        table_lines += page.evaluate(TABLE_CELL_LINES)
        if file_browser and width == WIDTHS[0]:
            continue  # the narrowest view: for the history table only
        call_lines[width] = [page.evaluate(CALL_LINE_BOXES, call) for call in OFFERED]
        _screenshot(page, front_end, width)
    texts = page.eval_on_selector_all(
        ".jp-Notebook .jp-Cell", "(cells) => cells.map((cell) => cell.innerText)"
    )
    (history_file,) = server.checkpoints.glob("*/history.jsonl")
    lines = [json.loads(line) for line in history_file.read_text("utf-8").splitlines() if line]
    return Views(front_end, call_lines, table_lines, texts, lines)


def _wait_for_running(server: Server) -> str:
    (kernel,) = server.api("kernels")
    return str(kernel["id"])


def _set_file_browser(page: Any, front_end: str, *, show: bool) -> None:
    """Open or close JupyterLab's file browser in the left sidebar (Notebook 7 has none)."""
    if front_end != "jupyterlab":
        return
    tab = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="filebrowser"]')
    shown = "lm-mod-current" in (tab.get_attribute("class") or "")
    if shown != show:
        tab.click()
        _settle(page)


def _screenshot(page: Any, front_end: str, width: int) -> None:
    folder = os.environ.get("PTC_RETRY_SCREENSHOTS")
    if not folder:
        return
    news = page.get_by_role("button", name="No", exact=True)  # JupyterLab asks about news
    if news.count():
        news.first.click()
    notice = page.locator(".jp-OutputArea-output pre", has_text=OFFERED[1]).first
    notice.evaluate("(pre) => pre.scrollIntoView({block: 'center'})")
    _settle(page)
    page.screenshot(path=str(Path(folder) / f"{front_end}-{width}.png"))


# -- the checks ----------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_every_call_to_send_is_on_one_rendered_line(views: Views, width: int) -> None:
    for call, shown in zip(OFFERED, views.call_lines[width], strict=True):
        assert shown, f"{views.front_end} at {width} px shows no {call}"
        assert all(box["lines"] == 1 for box in shown), (views.front_end, width, call, shown)


def test_ptc_show_1_shows_the_program_replay_1_then_runs(views: Views) -> None:
    show, replay = views.texts[CELLS.index("%ptc_show 1")], views.texts[CELLS.index(CELLS[11])]
    slow = next(line for line in views.history if line.get("n") == 10)
    assert f"# #10 ({slow['id']}), what replay(1, ...) runs in the next cell" in show
    assert 'print("basket of", len(basket), prices["mango"])' in show
    assert "the slow program, total 5.4" in replay and "basket of 4 the fix" in replay
    replayed = next(line for line in views.history if line.get("n") == 11)
    assert replayed["replay_of"] == slow["id"]


def test_the_history_table_never_breaks_inside_a_cell(views: Views) -> None:
    # A header of 7 columns and 13 rows of at least 4 filled cells, in three views (700 px
    # with the file browser open too).
    assert len(views.table_lines) >= 3 * (7 + 13 * 4), views.table_lines
    assert set(views.table_lines) == {1}, views.table_lines
