"""Nothing a program's tools did is done twice along the path the notices offer: chains of
fixes (replay, resume, extend in several orders), failed calls the program caught, retry
loops, a gather with one failure, and a program that replays and then does more.

Each test plays the model: it sends exactly the call the last notice offers, filled in (or
a program of its own, where a model writes one), and counts every call the host
(``test_tools_kernel.Host``) makes from the first program on.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ptc_retry.backend.code_mode import CUT_OFF_CELL

from . import test_tools_kernel as tools_kernel
from .helpers import Execution, Kernel, follow, latest_line_of, tool_call_lines
from .test_tools_kernel import Host

# test_tools_kernel's fixtures: a kernel of this module's own, and the host that counts calls.
shared, host = tools_kernel.shared, tools_kernel.host

_turns = iter(range(1, 10_000))


def run_turn(host: Host, kernel: Kernel, code: str, turn: int) -> Execution:
    """Run ``code`` as the agent's program of ``turn``; its result has the reply metadata."""
    result = host.run(kernel, code, turn=turn)
    assert result.ptc is not None, result.error
    return result


def undefined(result: Execution) -> str | None:
    """The name whose NameError stopped ``result``'s program, if one did."""
    found = re.fullmatch(r"name '(\w+)' is not defined", (result.error or {}).get("evalue", ""))
    return found[1] if found else None


def send_cut_off(host: Host, kernel: Kernel, code: str, turn: int) -> Execution:
    """The model's call of ``code`` whose stream stopped part-way (``code`` is as far as it
    got), handed over as ``KernelBackend.handle_partial_tool_call`` does."""
    arrived = '{"code": ' + json.dumps(code)[:-1]  # no closing quote: it never came
    return host.run(kernel, CUT_OFF_CELL, partial=True, arguments=arrived, turn=turn)


# -- chains of fixes -----------------------------------------------------------------------------

REPLAY_RESUME_REPLAY = """\
# Confirm the order by email, fetch the warehouse report (slow), then check the totals.
sent = await tools.count(name="chain-a email")
rows = [sent] * 3
total = len(rowz)
fetched = await tools.slow(s=1.05)
check = await tools.double(x=totl)
print(sent, total, fetched, check, reprot)
"""


def test_replay_then_resume_then_replay_sends_nothing_twice(
    shared: Kernel, host: Host, module_root: Any
) -> None:
    turn = next(_turns)
    first = run_turn(host, shared, REPLAY_RESUME_REPLAY, turn)
    assert undefined(first) == "rowz"

    # It failed at once: the notice offers a replay. The replay runs whole and is slow.
    second = run_turn(host, shared, follow(first.ptc["notice"], old="rowz", new="rows"), turn)
    assert undefined(second) == "totl"
    offered = follow(second.ptc["notice"], old="totl", new="total")
    assert offered.endswith(", resume=True)")

    third = run_turn(host, shared, offered, turn)  # from the failed statement on
    assert undefined(third) == "reprot"
    assert latest_line_of(module_root / "tools", third.ptc["call_id"])["resumed_from"] == 4
    # Its recording holds its whole program: the calls of the statements it skipped first.
    lines = tool_call_lines(module_root / "tools", third.ptc["call_id"])
    assert [(line["k"], line["tool"], line["reused_from"]) for line in lines[:2]] == [
        (1, "count", second.ptc["call_id"]), (2, "slow", second.ptc["call_id"])
    ]  # fmt: skip
    assert (lines[2]["k"], lines[2]["tool"], lines[2]["reused"]) == (3, "double", False)

    fourth = run_turn(host, shared, follow(third.ptc["notice"], old="reprot", new="'ok'"), turn)

    assert fourth.status == "ok", fourth.error
    assert fourth.stdout == "1 3 slept 6 ok\n"
    assert host.calls() == [
        ("count", {"name": "chain-a email"}), ("slow", {"s": 1.05}), ("double", {"x": 3})
    ]  # fmt: skip
    reference = third.ptc["reference"]
    assert (
        fourth.stderr == f"ptc-retry: 3 tool results reused from {reference}; 0 calls made live.\n"
    )
    assert fourth.ptc["tool_calls"] == {"reused": 3, "live": 0}


RESUME_RESUME_EXTEND = """\
# Confirm the order by email, fetch two slow reports, then email the summary to the team.
sent = await tools.count(name="chain-b email")
daily = await tools.slow(s=1.05)
a = dialy
weekly = await tools.slow(s=1.1)
b = weeklt
summary = await tools.count(name="chain-b summary")
print(sent, a, b, summary, totl)
"""


def test_resume_then_resume_then_an_extended_replay_sends_nothing_twice(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    first = run_turn(host, shared, RESUME_RESUME_EXTEND, turn)
    assert undefined(first) == "dialy"

    second = run_turn(host, shared, follow(first.ptc["notice"], old="dialy", new="daily"), turn)
    assert undefined(second) == "weeklt"
    offered = follow(second.ptc["notice"], old="weeklt", new="weekly")
    assert offered.endswith(", resume=True)")  # the resume's own slow call took over 1 s

    third = run_turn(host, shared, offered, turn)
    assert undefined(third) == "totl"
    # The model's next call, the fix the notice offers, is cut off mid-stream.
    fix = follow(third.ptc["notice"], old=", totl)", new=")")
    assert not fix.endswith("resume=True)")
    cut = fix.index("totl") + 2
    cut_off = send_cut_off(host, shared, fix[:cut], turn)
    assert cut_off.ptc is not None and cut_off.ptc["status"] == "partial"

    extended = run_turn(host, shared, follow(cut_off.ptc["notice"], rest=fix[cut:]), turn)

    assert extended.status == "ok", extended.error
    assert extended.stdout == "1 slept slept 1\n"
    assert host.calls() == [
        ("count", {"name": "chain-b email"}),
        ("slow", {"s": 1.05}),
        ("slow", {"s": 1.1}),
        ("count", {"name": "chain-b summary"}),
    ]
    reference = third.ptc["reference"]
    assert extended.stderr == (
        f"ptc-retry: 4 tool results reused from {reference}; 0 calls made live.\n"
    )


STOPPED = """\
# Email the customer, wait for the slow warehouse report, then count the pages in it.
sent = await tools.count(name="stopped email")
report = await tools.slow(s=2)
pages = len(reprot)
print(sent, pages)
"""


def test_a_program_stopped_by_the_time_limit_goes_on_and_is_fixed_sending_nothing_twice(
    shared: Kernel, host: Host, module_root: Any
) -> None:
    turn = next(_turns)
    stopped = host.run(shared, STOPPED, turn=turn, time_limit=1)
    assert stopped.ptc is not None and stopped.ptc["status"] == "interrupted"
    offered = follow(stopped.ptc["notice"])
    assert offered.startswith("await ptc_retry.resume(")

    resumed = run_turn(host, shared, offered, turn)  # from the statement that was stopped
    assert undefined(resumed) == "reprot"
    made = host.calls()
    fixed = run_turn(host, shared, follow(resumed.ptc["notice"], old="reprot", new="report"), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 5\n"
    assert host.counts["stopped email"] == 1 and host.calls() == made
    # Resumed or replayed whole (as the notice offers), its recording holds both calls.
    assert [
        line["tool"] for line in tool_call_lines(module_root / "tools", fixed.ptc["call_id"])
    ] == ["count", "slow"]


# -- failed calls the program caught ---------------------------------------------------------------

CAUGHT = """\
# Look the stock up (the service may be down: go on without it), then email the customer.
try:
    stock = await tools.flaky(key="caught stock")
except ptc_retry.ToolError:
    stock = None
sent = await tools.count(name="caught email")
print(stock, sent, undefined_name)
"""


def test_a_caught_failed_call_goes_live_and_the_email_after_it_is_not_sent_again(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    host.failing.add("caught stock")
    failed = run_turn(host, shared, CAUGHT, turn)
    assert failed.stdout == "" and failed.error is not None
    assert host.counts["caught email"] == 1

    fixed = run_turn(
        host, shared, follow(failed.ptc["notice"], old=", undefined_name", new=""), turn
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "caught stock: up 1\n"
    assert host.counts["caught email"] == 1
    assert host.calls()[2:] == [("flaky", {"key": "caught stock"})]  # only the failed call again
    reference = failed.ptc["reference"]
    assert fixed.stderr == f"ptc-retry: 1 tool result reused from {reference}; 1 call made live.\n"


RETRYING = """\
# Look the stock up, retrying while the service is down, then email the customer.
for attempt in range(3):
    try:
        stock = await tools.flaky(key="retried stock")
        break
    except ptc_retry.ToolError:
        pass
sent = await tools.count(name="retried email")
print(attempt, stock, sent, undefined_name)
"""


def test_a_retry_loop_gets_the_success_that_followed_its_failures(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    host.failing.add("retried stock")
    failed = run_turn(host, shared, RETRYING, turn)
    assert failed.error is not None
    calls = host.calls()
    assert calls == [
        ("flaky", {"key": "retried stock"}),
        ("flaky", {"key": "retried stock"}),
        ("count", {"name": "retried email"}),
    ]

    fixed = run_turn(
        host, shared, follow(failed.ptc["notice"], old=", undefined_name", new=""), turn
    )

    assert fixed.status == "ok", fixed.error
    # The first attempt got the recorded success: the loop ended at once, nothing went live.
    assert fixed.stdout == "0 retried stock: up 1\n"
    assert host.calls() == calls
    reference = failed.ptc["reference"]
    assert fixed.stderr == (
        f"ptc-retry: 2 tool results reused from {reference}; 0 calls made live.\n"
    )


class Outages(Host):
    """A host whose ``flaky`` service stays down for as many calls as ``down[key]`` says."""

    def __init__(self) -> None:
        super().__init__()
        self.down: Counter[str] = Counter()

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        key = call["arguments"].get("key") if call["tool"] == "flaky" else None
        if key is not None and self.down[key] > 0:
            self.down[key] -= 1
            self.failing.add(key)  # Host's flaky fails once for a key it holds
        return super().answer(call)


GAVE_UP = """\
# Look the stock up, twice at most while the service is down, then email the customer.
for attempt in range(2):
    try:
        stock = await tools.flaky(key="gave-up stock")
        break
    except ptc_retry.ToolError:
        stock = None
sent = await tools.count(name="gave-up email")
print(attempt, stock, sent, undefined_name)
"""


def test_a_retry_loop_that_gave_up_and_now_succeeds_at_once_does_not_email_again(
    shared: Kernel,
) -> None:
    host = Outages()
    host.down["gave-up stock"] = 2
    turn = next(_turns)
    failed = run_turn(host, shared, GAVE_UP, turn)
    assert failed.error is not None and host.counts["gave-up email"] == 1

    fixed = run_turn(
        host, shared, follow(failed.ptc["notice"], old=", undefined_name", new=""), turn
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "0 gave-up stock: up 1\n"  # the service is back: one attempt
    assert host.counts["gave-up email"] == 1
    assert host.calls()[3:] == [("flaky", {"key": "gave-up stock"})]
    reference = failed.ptc["reference"]
    assert fixed.stderr == f"ptc-retry: 1 tool result reused from {reference}; 1 call made live.\n"


GATHERED = """\
# Price three items at once (one price service may be down), then email the quote.
import asyncio
got = await asyncio.gather(
    tools.double(x=1), tools.flaky(key="gathered price"), tools.double(x=3),
    return_exceptions=True,
)
sent = await tools.count(name="gathered email")
print(got[0], type(got[1]).__name__, got[2], sent, undefined_name)
"""


def fail_then_fix(host: Host, kernel: Kernel, code: str, down: str) -> tuple[Execution, Execution]:
    """Run ``code`` while the flaky service is down for ``down`` (once), and then the fix its
    notice offers, which takes out the ``undefined_name`` it fails on."""
    turn = next(_turns)
    host.failing.add(down)
    failed = run_turn(host, kernel, code, turn)
    assert undefined(failed) == "undefined_name"
    fix = follow(failed.ptc["notice"], old=", undefined_name", new="")
    return failed, run_turn(host, kernel, fix, turn)


def test_a_gather_with_one_failed_call_makes_only_that_call_again(
    shared: Kernel, host: Host, module_root: Any
) -> None:
    failed, fixed = fail_then_fix(host, shared, GATHERED, "gathered price")
    assert len(host.calls()) == 4 + 1
    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "2 str 6 1\n"  # the price service answered this time
    assert host.calls()[4:] == [("flaky", {"key": "gathered price"})]
    reference = failed.ptc["reference"]
    assert fixed.stderr == f"ptc-retry: 3 tool results reused from {reference}; 1 call made live.\n"
    lines = tool_call_lines(module_root / "tools", fixed.ptc["call_id"])
    assert sorted((line["k"], line["reused"]) for line in lines) == [
        (1, True), (2, False), (3, True), (4, True)
    ]  # fmt: skip


# -- calls a recorded function makes ---------------------------------------------------------------

NOTIFYING = """\
# Notify the customer through a helper that emails, then report.
@ptc_retry.recorded
async def notify(to):
    status = await tools.count(name=to)
    return f"{status} {sufix}"

print(await notify("within email"))
"""


def test_a_host_call_inside_a_recorded_function_that_failed_is_not_made_again(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    failed = run_turn(host, shared, NOTIFYING, turn)
    assert undefined(failed) == "sufix"
    assert host.counts["within email"] == 1

    fixed = run_turn(host, shared, follow(failed.ptc["notice"], old="{sufix}", new="sent"), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 sent\n"
    assert host.counts["within email"] == 1  # the failed function ran again, its email did not
    reference = failed.ptc["reference"]
    assert fixed.stderr == f"ptc-retry: 1 tool result reused from {reference}; 1 call made live.\n"


NOTIFIED = """\
# Notify the customer through a helper that emails, email the team, then report.
@ptc_retry.recorded
async def tell(to):
    return await tools.count(name=to)

told = await tell("within customer")
team = await tools.count(name="within team")
print(told, team, reprot)
"""


def test_a_reused_recorded_function_makes_none_of_its_calls_and_the_next_is_reused(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    failed = run_turn(host, shared, NOTIFIED, turn)
    assert undefined(failed) == "reprot"

    fixed = run_turn(host, shared, follow(failed.ptc["notice"], old=", reprot", new=""), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 1\n"
    assert host.counts["within customer"] == 1 and host.counts["within team"] == 1
    said = f"ptc-retry: 2 tool results reused from {failed.ptc['reference']}; 0 calls made live.\n"
    assert fixed.stderr == said


CHAINED_HELPER = """\
# Notify the customer through a helper that emails, then report.
@ptc_retry.recorded
async def announce(to):
    return await tools.count(name=to)

sent = await announce("chained helper email")
print(sent, typo_one, typo_two)
"""


def test_a_chain_of_fixes_keeps_the_calls_made_within_a_reused_recorded_call(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    failed = run_turn(host, shared, CHAINED_HELPER, turn)
    # The first fix reuses the helper's result: the email within it is not made.
    second = run_turn(host, shared, follow(failed.ptc["notice"], old="typo_one", new="1"), turn)
    assert undefined(second) == "typo_two"
    # The second edits the helper, which runs again: its email is reused all the same.
    edits = [("return await", "print(to)\n    return await"), ("typo_two", "2")]
    reference = second.ptc["reference"]
    third = run_turn(host, shared, f"await ptc_retry.replay({reference!r}, edits={edits!r})", turn)

    assert third.status == "ok", third.error
    assert third.stdout == "chained helper email\n1 1 2\n"
    assert host.counts["chained helper email"] == 1


CHANGING_ITS_ARGUMENT = """\
# Reserve the lamp and put it in the cart, then report.
@ptc_retry.recorded
async def add(cart, item):
    await tools.count(name=item)
    cart.append(item)

cart = []
await add(cart, "argument lamp")
print(cart, typo)
"""


def test_a_recorded_function_that_changed_its_argument_runs_again_without_its_calls(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    failed = run_turn(host, shared, CHANGING_ITS_ARGUMENT, turn)

    fixed = run_turn(host, shared, follow(failed.ptc["notice"], old=", typo", new=""), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "['argument lamp']\n"  # not [], as a reused result would leave it
    assert host.counts["argument lamp"] == 1


# -- a program that replays and then does more -----------------------------------------------------

REPORT = """\
# Build the monthly report: fetch the numbers once, then format them for the team.
numbers = await tools.count(name="report numbers")
print("numbers:", numbers, missing_name)
"""

REPLAY_AND_MORE = """\
# First the fixed report (replayed), then the email that sends it to the team.
await ptc_retry.replay({reference}, ", missing_name", "")
sent = await tools.count(name="report email")
print("sent:", snet)
"""


def test_a_replay_of_a_program_that_replayed_and_did_more_sends_nothing_twice(
    shared: Kernel, host: Host, module_root: Any
) -> None:
    turn = next(_turns)
    report = run_turn(host, shared, REPORT, turn)
    assert report.error is not None
    reference = json.dumps(report.ptc["reference"])

    both = run_turn(host, shared, REPLAY_AND_MORE.format(reference=reference), turn)
    assert undefined(both) == "snet"
    # Said of the replay, counted exactly: the email after it is the program's own call.
    said = f"ptc-retry: 1 tool result reused from {report.ptc['reference']}; 0 calls made live.\n"
    assert both.stderr == said

    fixed = run_turn(host, shared, follow(both.ptc["notice"], old="snet", new="sent"), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "numbers: 1\nsent: 1\n"
    assert host.calls() == [
        ("count", {"name": "report numbers"}),
        ("count", {"name": "report email"}),
    ]
    # One line, of the whole replay: the nested replay's call and the email, both reused.
    assert fixed.stderr == (
        f"ptc-retry: 2 tool results reused from {both.ptc['reference']}; 0 calls made live.\n"
    )
    assert latest_line_of(module_root / "tools", fixed.ptc["call_id"])["tool_calls"] == {
        "reused": 2,
        "live": 0,
    }


DIES_IN_THE_RESUME = """\
# Email the customer, fetch the slow report, then hand it to the native renderer.
import os
sent = await tools.count(name="died email")
report = await tools.slow(s=1.05)
pages = len(reprot)
os._exit(1) if pages else None  # stands for a crash inside a native library
print(sent, pages)
"""


def test_a_resume_that_killed_its_kernel_is_resumed_without_sending_anything_twice(
    start_kernel: Any, host: Host
) -> None:
    kernel = start_kernel()  # a kernel of its own: the resume kills it
    failed = run_turn(host, kernel, DIES_IN_THE_RESUME, next(_turns))  # #1
    offered = follow(failed.ptc["notice"], old="reprot", new="report")
    assert offered.endswith(", resume=True)")
    host.run_dying(kernel, offered)  # #2 runs from the failed statement on, and dies
    kernel.restart()

    # Going on with the fix, resume=True: the kernel's state is gone, so it runs whole.
    again = host.run(
        kernel, "await ptc_retry.replay('#2', 'os._exit(1) if pages else None', '', resume=True)"
    )

    assert again.status == "ok", again.error
    assert again.stdout == "1 5\n"
    assert "the kernel restarted" in again.stderr
    assert host.counts["died email"] == 1
    assert host.calls() == [("count", {"name": "died email"}), ("slow", {"s": 1.05})]


# -- a fix that stops before the calls its target made --------------------------------------------

EARLY_STOP = """\
# Email the customer, work out the total, email the accountant, then print the report.
sent = await tools.count(name="early customer")
total = (
    sent * 2
)
booked = await tools.count(name="early accountant")
print(sent, total, booked, totl)
"""


def test_a_fix_that_fails_before_the_calls_its_target_made_does_not_lose_them(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    first = run_turn(host, shared, EARLY_STOP, turn)
    assert undefined(first) == "totl"
    # The model's fix touches a line before the accountant's email, and breaks it.
    edits = [("sent * 2", "sent * RATE"), ("totl", "total")]
    reference = first.ptc["reference"]
    second = run_turn(host, shared, f"await ptc_retry.replay({reference!r}, edits={edits!r})", turn)
    assert undefined(second) == "RATE"

    third = run_turn(host, shared, follow(second.ptc["notice"], old="RATE", new="2"), turn)

    assert third.status == "ok", third.error
    assert third.stdout == "1 2 1 2\n"
    assert host.counts["early accountant"] == 1 and host.counts["early customer"] == 1
    assert third.stderr == (
        f"ptc-retry: 2 tool results reused from {second.ptc['reference']} and {reference}; "
        "0 calls made live.\n"
    )


def test_a_fix_stopped_by_the_time_limit_is_resumed_without_repeating_its_targets_calls(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    code = EARLY_STOP.replace("early", "stopped").replace("sent * 2", "sent")
    first = run_turn(host, shared, code, turn)
    assert undefined(first) == "totl"
    # The fix waits where the first run did not: the time limit stops it there.
    wait = "import asyncio\nawait asyncio.sleep(3)  # the ledger settles first\ntotal = (\n"
    edits = [("total = (\n", wait), ("totl", "total")]
    fix = f"await ptc_retry.replay({first.ptc['reference']!r}, edits={edits!r})"
    stopped = host.run(shared, fix, turn=turn, time_limit=1)
    assert stopped.ptc is not None and stopped.ptc["status"] == "interrupted"
    offered = follow(stopped.ptc["notice"])
    assert offered.startswith("await ptc_retry.resume(")

    resumed = run_turn(host, shared, offered, turn)

    assert resumed.status == "ok", resumed.error
    assert resumed.stdout.endswith("1 1 1 1\n")
    assert host.counts["stopped customer"] == 1 and host.counts["stopped accountant"] == 1


IDENTICAL_IN_A_GATHER = """\
# Ask the flaky service twice at once (one may fail), email the customer, then report.
import asyncio
got = await asyncio.gather(
    tools.flaky(key="twice price"), tools.flaky(key="twice price"), return_exceptions=True
)
sent = await tools.count(name="twice email")
print(sorted(type(one).__name__ for one in got), sent, undefined_name)
"""


def test_a_gather_of_two_identical_calls_one_failed_makes_only_that_one_again(
    shared: Kernel, host: Host
) -> None:
    failed, fixed = fail_then_fix(host, shared, IDENTICAL_IN_A_GATHER, "twice price")

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "['str', 'str'] 1\n"
    assert host.counts["twice email"] == 1
    assert host.calls()[3:] == [("flaky", {"key": "twice price"})]
    reference = failed.ptc["reference"]
    assert fixed.stderr == f"ptc-retry: 2 tool results reused from {reference}; 1 call made live.\n"


# -- a recording the disk had no room for ----------------------------------------------------------

#: A program's first lines that fill the disk up (the file ``filler``).
FILL_DISK = """\
import os
filler = os.open({filler!r}, os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(filler, b"\\0" * 512)
except OSError:
    os.close(filler)
"""

# The disk fills up while the program emails two customers; then it frees it and reports.
DISK_FILLS = (
    FILL_DISK
    + """\
first = await tools.count(name="full-disk first")
second = await tools.count(name="full-disk second")
os.remove({filler!r})
print(first, second, totl)
"""
)


def test_calls_the_full_disk_left_unrecorded_are_not_made_again_by_the_fix(
    start_kernel: Any, host: Host, tmpfs: Any
) -> None:
    disk = tmpfs("size=256k,mode=0700")
    kernel = start_kernel(root=disk / "root")
    turn = next(_turns)
    failed = run_turn(host, kernel, DISK_FILLS.format(filler=str(disk / "filler")), turn)
    assert undefined(failed) == "totl"
    assert "could not record the tool calls" in failed.stderr  # said once, as ever

    fixed = run_turn(host, kernel, follow(failed.ptc["notice"], old="totl", new="0"), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 1 0\n"
    assert host.counts["full-disk first"] == 1 and host.counts["full-disk second"] == 1


RETRY_WITH_LOGIN = """\
# Each attempt logs in, then looks the stock up; retry while the service is down.
for attempt in range(3):
    token = await tools.count(name="login-retry token")
    try:
        stock = await tools.flaky(key="login-retry stock")
    except ptc_retry.ToolError:
        continue
    break
sent = await tools.count(name="login-retry email")
print(attempt, stock, sent, undefined_name)
"""


def test_a_retry_loop_whose_failed_attempt_now_succeeds_reuses_the_calls_after_the_loop(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    host.failing.add("login-retry stock")
    failed = run_turn(host, shared, RETRY_WITH_LOGIN, turn)
    assert undefined(failed) == "undefined_name"
    assert host.counts["login-retry email"] == 1
    host.failing.add("login-retry stock")  # still down: the replay's attempt fails again
    made = len(host.calls())

    fixed = run_turn(
        host, shared, follow(failed.ptc["notice"], old=", undefined_name", new=""), turn
    )

    assert fixed.status == "ok", fixed.error
    # The first login is reused, its failed lookup goes live (and fails again), the second
    # attempt's login and lookup are the recorded ones, and so is the email.
    assert host.calls()[made:] == [("flaky", {"key": "login-retry stock"})]
    assert fixed.stdout == "1 login-retry stock: up 1\n"
    reference = failed.ptc["reference"]
    assert fixed.stderr == (
        f"ptc-retry: 4 tool results reused from {reference}; 1 call made live.\n"
    )


def test_a_retry_loop_that_now_succeeds_sooner_does_not_send_the_email_again(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    host.failing.add("login-sooner stock")
    failed = run_turn(host, shared, RETRY_WITH_LOGIN.replace("login-retry", "login-sooner"), turn)
    assert undefined(failed) == "undefined_name"
    made = len(host.calls())

    fixed = run_turn(
        host, shared, follow(failed.ptc["notice"], old=", undefined_name", new=""), turn
    )

    assert fixed.status == "ok", fixed.error
    # The service is back: the failed lookup goes live and succeeds, the loop ends sooner,
    # and the email after the loop is the recorded one.
    assert host.calls()[made:] == [("flaky", {"key": "login-sooner stock"})]
    assert host.counts["login-sooner email"] == 1
    assert fixed.stdout == "0 login-sooner stock: up 1\n"
    reference = failed.ptc["reference"]
    assert fixed.stderr == (
        f"ptc-retry: 2 tool results reused from {reference}; 1 call made live.\n"
    )


class Notifier(Host):
    """A host with a ``notify`` tool whose ``urgent`` argument defaults to false."""

    def __init__(self) -> None:
        super().__init__()
        notify = {
            "name": "notify",
            "description": "Sends a message: a side effect.",
            "parameters": {
                "type": "object",
                "properties": {
                    "to": {"type": "string"},
                    "urgent": {"type": "boolean", "default": False},
                },
                "required": ["to"],
            },
        }
        self.catalog = [*tools_kernel.CATALOG, notify]

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        if call["tool"] != "notify":
            return super().answer(call)
        self.counts[call["arguments"]["to"]] += 1
        return {
            "id": call["id"],
            "ok": True,
            "result": f"sent {self.counts[call['arguments']['to']]}",
        }


DEFAULTED = """\
# Tell the team, then the customer, then print the receipts.
team = await tools.notify({team})
customer = await tools.count(name="defaults customer")
print(team, customer, undefined_name)
"""


def test_a_call_that_leaves_out_a_defaulted_argument_matches_one_that_spells_it_out(
    shared: Kernel,
) -> None:
    for first, fix in [
        ('"defaults team a"', '"defaults team a", urgent=False'),
        ('to="defaults team b", urgent=False', 'to="defaults team b"'),
    ]:
        host = Notifier()
        turn = next(_turns)
        failed = run_turn(host, shared, DEFAULTED.format(team=first), turn)
        assert undefined(failed) == "undefined_name"

        fixed = run_turn(
            host,
            shared,
            f"await ptc_retry.replay({failed.ptc['reference']!r}, edits=["
            f"({first!r}, {fix!r}), (', undefined_name', '')])",
            turn,
        )

        assert fixed.status == "ok", fixed.error
        assert fixed.stdout == "sent 1 1\n"
        assert len(host.calls()) == 2  # the first run's: none made again


DISK_STAYS_FULL = (
    FILL_DISK
    + """\
first = await tools.count(name="bounded first")
report = await tools.big(n=3000)
second = await tools.count(name="bounded second")
for i in range(40):
    await tools.double(x=i)
os.remove({filler!r})
last = await tools.double(x=100)
print(first, len(report), second, totl)
"""
)


def test_what_a_full_disk_keeps_in_memory_is_bounded_and_said(
    start_kernel: Any, host: Host, tmpfs: Any
) -> None:
    disk = tmpfs("size=256k,mode=0700")
    kernel = start_kernel(root=disk / "root", args=["--PtcRetry.unwritten_tool_calls_bytes=2000"])
    turn = next(_turns)
    failed = run_turn(host, kernel, DISK_STAYS_FULL.format(filler=str(disk / "filler")), turn)
    assert undefined(failed) == "totl"
    call_id = failed.ptc["call_id"]
    assert (
        f"kept the tool calls of {call_id} without their results, for want of disk" in failed.stderr
    )
    assert f"dropped the tool-call lines of {call_id} from call " in failed.stderr

    fixed = run_turn(host, kernel, follow(failed.ptc["notice"], old="totl", new="0"), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 3000 1 0\n"
    # The line kept without its result makes that call live; the next is still reused.
    assert host.counts["bounded first"] == 1 and host.counts["bounded second"] == 1
    assert host.calls().count(("big", {"n": 3000})) == 2


def test_a_fix_that_spelt_out_a_default_and_stopped_early_is_fixed_sending_nothing_twice(
    shared: Kernel,
) -> None:
    host = Notifier()
    turn = next(_turns)
    failed = run_turn(host, shared, DEFAULTED.format(team='"early team"'), turn)
    assert undefined(failed) == "undefined_name"
    # The fix spells the default out, and stops before the customer's call.
    stopped = run_turn(
        host,
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, "
        "'\"early team\")', '\"early team\", urgent=False)\\nboom')",
        turn,
    )
    assert undefined(stopped) == "boom"

    fixed = run_turn(
        host,
        shared,
        f"await ptc_retry.replay({stopped.ptc['reference']!r}, "
        "edits=[('\\nboom', ''), (', undefined_name', '')])",
        turn,
    )

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "sent 1 1\n"
    assert len(host.calls()) == 2  # the first run's: none made again


CHAINED_RETRY = """\
# Email the start, then log in and look the stock up, retrying; then email the customer.
started = await tools.count(name="chained start")
for attempt in range(3):
    token = await tools.count(name="chained token")
    try:
        stock = await tools.flaky(key="chained stock")
    except ptc_retry.ToolError:
        continue
    break
sent = await tools.count(name="chained email")
print(started, stock, sent, undefined_name)
"""


def test_a_fix_of_a_fix_that_stopped_before_a_retry_loop_does_not_email_again(
    shared: Kernel, host: Host
) -> None:
    turn = next(_turns)
    host.failing.add("chained stock")
    failed = run_turn(host, shared, CHAINED_RETRY, turn)
    assert undefined(failed) == "undefined_name"
    # The first fix stops before the loop, on a typo of its own.
    stopped = run_turn(
        host,
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, 'for attempt', 'tpyo\\nfor attempt')",
        turn,
    )
    assert undefined(stopped) == "tpyo"
    made = len(host.calls())

    fixed = run_turn(
        host,
        shared,
        f"await ptc_retry.replay({stopped.ptc['reference']!r}, "
        "edits=[('tpyo\\n', ''), (', undefined_name', '')])",
        turn,
    )

    assert fixed.status == "ok", fixed.error
    # The service is back: the failed lookup goes live and succeeds, nothing else is made.
    assert host.calls()[made:] == [("flaky", {"key": "chained stock"})]
    assert host.counts["chained email"] == 1
