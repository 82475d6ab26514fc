"""Promises under interrupts and concurrency, on real kernels: a replay stops when it is
interrupted, cells of ipykernel subshells keep their own facts, unloading works in the
ptc-retry kernel, and no time limit crashes the timer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ipykernel
import pytest

from .helpers import BLOCKING_MINUTE, Execution, Kernel, history

# Fails at once on its last line; its first line is what a replay changes.
# Each prints WAITING just before it waits, which is when the tests interrupt it.
# A blocking wait is many short sleeps (BLOCKING_MINUTE).
WAITING = "waiting"
#: An awaiting program says WAITING once it is suspended in its next ``await``: from the loop.
AWAITING = "asyncio.get_running_loop().call_soon(lambda: print('waiting', flush=True))\n"
SLEEPER = (
    "import time\nseconds = 0\nprint('waiting', flush=True)\nfor _ in range(seconds * 20):\n"
    "    time.sleep(0.05)\n"
    "print('slept')\nundefined_name\n"
)
SPINNER = (
    "spins = 0\nprint('waiting', flush=True)\nwhile spins < 0:\n    spins += 1\n"
    "print('spun')\nundefined_name\n"
)


def interrupted_when_waiting(
    kernel: Kernel, code: str, stream: str = "stdout"
) -> tuple[Execution, float]:
    """Run ``code``, interrupt the kernel once it has printed ``WAITING`` to ``stream``; the
    execution and how long the program went on after the interrupt."""
    msg_id = kernel.send(code)
    kernel.wait_for_output(msg_id, WAITING, stream)
    kernel.manager.interrupt_kernel()
    interrupted_at = time.monotonic()
    execution = kernel.collect(msg_id, timeout=120)
    return execution, time.monotonic() - interrupted_at


@pytest.mark.parametrize(
    ("program", "edit"),
    [(SLEEPER, ("seconds = 0", "seconds = 60")), (SPINNER, ("spins < 0", "spins >= 0"))],
    ids=["sleeping", "busy loop"],
)
def test_an_interrupt_stops_a_replayed_program_at_once(
    kernel: Kernel, checkpoint_root: Path, program: str, edit: tuple[str, str]
) -> None:
    assert kernel.execute(program).error["ename"] == "NameError"
    replay = f"await ptc_retry.replay('#1', {edit[0]!r}, {edit[1]!r})"

    stopped, after = interrupted_when_waiting(kernel, replay)

    assert after < 5, f"the replay ran on for {after:.1f} s after the interrupt"
    assert stopped.error["ename"] == "KeyboardInterrupt"
    assert stopped.ptc["status"] == "interrupted"
    assert history(kernel.session_dir)[-1]["status"] == "interrupted"
    # The kernel takes the next program at once, with the replay's names in place.
    assert kernel.execute("print('next')").stdout == "next\n"


@pytest.mark.parametrize(
    "wait",
    ["time.sleep(0.05)", "await asyncio.sleep(0.05)"],
    ids=["blocking", "awaiting"],
)
def test_an_interrupted_replay_is_offered_going_on(
    kernel: Kernel, checkpoint_root: Path, wait: str
) -> None:
    sleeper = SLEEPER.replace("time.sleep(0.05)", wait)
    if wait.startswith("await"):
        sleeper = sleeper.replace("print('waiting', flush=True)\n", AWAITING)
    long_sleeper = (
        "import asyncio\n" + sleeper + "# " + "padding to pass notice_min_bytes " * 6 + "\n"
    )
    kernel.execute(long_sleeper)
    replay = "await ptc_retry.replay('#1', 'seconds = 0', 'seconds = 60')"
    stopped, after = interrupted_when_waiting(kernel, replay)
    assert after < 5, f"the replay ran on for {after:.1f} s after the interrupt"
    assert stopped.ptc["notice"] == (
        '[ptc-retry] Interrupted; saved as #2. To go on:\nawait ptc_retry.resume("#2")'
    )
    assert stopped.ptc["status"] == history(kernel.session_dir)[-1]["status"] == "interrupted"


def test_an_interrupt_stops_a_cell_that_awaits(kernel: Kernel) -> None:
    # ipykernel 6.29 and 7.4 alone leave such a cell waiting out its sleep.
    awaiting = "import asyncio\n" + AWAITING + "await asyncio.sleep(60)"
    stopped, after = interrupted_when_waiting(kernel, awaiting)

    assert after < 5, f"the cell ran on for {after:.1f} s after the interrupt"
    assert (stopped.error["ename"], stopped.ptc["status"]) == ("CancelledError", "interrupted")
    assert kernel.execute("1 + 1").result == "2"


def test_an_interrupt_still_stops_a_plain_cell_and_the_kernel_goes_on(kernel: Kernel) -> None:
    sleeping = "import time\nprint('waiting', flush=True)\n" + BLOCKING_MINUTE
    stopped, after = interrupted_when_waiting(kernel, sleeping)
    assert after < 5, f"the cell ran on for {after:.1f} s after the interrupt: {stopped.error}"
    assert stopped.error["ename"] == "KeyboardInterrupt"
    assert kernel.execute("1 + 1").result == "2"


SUBSHELLS = tuple(int(part) for part in ipykernel.__version__.split(".")[:2]) >= (7, 0)


def create_subshell(kernel: Kernel) -> str:
    msg = kernel.client.session.msg("create_subshell_request", {})
    kernel.client.control_channel.send(msg)
    reply = kernel.client.get_control_msg(timeout=30)
    return str(reply["content"]["subshell_id"])


@pytest.mark.skipif(not SUBSHELLS, reason="ipykernel subshells exist from ipykernel 7 on")
def test_cells_of_two_subshells_at_once_keep_their_own_facts(kernel: Kernel) -> None:
    slow_shell, quick_shell = create_subshell(kernel), create_subshell(kernel)
    slow = "import time\ntime.sleep(1.5)\n" + "slow_values = [1, 2]\n" * 12 + "slow_values[9]\n"
    quick = "quick = {'a': 1}\n" + "quick['a'] += 1\n" * 12 + "quick['b']\n"

    slow_id = kernel.send(slow, {"call_id": "call_slow"}, subshell_id=slow_shell)
    time.sleep(0.3)
    quick_id = kernel.send(quick, {"call_id": "call_quick"}, subshell_id=quick_shell)
    quick_run = kernel.collect(quick_id)
    slow_run = kernel.collect(slow_id)

    assert (quick_run.ptc["call_id"], quick_run.error["ename"]) == ("call_quick", "KeyError")
    assert (slow_run.ptc["call_id"], slow_run.error["ename"]) == ("call_slow", "IndexError")
    refs = {quick_run.ptc["reference"], slow_run.ptc["reference"]}
    assert refs == {"#1", "#2"}
    for executed in (quick_run, slow_run):
        assert executed.error["traceback"][-1] == executed.ptc["notice"]
        assert f'replay("{executed.ptc["reference"]}"' in executed.ptc["notice"]
    # Afterwards the main shell's programs are outermost again: the time limit works.
    limited = kernel.execute("import time\ntime.sleep(30)", {"call_id": "m", "time_limit": 0.5})
    assert limited.ptc["status"] == "interrupted" and limited.ptc["time_limit"] == 0.5


def test_unload_ext_works_in_the_ptc_retry_kernel(kernel: Kernel) -> None:
    unloaded = kernel.execute("%unload_ext ptc_retry")
    assert unloaded.status == "ok" and "not loaded" not in unloaded.stdout + unloaded.stderr

    failed = kernel.execute(SLEEPER + "# " + "x" * 300)
    assert failed.ptc is None
    assert not any("ptc-retry" in line for line in failed.error["traceback"])
    assert kernel.execute("'ptc_retry' in globals()").result == "False"

    kernel.execute("%load_ext ptc_retry")
    again = kernel.execute(SLEEPER + "# " + "x" * 300)
    assert again.ptc is not None and again.ptc["notice"] is not None


@pytest.mark.parametrize(
    "limit",
    [1e10, 10**400, -5, 0, "5", [1], True],
    ids=["1e10", "10**400", "negative", "zero", "str", "list", "bool"],
)
def test_a_time_limit_that_makes_no_sense_means_no_limit_and_no_crash(
    kernel: Kernel, limit: Any
) -> None:
    executed = kernel.execute("import time\ntime.sleep(0.2)\nprint('done')", {"time_limit": limit})
    assert (executed.status, executed.stdout, executed.stderr) == ("ok", "done\n", "")


@pytest.mark.parametrize("value", ["-1", "float('nan')", "'soon'"])
def test_a_configured_time_limit_that_makes_no_sense_is_refused_clearly(
    kernel: Kernel, value: str
) -> None:
    executed = kernel.execute(f"%config PtcRetry.time_limit = {value}")
    text = executed.error["evalue"] if executed.error else executed.stderr
    assert "time_limit" in text
    assert kernel.execute("print('still fine')").stdout == "still fine\n"


@pytest.mark.parametrize("value", ["1e10", "10**400", "float('inf')", "1e400"])
def test_a_configured_time_limit_too_long_ever_to_pass_means_no_limit(
    kernel: Kernel, value: str
) -> None:
    assert kernel.execute(f"%config PtcRetry.time_limit = {value}").stderr == ""
    extension = "from ptc_retry.kernel.extension import active_extension as extension\n"
    assert kernel.execute(extension + "print(extension().config.time_limit)").stdout == "None\n"
    executed = kernel.execute("import asyncio\nawait asyncio.sleep(0.2)\nprint('done')")
    assert (executed.status, executed.stdout, executed.stderr) == ("ok", "done\n", "")


def test_an_interrupted_program_shows_its_own_line_last_not_ptc_retrys(kernel: Kernel) -> None:
    looping = "import time\nprint('waiting', flush=True)\nfor _ in range(600):\n    time.sleep(0.1)"
    stopped, _ = interrupted_when_waiting(kernel, looping)
    limited = kernel.execute("while True:\n    pass", {"time_limit": 0.5})

    for executed in (stopped, limited):
        text = "\n".join(executed.error["traceback"])
        assert "ptc_retry" not in text.replace("ptc_retry.resume", "")
        assert "time_limit.py" not in text and "_on_sigint" not in text
        assert executed.error["ename"] == "KeyboardInterrupt"
    assert limited.error["evalue"] == "time limit of 0.5 s reached"


def test_an_interrupt_while_the_program_is_saved_stops_it_and_records_it(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    # Fault injection in the real kernel, through the store's seam: saving takes two seconds
    # (it says when).
    kernel.execute(
        "import sys, time\n"
        "from ptc_retry.kernel.extension import active_extension\n"
        "_store = active_extension().checkpoints.store\n"
        "_write = _store.write_file\n"
        "def _slow_write(entry, data):\n"
        "    print('waiting', file=sys.stderr, flush=True)\n"
        "    time.sleep(2)\n"
        "    _write(entry, data)\n"
        "_store.write_file = _slow_write"
    )
    stopped, _ = interrupted_when_waiting(kernel, "ran = True\nprint('ran')", "stderr")

    assert stopped.stdout == ""  # it did not run, unsaved or otherwise
    assert stopped.error["evalue"] == "interrupted while the program was being saved; nothing ran"
    assert stopped.error["traceback"] == [
        "KeyboardInterrupt: interrupted while the program was being saved; nothing ran"
    ]
    assert stopped.ptc["status"] == "interrupted" and stopped.ptc["notice"] is None
    assert kernel.execute("'ran' in globals()").result == "False"
    kernel.execute("_store.write_file = _write")
    assert kernel.execute("print('next')").stdout == "next\n"
    assert [line["status"] for line in history(kernel.session_dir)][-2:] == ["ok", "ok"]


def test_a_replay_awaited_from_another_thread_is_refused_clearly(kernel: Kernel) -> None:
    kernel.execute("target = 1\nundefined_name")
    executed = kernel.execute(
        "import asyncio, threading\n"
        "outcome = []\n"
        "async def fix():\n"
        "    return await ptc_retry.replay('#1', 'target = 1', 'target = 2')\n"
        "def elsewhere():\n"
        "    try:\n"
        "        asyncio.run(fix())\n"
        "    except Exception as exc:\n"
        "        outcome.append(f'{type(exc).__name__}: {exc}')\n"
        "thread = threading.Thread(target=elsewhere)\n"
        "thread.start(); thread.join()\n"
        "print(outcome[0])"
    )
    assert executed.stdout.startswith("ReplayError: a replay runs as part of a program")
    assert kernel.execute("target").result == "1"  # nothing ran, nothing was overwritten


def test_a_replay_whose_fix_holds_a_lone_surrogate_is_a_replay_error(kernel: Kernel) -> None:
    kernel.execute("word = 'x'\nundefined_name")
    executed = kernel.execute("await ptc_retry.replay('#1', \"'x'\", \"'\\ud800'\")")
    assert executed.error["ename"] == "ReplayError"
    assert "lone surrogate" in executed.error["evalue"]


def test_a_stock_kernel_that_never_takes_reply_metadata_does_not_pile_it_up(
    start_kernel: Any,
) -> None:
    stock = start_kernel("python3", args=("--ext=ptc_retry",))
    for n in range(80):
        stock.execute(f"x = {n}")
    kept = stock.execute(
        "from ptc_retry.kernel.extension import active_extension\nlen(active_extension()._replies)"
    )
    assert int(kept.result) <= 64


def test_the_cell_that_unloads_the_extension_is_no_program_and_leaves_none_unfinished(
    kernel: Kernel, checkpoint_root: Path
) -> None:
    kernel.execute("%unload_ext ptc_retry")
    # A person's command, as the magics are: not saved, and nothing is left unfinished.
    assert history(kernel.session_dir) == []
    assert not (kernel.session_dir / "by-id").exists() or not any(
        (kernel.session_dir / "by-id").iterdir()
    )
