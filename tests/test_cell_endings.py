"""Every way a cell can end leaves the next cell a call of its own: checkpointed, with its
notice and its reply metadata. One shared ptc-retry kernel, on every supported IPython."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from ptc_retry.core.notice import parse_notice
from ptc_retry.core.protocol import METADATA_KEY, execute_request

from .helpers import Execution, Kernel, StartKernel, history, line_of

# Top-level `await` and `return`: IPython runs the cell without an event loop (the return
# makes it "not async") and fails inside its own machinery, as the stock kernel does.
REFUSED_BY_IPYTHON = "import asyncio\nawait asyncio.sleep(0)\nreturn 5\n"

#: Makes the shell's next ``pre_execute`` event raise, inside ``run_cell_async``, before
#: any pre_run_cell hook runs; once.
RAISE_BEFORE_PRE_RUN_CELL = """\
_ip = get_ipython()
_trigger = _ip.events.trigger
def _raise_once(event, *args, **kwargs):
    if event == "pre_execute":
        _ip.events.trigger = _trigger
        raise RuntimeError("inside IPython")
    return _trigger(event, *args, **kwargs)
_ip.events.trigger = _raise_once
"""


def fail_in_hook_once(where: str, error: str) -> str:
    """A cell after which ``where`` (a method path on the extension) raises ``error`` once:
    armed once this cell's own hooks ran, so it is the next cell's hook that fails."""
    owner, name = where.rsplit(".", 1)
    return f"""\
from ptc_retry.kernel.extension import active_for as _active_for
_owner = _active_for(get_ipython()){owner}
_real = _owner.{name}
def _fail_once(*args, **kwargs):
    _owner.{name} = _real
    raise {error}
def _arm(result):
    get_ipython().events.unregister("post_run_cell", _arm)
    _owner.{name} = _fail_once
get_ipython().events.register("post_run_cell", _arm)
"""


@pytest.fixture(scope="module")
def kernel(start_shared_kernel: StartKernel) -> Kernel:
    """One kernel for the module; every failure gets the full notice."""
    return start_shared_kernel("endings", args=("--PtcRetry.notice_min_bytes=0",))


_probes = itertools.count(1)


def assert_next_cell_is_a_call(kernel: Kernel, module_root: Path) -> None:
    """The next failing cell is saved, noticed, recorded and described in its reply."""
    call_id = f"probe_{next(_probes)}"
    probe = kernel.execute(f"undefined_{call_id}", {"call_id": call_id}, timeout=30)
    assert probe.ptc is not None, "the reply carries no metadata"
    assert (probe.ptc["call_id"], probe.ptc["status"]) == (call_id, "error")
    notice = probe.error["traceback"][-1]
    assert notice == probe.ptc["notice"]
    assert parse_notice(notice) == probe.ptc["reference"]
    assert (module_root / "endings" / "by-id" / f"{call_id}.json").exists()
    assert line_of(module_root / "endings", call_id)["status"] == "error"
    # No time limit, refusal or tool call of an earlier program is still in place.
    assert kernel.execute("print('next')", {"call_id": f"{call_id}_ok"}).stdout == "next\n"


def test_a_cell_ipython_refuses_is_recorded_as_failed_and_the_next_is_a_call(
    kernel: Kernel, module_root: Path
) -> None:
    refused = kernel.execute(REFUSED_BY_IPYTHON, {"call_id": "refused"})

    assert refused.error["ename"] == "RuntimeError"
    assert refused.ptc is not None
    assert (refused.ptc["call_id"], refused.ptc["status"]) == ("refused", "error")
    assert refused.error["traceback"][-1] == refused.ptc["notice"]
    assert line_of(module_root / "endings", "refused")["ename"] == "RuntimeError"
    assert_next_cell_is_a_call(kernel, module_root)


def test_the_refused_program_runs_as_a_replay(kernel: Kernel) -> None:
    kernel.execute(REFUSED_BY_IPYTHON, {"call_id": "refused_again"})

    replayed = kernel.execute("await ptc_retry.replay('refused_again', 'return 5', 'return 6')")

    assert replayed.status == "ok", replayed.error
    assert replayed.result == "6"


@pytest.mark.parametrize(
    ("setup", "cell"),
    [
        pytest.param(RAISE_BEFORE_PRE_RUN_CELL, "x = 1", id="IPython raises before pre_run_cell"),
        pytest.param(
            RAISE_BEFORE_PRE_RUN_CELL,
            "import asyncio\nawait asyncio.sleep(0)",
            id="IPython raises before pre_run_cell in a cell that awaits",
        ),
        pytest.param(
            fail_in_hook_once(".programs.pop", "RuntimeError('a bug')"),
            "1/0",
            id="our post_run_cell fails before it takes the program",
        ),
        pytest.param(
            fail_in_hook_once("._refuser.drop", "KeyboardInterrupt"),
            "1/0",
            id="an interrupt while our post_run_cell stops the program",
        ),
        pytest.param(
            fail_in_hook_once(".checkpoints.finish", "KeyboardInterrupt"),
            "import asyncio\nawait asyncio.sleep(0)\n1/0",
            id="an interrupt while our post_run_cell records the program",
        ),
        pytest.param(
            fail_in_hook_once(".checkpoints.begin", "RuntimeError('a bug')"),
            "x = 2",
            id="our pre_run_cell fails",
        ),
        pytest.param(None, "raise SystemExit(3)", id="SystemExit"),
        pytest.param(None, "import sys\nsys.exit(0)", id="sys.exit"),
        pytest.param(None, "", id="empty"),
        pytest.param(None, "  \n\n", id="blank"),
        pytest.param(None, "%ptc_history", id="only our magics"),
        pytest.param(None, "get_ipython().run_cell('1/0')", id="a cell a program runs"),
        pytest.param(
            None,
            "await get_ipython().run_cell_async('inner = 1', transformed_cell='inner = 1\\n')",
            id="a cell a program runs without post_run_cell",
        ),
    ],
)
def test_every_way_a_cell_ends_leaves_the_next_cell_a_call(
    kernel: Kernel, module_root: Path, setup: str | None, cell: str
) -> None:
    if setup is not None:
        assert kernel.execute(setup).status == "ok"

    kernel.execute(cell, {"call_id": f"cell_{next(_probes)}"}, timeout=30)

    assert_next_cell_is_a_call(kernel, module_root)


def test_a_program_whose_post_run_cell_never_came_is_recorded_at_its_reply(
    kernel: Kernel, module_root: Path
) -> None:
    kernel.execute(fail_in_hook_once(".programs.pop", "RuntimeError('a bug')"))

    failed = kernel.execute("1/0", {"call_id": "lost_hook"})

    assert "ptc-retry: its post_run_cell hook failed (RuntimeError: a bug)." in failed.stderr
    # The kernel ends it once the request is over: the reply still says what happened.
    assert failed.ptc is not None
    assert (failed.ptc["call_id"], failed.ptc["status"]) == ("lost_hook", "error")
    assert failed.error["ename"] == "ZeroDivisionError"
    assert failed.error["traceback"][-1] == failed.ptc["notice"]
    line = line_of(module_root / "endings", "lost_hook")
    assert (line["status"], line["ename"]) == ("error", "ZeroDivisionError")


# A program that runs a cell of another request from inside its own code, as
# jupyter_ui_poll does when it serves the kernel's queue, then fails.
SERVES_ANOTHER_REQUEST = """\
_kernel = get_ipython().kernel
_mine = _kernel.get_parent("shell")
_kernel.set_parent(None, {"header": {"msg_id": "another"}, "metadata": {}, "content": {}})
try:
    get_ipython().run_cell("served = 1")
finally:
    _kernel.set_parent(None, _mine)
served / 0
"""


def test_a_program_that_serves_another_request_stays_running(
    kernel: Kernel, module_root: Path
) -> None:
    served = kernel.execute(SERVES_ANOTHER_REQUEST, {"call_id": "serves"})

    assert served.ptc is not None
    assert (served.ptc["call_id"], served.ptc["status"]) == ("serves", "error")
    line = line_of(module_root / "endings", "serves")
    assert (line["status"], line["ename"]) == ("error", "ZeroDivisionError")
    assert_next_cell_is_a_call(kernel, module_root)


def test_an_error_in_our_pre_run_cell_is_said_once_and_the_cell_runs(kernel: Kernel) -> None:
    kernel.execute(fail_in_hook_once(".checkpoints.begin", "RuntimeError('a bug')"))

    ran = kernel.execute("print('ran')", {"call_id": "hook_bug"})

    assert (ran.status, ran.stdout, ran.error) == ("ok", "ran\n", None)
    assert "ptc-retry: its pre_run_cell hook failed (RuntimeError: a bug)." in ran.stderr


def test_a_silent_request_leaves_no_trace_and_the_next_cell_is_a_call(
    kernel: Kernel, module_root: Path
) -> None:
    before = len(history(module_root / "endings"))
    msg = kernel.client.session.msg("execute_request", execute_request("1/0", silent=True))
    kernel.client.shell_channel.send(msg)
    silent: Execution = kernel.collect(msg["header"]["msg_id"])

    assert silent.reply["metadata"].get(METADATA_KEY) is None
    assert len(history(module_root / "endings")) == before
    assert_next_cell_is_a_call(kernel, module_root)


def test_an_error_whose_message_holds_a_lone_surrogate_is_shown_with_its_notice(
    kernel: Kernel, module_root: Path
) -> None:
    # Half an emoji: a valid str, but no UTF-8, so a message that holds it never leaves
    # the kernel. Its escape goes out instead, in the error output and in the reply.
    cell = "label = 'bad \\ud83d'\nraise ValueError(label)"

    failed = kernel.execute(cell, {"call_id": "surrogate"}, timeout=30)

    assert failed.status == "error"
    assert failed.error is not None, "no error output"
    assert (failed.error["ename"], failed.error["evalue"]) == ("ValueError", "bad \\ud83d")
    content = failed.reply["content"]
    assert (content["ename"], content["evalue"]) == ("ValueError", "bad \\ud83d")
    assert failed.error["traceback"][-1] == failed.ptc["notice"]
    assert line_of(module_root / "endings", "surrogate")["status"] == "error"
    replayed = kernel.execute(
        "await ptc_retry.replay('surrogate', 'raise ValueError(label)', 'print(ascii(label))')"
    )
    assert replayed.status == "ok", replayed.error
    assert replayed.stdout == "'bad \\ud83d'\n"
    assert_next_cell_is_a_call(kernel, module_root)


@pytest.mark.parametrize("label", ["bad", "bad \\ud83d"], ids=["plain", "lone surrogate"])
def test_an_exception_group_is_the_error_output_with_its_notice(
    kernel: Kernel, module_root: Path, label: str
) -> None:
    # IPython prints a group to stderr with the standard library, past the error output.
    call_id = f"group_{next(_probes)}"
    cell = (
        "import sys\n"
        "if sys.version_info < (3, 11):\n"
        "    from exceptiongroup import ExceptionGroup\n"
        f"label = '{label}'\n"
        "raise ExceptionGroup('checks', [ValueError(label), KeyError('sku')])\n"
    )

    failed = kernel.execute(cell, {"call_id": call_id}, timeout=30)

    assert failed.error is not None, failed.stderr
    assert (failed.error["ename"], failed.error["evalue"]) == (
        "ExceptionGroup",
        "checks (2 sub-exceptions)",
    )
    shown = "\n".join(failed.error["traceback"])
    assert f"ValueError: {label}" in shown and "KeyError: 'sku'" in shown
    assert "interactiveshell.py" not in shown  # IPython's own frame is left out
    assert failed.error["traceback"][-1] == failed.ptc["notice"]
    assert failed.stderr == ""
    assert line_of(module_root / "endings", call_id)["ename"] == "ExceptionGroup"
    assert_next_cell_is_a_call(kernel, module_root)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is Python 3.11's")
def test_the_members_of_a_group_show_the_programs_frames_only(
    kernel: Kernel, module_root: Path
) -> None:
    call_id = f"group_{next(_probes)}"
    cell = (
        "import asyncio\n"
        "@ptc_retry.recorded\n"
        "async def check(sku):\n"
        "    raise KeyError(sku)\n"
        "async with asyncio.TaskGroup() as tg:\n"
        "    tg.create_task(check('lamp'))\n"
    )

    failed = kernel.execute(cell, {"call_id": call_id}, timeout=30)

    assert failed.error is not None, failed.stderr
    shown = "\n".join(failed.error["traceback"])
    assert "raise KeyError(sku)" in shown and "KeyError: 'lamp'" in shown
    assert "ptc_retry" not in shown.replace(failed.ptc["notice"], ""), shown
