"""Reuse at its edges, on a real kernel as in test_reuse_chains.py: a host tool's schema
that changes a default between the failure and its fix, retry loops that gave up or
gathered, a recorded function given a tuple, and lines a full disk kept in memory."""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any

from . import test_tools_kernel as tools_kernel
from .helpers import Execution, Kernel, OnLoop, StartBackend, follow
from .test_reuse_chains import DEFAULTED, FILL_DISK, Notifier, Outages, _turns, run_turn, undefined

shared = tools_kernel.shared


def notify_defaulting(host: Notifier, urgent: Any) -> dict[str, Any]:
    """``host``'s notify tool with ``urgent`` defaulting to ``urgent``."""
    notify = copy.deepcopy(host.catalog[-1])
    notify["parameters"]["properties"]["urgent"]["default"] = urgent
    return notify


def test_a_default_changed_before_the_fix_compares_the_recorded_call_with_its_own_default(
    shared: Kernel,
) -> None:
    host = Notifier()
    turn = next(_turns)
    failed = run_turn(host, shared, DEFAULTED.format(team='"changed default team"'), turn)
    assert undefined(failed) == "undefined_name"
    # The tool now defaults to urgent: the fix spells out the urgent=False the first run
    # was sent with.
    host.catalog = [*tools_kernel.CATALOG, notify_defaulting(host, True)]

    fixed = run_turn(
        host,
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, edits=["
        "('\"changed default team\"', '\"changed default team\", urgent=False'), "
        "(', undefined_name', '')])",
        turn,
    )

    assert fixed.status == "ok", fixed.error
    # The tool changed, so its call is made again; the customer's is the recorded one.
    assert fixed.stdout == "sent 2 1\n"
    assert host.counts["defaults customer"] == 1


def fail_then_fix(
    host: Outages, kernel: Kernel, code: str, key: str, down: int
) -> tuple[Execution, int]:
    """Run ``code`` while the flaky service of ``key`` is down for ``down`` calls, then the
    fix its notice offers (the service back up), which takes out the ``undefined_name`` it
    fails on: the fix's execution, and how many calls the host had answered before it."""
    host.down[key] = down
    turn = next(_turns)
    failed = run_turn(host, kernel, code, turn)
    assert undefined(failed) == "undefined_name"
    made = len(host.calls())
    fix = follow(failed.ptc["notice"], old=", undefined_name", new="")
    return run_turn(host, kernel, fix, turn), made


GAVE_UP_AFTER_LOGINS = """\
# Each attempt logs in, then looks the stock up; three attempts while the service is down.
for attempt in range(3):
    token = await tools.count(name="gave-up-login token")
    try:
        stock = await tools.flaky(key="gave-up-login stock")
        break
    except ptc_retry.ToolError:
        stock = None
sent = await tools.count(name="gave-up-login email")
print(attempt, stock, sent, undefined_name)
"""


def test_a_retry_loop_that_gave_up_after_logins_and_now_succeeds_does_not_email_again(
    shared: Kernel,
) -> None:
    host = Outages()
    fixed, made = fail_then_fix(host, shared, GAVE_UP_AFTER_LOGINS, "gave-up-login stock", 3)

    assert fixed.status == "ok", fixed.error
    # The service is back: the first login is reused, the lookup goes live and succeeds,
    # and the email after the loop is the recorded one.
    assert fixed.stdout == "0 gave-up-login stock: up 1\n"
    assert host.calls()[made:] == [("flaky", {"key": "gave-up-login stock"})]
    assert host.counts["gave-up-login email"] == 1


GATHER_IN_A_RETRY = """\
# Each attempt logs in, then prices both items at once; retry while a service is down.
import asyncio
for attempt in range(3):
    token = await tools.count(name="loop-gather token")
    try:
        a, b = await asyncio.gather(
            tools.flaky(key="loop-gather a"), tools.flaky(key="loop-gather b")
        )
        break
    except ptc_retry.ToolError:
        a = b = None
sent = await tools.count(name="loop-gather email")
print(attempt, a, b, sent, undefined_name)
"""


def test_a_gather_in_a_retry_loop_that_now_succeeds_at_once_does_not_email_again(
    shared: Kernel,
) -> None:
    host = Outages()
    # The first attempt's a fails, its b succeeds.
    fixed, made = fail_then_fix(host, shared, GATHER_IN_A_RETRY, "loop-gather a", 1)

    assert fixed.status == "ok", fixed.error
    # a goes live and succeeds, b is the first attempt's: the loop ends, and the email is
    # the recorded one (not matched against the second attempt's b).
    assert fixed.stdout == "0 loop-gather a: up loop-gather b: up 1\n"
    assert host.calls()[made:] == [("flaky", {"key": "loop-gather a"})]
    assert host.counts["loop-gather email"] == 1


TUPLE_ARGUMENT = """\
# Add the pair up in a recorded function, then email the total.
@ptc_retry.recorded
def total(pair):
    return sum(pair)

t = total((1, 2))
sent = await tools.count(name="tuple-argument email")
print(t, sent, undefined_name)
"""


def test_a_recorded_function_given_a_tuple_goes_live_and_the_email_after_it_is_reused(
    shared: Kernel,
) -> None:
    host = Notifier()
    turn = next(_turns)
    failed = run_turn(host, shared, TUPLE_ARGUMENT, turn)
    assert undefined(failed) == "undefined_name"

    fixed = run_turn(
        host,
        shared,
        f"await ptc_retry.replay({failed.ptc['reference']!r}, ', undefined_name', '')",
        turn,
    )

    assert fixed.status == "ok", fixed.error
    # A tuple is no JSON: no telling whether total's call is the same, so it runs again;
    # the email after it is still the recorded one.
    assert fixed.stdout == "3 1\n"
    assert host.counts["tuple-argument email"] == 1


DISK_STAYS_FULL = (
    FILL_DISK
    + """\
first = await tools.count(name="freed-disk first")
second = await tools.count(name="freed-disk second")
print(first, second, totl)
"""
)


def test_calls_kept_for_want_of_disk_are_written_once_it_has_room_and_outlive_a_restart(
    start_kernel: Any, tmpfs: Any
) -> None:
    host = Notifier()
    disk = tmpfs("size=256k,mode=0700")
    kernel = start_kernel(root=disk / "root")
    turn = next(_turns)
    filler = str(disk / "filler")
    failed = run_turn(host, kernel, DISK_STAYS_FULL.format(filler=filler), turn)
    assert undefined(failed) == "totl"
    assert "could not record the tool calls" in failed.stderr
    os.remove(filler)  # the disk has room again, after that program ended
    assert run_turn(host, kernel, "'a later program'", turn).status == "ok"
    kernel.restart()  # what the kernel kept in memory is gone

    fixed = run_turn(host, kernel, follow(failed.ptc["notice"], old="totl", new="0"), turn)

    assert fixed.status == "ok", fixed.error
    assert fixed.stdout == "1 1 0\n"
    assert host.counts["freed-disk first"] == 1 and host.counts["freed-disk second"] == 1


class Desk:
    """Host tools registered as Python functions, whose defaults their schema gives."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bool]] = []

    def notify(self, to: str, urgent: bool = False) -> str:
        """Send a message (a side effect)."""
        self.sent.append((to, urgent))
        return f"sent {len(self.sent)}"


def test_a_registered_function_s_default_spelt_out_by_the_fix_sends_nothing_twice(
    start_backend: StartBackend, options: dict[str, Any], on_loop: OnLoop[Any]
) -> None:
    desk = Desk()
    kb = start_backend(tools=[desk.notify], **options)
    program = (
        "team = await tools.notify('registered team')\n"
        "customer = await tools.notify('registered customer', urgent=True)\n"
        "print(team, customer, undefined_name)\n"
    )
    failed = on_loop(asyncio.wait_for(kb.run_code(program), 30))
    assert failed.status == "error" and failed.reference is not None
    fix = (
        f"await ptc_retry.replay({failed.reference!r}, edits=[(\"'registered team')\", "
        "\"'registered team', urgent=False)\"), (', undefined_name', '')])"
    )

    fixed = on_loop(asyncio.wait_for(kb.run_code(fix), 30))

    assert fixed.status == "ok", fixed.text
    assert fixed.text.startswith("sent 1 sent 2"), fixed.text
    assert desk.sent == [("registered team", False), ("registered customer", True)]
