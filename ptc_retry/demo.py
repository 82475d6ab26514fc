"""``ptc-retry demo``: a scripted agent fixes a failed program with a one-line replay.

No model, no key, no network: the "model" is a script, the kernel is real. The transcript
shows what the model sent and read, then what the retry cost against re-sending the
corrected program; ``save`` writes the session as a notebook that JupyterLab opens.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import textwrap
from pathlib import Path
from typing import Any

from jupyter_core.utils import run_sync

from .backend import BackendError, KernelBackend, KernelStartError, RunResult
from .core.errors import PtcRetryError
from .core.notice import parse_notice
from .core.session_files import read_history

TASK = "Report revenue by region and the best month from this CSV export."

# The program the scripted model writes. Its one mistake: "unit_prcie".
PROGRAM = '''\
import csv
import io
import statistics
from collections import defaultdict

RAW = """order_id,date,region,product,units,unit_price
1001,2024-01-03,North,widget,4,2.50
1002,2024-01-05, south ,gadget,1,12.00
1003,2024-01-09,North,gizmo,,7.25
1004,2024-02-11,East,widget,10,2.50
1005,2024-02-14,South,gizmo,3,7.25
1006,2024-02-20,east,gadget,2,12.00
1007,2024-03-02,North,widget,6,2.40
1008,2024-03-15,South,gadget,5,11.50
"""


def clean(row):
    """One tidy order, or None when the row has no units."""
    if not row["units"].strip():
        return None
    return {
        "month": row["date"][:7],
        "region": row["region"].strip().title(),
        "product": row["product"],
        "revenue": int(row["units"]) * float(row["unit_prcie"]),
    }


orders = [o for o in map(clean, csv.DictReader(io.StringIO(RAW))) if o is not None]
by_region = defaultdict(float)
by_month = defaultdict(float)
for order in orders:
    by_region[order["region"]] += order["revenue"]
    by_month[order["month"]] += order["revenue"]

print(f"{len(orders)} orders kept, 1 dropped (no units)")
for region, total in sorted(by_region.items(), key=lambda item: -item[1]):
    print(f"  {region:<6} {total:7.2f}")
best = max(by_month, key=by_month.get)
median = statistics.median(o["revenue"] for o in orders)
print(f"best month {best}: {by_month[best]:.2f}; median order {median:.2f}")
{"best_month": best, "revenue": round(sum(by_region.values()), 2)}
'''

FIX = ('row["unit_prcie"]', 'row["unit_price"]')
# Tool-call ids shaped like the ones a real model sends: the notice does not repeat them.
FIRST_ID = "call_Wd3kq0fJ2xLmN8pQ4rT6vY1z"
RETRY_ID = "call_Hn5sB8cXe2VtQ9mLr4KjZ7pA"
_WIDTH = 78


def estimate_tokens(n_bytes: int) -> int:
    """A rough token count: ``ceil(bytes / 4)``. An estimate, not a tokenizer."""
    return math.ceil(n_bytes / 4)


#: Exit codes: done, the demo did not complete, the checkpoint root cannot be used (as for
#: ``ptc-retry history``).
EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE_ROOT = 0, 1, 2


def run(root: str | Path | None = None, save: str | Path | None = None) -> int:
    """Play the scripted agent on a real kernel; 0 on success, else a one-line message on
    stderr and 2 when the checkpoint root cannot be used (unsafe, or not writable), 1
    otherwise.

    ``root``: the checkpoint root (default ``$PTC_RETRY_ROOT``, else the temp-dir one).
    ``save``: a path to write the session to as a notebook. The session's checkpoints
    are kept, and the transcript says where.
    """
    return run_sync(_play)(root, save)


async def _play(root: str | Path | None, save: str | Path | None) -> int:
    backend = KernelBackend(
        root=root,
        session_id=f"demo-{secrets.token_hex(3)}",
        # Keep the transcript readable: the kernel's own startup chatter is not the demo.
        env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    try:
        await backend.start()
    except KernelStartError as exc:
        print(f"ptc-retry demo: the kernel did not start: {exc}", file=sys.stderr)
        print(
            "Check that ipykernel is installed for this Python "
            f"({sys.executable} -m pip install ipykernel) and try again.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except BackendError as exc:  # the root cannot hold checkpoints: nothing was started
        print(f"ptc-retry demo: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE_ROOT
    try:
        return await _converse(backend, save)
    except PtcRetryError as exc:
        print(f"ptc-retry demo: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await backend.shutdown(keep=True)


async def _converse(backend: KernelBackend, save: str | Path | None) -> int:
    _title("ptc-retry demo: a scripted agent, a real kernel, no model and no network")
    print(f"kernel: {backend.kernel_name}    session: {backend.session_dir}")

    _section("system prompt section (added by the backend)")
    _block(_wrap(backend.system_prompt()))

    turn = backend.new_turn()
    _section(f"turn {turn}: the user asks")
    _block(TASK)

    first_raw = json.dumps({"code": PROGRAM})
    _section(f"the model calls run_code (id {FIRST_ID}, {len(first_raw.encode()):,} bytes)")
    _block(PROGRAM)
    first_text = await backend.handle_tool_call("run_code", first_raw, FIRST_ID)
    first = _last(backend)
    _section(f"the model reads (status: {first.status})")
    _block(first_text)
    if first.status != "error" or first.notice is None:
        print(f"ptc-retry demo: expected a failure with a notice, got {first.status}.")
        return EXIT_FAILED

    # The scripted model does what the notice says: it takes the reference, sends one line.
    target = parse_notice(first.notice)
    line = f"await ptc_retry.replay({json.dumps(target)}, {FIX[0]!r}, {FIX[1]!r})"
    retry_raw = json.dumps({"code": line})
    _section(f"the model calls run_code (id {RETRY_ID}, {len(retry_raw.encode()):,} bytes)")
    _block(line)
    retry_text = await backend.handle_tool_call("run_code", retry_raw, RETRY_ID)
    retry = _last(backend)
    _section(f"the model reads (status: {retry.status})")
    _block(retry_text)
    if retry.status != "ok":
        print(f"ptc-retry demo: the replay did not succeed ({retry.status}).")
        return EXIT_FAILED

    resend_raw = json.dumps({"code": PROGRAM.replace(*FIX)})
    summary = _summary(retry_raw, resend_raw, first.notice)
    _section("what the retry cost")
    _block(summary)
    _section("history.jsonl of this session")
    _block(_history(backend))
    print(f"\nThe checkpoints stay in {backend.session_dir}")
    print(f"(ptc-retry history --session {backend.session_id})")
    if save is not None:
        path = Path(save)
        _write_notebook(path, backend, first, retry, line, summary)
        print(f"Notebook written to {path}")
    return EXIT_OK


def _last(backend: KernelBackend) -> RunResult:
    result = backend.last_result
    assert result is not None  # handle_tool_call ran a program
    return result


def _summary(retry_raw: str, resend_raw: str, notice: str) -> str:
    from .tokens import load_tokenizer

    tokenizer = load_tokenizer()

    def count(text: str) -> int:
        tokens = tokenizer.count(text)
        return tokens if tokens is not None else estimate_tokens(len(text.encode()))

    if tokenizer.available:
        mark = ""
        how = f"tokens: {tokenizer.name}, of the tool-call arguments as JSON"
    else:
        mark = "~"
        how = (
            "tokens: an estimate, ceil(bytes / 4) of the tool-call arguments as JSON "
            "(pip install 'ptc-retry[eval]' counts them with cl100k_base)"
        )
    retry, resend = len(retry_raw.encode()), len(resend_raw.encode())
    saved = resend - retry
    saved_tokens = count(resend_raw) - count(retry_raw)
    rows = [
        ("retry by replay (one line)", retry, count(retry_raw), ""),
        ("retry by re-sending the program", resend, count(resend_raw), ""),
        ("saved", saved, saved_tokens, f" ({saved / resend:.0%})"),
        ("the notice, read once", len(notice.encode()), count(notice), ""),
    ]
    lines = [
        f"{label:<32} {size:>6,} bytes {mark + format(tokens, ','):>7} tokens{note}"
        for label, size, tokens, note in rows
    ]
    lines.append(how)
    return "\n".join(lines)


def _history(backend: KernelBackend) -> str:
    assert backend.session_dir is not None  # a local kernel's session is known from the start
    rows = []
    for line in read_history(backend.session_dir):
        extra = f"  replay of {line['replay_of']}" if line.get("replay_of") else ""
        ename = f"  {line['ename']}" if line.get("ename") else ""
        rows.append(f"{line.get('id')}: {line.get('status')}{ename}{extra}")
    return "\n".join(rows)


def _title(text: str) -> None:
    print(text)
    print("=" * min(len(text), _WIDTH))


def _section(text: str) -> None:
    print(f"\n-- {text} " + "-" * max(3, _WIDTH - len(text) - 4))


def _wrap(text: str) -> str:
    return "\n".join(textwrap.fill(line, _WIDTH - 4) for line in text.splitlines())


def _block(text: str) -> None:
    print(textwrap.indent(text.rstrip("\n"), "    ", lambda _: True))


def _write_notebook(
    path: Path,
    backend: KernelBackend,
    first: RunResult,
    retry: RunResult,
    line: str,
    summary: str,
) -> None:
    import nbformat
    from nbformat import v4

    from .kernelspec import DISPLAY_NAME, KERNEL_NAME

    def code_cell(source: str, result: RunResult, tags: list[str]) -> Any:
        cell = v4.new_code_cell(
            source,
            execution_count=result.execution_count,
            outputs=[nbformat.from_dict(output) for output in result.outputs],
        )
        cell.metadata["ptc_retry"] = {"call_id": result.call_id, "status": result.status}
        if tags:
            cell.metadata["tags"] = tags
        return cell

    fence = "```"
    cells = [
        v4.new_markdown_cell(
            "# ptc-retry demo\n\n"
            "A scripted agent (no model, no network) ran these programs on a real "
            f"`{backend.kernel_name}` kernel. The outputs are the kernel's own. The call ids "
            f"belong to the demo's session, `{backend.session_dir}`.\n\n**Task:** {TASK}"
        ),
        v4.new_markdown_cell(
            "## The system prompt section\n\nThe backend adds this to the system prompt:\n\n"
            f"{fence}text\n{backend.system_prompt().rstrip()}\n{fence}"
        ),
        v4.new_markdown_cell(
            "## The model's program\n\nIt sends a program of about forty lines with one "
            f"wrong literal, as tool call `{FIRST_ID}`:"
        ),
        code_cell(PROGRAM, first, ["raises-exception"]),
        v4.new_markdown_cell(
            "## The notice\n\nThe traceback ends with ptc-retry's notice, the call to send on a "
            "line of its own; the model "
            f"reads it:\n\n{fence}text\n{first.notice}\n{fence}\n\n"
            f"Instead of sending the whole program again, it sends one line (`{RETRY_ID}`):"
        ),
        code_cell(line, retry, []),
        v4.new_markdown_cell(f"## What the retry cost\n\n{fence}text\n{summary}\n{fence}"),
    ]
    notebook = v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {
        "name": KERNEL_NAME,
        "display_name": DISPLAY_NAME,
        "language": "python",
    }
    notebook.metadata["language_info"] = {"name": "python"}
    nbformat.validate(notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))
