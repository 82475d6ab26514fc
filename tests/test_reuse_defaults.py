"""Reuse of host-tool calls compared with the schema's defaults filled in, when the schema
changes between the failure and its fix (a real kernel, as test_reuse_chains.py)."""

from __future__ import annotations

import copy
from typing import Any

from . import test_tools_kernel as tools_kernel
from .helpers import Kernel
from .test_reuse_chains import DEFAULTED, Notifier, _turns, run_turn, undefined

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
