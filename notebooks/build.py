"""Write the demo notebooks (without outputs); ``execute.py`` runs them and stores the outputs.

    python notebooks/build.py            # rewrite the .ipynb files, outputs empty
    python notebooks/execute.py          # run them top to bottom and store the outputs

The notebooks are generated so their text lives in one reviewable place. Cells
meant to fail carry the ``raises-exception`` tag, which nbclient honours. The
references written in the cells (``#1``, ``#3``) are the numbers the kernel gives
its calls when a notebook runs top to bottom in a fresh kernel: a changed cell
order shows up as a ReplayError when the notebook is executed. The call ids a
scripted backend sends are shaped like real ones (``call_`` and 24 characters),
so the outputs show what a notice costs with them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat
from nbformat import v4

HERE = Path(__file__).resolve().parent
FAILS = ["raises-exception"]

PTC_KERNEL = {"name": "ptc-retry", "display_name": "Python 3 (ptc-retry)", "language": "python"}
STOCK_KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def notebook(slug: str, kernel: dict[str, str], cells: list[tuple[str, str, list[str]]]) -> Any:
    """A v4 notebook of (kind, source, tags) cells, with stable cell ids."""
    built = []
    for n, (kind, source, tags) in enumerate(cells, 1):
        cell = v4.new_markdown_cell(source) if kind == "md" else v4.new_code_cell(source)
        cell.id = f"{slug}-{n:02d}"
        if tags:
            cell.metadata["tags"] = list(tags)
        built.append(cell)
    nb = v4.new_notebook(cells=built)
    nb.metadata["kernelspec"] = dict(kernel)
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def md(text: str) -> tuple[str, str, list[str]]:
    return ("md", text.strip("\n"), [])


def code(text: str, tags: list[str] | None = None) -> tuple[str, str, list[str]]:
    return ("code", text.strip("\n"), tags or [])


# -- 01: quickstart ---------------------------------------------------------------------------

QUICKSTART = [
    md("""
# ptc-retry in one notebook

A code-mode agent answers by writing whole programs, and a kernel runs each one. When
a long program fails on one small mistake, the model re-sends all of it. With
ptc-retry the kernel keeps every program it runs, and a failed program's traceback
ends with a short **notice**: the program's reference, and the one line that
fixes it. Here we play the model by hand, in the stock `python3` kernel.
"""),
    md("Load the extension. From now on every cell is saved before it runs."),
    code("%load_ext ptc_retry"),
    md("""
## A program that fails

One wrong key: `"regoin"`. Its traceback ends with the notice: the program's
reference, `#1` (the first program of this session), and the helper call to send,
with two placeholders for the fix.
"""),
    code(
        """
import statistics

orders = [
    {"id": 1, "region": "north", "amount": 120.5, "items": 3},
    {"id": 2, "region": "south", "amount": 80.0, "items": 1},
    {"id": 3, "region": "north", "amount": 42.25, "items": 2},
    {"id": 4, "region": "east", "amount": 310.0, "items": 7},
]


def totals_by_region(rows):
    totals = {}
    for row in rows:
        key = row["regoin"]
        totals[key] = round(totals.get(key, 0) + row["amount"], 2)
    return totals


summary = totals_by_region(orders)
print("regions:", sorted(summary))
print(f"mean order: {statistics.mean(o['amount'] for o in orders):.2f}")
summary
""",
        FAILS,
    ),
    md("""
## The replay

Instead of the whole program, one line: the helper reads program `#1`, replaces the
text (which must occur exactly once), and runs the corrected program again in this
kernel. Its output and value are the corrected program's.
"""),
    code("""await ptc_retry.replay("#1", 'row["regoin"]', 'row["region"]')"""),
    md("What the fix cost, in the bytes a model would have sent:"),
    code(
        """
program, line = In[2], In[3]  # the cells as they were sent
print(f"re-send: {len(program.encode()):,} bytes; replay: {len(line.encode())} bytes")
"""
    ),
    md("""
## What the kernel kept

`%ptc_history` lists the calls of this session: each one's reference (`ref`), its
call id (`c1`, `c2`, ... here, where no backend sends ids) and its status; the
replay names the call it replayed. `%ptc_show #2` prints what the replay saved: the
corrected program, so a second fix edits it, not the one-line loader. Cells that
only run these magics are not calls: they take no number.
"""),
    code("%ptc_history"),
    code("%ptc_show #2"),
    md("""
Programs run the same with or without ptc-retry: `%unload_ext ptc_retry` removes
every hook. To have it in every session, start the `ptc-retry` kernel
(`ptc-retry install-kernel --user`) or add `c.InteractiveShellApp.extensions =
["ptc_retry"]` to `ipython_config.py`.
"""),
]

# -- 02: agent loop ---------------------------------------------------------------------------

AGENT_PROGRAM = '''\
import csv
import io
from collections import defaultdict

RAW = """order_id,date,region,product,units,unit_price
1001,2024-01-03,North,widget,4,2.50
1002,2024-01-05,South,gadget,1,12.00
1003,2024-02-11,East,widget,10,2.50
1004,2024-02-14,South,gizmo,3,7.25
1005,2024-03-02,North,widget,6,2.40
1006,2024-03-15,South,gadget,5,11.50
"""


def revenue(row):
    return int(row["units"]) * float(row["unit_prcie"])


by_region = defaultdict(float)
by_month = defaultdict(float)
for row in csv.DictReader(io.StringIO(RAW)):
    by_region[row["region"]] += revenue(row)
    by_month[row["date"][:7]] += revenue(row)

for region, total in sorted(by_region.items(), key=lambda item: -item[1]):
    print(f"{region:<6} {total:8.2f}")
best = max(by_month, key=by_month.get)
{"best_month": best, "revenue": round(sum(by_region.values()), 2)}
'''

# The scripted model of the agent-loop notebooks (02, 05): it plays the LLM.
SCRIPTED_MODEL = """\
class ScriptedModel:
    \"\"\"Stands in for an LLM: first the program, then what the notice teaches.\"\"\"

    def __init__(self, program, fix):
        self.program, self.fix = program, fix

    def next_call(self, tool_result):
        if tool_result is None:
            return {"code": self.program}
        reference = parse_notice(tool_result)  # "#1", or None
        if reference is None:
            return None  # a result without a notice: the task is done
        target, (old, new) = json.dumps(reference), self.fix
        return {"code": f"await ptc_retry.replay({target}, {old!r}, {new!r})"}
"""

AGENT_LOOP = [
    md("""
# An agent loop on `KernelBackend`

`ptc_retry.backend.KernelBackend` starts its own `ptc-retry` kernel and gives an
agent loop what it needs: the system-prompt section, the `run_code` tool
definition, and `handle_tool_call`, which runs the model's call and returns the
text the model reads next. There is no model here and no key: a scripted model
writes one program with a typo, then does what the notice says.
"""),
    code(
        """
import json
import random
import string

from ptc_retry import parse_notice
from ptc_retry.backend import KernelBackend

id_source = random.Random(2024)  # seeded, so the ids are the same on every run


def new_call_id():
    \"\"\"A tool-call id shaped like the ones a model API sends: call_ and 24 characters.\"\"\"
    return "call_" + "".join(id_source.choices(string.ascii_letters + string.digits, k=24))


kb = KernelBackend(
    session_id="agent-loop",
    # Keep the kernel's own startup warnings out of this notebook.
    extra_arguments=["--IPKernelApp.log_level=ERROR"],
    env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
)
await kb.start()
kb
"""
    ),
    md("""
## What the model is given

The prompt section goes into the system prompt, once; it is the same bytes for the
whole session, so it never breaks a prompt cache. The tool is a plain `run_code`.
"""),
    code("print(kb.system_prompt())"),
    code('print(json.dumps(kb.tool_schema("openai"), indent=2))'),
    md("""
## The scripted model

It writes the program first. When the text it reads holds a notice, it takes the
program's reference (`"#1"`) from it with `parse_notice` and sends one line instead
of the program; when a result has no notice, it is done.
"""),
    code("PROGRAM = '''\\\n" + AGENT_PROGRAM + "'''\n\n\n" + SCRIPTED_MODEL),
    md("""
## The loop

Each tool call's arguments go to `handle_tool_call` exactly as the model sent them
(the raw JSON string, saved byte for byte), with the model's own call id. The notice
does not repeat that id: it calls the program `#1`, a few tokens whatever the id.
"""),
    code(
        """
model = ScriptedModel(PROGRAM, ('row["unit_prcie"]', 'row["unit_price"]'))
kb.new_turn()  # the user's instruction arrives
tool_result = None
sent = []  # the call ids, in order
for _ in range(4):
    arguments = model.next_call(tool_result)
    if arguments is None:
        break
    raw = json.dumps(arguments)
    sent.append(new_call_id())
    shown = arguments["code"] if len(raw) < 300 else arguments["code"][:240] + "\\n[...]"
    print(f"=== the model calls run_code ({sent[-1]}, {len(raw):,} bytes)\\n{shown}\\n")
    tool_result = await kb.handle_tool_call("run_code", raw, sent[-1])
    print(f"=== the model reads ({kb.last_result.status})\\n{tool_result}\\n")
"""
    ),
    md("""
A call id names a program as well as its reference does: a model that would rather
copy the id from its own transcript can. The same fix, sent with the first call's id:
"""),
    code(
        """
old, new = model.fix
line = f"await ptc_retry.replay({json.dumps(sent[0])}, {old!r}, {new!r})"
print(line)
print(await kb.handle_tool_call("run_code", json.dumps({"code": line}), new_call_id()))
"""
    ),
    md("""
`kb.last_result` keeps the whole `RunResult` of the latest call: its status, value,
reference, checkpoint, and the outputs as nbformat dicts. The session's
`history.jsonl` numbers the calls and says which call each replay replayed; once a
notice named program 1, it is also at `calls/1.json`, for a model without the helper.
"""),
    code(
        """
result = kb.last_result
print(result.status, result.reference, result.call_id)
for line in (kb.session_dir / "history.jsonl").read_text().splitlines():
    entry = json.loads(line)
    print(f"#{entry['n']}", entry["id"], entry["status"], entry.get("replay_of") or "")
print(sorted(path.name for path in (kb.session_dir / "calls").iterdir()))
"""
    ),
    md("""
## A call cut off mid-stream

When a model's stream stops part-way (an output-token limit, a dropped connection),
the loop hands what arrived to `handle_partial_tool_call` instead of asking for the
whole call again. Nothing runs: the model reads where its program stops, here in the
middle of a name, and its next call sends only the rest, which `ptc_retry.extend`
appends before it runs the whole program.
"""),
    code(
        """
fixed = PROGRAM.replace(*model.fix)  # the model writes the whole program...
written = fixed[:600]  # ...and its stream stops after 600 characters of it
arrived = json.dumps({"code": written})[:-2]  # the arguments so far: no closing "}
whole = len(json.dumps({"code": fixed}))
print(f"=== the stream of run_code stops after {len(arrived):,} of {whole:,} bytes")
text = await kb.handle_partial_tool_call("run_code", arrived, new_call_id())
print(f"=== the model reads ({kb.last_result.status})\\n{text}\\n")
rest = fixed[len(written) :]
line = f"await ptc_retry.extend({json.dumps(parse_notice(text))}, {rest!r})"
raw = json.dumps({"code": line})
print(f"=== the model calls run_code ({len(raw):,} bytes)\\n{line[:150]} [...]\\n")
text = await kb.handle_tool_call("run_code", raw, new_call_id())
print(f"=== the model reads ({kb.last_result.status})\\n{text}")
"""
    ),
    code("await kb.shutdown()  # stops the kernel and removes its session directory"),
]

# -- 03: guard, resume, time limit ------------------------------------------------------------

GUARD_PROGRAM = """\
import json

DEFAULTS = {"retries": 3, "timeout": 30, "verify_tls": True}
settings = '{"retries": 5, "timeout": 10, "region": "eu-west-1", "pool": 8}'


def load_config(text):
    config = dict(DEFAULTS)
    config.update(json.loads(text))
    if config["timeout"] > 60:
        raise ValueError("timeout must be at most 60 s")
    return config


config = load_config(settings)
print("connecting with", {key: config[key] for key in sorted(config)})
config["endpoint"]
"""

GUARD_AND_RESUME = [
    md("""
# The guard, resume, and the time limit

Three things ptc-retry does besides the replay: it notices an agent sending the same
failing program again and again, it resumes a program from the statement that
failed, and it stops a program that runs past its time limit, keeping its output.
"""),
    md("""
## The repeated-failure guard

A backend whose kernel runs with `--PtcRetry.guard_mode=pause`. A stubborn scripted
model ignores the notice and sends the same failing program four times, each time
with a fresh call id: the third identical failure's notice says so on a line of its
own, and the fourth program is not run (`RetryGuardPaused`). A new instruction from
the user (`kb.new_turn()`) lifts the pause. In `observe` mode, the default, the third
failure only says so.
"""),
    code(
        """
import json

from ptc_retry.backend import KernelBackend

# Tool-call ids shaped like the ones a model API sends: call_ and 24 characters.
CALL_IDS = [
    "call_i0VpEBOWfbZAVaBSo63bbH6x",
    "call_nAbnBEoonCrbZINl91huSS6A",
    "call_ZPsK20FKcpXzkIRPxBFWGyEb",
    "call_Tq4Wd8LmXc2RvN7yHk1sGa9B",
    "call_3fJhUe6QpZk0BoYw5CtLr8Dv",
]
kb = KernelBackend(
    session_id="guard",
    extra_arguments=["--PtcRetry.guard_mode=pause", "--IPKernelApp.log_level=ERROR"],
    env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
)
await kb.start()
PROGRAM = \"\"\"\\
"""
        + GUARD_PROGRAM
        + """\"\"\"
kb.new_turn()
for call_id in CALL_IDS[:4]:
    text = await kb.handle_tool_call("run_code", json.dumps({"code": PROGRAM}), call_id)
    lines = text.splitlines()
    # What the model reads after the traceback: the notice, or the refusal's last line.
    said = [line for line in lines if line.startswith(("[ptc-retry]", "await ptc_retry."))]
    tail = said or lines[-1:]
    print(f"{call_id}: {kb.last_result.status}")
    for line in tail:
        print("   ", line)
"""
    ),
    code(
        """
kb.new_turn()  # the user answers: programs run again
fixed = PROGRAM.replace('config["endpoint"]', 'config["region"]')
text = await kb.handle_tool_call("run_code", json.dumps({"code": fixed}), CALL_IDS[4])
print(kb.last_result.status, text)
await kb.shutdown()
"""
    ),
    md("""
## Resume after a slow step

This notebook runs in the `ptc-retry` kernel itself, so each of its cells is a
saved program (`#1`, `#2`, ... in order). The next cell computes for a few seconds,
then fails in its last statement. The notice's template then ends in `resume=True`:
the replay skips the statements that completed. It makes that offer only when the
program had run for `PtcRetry.resume_min_seconds` (1 s by default) before it
failed: for a quicker program, running the completed statements again costs
less than skipping them saves.
"""),
    code(
        """
import random
import time

started = time.perf_counter()
rng = random.Random(7)
samples = [sum(rng.random() for _ in range(12)) - 6 for _ in range(2_000_000)]  # the slow step
mean = sum(samples) / len(samples)
spread = (sum((x - mean) ** 2 for x in samples) / len(samples)) ** 0.5
print(f"{len(samples):,} samples in {time.perf_counter() - started:.1f} s")
print(f"range {min(samples):+.2f} to {max(samples):+.2f}")
f"mean {mean:+.3f}, spread {spread:.3f}, tail {sum(x > 2 for x in samples) / len(samples):.2%f}"
""",
        FAILS,
    ),
    md("""
The replay with `resume=True` starts at the failed statement: the samples are still
in the namespace, so it takes milliseconds instead of running the slow step again.
"""),
    code(
        """
started = time.perf_counter()
value = await ptc_retry.replay("#3", ":.2%f}", ":.2%}", resume=True)
print(f"fixed in {time.perf_counter() - started:.3f} s")
value
"""
    ),
    md("""
## The time limit

With `PtcRetry.time_limit` (or a backend's per-call `time_limit`), the kernel stops
its own program when the limit passes, keeps what it printed, and says so in the
notice, which offers to go on with `ptc_retry.resume`. Here the simulation's loop
count is far too high.
"""),
    code("%config PtcRetry.time_limit = 2"),
    code(
        """
def simulate(rounds, seed=11, threshold=1.2):
    \"\"\"The share of rounds in which two uniform draws add up to more than threshold.\"\"\"
    rng = random.Random(seed)
    wins = 0
    for _ in range(rounds):
        wins += rng.random() + rng.random() > threshold
    return wins / rounds


exact = (2 - 1.2) ** 2 / 2  # the closed form, to check the simulation against
baseline = sum(samples[:1000])  # already computed: a resume will not redo it
print("simulating ...")
share = simulate(rounds=500_000_000)
{"simulated": round(share, 3), "exact": round(exact, 3)}
""",
        FAILS,
    ),
    md("""
Going on as it is (`ptc_retry.resume("#6")`) would run the same loop again, so here
the fix is a replay that lowers the loop count; `resume=True` still skips the
statements that completed.
"""),
    code("""await ptc_retry.replay("#6", "rounds=500_000_000", "rounds=200_000", resume=True)"""),
    code("%config PtcRetry.time_limit = None"),
    code("%ptc_history"),
]

# -- 04: native mode ----------------------------------------------------------------------------

NOTES = """\
## ledger-api 2.4.0

### Added
- Reconciliation engine v2: matches bank statements against ledger entries in one pass,
  with partial matches reported instead of dropped.
- Strict currency checks: a batch that mixes currencies is rejected with the offending
  entry ids.
- Exports run asynchronously; poll /v2/exports/{id} or subscribe to export.finished.

### Changed
- The database pool doubles to 20 connections for the month-end peak.
- The statement timeout drops from 15 s to 10 s; long reports move to the export API.
- Log level warning by default: request logs move to the tracing pipeline.

### Fixed
- Duplicate webhook deliveries after a retry no longer book a transfer twice.
- Cursor pagination skipped an item when two entries shared a timestamp.
- The CSV export quoted numbers in some locales.
"""

NATIVE = [
    md("""
# Native mode: `editPreviousToolCalling`

An agent that calls tools directly pays for a whole retry when one long argument
holds one small mistake. `ptc_retry.native.NativeTools` journals every call's raw
arguments and adds one tool, `editPreviousToolCalling`: the model sends a small
patch and names the call; the tool re-runs it with the patched arguments.
"""),
    code(
        """
import datetime
import json
import re

from ptc_retry.native import NativeTools, ToolFailure

tools = NativeTools(session="native-demo")


@tools.register
def publish_release(version: str, date: str, notes: str) -> str:
    \"\"\"Publish release notes for a version on its release date (YYYY-MM-DD).\"\"\"
    if not re.fullmatch(r"\\d+\\.\\d+\\.\\d+", version):
        raise ToolFailure(f"version must look like 1.2.3, not {version!r}")
    day = datetime.date.fromisoformat(date)
    return f"published {version} on {day:%d %b %Y}: {len(notes.splitlines())} lines of notes"


print([d["function"]["name"] for d in tools.definitions("openai")])
print(tools.prompt_section())
"""
    ),
    md("""
## A small loop

The scripted model's first call has a long `notes` argument and a date with month 13.
It reads the failure and its notice, then patches the one field.
"""),
    code(
        'NOTES = """\\\n'
        + NOTES
        + '''"""

# Tool-call ids shaped like the ones a model API sends: call_ and 24 characters.
first_id, edit_id = "call_Xw2PbK7mQa9VtN4cRz1LhE5s", "call_Gd8sJy3NfU0oTq6WkB2xMe7R"
first = {"version": "2.4.0", "date": "2024-13-02", "notes": NOTES}
fix = {"call_id": first_id, "patch": [{"path": "date", "value": "2024-12-02"}]}
calls = [
    (first_id, "publish_release", json.dumps(first)),
    (edit_id, "editPreviousToolCalling", json.dumps(fix)),
]
for call_id, name, raw in calls:
    tools.journal.new_message()  # each call is one model message here
    result = await tools.invoke(name, raw, call_id)
    print(f"=== the model calls {name} ({call_id}, {len(raw):,} bytes)")
    print(f"=== it reads ({result.status}):\\n{result.text}\\n")
'''
    ),
    md("""
The retry cost the patch, not the arguments again. The journal holds both calls;
the edit's checkpoint holds the patched arguments, so a second fix would edit those.
"""),
    code(
        """
resend = len(json.dumps({**first, "date": "2024-12-02"}))
print(f"re-send: {resend:,} bytes; patch: {len(calls[1][2])} bytes")
for line in tools.journal.store.history():
    print(line["id"], line["tool"], line["status"], line.get("replay_of") or "")
patched = json.loads((tools.journal.session_dir / "by-id" / f"{edit_id}.json").read_text())
print(patched["date"], len(patched["notes"]))
"""
    ),
]

# -- 05: tools in programs --------------------------------------------------------------------

TOOLS_PROGRAM = """\
import asyncio

customers = ["acme", "globex"]
found = await asyncio.gather(*(tools.search_orders(customer=name) for name in customers))
late = {
    name: [order for order in orders if order["days_late"] > 7]
    for name, orders in zip(customers, found)
}
receipts = []
for name, orders in late.items():
    lines = [f"order {order['id']}: {order['days_late']} days late" for order in orders]
    receipt = await tools.send_email(
        to=f"billing@{name}.example", subject=f"late orders: {len(orders)}", body="; ".join(lines)
    )
    receipts.append(receipt)
due = sum(order["amount"] for orders in late.values() for order in orders)
{"emails": receipts, "late_orders": sum(map(len, late.values())), "due": round(dues, 2)}
"""

TOOLS_IN_PROGRAMS = [
    md("""
# Tools in programs: a replay that calls no tool again

In programmatic tool calling the model's program calls the agent's tools itself,
and only the program's output reaches the model. When such a program fails in its
last line, re-sending it calls every tool again: the queries, and the emails too.
With ptc-retry each tool call is recorded with the program that made it, and a replay
gets the recorded results of the calls that succeeded instead of making them again.
"""),
    md("""
## The agent's tools

Two plain functions of the agent's process, handed to `KernelBackend(tools=...)`:
`search_orders` is slow, `send_email` has a side effect. Both count their calls.
"""),
    code(
        """
import asyncio
import json
from collections import Counter

from ptc_retry import parse_notice
from ptc_retry.backend import KernelBackend

calls = Counter()  # how often the host ran each tool
sent_emails = []  # the side effect a retry must not repeat
ORDERS = {
    "acme": [
        {"id": 7001, "amount": 1250.0, "days_late": 12},
        {"id": 7002, "amount": 80.5, "days_late": 0},
        {"id": 7003, "amount": 310.25, "days_late": 9},
    ],
    "globex": [
        {"id": 8101, "amount": 99.9, "days_late": 30},
        {"id": 8102, "amount": 2400.0, "days_late": 3},
    ],
}


async def search_orders(customer: str) -> list:
    \"\"\"Find a customer's open orders.\"\"\"
    calls["search_orders"] += 1
    await asyncio.sleep(0.5)  # a slow API
    return ORDERS.get(customer, [])


def send_email(to: str, subject: str, body: str) -> str:
    \"\"\"Send an email; return its message id.\"\"\"
    calls["send_email"] += 1
    sent_emails.append({"to": to, "subject": subject})
    return f"msg-{len(sent_emails)}"


kb = KernelBackend(
    session_id="tools-in-programs",
    tools=[search_orders, send_email],
    extra_arguments=["--IPKernelApp.log_level=ERROR"],
    env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
)
await kb.start()
kb
"""
    ),
    md("""
The prompt section ends with one line a tool, and the `run_code` description names
them: the model knows what its programs can call.
"""),
    code(
        """
print(kb.system_prompt())
print(kb.tool_schema("openai")["function"]["description"])
"""
    ),
    md("""
## The loop

The scripted model of `02-agent-loop.ipynb`: its program searches two customers'
orders at once, emails each of them, then fails on a typo in its last line
(`dues`). The notice names the program `#1`; the model sends one line instead of
the program. After each call the host's counters show what ran.
"""),
    code("PROGRAM = '''\\\n" + TOOLS_PROGRAM + "'''\n\n\n" + SCRIPTED_MODEL),
    code(
        """
# Tool-call ids shaped like the ones a model API sends: call_ and 24 characters.
CALL_IDS = ["call_R4nT8vLq2WcX7bKe0YsHm3Jd", "call_p9GzA1uFk6NwE5oQc8VtSb2L"]
model = ScriptedModel(PROGRAM, ("round(dues, 2)", "round(due, 2)"))
kb.new_turn()  # the user's instruction arrives
tool_result = None
counts = []  # the host's counters after each call
for call_id in CALL_IDS:
    arguments = model.next_call(tool_result)
    raw = json.dumps(arguments)
    print(f"=== the model calls run_code ({call_id}, {len(raw):,} bytes)\\n{arguments['code']}\\n")
    tool_result = await kb.handle_tool_call("run_code", raw, call_id)
    print(f"=== the model reads ({kb.last_result.status})\\n{tool_result}\\n")
    counts.append(dict(calls))
    print(f"=== the host has run {counts[-1]}\\n")
print("done:", model.next_call(tool_result) is None)  # no notice left: the task is done
"""
    ),
    md("""
The replay called no tool: its four calls matched the recorded ones, in order, so
each got its recorded result, and one sentence before the value says so. Had the
edit changed a call's arguments, that call and every later one would have gone live;
`fresh=True` on `replay` makes every call live.
"""),
    code(
        """
after_program, after_replay = counts
print("after the program:", after_program)
print("after the replay: ", after_replay)
print("emails sent:", sent_emails)
"""
    ),
    md("""
## What the session kept

Each program's tool calls are lines of `tool-calls/<id>.jsonl` next to its
checkpoint, and its history line counts what was reused and what went live:
"""),
    code(
        """
for line in (kb.session_dir / "history.jsonl").read_text().splitlines():
    entry = json.loads(line)
    print(f"#{entry['n']}", entry["id"], entry["status"], entry.get("tool_calls"))
"""
    ),
    md("""
`%ptc_show` (and `ptc-retry show` in a shell) prints a program and then lists its
tool calls. Sent through the backend, it shows what the replay saved: the corrected
program, whose four calls all took the results recorded for the first one.
"""),
    code("""print((await kb.run_code("%ptc_show #2")).text)"""),
    code("await kb.shutdown()  # stops the kernel and removes its session directory"),
]

# -- 06: approvals ----------------------------------------------------------------------------

APPROVAL_PROGRAM = """\
import asyncio

customers = ["acme", "globex"]
found = await asyncio.gather(*(tools.search_orders(customer=c) for c in customers))
late = {c: [o for o in orders if o["days_late"] > 0] for c, orders in zip(customers, found)}
due = {c: round(sum(o["amount"] for o in orders), 2) for c, orders in late.items()}
print("late orders:", {c: len(orders) for c, orders in late.items()}, "due:", due)
receipt = await tools.send_email(
    to="billing@acme.example",
    subject=f"{len(late['acme'])} late orders",
    body=f"You owe {due['acme']:.2f} EUR.",
)
print("sent:", receipt, "| still here from before the pause:", due)
"""

APPROVALS = [
    md("""
# Approvals: a person decides before a program sends an email

A program the model writes may call tools a person must approve first: sending an
email, paying an invoice. With `register_tool(fn, approval=True)` the program stops
**before** such a call, with everything before it done and recorded. A person looks at
the call and approves (or denies) it, and the program goes on from the paused
statement, as `ptc_retry.resume` does: its variables are still there, recorded results
are reused, and the approved call runs once. Nothing is repeated.
"""),
    code(
        """
import asyncio
import json
from collections import Counter

from ptc_retry.backend import KernelBackend

calls = Counter()  # how often the host ran each tool
ORDERS = {
    "acme": [
        {"id": 7001, "amount": 1250.0, "days_late": 12},
        {"id": 7002, "amount": 80.5, "days_late": 0},
    ],
    "globex": [{"id": 8101, "amount": 99.9, "days_late": 30}],
}


async def search_orders(customer: str) -> list:
    \"\"\"Find a customer's open orders.\"\"\"
    calls["search_orders"] += 1
    await asyncio.sleep(0.3)  # a slow API
    return ORDERS.get(customer, [])


def send_email(to: str, subject: str, body: str) -> str:
    \"\"\"Send an email; return its message id.\"\"\"
    calls["send_email"] += 1
    return f"msg-{calls['send_email']}"


kb = KernelBackend(
    session_id="approvals",
    tools=[search_orders],
    extra_arguments=["--IPKernelApp.log_level=ERROR"],
    env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
)
kb.register_tool(send_email, approval=True)  # every email waits for a person
await kb.start()
print(kb.system_prompt().splitlines()[-1])  # the prompt marks the tool
"""
    ),
    md("""
## The model's program pauses before the email

The loop sends the model's program as usual. It searches two customers' orders (two
calls the host makes), computes what is due, and reaches `tools.send_email`: there it
stops. The model reads one line telling it not to send the program again.
"""),
    code(
        "PROGRAM = '''\\\n"
        + APPROVAL_PROGRAM
        + """'''
# A tool-call id shaped like the ones a model API sends: call_ and 24 characters.
raw = json.dumps({"code": PROGRAM})
text = await kb.handle_tool_call("run_code", raw, "call_A7pQ2sLm9XcV4bNe1YtHk8Jw")
print(f"=== the model reads ({kb.last_result.status})\\n{text}\\n")
print("=== the host has run", dict(calls))
"""
    ),
    md("""
## A person decides

`kb.pending_approvals()` lists what waits: the tool, the exact arguments, and the
program's reference. The decision lives on the host; nothing the program does can
make it. `kb.approve` goes on with the program and returns what the model reads next.
"""),
    code(
        """
for waiting in kb.pending_approvals():
    print(waiting.ref, waiting.tool, json.dumps(waiting.arguments))
result = await kb.approve(waiting.reference)
print(f"=== the model reads ({result.status})\\n{result.text}\\n")
print("=== the host has run", dict(calls))  # two searches in all, one email
"""
    ),
    md("""
## A denial

`kb.deny(reference, reason)` gives the program `ptc_retry.ToolDenied(reason)` at the
call. This program does not catch it, so it fails with the ordinary notice, and the
model can fix it with one line.
"""),
    code(
        """
second = PROGRAM.replace("billing@acme.example", "everyone@acme.example")
raw = json.dumps({"code": second})
await kb.handle_tool_call("run_code", raw, "call_R2kW8dNq5ZbT3mYe7LcHs1Gv")
(waiting,) = kb.pending_approvals()
print("waits:", waiting.ref, waiting.arguments["to"])
result = await kb.deny(waiting.reference, "not to everyone")
print(f"=== the model reads ({result.status})\\n{result.text}\\n")
print("=== the host has run", dict(calls))
"""
    ),
    md("""
## What the session kept

The history records each pause (`paused`, with the calls that wait) and each
continuation, which names the program it went on from (`replay_of`):
"""),
    code(
        """
for line in (kb.session_dir / "history.jsonl").read_text().splitlines():
    entry = json.loads(line)
    waits = [call["tool"] for call in entry.get("pending", [])]
    went_on_from = entry.get("replay_of", "")
    print(f"#{entry['n']}", entry["status"], went_on_from, waits or "", entry.get("tool_calls"))
"""
    ),
    code("await kb.shutdown()  # stops the kernel and removes its session directory"),
]

NOTEBOOKS = {
    "01-quickstart.ipynb": ("quickstart", STOCK_KERNEL, QUICKSTART),
    "02-agent-loop.ipynb": ("agent-loop", PTC_KERNEL, AGENT_LOOP),
    "03-guard-and-resume.ipynb": ("guard-and-resume", PTC_KERNEL, GUARD_AND_RESUME),
    "04-native-mode.ipynb": ("native-mode", PTC_KERNEL, NATIVE),
    "05-tools-in-programs.ipynb": ("tools-in-programs", PTC_KERNEL, TOOLS_IN_PROGRAMS),
    "06-approvals.ipynb": ("approvals", PTC_KERNEL, APPROVALS),
}


def build(directory: Path = HERE) -> list[Path]:
    """Write every notebook, without outputs, to ``directory``; return the paths."""
    paths = []
    for filename, (slug, kernel, cells) in NOTEBOOKS.items():
        nb = notebook(slug, kernel, cells)
        nbformat.validate(nb)
        path = directory / filename
        nbformat.write(nb, str(path))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(f"wrote {written}")
