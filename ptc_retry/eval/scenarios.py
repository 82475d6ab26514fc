"""The evaluation corpus: agent programs, the mistake a model makes in each, and the fix.

Every :class:`Scenario` is one failed model message of a code-mode agent (a program of
about 150 B, 1 KB, 5 KB or 20 KB with one realistic mistake) and its correction; every
:class:`CutOff`, a long program whose call was cut off mid-stream. The big programs are
generated as agents write them, from fixed seeds, so the corpus is the same on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..core.edits import apply_edits

__all__ = [
    "APPROVALS",
    "CUT_OFFS",
    "QUICK",
    "QUICK_CUT_OFFS",
    "SCENARIOS",
    "SIZES",
    "ApprovalScenario",
    "CutOff",
    "Parallel",
    "Scenario",
    "by_name",
]

#: The size classes, smallest first, as the report names them.
SIZES = ("150 B", "1 KB", "5 KB", "20 KB")


@dataclass(frozen=True)
class Parallel:
    """A second program the model sends in the same message as the scenario's (the same
    step); it fails too, and the next message fixes both, each by its own reference."""

    program: str
    expected: str
    edits: tuple[tuple[str, str], ...]

    @property
    def corrected(self) -> str:
        return apply_edits(self.program, list(self.edits))


@dataclass(frozen=True)
class Scenario:
    """One failed program and its fix.

    The mistakes are the ones models make: a wrong literal, key, type or function name, a
    syntax or indentation slip, a stale fragment in a file edit, a fix needed in two
    places, a slow step before a failing last statement, a time limit, a program below
    the notice threshold, a failure that needs a rewrite. The value the corrected program
    must end with is known, so both arms of the evaluation are checked to reach it.

    ``edits``: the ``(old, new)`` pairs the model sends (one pair: the helper's
    ``old, new``; several: ``edits=[...]``). ``rewrite``: the corrected program when
    the fix is a rewrite: the model re-sends it in both arms. ``expected``: the
    ``repr`` of the value the corrected program ends with. ``resume``: the model adds
    ``resume=True`` (when the notice offers it). ``timeout``: the call's time limit
    in seconds. ``first_try``: a replay the model sends first whose fragment does not
    match exactly once; it reads the error and sends ``edits``. ``files``: files
    written to the kernel's working directory before the program runs.

    Around the failure: ``inspect``, a small program the model runs after reading the
    failure and before the fix, to look at the data (it must succeed); ``parallel``, a
    second failing program of the same message (:class:`Parallel`); ``restart``, the
    kernel restarts between the failure and the fix, so the fix runs the whole program
    again (no ``resume``); ``extra_keys``, keys the failed call's arguments carry beside
    ``"code"`` (the backend runs the program and names them; the fix leaves them out);
    ``tools``, the program calls the evaluation's host tools (:mod:`.host`) and fails after
    its last call, so a re-send makes every call again and a replay none.
    """

    name: str
    size: str
    shape: str
    program: str
    expected: str
    edits: tuple[tuple[str, str], ...] = ()
    rewrite: str | None = None
    resume: bool = False
    timeout: float | None = None
    first_try: tuple[tuple[str, str], ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    inspect: str | None = None
    parallel: Parallel | None = None
    restart: bool = False
    extra_keys: dict[str, str] = field(default_factory=dict)
    tools: bool = False

    @property
    def corrected(self) -> str:
        """The program the model would re-send: the rewrite, or the edits applied."""
        if self.rewrite is not None:
            return self.rewrite
        return apply_edits(self.program, list(self.edits))


@dataclass(frozen=True)
class CutOff:
    """A ``run_code`` call whose stream stopped part-way (an output-token limit, a dropped
    connection): ``at`` is the share of the call's JSON arguments that arrived, in
    characters. Its ``program`` has no mistake; ``expected`` is the ``repr`` of the value
    the whole program ends with."""

    name: str
    size: str
    program: str
    expected: str
    at: float


@dataclass(frozen=True)
class ApprovalScenario:
    """A program that calls the evaluation's host tools (:mod:`.host`) and then
    ``approved``, a tool that needs a person's approval: it pauses there, a person approves,
    and the program goes on. Without ptc-retry the loop runs it again from the top once
    approved; ``expected`` is the ``repr`` of the value it ends with either way."""

    name: str
    size: str
    program: str
    expected: str
    approved: str = "send_email"


# -- 150 B ------------------------------------------------------------------------------------

TINY_DATE = """\
from datetime import date, timedelta

start = date(2024, 2, 30)
sprints = [start + timedelta(weeks=2 * n) for n in range(4)]
print("sprint starts:", ", ".join(d.isoformat() for d in sprints))
sprints[-1].isoformat()
"""

TINY_MEDIAN = """\
import statistics
temps_c = [21.5, 23.0, 19.8, 22.4, 20.9]
statistics.median(temp_c)
"""

TINY_QUANTILES = """\
import statistics

latencies_ms = [112, 98, 143, 87, 120, 131, 99, 105, 160, 92]
cuts = statistics.quantile(latencies_ms, n=10)
print("p50:", cuts[4], "p90:", cuts[8])
cuts[8]
"""

# -- 1 KB -------------------------------------------------------------------------------------

REORDER = '''\
import json
import math

inventory = json.loads("""[
  {"sku": "A-100", "name": "hex bolt M6", "on_hand": 420, "daily_use": 38, "lead_days": 4},
  {"sku": "A-101", "name": "hex bolt M8", "on_hand": 75, "daily_use": 22, "lead_days": 6},
  {"sku": "B-210", "name": "washer 8mm", "on_hand": 1300, "daily_use": 95, "lead_days": 3},
  {"sku": "C-007", "name": "lock nut M8", "on_hand": 64, "daily_use": 18, "lead_days": 9},
  {"sku": "D-330", "name": "cable tie 200", "on_hand": 900, "daily_use": 140, "lead_days": 5}
]""")

SAFETY_DAYS = 3
PACK_SIZE = 50


def reorder_point(item):
    """Stock level at which to order: use over the lead time plus a safety buffer."""
    return item["daily_use"] * (item["lead_day"] + SAFETY_DAYS)


def order_quantity(item, cover_days=14):
    """Units to order, in whole packs, to cover `cover_days` after the order arrives."""
    needed = item["daily_use"] * cover_days + reorder_point(item) - item["on_hand"]
    return max(0, math.ceil(needed / PACK_SIZE) * PACK_SIZE)


orders = []
for item in inventory:
    if item["on_hand"] <= reorder_point(item):
        orders.append((item["sku"], order_quantity(item)))

for sku, qty in orders:
    print(f"order {qty:>5} x {sku}")
print(f"{len(orders)} of {len(inventory)} items need an order")
orders
'''

RETRY_BUDGET = """\
import random

settings = {
    "base_url": "https://api.example.com/v2",
    "timeout_s": "30",
    "max_retries": 5,
    "backoff_base_s": 0.5,
    "backoff_cap_s": 20,
    "jitter": 0.1,
}


def backoff_schedule(cfg, seed=7):
    \"\"\"Sleep before each retry: exponential, capped, with a deterministic jitter.\"\"\"
    rng = random.Random(seed)
    delays = []
    for attempt in range(cfg["max_retries"]):
        delay = min(cfg["backoff_cap_s"], cfg["backoff_base_s"] * 2**attempt)
        delay *= 1 + rng.uniform(-cfg["jitter"], cfg["jitter"])
        delays.append(round(delay, 3))
    return delays


def worst_case_seconds(cfg):
    \"\"\"How long a request can take before it gives up: every attempt times out.\"\"\"
    attempts = cfg["max_retries"] + 1
    return attempts * cfg["timeout_s"] + sum(backoff_schedule(cfg))


delays = backoff_schedule(settings)
print("retry delays:", delays)
budget = worst_case_seconds(settings)
print(f"worst case: {budget:.1f} s for {settings['base_url']}")
if budget > 300:
    raise RuntimeError("the retry budget is above the 5-minute job limit")
round(budget, 1)
"""

SURVEY = '''\
import csv
import io
from collections import Counter

SURVEY = """respondent,team,tool,satisfaction
r01,platform,pytest,5
r02,platform,tox,3
r03,data,pytest,4
r04,data,nox,4
r05,web,pytest,5
r06,web,tox,2
r07,mobile,pytest,4
r08,mobile,nox,5
r09,platform,nox,4
r10,data,pytest,3
r11,web,tox,3
r12,mobile,pytest,5
"""

rows = list(csv.DictReader(io.StringIO(SURVEY)))
by_tool = Counter(row["tool"] for row in rows)
scores = {}
for row in rows:
    scores.setdefault(row["tool"], []).append(int(row["satisfaction"]))

print(f"{'tool':<8} {'users':>5} {'score':>5}")
for tool, count in by_tool.most_common():
    avg = sum(scores[tool]) / len(scores[tool])
    print(f"{tool:<8} {count:>5} {avg:>5.2f}"
teams = sorted({row["team"] for row in rows})
print("teams:", ", ".join(teams))
{tool: round(sum(s) / len(s), 2) for tool, s in sorted(scores.items())}
'''

LEDGER = """\
from collections import defaultdict

transactions = [
    {"id": "t1", "account": "ops", "currency": "EUR", "amount_cents": 12500, "status": "settled"},
    {"id": "t2", "account": "ops", "currency": "EUR", "amount_cents": -4300, "status": "settled"},
    {"id": "t3", "account": "rnd", "currency": "USD", "amount_cents": 99900, "status": "pending"},
    {"id": "t4", "account": "rnd", "currency": "USD", "amount_cents": 15000, "status": "settled"},
    {"id": "t5", "account": "ops", "currency": "USD", "amount_cents": 2750, "status": "settled"},
    {"id": "t6", "account": "mkt", "currency": "EUR", "amount_cents": 60000, "status": "settled"},
]
FEE_RATE = {"EUR": 0.014, "USD": 0.029}


def summarize(rows):
    \"\"\"Settled net amount and card fees per (account, currency), in cents.\"\"\"
    totals = defaultdict(int)
    fees = defaultdict(int)
    for tx in rows:
        if tx["status"] != "settled":
            continue
        key = (tx["account"], tx["currency"])
        totals[key] += tx["amount_cents"]
       fees[key] += round(abs(tx["amount_cents"]) * FEE_RATE[tx["currency"]])
    return {key: (totals[key], fees[key]) for key in sorted(totals)}


summary = summarize(transactions)
for (account, currency), (net, fee) in summary.items():
    print(f"{account:<4} {currency} net {net / 100:>9.2f} fees {fee / 100:>6.2f}")
sum(fee for _, fee in summary.values())
"""

THREAD = """\
# A support thread exported as nested replies: each message holds the reply to it.
def build_thread(n):
    root = {"id": 0, "author": "customer", "text": "Checkout fails with 502", "reply": None}
    node = root
    for i in range(1, n):
        author = "agent" if i % 2 else "customer"
        node["reply"] = {"id": i, "author": author, "text": f"message {i}", "reply": None}
        node = node["reply"]
    return root


def count_by_author(message):
    counts = {message["author"]: 1}
    if message["reply"] is not None:
        for author, n in count_by_author(message["reply"]).items():
            counts[author] = counts.get(author, 0) + n
    return counts


def depth(message):
    return 1 + (depth(message["reply"]) if message["reply"] is not None else 0)


thread = build_thread(5000)
counts = count_by_author(thread)
print(f"{depth(thread)} messages: {counts}")
(counts["customer"], counts["agent"], depth(thread))
"""

THREAD_REWRITE = """\
from collections import Counter


# A support thread exported as nested replies: each message holds the reply to it.
def build_thread(n):
    root = {"id": 0, "author": "customer", "text": "Checkout fails with 502", "reply": None}
    node = root
    for i in range(1, n):
        author = "agent" if i % 2 else "customer"
        node["reply"] = {"id": i, "author": author, "text": f"message {i}", "reply": None}
        node = node["reply"]
    return root


def walk(message):
    \"\"\"Every message of the thread, in order, without recursion (threads run deep).\"\"\"
    while message is not None:
        yield message
        message = message["reply"]


thread = build_thread(5000)
counts = Counter(message["author"] for message in walk(thread))
length = sum(1 for _ in walk(thread))
print(f"{length} messages: {dict(counts)}")
(counts["customer"], counts["agent"], length)
"""

BACKOFF = """\
def backoff(base, factor, attempts, cap=120.0):
    \"\"\"Seconds to sleep before each retry: base * factor**n, capped.\"\"\"
    return [min(cap, base * factor**n) for n in range(attempts)]


# Each service's retries must fit in its request budget (seconds).
BUDGET_S = {"payments": 60, "search": 15, "emails": 600}

schedules = {
    "payments": backoff(base=0.5, factor=3, attempts=6),
    "search": backoff(base=0.25, factor=3, attempts=4),
    "emails": backoff(base=5, factor=2, attempts=8),
}

for name, delays in schedules.items():
    total = sum(delays)
    shown = ", ".join(f"{d:g}" for d in delays)
    print(f"{name:<9} {len(delays)} retries, {total:7.2f} s total: {shown}")
    if total > BUDGET_S[name]:
        raise ValueError(
            f"{name}: its retries wait {total:.1f} s, over the {BUDGET_S[name]} s budget"
        )

{name: round(sum(delays), 2) for name, delays in schedules.items()}
"""

# -- 1 KB: two programs of one message --------------------------------------------------------

DISK = '''\
DF = """\\
Filesystem      Size  Used Avail Use% Mounted on
/dev/nvme0n1p2  468G  391G   54G  88% /
tmpfs            16G  1.2G   15G   8% /dev/shm
/dev/nvme0n1p1  511M  6.1M  505M   2% /boot/efi
/dev/sdb1       1.8T  1.7T   98G  95% /data
/dev/sdc1       3.6T  1.1T  2.4T  31% /backup
overlay          98G   81G   17G  83% /var/lib/docker
"""
UNITS = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1, "T": 1024}
ALERT_AT = "85"


def gib(text):
    """'1.8T' -> 1843.2 (GiB)."""
    return float(text[:-1]) * UNITS[text[-1]]


mounts = []
for line in DF.splitlines()[1:]:
    fs, size, used, avail, pct, mount = line.split()
    mounts.append({"mount": mount, "size": gib(size), "avail": gib(avail), "use": int(pct[:-1])})

full = [m for m in mounts if m["use"] >= ALERT_AT]
for m in sorted(full, key=lambda m: -m["use"]):
    print(f"{m['mount']:<16} {m['use']:>3}% used, {m['avail']:7.1f} GiB free of {m['size']:.0f}")
print(f"{len(full)} of {len(mounts)} filesystems at {ALERT_AT}% or more")
sorted(m["mount"] for m in full)
'''

LOG_LEVELS = r'''import re
from collections import Counter, defaultdict

LOG = """\
2024-06-03T10:00:01Z api INFO request served path=/orders ms=41
2024-06-03T10:00:02Z api WARN slow query table=orders ms=1210
2024-06-03T10:00:02Z worker INFO job started id=8812
2024-06-03T10:00:05Z worker ERROR job failed id=8812 reason=timeout
2024-06-03T10:00:06Z api INFO request served path=/cart ms=38
2024-06-03T10:00:09Z billing ERROR card declined customer=c-311
2024-06-03T10:00:11Z worker INFO job started id=8813
2024-06-03T10:00:12Z api ERROR upstream 502 path=/pay
2024-06-03T10:00:15Z billing WARN retrying charge customer=c-311
2024-06-03T10:00:19Z worker INFO job done id=8813 ms=7020
"""
LINE = re.compile(r"^(?P<ts>\S+) (?P<service>\w+) (?P<level>[A-Z]+) (?P<message>.*)$")

levels = defaultdict(Counter)
errors = []
for line in LOG.splitlines():
    m = LINE.match(line)
    if m is None:
        continue
    levels[m.group("service")][m.group("lvl")] += 1
    if m.group("level") == "ERROR":
        errors.append((m.group("service"), m.group("message")))

for service, counts in sorted(levels.items()):
    print(f"{service:<8} " + "  ".join(f"{lvl} {n}" for lvl, n in counts.most_common()))
for service, message in errors:
    print(f"ERROR {service}: {message}")
{service: counts["ERROR"] for service, counts in sorted(levels.items())}
'''

# -- 1 KB: a stray key beside "code" ----------------------------------------------------------

TIMESHEET = """\
from collections import defaultdict
from datetime import datetime, timedelta

ENTRIES = [
    ("2024-06-03", "atlas", "09:00", "12:30", 15),
    ("2024-06-03", "billing-v2", "13:15", "17:45", 0),
    ("2024-06-04", "atlas", "08:45", "11:00", 10),
    ("2024-06-04", "internal", "11:00", "12:00", 0),
    ("2024-06-04", "billing-v2", "13:00", "18:10", 20),
    ("2024-06-05", "atlas", "09:10", "16:40", 45),
    ("2024-06-06", "billing-v2", "09:00", "13:20", 0),
    ("2024-06-06", "internal", "14:00", "15:30", 0),
    ("2024-06-07", "atlas", "10:00", "15:00", 30),
]
BILLABLE = {"atlas": 95, "billing-v2": 110}  # EUR per hour


def worked(day, start, end, break_min):
    begin = datetime.fromisoformat(f"{day}T{start}")
    finish = datetime.fromisoformat(f"{day}T{end}")
    return finish - begin - timedelta(minute=break_min)


hours = defaultdict(float)
for day, project, start, end, break_min in ENTRIES:
    hours[project] += worked(day, start, end, break_min).total_seconds() / 3600

invoice = {p: round(h * BILLABLE[p], 2) for p, h in hours.items() if p in BILLABLE}
for project, h in sorted(hours.items()):
    print(f"{project:<11} {h:5.2f} h  {invoice.get(project, 0):>9,.2f} EUR")
(round(sum(hours.values()), 2), invoice)
"""

# -- 5 KB -------------------------------------------------------------------------------------

_REGIONS = ["North", "South", "East", "West", "Central"]
_CHANNELS = ["web", "store", "partner"]
_PRODUCTS = [
    ("widget", 2.5),
    ("gadget", 12.0),
    ("gizmo", 7.25),
    ("sprocket", 4.8),
    ("doohickey", 19.9),
    ("flange", 3.15),
]


def _sales_csv(rows: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["order_id,order_date,region,channel,product,units,unit_price,discount_pct,returned"]
    for n in range(rows):
        product, price = rng.choice(_PRODUCTS)
        month, day = rng.randint(1, 6), rng.randint(1, 28)
        lines.append(
            f"{5001 + n},2024-{month:02d}-{day:02d},{rng.choice(_REGIONS)},"
            f"{rng.choice(_CHANNELS)},{product},{rng.randint(1, 40)},{price:.2f},"
            f"{rng.choice([0, 0, 0, 5, 10, 15])},{'yes' if rng.random() < 0.08 else 'no'}"
        )
    return "\n".join(lines) + "\n"


SALES = (
    'import csv\nimport io\nfrom collections import defaultdict\n\nRAW = """'
    + _sales_csv(44, seed=11)
    + '''"""


def parse(row):
    """One order with numbers as numbers; None for a returned order."""
    if row["returned"] == "yes":
        return None
    units = int(row["units"])
    gross = units * float(row["unit_price"])
    net = gross * (1 - float(row["discount"]) / 100)
    return {
        "id": int(row["order_id"]),
        "month": row["order_date"][:7],
        "region": row["region"],
        "channel": row["channel"],
        "product": row["product"],
        "units": units,
        "net": round(net, 2),
    }


def group_sum(orders, key, value="net"):
    totals = defaultdict(float)
    for order in orders:
        totals[order[key]] += order[value]
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def growth(by_month):
    """Month-over-month change of net revenue, as a fraction."""
    months = sorted(by_month)
    return {
        month: (by_month[month] - by_month[prev]) / by_month[prev]
        for prev, month in zip(months, months[1:])
        if by_month[prev]
    }


def table(title, totals, total):
    print(title)
    for name, amount in totals.items():
        share = amount / total if total else 0
        print(f"  {name:<10} {amount:>10,.2f}  {share:6.1%}  {'#' * round(share * 40)}")


orders = [o for o in map(parse, csv.DictReader(io.StringIO(RAW))) if o is not None]
total = sum(o["net"] for o in orders)
by_region = group_sum(orders, "region")
by_channel = group_sum(orders, "channel")
by_product = group_sum(orders, "product")
by_month = dict(sorted(group_sum(orders, "month").items()))
units_by_product = group_sum(orders, "product", value="units")

print(f"{len(orders)} orders kept, net revenue {total:,.2f}")
table("by region", by_region, total)
table("by channel", by_channel, total)
table("by product", by_product, total)
for month, change in growth(by_month).items():
    print(f"  {month}: {change:+.1%}")
best_product = max(units_by_product, key=units_by_product.get)
{
    "orders": len(orders),
    "net": round(total, 2),
    "top_region": next(iter(by_region)),
    "best_product_by_units": best_product,
}
'''
)

APP_TOML = """\
# Deployed by the platform team. Edit through a reviewed change only.
[app]
name = "ledger-api"
version = "2.3.1"
owner = "payments"
port = 8080
workers = 4

[database]
host = "db.internal"
port = 5432
name = "ledger"
pool_size = 10
pool_timeout_s = 30
statement_timeout_ms = 15000

[cache]
backend = "redis"
url = "redis://cache.internal:6379/2"
ttl_s = 300

[logging]
level = "info"
format = "json"
include_request_id = true

[features]
new_reconciliation = false
async_exports = true
strict_currency_check = false
"""

FILE_EDIT = r'''import difflib
from pathlib import Path

PATH = Path("deploy/app.toml")

OBSERVABILITY = """
[observability]
metrics_port = 9102
metrics_path = "/metrics"
tracing = "otlp"
otlp_endpoint = "http://otel-collector.internal:4317"
sample_ratio = 0.05
slow_request_ms = 750
health_path = "/healthz"
ready_path = "/readyz"
"""

RATE_LIMITS = """
[rate_limits]
default_per_minute = 600
burst = 120
exports_per_hour = 20
reconciliations_per_hour = 6
exempt_clients = ["batch-settlement", "audit-readonly"]
"""

# (old, new) fragment pairs for the 2.4.0 release. Each old fragment must be in the
# file exactly once: the release notes below were reviewed against these exact lines.
EDITS = [
    ('version = "2.3.0"', 'version = "2.4.0"'),
    ("workers = 4", "workers = 6"),
    ("pool_size = 10", "pool_size = 20"),
    ("statement_timeout_ms = 15000", "statement_timeout_ms = 10000"),
    ('level = "info"', 'level = "warning"'),
    ("new_reconciliation = false", "new_reconciliation = true"),
    ("strict_currency_check = false", "strict_currency_check = true"),
]

RELEASE_NOTES = """\
ledger-api 2.4.0
- the new reconciliation engine is on for every tenant
- strict currency checks reject mixed-currency batches
- twice the database pool for the month-end peak; shorter statement timeout
- metrics, traces and health endpoints under [observability]
- per-client rate limits under [rate_limits]
- log level warning: request logs move to the tracing pipeline
"""


def apply_fragment_edits(text, edits):
    """Apply (old, new) pairs; each old fragment must occur exactly once."""
    for old, new in edits:
        count = text.count(old)
        if count != 1:
            raise ValueError(
                f"{PATH}: expected the fragment {old!r} once, found it {count} times; "
                "the file changed since the edit was written"
            )
        text = text.replace(old, new)
    return text


def parse_sections(text):
    """A small TOML reader for this file: {section: {key: raw value}}."""
    sections, current = {}, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif "=" in line and current is not None:
            key, value = (part.strip() for part in line.split("=", 1))
            current[key] = value
    return sections


def check(sections):
    """The invariants the deploy pipeline enforces."""
    problems = []
    ports = [sections["app"]["port"], sections["observability"]["metrics_port"]]
    if len(set(ports)) != len(ports):
        problems.append("the metrics port clashes with the app port")
    if int(sections["database"]["pool_size"]) < int(sections["app"]["workers"]) * 2:
        problems.append("the pool must hold two connections per worker")
    ratio = float(sections["observability"]["sample_ratio"])
    if not 0 < ratio <= 1:
        problems.append("sample_ratio must be in (0, 1]")
    return problems


before = PATH.read_text()
after = apply_fragment_edits(before, EDITS)
after = after.rstrip("\n") + "\n" + OBSERVABILITY + RATE_LIMITS
sections = parse_sections(after)
problems = check(sections)
if problems:
    raise ValueError("; ".join(problems))
PATH.write_text(after)
Path("deploy/RELEASE_NOTES.txt").write_text(RELEASE_NOTES)

diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm=""))
added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
print(f"{PATH}: +{added} -{removed} lines, {len(sections)} sections")
(sections["app"]["version"], len(sections), added, removed)
'''

_PATHS = [
    "/api/v2/orders",
    "/api/v2/orders/5512",
    "/api/v2/invoices",
    "/api/v2/customers/88",
    "/static/app.js",
    "/static/app.css",
    "/healthz",
    "/api/v2/exports/latest",
]
_AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/125.0",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "Mozilla/5.0 (Macintosh) Safari/605.1.15",
]


def _access_log(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        ip = f"10.0.{rng.randint(0, 3)}.{rng.randint(2, 250)}"
        minute, second = rng.randint(0, 59), rng.randint(0, 59)
        method = rng.choice(["GET", "GET", "GET", "POST"])
        status = rng.choice([200, 200, 200, 200, 201, 304, 404, 500, 502])
        size = 0 if status == 304 else rng.randint(120, 48000)
        out.append(
            f'{ip} - - [12/Mar/2024:14:{minute:02d}:{second:02d} +0000] "{method} '
            f'{rng.choice(_PATHS)} HTTP/1.1" {status} {size} "-" "{rng.choice(_AGENTS)}"'
        )
    return "\n".join(out) + "\n"


ACCESS_LOG = (
    'import re\nfrom collections import Counter, defaultdict\n\nLOG = """'
    + _access_log(26, seed=5)
    + r'''"""

LINE = re.compile(
    r'(?P<ip>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>\S+) (?P<path>\S+) \S+" '
    r'(?P<status>\d{3}) (?P<bytes>\d+) "[^"]*" "(?P<agent>[^"]*)"'
)


def parse(line):
    m = LINE.match(line)
    if m is None:
        return None
    return {
        "ip": m.group("ip"),
        "minute": m.group("time")[12:17],
        "method": m.group("method"),
        "path": m.group("path").split("?")[0],
        "status": m.group("status"),
        "bytes": m.group("bytes"),
        "agent": m.group("agent"),
    }


def route(path):
    """Group ids away: /api/v2/orders/5512 -> /api/v2/orders/{id}."""
    return re.sub(r"/\d+", "/{id}", path)


entries = [e for e in map(parse, LOG.splitlines()) if e is not None]
errors = [e for e in entries if e["status"] >= 500]
not_found = Counter(route(e["path"]) for e in entries if e["status"] == 404)
traffic = defaultdict(int)
for e in entries:
    traffic[route(e["path"])] += e["bytes"]

print(f"{len(entries)} requests, {len(errors)} server errors")
for path, size in sorted(traffic.items(), key=lambda item: -item[1])[:5]:
    print(f"  {path:<26} {size / 1024:8.1f} KiB")
for path, count in not_found.most_common(3):
    print(f"  404 x{count} {path}")
(len(entries), len(errors), sum(traffic.values()))
'''
)

_CITIES = [
    ("Lyon", 45.76, 4.84),
    ("Lille", 50.63, 3.06),
    ("Nantes", 47.22, -1.55),
    ("Bordeaux", 44.84, -0.58),
    ("Toulouse", 43.60, 1.44),
    ("Marseille", 43.30, 5.37),
    ("Strasbourg", 48.57, 7.75),
    ("Rennes", 48.11, -1.68),
    ("Paris", 48.86, 2.35),
    ("Nice", 43.70, 7.27),
    ("Dijon", 47.32, 5.04),
    ("Brest", 48.39, -4.49),
    ("Montpellier", 43.61, 3.88),
    ("Grenoble", 45.19, 5.72),
    ("Rouen", 49.44, 1.10),
    ("Reims", 49.26, 4.03),
    ("Tours", 47.39, 0.69),
    ("Limoges", 45.83, 1.26),
    ("Clermont-Ferrand", 45.78, 3.08),
    ("Metz", 49.12, 6.18),
    ("Caen", 49.18, -0.37),
    ("Perpignan", 42.70, 2.90),
    ("Besancon", 47.24, 6.02),
    ("Orleans", 47.90, 1.91),
]

KMEANS = (
    "import math\nimport random\n\n# Depots we may open; each cluster gets the nearest one.\n"
    "DEPOTS = [\n"
    + "".join(f'    ("{name}", {lat:.2f}, {lon:.2f}),\n' for name, lat, lon in _CITIES)
    + '''\
]


def synthetic_customers(n, seed=3):
    """Customer locations around the depots, with a few far-off ones."""
    rng = random.Random(seed)
    points = []
    for i in range(n):
        _, lat, lon = DEPOTS[i % len(DEPOTS)]
        spread = 0.35 if i % 17 else 1.8
        points.append((lat + rng.gauss(0, spread), lon + rng.gauss(0, spread)))
    return points


def km(a, b):
    """Great-circle distance in kilometres."""
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(
        (lon2 - lon1) / 2
    ) ** 2
    return 12742 * math.asin(math.sqrt(h))


def nearest(point, centers):
    best, best_d = 0, float("inf")
    for index, center in enumerate(centers):
        d = (point[0] - center[0]) ** 2 + (point[1] - center[1]) ** 2
        if d < best_d:
            best, best_d = index, d
    return best


def kmeans(points, k, iterations=12, seed=5):
    """Plain Lloyd iterations from a seeded pick of k points."""
    rng = random.Random(seed)
    centers = rng.sample(points, k)
    for _ in range(iterations):
        groups = [[] for _ in range(k)]
        for p in points:
            groups[nearest(p, centers)].append(p)
        centers = [
            (sum(p[0] for p in g) / len(g), sum(p[1] for p in g) / len(g)) if g else c
            for g, c in zip(groups, centers)
        ]
    labels = [nearest(p, centers) for p in points]
    return centers, labels


def inertia(points, centers, labels):
    return sum(km(p, centers[label]) ** 2 for p, label in zip(points, labels))


def depot_for(center):
    return min(DEPOTS, key=lambda depot: km(center, depot[1:]))[0]


def delivery_stats(points, centers, labels, speed_kmh=55):
    """Median and 90th-percentile drive time (minutes) from each cluster's center."""
    minutes = [[] for _ in centers]
    for p, label in zip(points, labels):
        minutes[label].append(km(p, centers[label]) / speed_kmh * 60)
    stats = []
    for values in minutes:
        values.sort()
        if not values:
            stats.append((0.0, 0.0))
            continue
        stats.append((values[len(values) // 2], values[int(len(values) * 0.9)]))
    return stats


customers = synthetic_customers(120000)
centers, labels = kmeans(customers, k=6)
sizes = [labels.count(i) for i in range(len(centers))]
names = [depot_for(c) for c in centers]
spread = inertia(customers, centers, labels)
drive = delivery_stats(customers, centers, labels)
for name, size, (median, p90) in sorted(zip(names, sizes, drive), key=lambda row: -row[1]):
    print(f"{name:<17} {size:>6} customers, drive {median:5.1f} min median, {p90:5.1f} p90")
{"depots": sorted(names), "largest": max(sizes), "inertia": f"{spread / len(customers):,.1f%} km2"}
'''
)


def _walk(start: float, days: int, seed: int) -> list[float]:
    """A random walk of daily closes, as a price series looks."""
    rng = random.Random(seed)
    prices = [start]
    for _ in range(days - 1):
        prices.append(prices[-1] * (1 + rng.gauss(0.0004, 0.015)))
    return prices


VAR = (
    "import math\nimport random\nimport statistics\n\n"
    "# Daily closes of the portfolio's five positions (EUR), oldest first.\nCLOSES = {\n"
    + "".join(
        f'    "{ticker}": [{", ".join(f"{p:.2f}" for p in prices)}],\n'
        for ticker, prices in (
            (name, _walk(start, 70, seed))
            for name, start, seed in (
                ("ASML", 640.0, 1),
                ("SAP", 172.0, 2),
                ("TTE", 61.0, 3),
                ("ALV", 251.0, 4),
                ("MC", 803.0, 5),
            )
        )
    )
    + '''}
POSITIONS = {"ASML": 120, "SAP": 400, "TTE": 1500, "ALV": 260, "MC": 90}


def log_returns(prices):
    return [math.log(b / a) for a, b in zip(prices, prices[1:])]


def bootstrap_vol(returns, rounds=600, seed=17):
    """Volatility of the daily return, bootstrapped (the series is short)."""
    rng = random.Random(seed)
    vols = []
    for _ in range(rounds):
        sample = [rng.choice(returns) for _ in returns]
        vols.append(statistics.pstdev(sample))
    return statistics.median(vols)


def simulate_losses(paths, horizon_days=10, seed=99):
    """Portfolio loss over the horizon on independent normal returns, one per path."""
    rng = random.Random(seed)
    losses = []
    for _ in range(paths):
        pnl = 0.0
        for ticker, qty in POSITIONS.items():
            drift = sum(rng.gauss(MEANS[ticker], VOLS[ticker]) for _ in range(horizon_days))
            pnl += qty * PRICES[ticker] * (math.exp(drift) - 1)
        losses.append(-pnl)
    losses.sort()
    return losses


RETURNS = {ticker: log_returns(prices) for ticker, prices in CLOSES.items()}
MEANS = {ticker: statistics.fmean(r) for ticker, r in RETURNS.items()}
VOLS = {ticker: bootstrap_vol(r) for ticker, r in RETURNS.items()}
PRICES = {ticker: prices[-1] for ticker, prices in CLOSES.items()}
exposure = sum(qty * PRICES[t] for t, qty in POSITIONS.items())
vols = ", ".join(f"{t} {v:.2%}" for t, v in VOLS.items())
print(f"exposure {exposure:,.0f} EUR; daily vols {vols}")
losses = simulate_losses(paths=20_000_000)
var99 = losses[int(0.99 * len(losses))]
es99 = statistics.fmean(losses[int(0.99 * len(losses)):])
print(f"10-day VaR 99%: {var99:,.0f} EUR; expected shortfall {es99:,.0f} EUR")
(round(var99, -2), round(es99, -2))
'''
)

DOC_PAGE = """\
# Ledger API guide

The Ledger API records money movements between accounts. Read [Authentication](#authentication)
first, then [Idempotency keys](#idempotency-keys); every write needs both.

## Authentication

Send a bearer token in the `Authorization` header. Tokens come from the
[developer console](https://console.example.com/tokens) and expire after 90 days;
rotate them with the [token API](https://docs.example.com/api/tokens#rotate).

## Idempotency keys

Every `POST` takes an `Idempotency-Key` header. A retry with the same key returns the
first response instead of booking twice. Keys live for 24 hours; see
[Retries and timeouts](#retries-and-timeouts) for how long a client should keep trying.

## Pagination

List endpoints return at most 100 items and a `next_cursor`. Pass it back as `cursor`
until it is null. Sorting is stable by `created_at`, then `id`
(see the [ordering RFC](https://rfc.example.com/ordering)).

## Errors

Errors are JSON objects with `code`, `message` and `request_id`. The codes are listed in
[Error codes](#error-codes); a `409` means the idempotency key was reused with a different
body. Report anything else with its `request_id` on the
[status page](https://status.example.com) or by [email](mailto:ledger-support@example.com).

## Retries and timeouts

Retry `429`, `502`, `503` and `504` with exponential backoff, starting at 500 ms, at most
6 times. Never retry a `400`. The [client libraries](https://github.com/example/ledger-clients)
do this for you; their defaults are documented in the
[client guide](https://docs.example.com/clients#defaults).

## Webhooks

Subscribe to `transfer.settled` and `transfer.failed` in the
[console](https://console.example.com/webhooks). Verify each delivery's signature with the
secret shown there (see [Authentication](#authentication)); deliveries are retried for
three days.

## Rate limits

Each token may send 600 requests a minute, with bursts of 120. Exports are limited to 20
an hour. Ask for more on the [limits form](https://forms.example.com/limits) and read
[Retries and timeouts](#retries-and-timeouts) before you do.

## Changelog

- 2.4: reconciliation engine, strict currency checks ([notes](https://docs.example.com/changelog#2-4))
- 2.3: exports are asynchronous ([migration](#migrating-to-async-exports))
- 2.2: cursor pagination everywhere ([pagination](#pagination))
"""

DOCS_LINKS = (
    "import re\nfrom collections import Counter\nfrom urllib.parse import urlparse\n\n"
    'DOC = """'
    + DOC_PAGE
    + r'''"""

HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.M)
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def normalize_title(title):
    """The anchor a code host gives a heading: lower case, punctuation out, spaces to -."""
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return re.sub(r"\s", "-", slug)


def anchors(doc):
    """Every heading's anchor; repeated titles get -1, -2, ... as on the code host."""
    seen = Counter()
    found = []
    for _, title in HEADING.findall(doc):
        base = normalise_title(title)
        found.append(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def sections(doc):
    """(heading, text) pairs, the text before the first heading under ''."""
    parts = HEADING.split(doc)
    out = [("", parts[0])]
    for i in range(1, len(parts) - 2, 3):
        out.append((parts[i + 1], parts[i + 2]))
    return out


def check_links(doc):
    known = set(anchors(doc))
    broken, external = [], Counter()
    per_section = {}
    for title, text in sections(doc):
        links = LINK.findall(text)
        per_section[title or "(top)"] = len(links)
        for label, target in links:
            if target.startswith("#"):
                if target[1:] not in known:
                    broken.append((title, label, target))
            elif target.startswith("mailto:"):
                external["mailto"] += 1
            else:
                external[urlparse(target).netloc] += 1
    return broken, external, per_section


broken, external, per_section = check_links(DOC)
print(f"{sum(per_section.values())} links in {len(per_section)} sections")
for title, label, target in broken:
    print(f"  broken in {title!r}: [{label}]({target})")
for host, count in external.most_common():
    print(f"  {count} x {host}")
(len(anchors(DOC)), [target for _, _, target in broken], len(external))
'''
)

# -- 5 KB: inspect, then fix ------------------------------------------------------------------

_ENGINEERS = [
    ("mhoff", 4411),
    ("asantos", 3920),
    ("lchen", 5102),
    ("okafor", 2871),
    ("bdupont", 6033),
]
_TICKET_TITLES = [
    "Checkout returns 502 on large carts",
    "Export to CSV drops the last row",
    "Password reset mail goes to spam",
    "Search ignores accents in names",
    "Invoice PDF shows the wrong VAT",
    "Dashboard times out for big accounts",
    "Webhook retries never stop",
    "Dark mode breaks the date picker",
    "SSO login loops on Safari",
    "Rate limit counts OPTIONS requests",
    "Bulk import rejects UTF-8 BOM",
    "Audit log misses role changes",
    "Mobile app crashes on empty cart",
    "Currency rounding off by one cent",
]
_TICKET_LABELS = ["bug", "checkout", "email", "search", "billing", "perf", "auth", "ui", "api"]


def _tickets_json(count: int, seed: int) -> str:
    """The first page of an issue tracker's search API, as an agent pastes it."""
    rng = random.Random(seed)
    lines = [f'{{"total": {count + 23}, "page": 1, "per_page": {count}, "results": [']
    for n in range(count):
        login, uid = rng.choice(_ENGINEERS)
        day, hour = rng.randint(1, 20), rng.randint(8, 17)
        created = f"2024-05-{day:02d}T{hour:02d}:{rng.randint(0, 59):02d}:00Z"
        closed = "null"
        if rng.random() < 0.75:
            close_day = day + rng.randint(0, 6)
            closed = (
                f'"2024-05-{close_day:02d}T{rng.randint(8, 19):02d}:{rng.randint(0, 59):02d}:00Z"'
            )
        labels = ", ".join(f'"{label}"' for label in sorted(rng.sample(_TICKET_LABELS, 2)))
        comma = "," if n < count - 1 else ""
        lines.append(
            f'  {{"number": {4101 + n}, "title": "{_TICKET_TITLES[n % len(_TICKET_TITLES)]}", '
            f'"state": "{"open" if closed == "null" else "closed"}", "labels": [{labels}], '
            f'"assignee": {{"login": "{login}", "id": {uid}}}, "created_at": "{created}", '
            f'"closed_at": {closed}, "comments": {rng.randint(0, 14)}}}{comma}'
        )
    lines.append("]}")
    return "\n".join(lines)


TICKETS = (
    "import json\nimport statistics\nfrom collections import Counter, defaultdict\n"
    'from datetime import datetime\n\nPAYLOAD = json.loads("""\\\n'
    + _tickets_json(14, seed=13)
    + '''""")
tickets = PAYLOAD["results"]
print(f"{len(tickets)} of {PAYLOAD['total']} tickets (page {PAYLOAD['page']})")


def parse_time(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")


def hours_open(ticket):
    """Hours from opening to closing; None while the ticket is open."""
    if ticket["closed_at"] is None:
        return None
    delta = parse_time(ticket["closed_at"]) - parse_time(ticket["created_at"])
    return delta.total_seconds() / 3600


closed_hours = defaultdict(list)
open_count = Counter()
for ticket in tickets:
    who = ticket["assignee"]["name"]
    hours = hours_open(ticket)
    if hours is None:
        open_count[who] += 1
    else:
        closed_hours[who].append(hours)

labels = Counter(label for ticket in tickets for label in ticket["labels"])
print("labels:", ", ".join(f"{name} {n}" for name, n in labels.most_common(4)))
for who in sorted(closed_hours.keys() | open_count.keys()):
    times = closed_hours.get(who, [])
    median = statistics.median(times) if times else float("nan")
    print(f"{who:<8} closed {len(times):>2}, open {open_count[who]:>2}, median {median:6.1f} h")
slowest = max(closed_hours, key=lambda who: statistics.median(closed_hours[who]))
(sum(open_count.values()), slowest, labels.most_common(1)[0][0])
'''
)

# -- 5 KB: a fix after a kernel restart -------------------------------------------------------


def _sensor_csv(rows: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["sensor,timestamp,temp_c,humidity_pct"]
    for sensor, base in (("greenhouse-a", 24.0), ("greenhouse-b", 21.5), ("cold-room", 4.0)):
        minute = 0
        for _ in range(rows):
            minute += rng.choice([10, 10, 10, 10, 20, 45]) if sensor != "cold-room" else 10
            hour, mm = 6 + minute // 60, minute % 60
            temp = base + rng.gauss(0, 0.8) + (minute / 120 if sensor != "cold-room" else 0)
            lines.append(
                f"{sensor},2024-03-01 {hour:02d}:{mm:02d}:00,{temp:.1f},{rng.randint(38, 91)}"
            )
    return "\n".join(lines) + "\n"


SENSORS = (
    "import csv\nimport io\nimport math\nimport statistics\nfrom collections import defaultdict\n"
    'from datetime import datetime, timedelta\n\nRAW = """'
    + _sensor_csv(28, seed=5)
    + '''"""
TIME_FORMAT = "%Y-%m-%d %H:%M"
GAP = timedelta(minutes=30)
LIMITS = {"greenhouse-a": (18, 30), "greenhouse-b": (18, 30), "cold-room": (2, 6)}


def dew_point(temp_c, humidity_pct):
    """Magnus formula, good to about 0.4 degrees between -45 and 60 C."""
    gamma = math.log(humidity_pct / 100) + 17.62 * temp_c / (243.12 + temp_c)
    return 243.12 * gamma / (17.62 - gamma)


def parse(row):
    return {
        "sensor": row["sensor"],
        "at": datetime.strptime(row["timestamp"], TIME_FORMAT),
        "temp": float(row["temp_c"]),
        "humidity": int(row["humidity_pct"]),
    }


readings = defaultdict(list)
for row in csv.DictReader(io.StringIO(RAW)):
    reading = parse(row)
    readings[reading["sensor"]].append(reading)

report = {}
for sensor, rows in sorted(readings.items()):
    rows.sort(key=lambda r: r["at"])
    gaps = [(a["at"], b["at"]) for a, b in zip(rows, rows[1:]) if b["at"] - a["at"] > GAP]
    low, high = LIMITS[sensor]
    out_of_range = [r for r in rows if not low <= r["temp"] <= high]
    dew = statistics.fmean(dew_point(r["temp"], r["humidity"]) for r in rows)
    report[sensor] = (len(rows), len(gaps), len(out_of_range), round(dew, 1))
    print(f"{sensor:<13} {len(rows)} readings, {len(gaps)} gaps, "
          f"{len(out_of_range)} out of range, mean dew point {dew:.1f} C")
report
'''
)

# -- 20 KB ------------------------------------------------------------------------------------

_FIRST = [
    "anna",
    "bruno",
    "chloe",
    "dev",
    "emil",
    "fatima",
    "goran",
    "hana",
    "ivan",
    "julia",
    "karim",
    "lena",
    "marco",
    "nora",
    "omar",
    "paula",
    "quentin",
    "rosa",
    "sven",
    "tomas",
]
_DOMAINS = ["example.com", "mail.example.org", "corp.example.net", "shop.example.io"]
_COUNTRIES = [
    ("FR", "EUR", "West"),
    ("DE", "EUR", "Central"),
    ("ES", "EUR", "South"),
    ("IT", "EUR", "South"),
    ("NL", "EUR", "North"),
    ("SE", "SEK", "North"),
    ("PL", "PLN", "East"),
    ("GB", "GBP", "West"),
    ("CH", "CHF", "Central"),
    ("US", "USD", "Export"),
]
_REGION_SPELLINGS = {
    "North": ["North", "north", "NORTH", "Nord"],
    "South": ["South", "south", "Sud"],
    "East": ["East", "east", "Est"],
    "West": ["West", "west", "Ouest"],
    "Central": ["Central", "central", "Centre"],
    "Export": ["Export", "export"],
}
_CATEGORIES = ["fasteners", "tools", "electrical", "plumbing", "safety", "storage"]
_ITEMS = [
    "hex bolt",
    "wood screw",
    "anchor plug",
    "cordless drill",
    "hammer",
    "tape measure",
    "cable 3x1.5",
    "socket outlet",
    "LED panel",
    "PVC elbow",
    "ball valve",
    "pipe clamp",
    "safety glasses",
    "ear muffs",
    "work gloves",
    "storage bin",
    "wall shelf",
    "tool case",
    "wire stripper",
    "spirit level",
    "pliers set",
    "junction box",
    "silicone seal",
    "flush valve",
    "hard hat",
    "first aid kit",
    "drawer unit",
    "pegboard",
    "torx bits",
    "utility knife",
]


def _catalog(seed: int) -> list[tuple[str, str, str, float, float]]:
    rng = random.Random(seed)
    out = []
    for n, item in enumerate(_ITEMS):
        cost = round(rng.uniform(0.8, 60.0), 2)
        price = round(cost * rng.uniform(1.25, 2.1), 2)
        out.append((f"SKU-{1001 + n}", item, _CATEGORIES[n % len(_CATEGORIES)], cost, price))
    return out


def _orders_csv(rows: int, seed: int, catalog: list[tuple[str, str, str, float, float]]) -> str:
    rng = random.Random(seed)
    customers = [
        (
            f"{rng.choice(_FIRST)}.{rng.choice(_FIRST)}@{rng.choice(_DOMAINS)}",
            rng.choice(_COUNTRIES),
        )
        for _ in range(rows // 3)
    ]
    lines = [
        "order_id,placed_at,customer_email,country,region,sku,qty,unit_price,currency,coupon,status"
    ]
    for n in range(rows):
        email, (country, currency, region) = rng.choice(customers)
        if rng.random() < 0.1:
            email = email.upper()
        sku, _, _, _, price = rng.choice(catalog)
        fx = {"EUR": 1.0, "SEK": 11.4, "PLN": 4.3, "GBP": 0.85, "CHF": 0.96, "USD": 1.08}[currency]
        status = rng.choice(["paid"] * 8 + ["refunded", "pending"])
        coupon = rng.choice(["", "", "", "", "SPRING10", "VIP20", "WELCOME5"])
        lines.append(
            f"{90001 + n},2024-{rng.randint(1, 6):02d}-{rng.randint(1, 28):02d},{email},"
            f"{country},{rng.choice(_REGION_SPELLINGS[region])},{sku},{rng.randint(1, 12)},"
            f"{price * fx:.2f},{currency},{coupon},{status}"
        )
        if rng.random() < 0.04:  # the export duplicates a row now and then
            lines.append(lines[-1])
    return "\n".join(lines) + "\n"


def _pipeline(seed: int, date_format: str, tail: str) -> str:
    catalog = _catalog(seed)
    catalog_text = "".join(
        f'    "{sku}": {{"name": "{name}", "category": "{cat}", "cost": {cost:.2f}, '
        f'"list_price": {price:.2f}}},\n'
        for sku, name, cat, cost, price in catalog
    )
    head = f'''\
import csv
import io
import random
import re
import statistics
from collections import Counter, defaultdict
from datetime import datetime

DATE_FORMAT = "{date_format}"
REPORT_CURRENCY = "EUR"
FX_TO_EUR = {{"EUR": 1.0, "USD": 0.926, "GBP": 1.176, "CHF": 1.042, "SEK": 0.0877, "PLN": 0.2326}}
VAT = {{
    "FR": 0.20, "DE": 0.19, "ES": 0.21, "IT": 0.22, "NL": 0.21,
    "SE": 0.25, "PL": 0.23, "GB": 0.20, "CH": 0.081, "US": 0.0,
}}
REGION_ALIASES = {{
    "nord": "North", "sud": "South", "est": "East", "ouest": "West", "centre": "Central",
}}
COUPONS = {{"": 0.0, "SPRING10": 0.10, "VIP20": 0.20, "WELCOME5": 0.05}}
CATALOG = {{
{catalog_text}}}
RAW = """'''
    return head + _orders_csv(110, seed, catalog) + '"""' + _PIPELINE_CODE + tail


_PIPELINE_CODE = r'''


class RowError(ValueError):
    """A row the pipeline cannot use; the message says which field and why."""


EMAIL = re.compile(r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$")


def parse_date(text):
    return datetime.strptime(text.strip(), DATE_FORMAT).date()


def parse_money(text, currency):
    amount = float(text)
    if amount < 0:
        raise RowError(f"negative price {text}")
    return amount * FX_TO_EUR[currency]


def normalize_region(text):
    key = text.strip().lower()
    return REGION_ALIASES.get(key, key.title())


def normalize_email(text):
    email = text.strip().lower()
    if not EMAIL.match(email):
        raise RowError(f"bad email {text!r}")
    return email


def validate(row):
    """Every problem of a raw row, as text; an empty list for a good row."""
    problems = []
    if row["sku"] not in CATALOG:
        problems.append(f"unknown sku {row['sku']}")
    if row["currency"] not in FX_TO_EUR:
        problems.append(f"unknown currency {row['currency']}")
    if row["country"] not in VAT:
        problems.append(f"no VAT rate for {row['country']}")
    if row["coupon"] not in COUPONS:
        problems.append(f"unknown coupon {row['coupon']}")
    if not row["qty"].isdigit() or int(row["qty"]) == 0:
        problems.append(f"bad quantity {row['qty']!r}")
    parse_date(row["placed_at"])
    return problems


def to_order(row):
    qty = int(row["qty"])
    unit = parse_money(row["unit_price"], row["currency"])
    discount = COUPONS[row["coupon"]]
    gross = qty * unit * (1 - discount)
    net = gross / (1 + VAT[row["country"]])
    item = CATALOG[row["sku"]]
    return {
        "id": int(row["order_id"]),
        "placed": parse_date(row["placed_at"]),
        "email": normalize_email(row["customer_email"]),
        "country": row["country"],
        "region": normalize_region(row["region"]),
        "sku": row["sku"],
        "category": item["category"],
        "qty": qty,
        "net": round(net, 2),
        "margin": round(net - qty * item["cost"], 2),
        "status": row["status"],
    }


def dedupe(orders):
    """Drop exact repeats of an order id (the export duplicates rows); keep the first."""
    seen, kept = set(), []
    for order in orders:
        if order["id"] in seen:
            continue
        seen.add(order["id"])
        kept.append(order)
    return kept


def month(order):
    return order["placed"].strftime("%Y-%m")


def aggregate(orders, key, value="net"):
    totals = defaultdict(float)
    for order in orders:
        totals[key(order) if callable(key) else order[key]] += order[value]
    return {name: round(total, 2) for name, total in sorted(totals.items())}


def pivot(orders, row_key, col_key, value="net"):
    table = defaultdict(lambda: defaultdict(float))
    for order in orders:
        table[order[row_key]][order[col_key]] += order[value]
    return {row: dict(cols) for row, cols in sorted(table.items())}


def top_n(mapping, n=5):
    return sorted(mapping.items(), key=lambda item: -item[1])[:n]


def percent_change(old, new):
    return (new - old) / old if old else float("nan")


def customer_stats(orders):
    """Lifetime value and repeat rate, per customer email."""
    by_customer = defaultdict(list)
    for order in orders:
        by_customer[order["email"]].append(order)
    ltv = {email: round(sum(o["net"] for o in os), 2) for email, os in by_customer.items()}
    repeat = sum(1 for os in by_customer.values() if len(os) > 1) / max(1, len(by_customer))
    return ltv, repeat


def cohorts(orders):
    """Customers by the month of their first order, and how many came back later."""
    first = {}
    for order in sorted(orders, key=lambda o: o["placed"]):
        first.setdefault(order["email"], month(order))
    returned = defaultdict(set)
    for order in orders:
        if month(order) > first[order["email"]]:
            returned[first[order["email"]]].add(order["email"])
    sizes = Counter(first.values())
    return {m: (sizes[m], len(returned[m])) for m in sorted(sizes)}


def format_table(rows, headers):
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(
            f"{x:,.2f}".rjust(w) if isinstance(x, float) else str(x).ljust(w)
            for x, w in zip(row, widths)
        ))
    return "\n".join(lines)


def quality_report(rows, rejected, duplicates):
    lines = [f"{len(rows)} rows read, {len(rejected)} rejected, {duplicates} duplicates dropped"]
    reasons = Counter(problem.split(" ")[0] for _, problems in rejected for problem in problems)
    lines += [f"  {count} x {reason}" for reason, count in reasons.most_common()]
    return "\n".join(lines)


rows = list(csv.DictReader(io.StringIO(RAW)))
accepted, rejected = [], []
for row in rows:
    problems = validate(row)
    if problems:
        rejected.append((row["order_id"], problems))
    else:
        accepted.append(to_order(row))
orders = dedupe(accepted)
paid = [o for o in orders if o["status"] == "paid"]
by_region = aggregate(paid, "region")
by_category = aggregate(paid, "category")
by_month = aggregate(paid, month)
margin_by_category = aggregate(paid, "category", value="margin")
region_category = pivot(paid, "region", "category")
ltv, repeat_rate = customer_stats(paid)
print(quality_report(rows, rejected, len(accepted) - len(orders)))
print(format_table(
    [(r, by_region[r], sum(1 for o in paid if o["region"] == r)) for r in by_region],
    ["region", "net EUR", "orders"],
))
print(format_table(
    [(c, by_category[c], margin_by_category[c]) for c in by_category],
    ["category", "net EUR", "margin EUR"],
))
months = list(by_month)
for prev, cur in zip(months, months[1:]):
    change = percent_change(by_month[prev], by_month[cur])
    print(f"{cur}: {by_month[cur]:>10,.2f} EUR ({change:+.1%})")
for m, (size, back) in cohorts(paid).items():
    print(f"cohort {m}: {size} customers, {back} came back")
print("top customers:", ", ".join(f"{e} {v:,.0f}" for e, v in top_n(ltv, 3)))
'''

_PIPELINE_SUMMARY = """
{
    "orders": len(paid),
    "net_eur": round(sum(by_region.values()), 2),
    "top_region": top_n(by_region, 1)[0][0],
    "repeat_rate": round(repeat_rate, 3),
}
"""

_PIPELINE_BOOTSTRAP = """

def bootstrap_ci(values, rounds=150_000, level=0.9, seed=21):
    \"\"\"Confidence interval of the mean order value, by resampling the orders.\"\"\"
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(rounds))
    cut = int((1 - level) / 2 * rounds)
    return round(means[cut], 2), round(means[-cut - 1], 2)


order_values = defaultdict(list)
for order in paid:
    order_values[order["region"]].append(order["net"])
intervals = {region: bootstrap_ci(values) for region, values in sorted(order_values.items())}
for region, (low, high) in intervals.items():
    print(f"{region:<8} mean order {low:,.2f} .. {high:,.2f} EUR (90%)")
{
    "orders": len(paid),
    "net_eur": round(sum(by_region.values()), 2),
    "north_ci": intervals["north"],
    "widest": max(intervals, key=lambda r: intervals[r][1] - intervals[r][0]),
}
"""

PIPELINE_DATES = _pipeline(31, "%Y/%m/%d", _PIPELINE_SUMMARY)
PIPELINE_RESUME = _pipeline(47, "%Y-%m-%d", _PIPELINE_BOOTSTRAP)

_QBR_REGIONS = [
    "North",
    "South",
    "East",
    "West",
    "Central",
    "Benelux",
    "Nordics",
    "Iberia",
    "Alps",
    "Baltics",
]
_QBR_PRODUCTS = ["Core", "Analytics", "Payments", "Connect", "Vault", "Insights"]
_QBR_OPENERS = [
    "{region} closed the quarter at {{{key}_revenue:,.0f}} EUR, {{{key}_growth:+.1%}} on Q1,",
    "Revenue in {region} reached {{{key}_revenue:,.0f}} EUR ({{{key}_growth:+.1%}} quarter on "
    "quarter),",
    "{region} booked {{{key}_revenue:,.0f}} EUR of net revenue, a change of {{{key}_growth:+.1%}},",
]
_QBR_MIDDLES = [
    " with {{{key}_customers:,}} active customers and {{{key}_churned}} lost to churn "
    "({{{key}_churn:.1%}}).",
    " carried by {{{key}_customers:,}} paying customers; churn took {{{key}_churned}} of them "
    "({{{key}_churn:.1%}}).",
]
_QBR_CLOSERS = [
    " {{{key}_best}} sold best, and NPS stands at {{{key}_nps}}. The team's focus for Q3 is "
    "renewals in the mid-market segment and a shorter onboarding for new accounts.",
    " The strongest line was {{{key}_best}}; NPS moved to {{{key}_nps}}. Q3 priorities: the "
    "partner channel, two open senior sales roles, and the price review for small accounts.",
    " {{{key}_best}} led the product mix and NPS is {{{key}_nps}}. For Q3 the region plans a "
    "customer advisory board and a migration offer for accounts on the legacy plan.",
]


def _report_template(seed: int) -> str:
    rng = random.Random(seed)
    parts = [
        "# Quarterly business review, {quarter}\n\n",
        "Prepared for the executive team by Revenue Operations on {prepared_on}. Figures are "
        "net of VAT and refunds, in EUR at the quarter's average rates.\n\n",
        "## Executive summary\n\n",
        "Net revenue reached {total_revenue:,.0f} EUR, {total_growth:+.1%} on the prior quarter, "
        "against a plan of {plan_revenue:,.0f} EUR ({plan_gap:+.1%}). Net margin was "
        "{net_margin_pct:.1%} after {opex:,.0f} EUR of operating expenses. We served "
        "{total_customers:,} customers; {total_churned} left us, a churn of {total_churn:.1%}. "
        "{best_region} grew fastest ({best_region_growth:+.1%}); {worst_region} is the region "
        "to watch ({worst_region_growth:+.1%}).\n\n",
        "| Region | Revenue EUR | Growth | Customers | Churn | NPS |\n",
        "|---|---:|---:|---:|---:|---:|\n",
    ]
    for region in _QBR_REGIONS:
        key = region.lower()
        parts.append(
            f"| {region} | {{{key}_revenue:,.0f}} | {{{key}_growth:+.1%}} | "
            f"{{{key}_customers:,}} | {{{key}_churn:.1%}} | {{{key}_nps}} |\n"
        )
    parts.append("\n")
    for region in _QBR_REGIONS:
        key = region.lower()
        parts.append(f"## {region}\n\n")
        parts.append(
            rng.choice(_QBR_OPENERS).format(region=region, key=key)
            + rng.choice(_QBR_MIDDLES).format(key=key)
            + rng.choice(_QBR_CLOSERS).format(key=key)
            + "\n\n"
        )
        parts.append("| Product | Units | Revenue EUR | Share |\n|---|---:|---:|---:|\n")
        for product in _QBR_PRODUCTS:
            pkey = f"{key}_{product.lower()}"
            parts.append(
                f"| {product} | {{{pkey}_units:,}} | {{{pkey}_revenue:,.0f}} | "
                f"{{{pkey}_share:.1%}} |\n"
            )
        parts.append("\n")
    parts.append(
        "## Method\n\n"
        "Revenue is recognised when an invoice is paid. Growth compares the same regions in "
        "the prior quarter; regions created mid-quarter count from their first invoice. Churn "
        "is the share of customers active on the first day of the quarter who had no active "
        "contract on its last day. NPS is the mean of the quarter's surveys, weighted by "
        "responses, and is not comparable with the figures before the survey change in Q4.\n\n"
        "## Appendix: definitions\n\n"
        "- Active customer: at least one paid invoice in the quarter.\n"
        "- Net revenue: invoiced amounts less VAT, refunds and credit notes.\n"
        "- Operating expenses: payroll, hosting, tooling and marketing, without depreciation.\n"
        "- Plan: the budget approved in January, not re-forecast.\n"
    )
    return "".join(parts)


def _report_data(seed: int) -> str:
    rng = random.Random(seed)
    lines = ["REGIONS = {\n"]
    for region in _QBR_REGIONS:
        revenue_q1 = rng.randint(700, 2600) * 1000
        products = ", ".join(f'"{p}": {rng.randint(40, 900)}' for p in _QBR_PRODUCTS)
        prices = ", ".join(f'"{p}": {rng.randint(180, 2400)}' for p in _QBR_PRODUCTS)
        lines.append(
            f'    "{region}": {{\n'
            f'        "revenue_q1": {revenue_q1}, "customers": {rng.randint(120, 900)}, '
            f'"churned": {rng.randint(3, 40)}, "nps": {rng.randint(18, 61)},\n'
            f'        "units": {{{products}}},\n'
            f'        "unit_price": {{{prices}}},\n'
            "    },\n"
        )
    lines.append("}\n")
    return "".join(lines)


REPORT = (
    'import hashlib\nfrom datetime import date\n\nQUARTER = "Q2 2024"\nPLAN_REVENUE = 11_500_000\n'
    "OPEX = 7_350_000\n\n"
    + _report_data(13)
    + '\nTEMPLATE = """\\\n'
    + _report_template(13)
    + r'''"""


def region_context(name, data):
    """The placeholders of one region: totals, growth, churn and its product table."""
    key = name.lower()
    revenues = {p: data["units"][p] * data["unit_price"][p] for p in data["units"]}
    revenue = sum(revenues.values())
    context = {
        f"{key}_revenue": revenue,
        f"{key}_growth": (revenue - data["revenue_q1"]) / data["revenue_q1"],
        f"{key}_customers": data["customers"],
        f"{key}_churned": data["churned"],
        f"{key}_churn": data["churned"] / data["customers"],
        f"{key}_nps": data["nps"],
        f"{key}_best": max(revenues, key=revenues.get),
    }
    for product, amount in revenues.items():
        pkey = f"{key}_{product.lower()}"
        context[f"{pkey}_units"] = data["units"][product]
        context[f"{pkey}_revenue"] = amount
        context[f"{pkey}_share"] = amount / revenue
    return context


context = {"quarter": QUARTER, "prepared_on": date(2024, 7, 8).isoformat()}
for name, data in REGIONS.items():
    context.update(region_context(name, data))
growth = {name: context[f"{name.lower()}_growth"] for name in REGIONS}
total = sum(context[f"{name.lower()}_revenue"] for name in REGIONS)
total_q1 = sum(data["revenue_q1"] for data in REGIONS.values())
customers = sum(data["customers"] for data in REGIONS.values())
churned = sum(data["churned"] for data in REGIONS.values())
context.update(
    total_revenue=total,
    total_growth=(total - total_q1) / total_q1,
    plan_revenue=PLAN_REVENUE,
    plan_gap=(total - PLAN_REVENUE) / PLAN_REVENUE,
    opex=OPEX,
    net_margin=(total - OPEX) / total,
    total_customers=customers,
    total_churned=churned,
    total_churn=churned / customers,
    best_region=max(growth, key=growth.get),
    best_region_growth=max(growth.values()),
    worst_region=min(growth, key=growth.get),
    worst_region_growth=min(growth.values()),
)
report = TEMPLATE.format(**context)
digest = hashlib.sha256(report.encode()).hexdigest()[:12]
print(report[:600])
print(f"... {len(report):,} characters, {report.count(chr(10))} lines, sha256 {digest}")
(report.count("\n"), digest)
'''
)


_TEAMS = ["payments", "ledger", "search", "identity", "notifications", "platform", "data"]
_SERVICE_NAMES = [
    "ledger-api",
    "ledger-worker",
    "payments-gateway",
    "payments-webhooks",
    "fx-rates",
    "search-api",
    "search-indexer",
    "identity-api",
    "sessions",
    "mfa-service",
    "notify-email",
    "notify-sms",
    "notify-push",
    "api-gateway",
    "edge-cache",
    "feature-flags",
    "audit-log",
    "exports",
    "reports-api",
    "warehouse-loader",
    "events-router",
    "scheduler",
    "billing-api",
    "invoices-pdf",
    "tax-engine",
    "risk-scoring",
    "kyc-checks",
    "admin-console",
]
_EXTERNALS = ["postgres-main", "postgres-ledger", "redis-cache", "kafka", "s3-exports"]


def _py(value: object) -> str:
    """A short literal: what a model writes inline (dicts of scalars, lists of strings)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}": {_py(v)}' for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _services(seed: int, string_port: str) -> str:
    rng = random.Random(seed)
    lines = ["SERVICES = [\n"]
    ports = rng.sample(range(8000, 8400), len(_SERVICE_NAMES))
    for n, name in enumerate(_SERVICE_NAMES):
        team = next((t for t in _TEAMS if name.startswith(t[:5])), rng.choice(_TEAMS))
        tier = 1 if n % 3 == 0 else rng.choice([2, 3])
        port = f'"{string_port}"' if name == "risk-scoring" else str(ports[n])
        fields = {
            "team": team,
            "image": f"registry.internal/{team}/{name}:{rng.randint(1, 4)}.{rng.randint(0, 19)}."
            f"{rng.randint(0, 9)}",
            "replicas": rng.choice([2, 3, 4, 6]) if tier == 1 else rng.choice([1, 2, 3]),
            "tier": tier,
            "cpu": rng.choice(["100m", "250m", "500m", "1", "2"]),
            "memory": rng.choice(["128Mi", "256Mi", "512Mi", "1Gi", "2Gi"]),
            "env": {
                "LOG_LEVEL": rng.choice(["info", "warning", "debug"]),
                "REGION": "eu-west-1",
                "OTEL_SERVICE_NAME": name,
                "MAX_CONNECTIONS": str(rng.choice([16, 32, 64, 128])),
            },
            "depends_on": sorted(rng.sample(_EXTERNALS + _SERVICE_NAMES[:n], rng.randint(1, 3)))
            if n
            else ["postgres-main"],
            "healthcheck": {
                "path": rng.choice(["/healthz", "/health", "/ready"]),
                "interval_s": rng.choice([5, 10, 15, 30]),
                "timeout_s": rng.choice([1, 2, 3]),
            },
            "public": name in ("api-gateway", "edge-cache", "admin-console"),
        }
        lines.append(f'    {{\n        "name": "{name}",\n        "port": {port},\n')
        lines += [f'        "{k}": {_py(v)},\n' for k, v in fields.items()]
        lines.append("    },\n")
    lines.append("]\n")
    return "".join(lines)


CONFIG = (
    "import hashlib\nimport re\nfrom collections import defaultdict\n\n"
    + _services(23, "8443")
    + r'''
EXTERNAL = {"postgres-main", "postgres-ledger", "redis-cache", "kafka", "s3-exports"}
REQUIRED = {
    "name": str, "port": int, "team": str, "image": str, "replicas": int, "tier": int,
    "cpu": str, "memory": str, "env": dict, "depends_on": list, "healthcheck": dict,
    "public": bool,
}
CPU = re.compile(r"^(\d+)(m?)$")
MEMORY = re.compile(r"^(\d+)(Mi|Gi)$")


def cpu_cores(text):
    number, milli = CPU.match(text).groups()
    return int(number) / 1000 if milli else float(number)


def memory_mib(text):
    number, unit = MEMORY.match(text).groups()
    return int(number) * (1024 if unit == "Gi" else 1)


def validate(services):
    """Raise on the first problem; the deploy tool would reject the file anyway."""
    names = {s["name"] for s in services}
    ports = {}
    for svc in services:
        for key, kind in REQUIRED.items():
            if not isinstance(svc.get(key), kind):
                got = type(svc.get(key)).__name__
                raise TypeError(
                    f"{svc['name']}: {key} must be {kind.__name__}, got {got} {svc.get(key)!r}"
                )
        if svc["port"] in ports:
            raise ValueError(f"{svc['name']}: port {svc['port']} taken by {ports[svc['port']]}")
        ports[svc["port"]] = svc["name"]
        if svc["tier"] == 1 and svc["replicas"] < 2:
            raise ValueError(f"{svc['name']}: a tier-1 service needs 2 replicas or more")
        for dep in svc["depends_on"]:
            if dep not in names and dep not in EXTERNAL:
                raise ValueError(f"{svc['name']}: depends on unknown {dep}")
        if not CPU.match(svc["cpu"]) or not MEMORY.match(svc["memory"]):
            raise ValueError(f"{svc['name']}: bad resources {svc['cpu']} / {svc['memory']}")


def render(services):
    """The compose-style YAML the deploy tool reads."""
    out = ["services:"]
    for svc in sorted(services, key=lambda s: s["name"]):
        out += [
            f"  {svc['name']}:",
            f"    image: {svc['image']}",
            f"    ports: [\"{svc['port']}:{svc['port']}\"]",
            f"    deploy: {{replicas: {svc['replicas']}, resources: "
            f"{{limits: {{cpus: '{cpu_cores(svc['cpu'])}', memory: {svc['memory']}}}}}}}",
            "    environment:",
        ]
        out += [f"      {k}: \"{v}\"" for k, v in sorted(svc["env"].items())]
        out.append(f"    depends_on: [{', '.join(svc['depends_on'])}]")
        check = svc["healthcheck"]
        out.append(
            f"    healthcheck: {{test: [CMD, curl, -f, 'http://localhost:{svc['port']}"
            f"{check['path']}'], interval: {check['interval_s']}s, timeout: {check['timeout_s']}s}}"
        )
    return "\n".join(out) + "\n"


validate(SERVICES)
per_team = defaultdict(lambda: [0.0, 0])
for svc in SERVICES:
    per_team[svc["team"]][0] += cpu_cores(svc["cpu"]) * svc["replicas"]
    per_team[svc["team"]][1] += memory_mib(svc["memory"]) * svc["replicas"]
for team, (cores, mib) in sorted(per_team.items()):
    print(f"{team:<14} {cores:6.2f} cores {mib / 1024:6.1f} GiB")
compose = render(SERVICES)
digest = hashlib.sha256(compose.encode()).hexdigest()[:12]
print(f"{len(SERVICES)} services, {len(compose.splitlines())} lines of compose, sha256 {digest}")
(len(SERVICES), round(sum(c for c, _ in per_team.values()), 2), digest)
'''
)

_ALERT_METRICS = [
    ("http_request_errors_ratio", "ratio of 5xx responses", "> 0.05", "5m"),
    ("http_request_p99_seconds", "p99 latency", "> 1.5", "10m"),
    ("queue_depth", "messages waiting", "> 5000", "15m"),
    ("replication_lag_seconds", "replication lag", "> 30", "5m"),
    ("pod_restarts_total", "pod restarts in 15 minutes", "> 3", "0m"),
    ("disk_free_ratio", "free disk", "< 0.1", "30m"),
]


def _alerts(seed: int, missing_comma_after: str) -> str:
    rng = random.Random(seed)
    lines = ["RULES = [\n"]
    for n, service in enumerate(_SERVICE_NAMES[:22]):
        team = next((t for t in _TEAMS if service.startswith(t[:5])), _TEAMS[n % len(_TEAMS)])
        picked = rng.sample(_ALERT_METRICS, 2)
        if service == "ledger-worker":  # the rule with the mistake
            picked = [_ALERT_METRICS[3], _ALERT_METRICS[0]]
        for metric, what, op, wait in picked:
            severity = "critical" if op.startswith(">") and rng.random() < 0.4 else "warning"
            threshold = op.split()[1]
            summary = f"{service}: {what} {'above' if op[0] == '>' else 'below'} {threshold}"
            if (service, metric) == ("ledger-worker", "replication_lag_seconds"):
                summary = missing_comma_after
            comma = "" if summary == missing_comma_after else ","
            rule_name = "".join(
                w.title() for w in f"{service}-{metric}".replace("_", "-").split("-")
            )
            lines.append(
                "    {\n"
                f'        "alert": "{rule_name}",\n'
                f'        "expr": \'{metric}{{service="{service}"}} {op}\',\n'
                f'        "for": "{wait}",\n'
                f'        "severity": "{severity}",\n'
                f'        "team": "{team}",\n'
                f'        "summary": "{summary}"{comma}\n'
                f'        "runbook": "https://runbooks.internal/{team}/{service}/{metric}",\n'
                "    },\n"
            )
    lines.append("]\n")
    return "".join(lines)


ALERTS = (
    "import re\nfrom collections import Counter\n\n"
    + _alerts(29, "Ledger replication lag above 30 s")
    + r'''
DURATION = re.compile(r"^(\d+)([smh])$")
SEVERITIES = ("warning", "critical")
COMPARISON = re.compile(r"\s(>|<|>=|<=|==)\s")


def check(rules):
    """Every problem in the rules, as text."""
    problems = []
    names = Counter(rule["alert"] for rule in rules)
    problems += [f"duplicate alert name {name}" for name, n in names.items() if n > 1]
    for rule in rules:
        if not DURATION.match(rule["for"]):
            problems.append(f"{rule['alert']}: bad duration {rule['for']!r}")
        if rule["severity"] not in SEVERITIES:
            problems.append(f"{rule['alert']}: unknown severity {rule['severity']!r}")
        if not COMPARISON.search(rule["expr"]):
            problems.append(f"{rule['alert']}: the expression compares nothing")
        if not rule["runbook"].startswith("https://runbooks.internal/"):
            problems.append(f"{rule['alert']}: the runbook must be internal")
    return problems


def render(rules):
    """Prometheus rule file, grouped by team."""
    out = ["groups:"]
    for team in sorted({rule["team"] for rule in rules}):
        out += [f"  - name: {team}", "    rules:"]
        for rule in (r for r in rules if r["team"] == team):
            out += [
                f"      - alert: {rule['alert']}",
                f"        expr: {rule['expr']}",
                f"        for: {rule['for']}",
                f"        labels: {{severity: {rule['severity']}, team: {team}}}",
                f"        annotations: {{summary: \"{rule['summary']}\", runbook_url: "
                f"\"{rule['runbook']}\"}}",
            ]
    return "\n".join(out) + "\n"


problems = check(RULES)
if problems:
    raise ValueError("\n".join(problems))
text = render(RULES)
severity = Counter(rule["severity"] for rule in RULES)
teams = Counter(rule["team"] for rule in RULES)
print(f"{len(RULES)} rules for {len(teams)} teams: {dict(severity)}")
print(text[:400])
(len(RULES), severity["critical"], len(text.splitlines()))
'''
)


# -- programs that call the host's tools (ptc_retry.eval.host) ------------------------------

OVERDUE = r"""orders = await tools.fetch_orders(customer="acme")
overdue = sorted(
    (o for o in orders if o["days_open"] > 30), key=lambda o: o["days_open"], reverse=True
)
total = round(sum(o["amount"] for o in overdue), 2)
lines = [
    f"{o['id']}  {o['sku']:<6} {o['days_open']:>3} days  {o['amount']:>10,.2f} EUR"
    for o in overdue
]
body = "\n".join(
    [
        "Hello Acme accounts team,",
        "",
        f"{len(overdue)} of your {len(orders)} open orders are more than 30 days old:",
        "",
        *lines,
        "",
        f"Total overdue: {total:,.2f} EUR. Please tell us when to expect the payment.",
        "",
        "Kind regards, Accounts receivable",
    ]
)
receipt = await tools.send_email(
    to="accounts@acme.example", subject=f"{len(overdue)} overdue orders", body=body
)
print(body)
print("sent:", receipt["status"])
{"overdue": len(overdue), "total": total, "email": receipt["message_id"]}
"""

RESTOCK = r'''import asyncio
import math
from collections import defaultdict

WAREHOUSES = ["berlin", "lyon", "milan", "porto"]
CUSTOMER = "globex"
# Lead time in days and pack size per SKU, from the purchasing handbook.
POLICY = {
    "A-100": {"lead_days": 4, "pack": 50, "daily_use": 14.0, "supplier": "Brandt GmbH"},
    "A-101": {"lead_days": 6, "pack": 50, "daily_use": 9.5, "supplier": "Brandt GmbH"},
    "B-210": {"lead_days": 3, "pack": 100, "daily_use": 31.0, "supplier": "Nordwerk AB"},
    "C-007": {"lead_days": 9, "pack": 25, "daily_use": 6.2, "supplier": "Ferrum SpA"},
    "D-330": {"lead_days": 5, "pack": 200, "daily_use": 48.0, "supplier": "Nordwerk AB"},
    "E-512": {"lead_days": 12, "pack": 10, "daily_use": 2.1, "supplier": "Ferrum SpA"},
    "F-044": {"lead_days": 7, "pack": 20, "daily_use": 4.4, "supplier": "Oliveira Lda"},
    "G-918": {"lead_days": 14, "pack": 5, "daily_use": 1.3, "supplier": "Oliveira Lda"},
}
SAFETY_DAYS = 3
COVER_DAYS = 21
# Warehouses that can ship to each other within a day.
NEIGHBOURS = {"berlin": ["milan"], "lyon": ["milan", "porto"], "milan": ["berlin", "lyon"],
              "porto": ["lyon"]}


def reorder_point(sku):
    """Stock at which to order: use over the lead time plus a safety buffer."""
    p = POLICY[sku]
    return math.ceil(p["daily_use"] * (p["lead_days"] + SAFETY_DAYS))


def order_quantity(sku, on_hand, reserved):
    """Units to order, in whole packs, to cover COVER_DAYS after the order arrives."""
    p = POLICY[sku]
    needed = p["daily_use"] * COVER_DAYS + reorder_point(sku) + reserved - on_hand
    return max(0, math.ceil(needed / p["pack"]) * p["pack"])


def transfers(stock, sku, site, short):
    """Units a neighbour can spare for ``site`` without going under its own reorder point."""
    moves = []
    for other in NEIGHBOURS[site]:
        spare = stock[other][sku] - reorder_point(sku)
        if spare > 0 and short > 0:
            moved = min(spare, short)
            moves.append((other, moved))
            stock[other][sku] -= moved
            short -= moved
    return moves, short


def plan_restock(stock, orders):
    """Per site and SKU: transfers from neighbours first, then purchase orders."""
    reserved = defaultdict(int)
    for order in orders:
        reserved[order["sku"]] += order["qty"]
    plan, moves_out = defaultdict(dict), []
    for site in WAREHOUSES:
        for sku in POLICY:
            share = math.ceil(reserved[sku] / len(WAREHOUSES))
            short = reorder_point(sku) + share - stock[site][sku]
            if short <= 0:
                continue
            moves, short = transfers(stock, sku, site, short)
            moves_out += [(other, site, sku, units) for other, units in moves]
            if short > 0:
                plan[site][sku] = order_quantity(sku, stock[site][sku], share)
    return plan, moves_out


def by_supplier(plan):
    """Purchase lines grouped by supplier, largest first."""
    lines = defaultdict(list)
    for site, skus in plan.items():
        for sku, units in skus.items():
            lines[POLICY[sku]["supplier"]].append((units, sku, site))
    return {name: sorted(rows, reverse=True) for name, rows in sorted(lines.items())}


def render(plan, moves, orders):
    """The email to purchasing: transfers, then one block per supplier."""
    out = [f"Restock plan for {len(WAREHOUSES)} warehouses ({len(orders)} open orders "
           f"reserved for {CUSTOMER}).", "", "Transfers:"]
    out += [f"  {units:>4} x {sku} {src} -> {dst}" for src, dst, sku, units in moves] or ["  none"]
    for supplier, rows in by_supplier(plan).items():
        out += ["", f"{supplier}:"]
        out += [f"  {units:>5} x {sku}  for {site}" for units, sku, site in rows]
    return "\n".join(out)


*levels, orders = await asyncio.gather(
    *(tools.fetch_stock(warehouse=site) for site in WAREHOUSES),
    tools.fetch_orders(customer=CUSTOMER),
)
stock = dict(zip(WAREHOUSES, levels))
plan, moves = plan_restock(stock, orders)
body = render(plan, moves, orders)
receipt = await tools.send_email(
    to="purchasing@example.com", subject=f"Restock plan: {sum(map(len, plan.values()))} lines",
    body=body,
)
print(body)
units = {site: sum(skus.values()) for site, skus in plan.items()}
(receipt["status"], len(moves), units["Lyon"], sum(units.values()))
'''


# -- the corpus -------------------------------------------------------------------------------

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "150b-wrong-literal",
        "150 B",
        "wrong literal",
        TINY_DATE,
        "'2024-04-11'",
        edits=(("2, 30", "2, 29"),),
    ),
    Scenario(
        "150b-under-threshold",
        "150 B",
        "under the notice threshold",
        TINY_MEDIAN,
        "21.5",
        edits=(("median(temp_c)", "median(temps_c)"),),
    ),
    Scenario(
        "150b-wrong-function",
        "150 B",
        "wrong function name",
        TINY_QUANTILES,
        "158.3",
        edits=(("statistics.quantile(", "statistics.quantiles("),),
    ),
    Scenario(
        "1k-wrong-key",
        "1 KB",
        "wrong key",
        REORDER,
        "[('A-101', 450), ('C-007', 450), ('D-330', 2200)]",
        edits=(('item["lead_day"]', 'item["lead_days"]'),),
    ),
    Scenario(
        "1k-wrong-type",
        "1 KB",
        "wrong type",
        RETRY_BUDGET,
        "195.2",
        edits=(('"timeout_s": "30"', '"timeout_s": 30'),),
    ),
    Scenario(
        "1k-syntax-error",
        "1 KB",
        "syntax error",
        SURVEY,
        "{'nox': 4.33, 'pytest': 4.33, 'tox': 2.67}",
        edits=(('{avg:>5.2f}"\n', '{avg:>5.2f}")\n'),),
    ),
    Scenario(
        "1k-indentation-slip",
        "1 KB",
        "indentation slip",
        LEDGER,
        "1590",
        edits=(("\n       fees[key]", "\n        fees[key]"),),
    ),
    Scenario(
        "1k-ambiguous-fragment",
        "1 KB",
        "wrong literal; first fragment matches twice",
        BACKOFF,
        "{'payments': 31.5, 'search': 10.0, 'emails': 515.0}",
        edits=(("factor=3, attempts=6", "factor=2, attempts=6"),),
        first_try=(("factor=3", "factor=2"),),
    ),
    Scenario(
        "1k-rewrite",
        "1 KB",
        "fix is a rewrite (no replay)",
        THREAD,
        "(2500, 2500, 5000)",
        rewrite=THREAD_REWRITE,
    ),
    Scenario(
        "1k-two-in-one-message",
        "1 KB",
        "two programs of one message fail (wrong type, wrong group name): two replays",
        DISK,
        "['/', '/data']",
        edits=(('ALERT_AT = "85"', "ALERT_AT = 85"),),
        parallel=Parallel(
            LOG_LEVELS,
            "{'api': 1, 'billing': 1, 'worker': 1}",
            edits=(('m.group("lvl")', 'm.group("level")'),),
        ),
    ),
    Scenario(
        "1k-stray-key",
        "1 KB",
        'wrong keyword argument; a stray "description" key beside "code"',
        TIMESHEET,
        "(32.75, {'atlas': 1575.42, 'billing-v2': 1503.33})",
        edits=(("timedelta(minute=", "timedelta(minutes="),),
        extra_keys={"description": "Billable hours per project this week, and the invoice"},
    ),
    Scenario(
        "5k-wrong-column",
        "5 KB",
        "wrong column",
        SALES,
        "{'orders': 41, 'net': 6204.64, 'top_region': 'North', 'best_product_by_units': 'widget'}",
        edits=(('float(row["discount"])', 'float(row["discount_pct"])'),),
    ),
    Scenario(
        "5k-stale-file-edit",
        "5 KB",
        "stale fragment in a file edit",
        FILE_EDIT,
        "('\"2.4.0\"', 7, 24, 7)",
        edits=(('version = "2.3.0"', 'version = "2.3.1"'),),
        files={"deploy/app.toml": APP_TOML},
    ),
    Scenario(
        "5k-two-places",
        "5 KB",
        "fix in two places",
        ACCESS_LOG,
        "(26, 7, 569845)",
        edits=(
            ('"status": m.group("status")', '"status": int(m.group("status"))'),
            ('"bytes": m.group("bytes")', '"bytes": int(m.group("bytes"))'),
        ),
    ),
    Scenario(
        "5k-wrong-function-name",
        "5 KB",
        "wrong function name",
        DOCS_LINKS,
        "(9, ['#error-codes', '#migrating-to-async-exports'], 7)",
        edits=(("normalise_title(title)", "normalize_title(title)"),),
    ),
    Scenario(
        "5k-resume-last-statement",
        "5 KB",
        "last statement fails after a slow step (resume)",
        KMEANS,
        "{'depots': ['Besancon', 'Grenoble', 'Orleans', 'Reims', 'Rennes', 'Toulouse'], "
        "'largest': 25287, 'inertia': '20,992.2 km2'}",
        edits=(("{spread / len(customers):,.1f%}", "{spread / len(customers):,.1f}"),),
        resume=True,
    ),
    Scenario(
        "5k-timeout",
        "5 KB",
        "time limit; the fix lowers a loop count (resume)",
        VAR,
        "(18900.0, 21100.0)",
        edits=(("paths=20_000_000", "paths=20_000"),),
        resume=True,
        timeout=4.0,
    ),
    Scenario(
        "5k-inspect-then-fix",
        "5 KB",
        "wrong key; the model prints the data before the fix",
        TICKETS,
        "(4, 'okafor', 'perf')",
        edits=(('ticket["assignee"]["name"]', 'ticket["assignee"]["login"]'),),
        inspect='print(tickets[0]["assignee"])\n',
    ),
    Scenario(
        "5k-fix-after-restart",
        "5 KB",
        "wrong date format; the kernel restarts before the fix",
        SENSORS,
        "{'cold-room': (28, 0, 0, -1.1), 'greenhouse-a': (28, 2, 0, 17.1), "
        "'greenhouse-b': (28, 5, 0, 16.6)}",
        edits=(('TIME_FORMAT = "%Y-%m-%d %H:%M"', 'TIME_FORMAT = "%Y-%m-%d %H:%M:%S"'),),
        restart=True,
    ),
    Scenario(
        "20k-wrong-literal",
        "20 KB",
        "wrong literal",
        PIPELINE_DATES,
        "{'orders': 83, 'net_eur': 18249.32, 'top_region': 'South', 'repeat_rate': 0.742}",
        edits=(('DATE_FORMAT = "%Y/%m/%d"', 'DATE_FORMAT = "%Y-%m-%d"'),),
    ),
    Scenario(
        "20k-template-wrong-key",
        "20 KB",
        "wrong key in a template",
        REPORT,
        "(161, '3c79747fa19b')",
        edits=(("{net_margin_pct:.1%}", "{net_margin:.1%}"),),
    ),
    Scenario(
        "20k-config-wrong-type",
        "20 KB",
        "wrong type in a config blob",
        CONFIG,
        "(28, 66.55, 'eba6da0e51f8')",
        edits=(('"port": "8443"', '"port": 8443'),),
    ),
    Scenario(
        "20k-syntax-error",
        "20 KB",
        "syntax error (missing comma)",
        ALERTS,
        "(44, 14, 235)",
        edits=(('lag above 30 s"\n', 'lag above 30 s",\n'),),
    ),
    Scenario(
        "20k-resume-last-statement",
        "20 KB",
        "last statement fails after a slow step (resume)",
        PIPELINE_RESUME,
        "{'orders': 86, 'net_eur': 22595.71, 'north_ci': (215.55, 406.84), 'widest': 'North'}",
        edits=(('intervals["north"]', 'intervals["North"]'),),
        resume=True,
    ),
    Scenario(
        "1k-tools-wrong-key",
        "1 KB",
        "wrong key after two tool calls (an email sent)",
        OVERDUE,
        "{'overdue': 5, 'total': 6699.89, 'email': 'msg-70242ae773'}",
        edits=(('receipt["message_id"]', 'receipt["id"]'),),
        tools=True,
    ),
    Scenario(
        "5k-tools-gather",
        "5 KB",
        "wrong literal after a gather of five tool calls and an email",
        RESTOCK,
        "('sent', 6, 1400, 6600)",
        edits=(('units["Lyon"]', 'units["lyon"]'),),
        tools=True,
    ),
)

#: Programs that pause before a call a person must approve: the fix for an overdue-orders
#: email (``1k-tools-wrong-key``, corrected) and the restock plan (``5k-tools-gather``).
APPROVALS = (
    ApprovalScenario(
        "1k-approve-email",
        "1 KB",
        apply_edits(OVERDUE, [('receipt["message_id"]', 'receipt["id"]')]),
        "{'overdue': 5, 'total': 6699.89, 'email': 'msg-70242ae773'}",
    ),
    ApprovalScenario(
        "5k-approve-after-gather",
        "5 KB",
        apply_edits(RESTOCK, [('units["Lyon"]', 'units["lyon"]')]),
        "('sent', 6, 1400, 6600)",
    ),
)

#: The subset ``ptc-retry eval --quick`` runs: one of each size, a resume, two edits, and
#: each thing that can happen around a failure (an inspection, two failures in one message,
#: a restart, a stray key, tool calls).
QUICK = (
    "150b-under-threshold",
    "1k-wrong-key",
    "1k-two-in-one-message",
    "1k-stray-key",
    "5k-two-places",
    "5k-resume-last-statement",
    "5k-inspect-then-fix",
    "5k-fix-after-restart",
    "20k-config-wrong-type",
    "1k-tools-wrong-key",
)


def _cut_off(source: str, at: float) -> CutOff:
    """The corrected program of the corpus scenario ``source``, cut off at ``at``."""
    (whole,) = [scenario for scenario in SCENARIOS if scenario.name == source]
    name = f"{source.split('-')[0]}-cut-at-{round(at * 100)}"
    return CutOff(name, whole.size, whole.corrected, whole.expected, at)


#: Long programs cut off at half and at nine tenths of their arguments: a 5 KB sales
#: report and a 20 KB data pipeline (the corrected programs of two scenarios above).
CUT_OFFS: tuple[CutOff, ...] = tuple(
    _cut_off(source, at) for source in ("5k-wrong-column", "20k-wrong-literal") for at in (0.5, 0.9)
)

#: The cut-off calls ``ptc-retry eval --quick`` plays: each size, each cut.
QUICK_CUT_OFFS = ("5k-cut-at-50", "20k-cut-at-90")


def by_name(names: list[str] | tuple[str, ...]) -> list[Scenario]:
    """The scenarios with these names, in corpus order; KeyError names an unknown one."""
    known = {scenario.name: scenario for scenario in SCENARIOS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise KeyError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [scenario for scenario in SCENARIOS if scenario.name in names]
