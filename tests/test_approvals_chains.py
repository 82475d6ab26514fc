"""Approvals in the chains an adversarial pass tried on real kernels: a program that catches
the pause, a failure beside a pause, a paused session, a tool gone before the decision, an
approver that answers oddly, many calls waiting at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import ApprovalError, KernelBackend, PendingApproval
from ptc_retry.core.sentences import NOTICE_PAUSED, STILL_WAITS
from ptc_retry.core.status import ResultStatus

from .helpers import OnLoop, StartBackend, long_program
from .test_approvals import Office, bounded, continued, deny_all, model_call


@pytest.fixture(scope="module")
def desk() -> Office:
    return Office()


@pytest.fixture(scope="module")
def kb(
    start_backend: StartBackend,
    desk: Office,
    roots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> KernelBackend:
    env = {"IPYTHONDIR": str(tmp_path_factory.mktemp("ipy"))}
    kb = start_backend(approver=desk.approver, root=roots["local"], env=env)
    desk.register(kb)
    return kb


@pytest.fixture(autouse=True)
def fresh_desk(desk: Office, kb: KernelBackend, on_loop: OnLoop[Any]) -> Iterator[None]:
    yield
    desk.answer = None
    deny_all(kb, on_loop)
    desk.calls.clear()
    desk.asked.clear()


@pytest.mark.parametrize("caught", ["BaseException as exc", "BaseException", ""])
def test_a_program_that_catches_the_pause_still_stops_and_waits(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any], caught: str
) -> None:
    code = long_program(
        'owner = await tools.lookup(name="kim")',
        "try:",
        '    sent = await tools.send_email(to=owner, body="hi")',
        f"except {caught}:".replace(" :", ":"),
        '    sent = "swallowed"',
        'print("after:", sent)',
    )
    paused = on_loop(model_call(kb, code))

    assert paused.status == ResultStatus.PAUSED, paused.text
    assert "after:" not in paused.text and "swallowed" not in paused.text
    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))
    assert "after: sent to kim@example.com" in went_on.text
    assert desk.calls == {"lookup": 1, "send_email": 1}


def test_a_gather_that_returns_exceptions_does_not_take_the_pause_as_a_value(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        "import asyncio",
        "got = await asyncio.gather(",
        '    tools.lookup(name="max"), tools.send_email(to="max", body="x"),',
        "    return_exceptions=True,",
        ")",
        'print("got:", got)',
    )
    paused = on_loop(model_call(kb, code))

    assert paused.status == ResultStatus.PAUSED, paused.text
    assert "got:" not in paused.text
    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))
    assert "got: ['max@example.com', 'sent to max']" in went_on.text
    assert desk.calls == {"lookup": 1, "send_email": 1}


def test_the_pause_line_names_the_first_call_and_counts_the_rest(
    kb: KernelBackend, on_loop: OnLoop[Any], count_tokens: Callable[[str], int]
) -> None:
    code = long_program(
        "import asyncio",
        "await asyncio.gather(",
        '    tools.send_email(to="una", body="x"),',
        *(f"    tools.pay(amount={amount})," for amount in range(101, 113)),
        ")",
    )
    paused = on_loop(model_call(kb, code))

    assert paused.status == ResultStatus.PAUSED, paused.text
    last = paused.text.splitlines()[-1]
    assert "Paused before tools.send_email and 12 more for a person's approval" in last
    assert count_tokens(last) <= NOTICE_PAUSED.budget
    assert len(kb.pending_approvals()) == 13  # each is still listed
    again = on_loop(model_call(kb, code))
    assert "before tools.send_email and 12 more. Do not send" in again.text
    assert count_tokens(again.text) <= STILL_WAITS.budget


def test_deciding_a_call_of_a_tool_no_longer_registered_says_to_register_it(
    start_backend: StartBackend,
    roots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    on_loop: OnLoop[Any],
) -> None:
    options = {"root": roots["local"], "env": {"IPYTHONDIR": str(tmp_path_factory.mktemp("i"))}}
    host = Office()
    first = start_backend(session_id="tool-gone", **options)
    host.register(first)
    paused = on_loop(
        model_call(first, long_program('print(await tools.send_email(to="o", body="x"))'))
    )
    assert paused.status == ResultStatus.PAUSED, paused.text
    on_loop(first.shutdown(keep=True))
    second = start_backend(session_id="tool-gone", **options)
    second.register_tool(host.lookup)  # send_email is not registered on this backend
    (waiting,) = second.pending_approvals()

    for decide in (second.approve(waiting.ref), second.deny(waiting.reference, "no")):
        with pytest.raises(ApprovalError, match="no tool for") as raised:
            on_loop(bounded(decide))
        assert "tools.send_email" in str(raised.value)
        assert "register it (kb.register_tool) and approve or deny again" in str(raised.value)
    assert second.pending_approvals() == [waiting]  # nothing was decided

    second.register_tool(host.send_email, approval=True)
    went_on = continued(on_loop(bounded(second.approve(waiting.ref))))
    assert "sent to o" in went_on.text and host.calls == {"send_email": 1}


def test_an_approver_answering_neither_bool_str_nor_none_leaves_the_call_waiting(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any], caplog: pytest.LogCaptureFixture
) -> None:
    desk.answer = lambda call: {"approved": True}  # looks like a yes, is no decision
    ran = on_loop(model_call(kb, long_program('print(await tools.send_email(to="ned", body="x"))')))

    assert ran.status == ResultStatus.PAUSED, ran.text
    assert len(desk.asked) == 1 and desk.calls == {}
    assert "the approver answered {'approved': True} on tools.send_email" in caplog.text


def test_an_approver_that_never_answers_leaves_the_call_waiting_after_its_timeout(
    start_backend: StartBackend,
    roots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    on_loop: OnLoop[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def never(call: PendingApproval) -> bool:
        await asyncio.Event().wait()
        return True

    host = Office()
    env = {"IPYTHONDIR": str(tmp_path_factory.mktemp("i"))}
    slow = start_backend(approver=never, approver_timeout=1, root=roots["local"], env=env)
    host.register(slow)
    ran = on_loop(
        model_call(slow, long_program('print(await tools.send_email(to="ona", body="x"))'))
    )

    assert ran.status == ResultStatus.PAUSED, ran.text
    assert "the approver gave no answer on tools.send_email within 1 s" in caplog.text
    went_on = continued(on_loop(bounded(slow.approve(ran.reference or ""))))
    assert "sent to ona" in went_on.text and host.calls == {"send_email": 1}


def test_an_approval_the_paused_guard_refuses_says_so_and_the_call_still_waits(
    start_backend: StartBackend,
    roots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    on_loop: OnLoop[Any],
) -> None:
    host = Office()
    env = {"IPYTHONDIR": str(tmp_path_factory.mktemp("i"))}
    guarded = start_backend(root=roots["local"], env=env)
    host.register(guarded)
    on_loop(model_call(guarded, '%config PtcRetry.guard_mode = "pause"'))
    code = long_program(
        'owner = await tools.lookup(name="pia")',
        "print(await tools.send_email(to=owner, body='x'))",
    )
    paused = on_loop(model_call(guarded, code))
    for _ in range(3):  # the guard pauses the session's programs after the third
        assert on_loop(model_call(guarded, "raise ValueError('bad')")).status == ResultStatus.ERROR

    with pytest.raises(ApprovalError, match="repeated-failure guard pauses") as raised:
        on_loop(bounded(guarded.approve(paused.reference or "")))

    assert "it still waits" in str(raised.value) and "kb.new_turn()" in str(raised.value)
    assert [call.reference for call in guarded.pending_approvals()] == [paused.reference]
    assert host.calls == {"lookup": 1}
    guarded.new_turn()  # the user's next instruction lifts the guard
    went_on = continued(on_loop(bounded(guarded.approve(paused.reference or ""))))
    assert "sent to pia@example.com" in went_on.text
    assert host.calls == {"lookup": 1, "send_email": 1}


@pytest.mark.parametrize("returns", [True, False])
def test_a_call_that_failed_beside_the_pause_is_not_made_again_on_approval(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any], returns: bool
) -> None:
    def broken(x: int) -> int:
        """Always fails."""
        desk.calls["broken"] += 1
        raise RuntimeError("upstream down")

    kb.register_tool(broken, name=f"broken{int(returns)}")
    code = long_program(
        "import asyncio",
        "got = await asyncio.gather(",
        f"    tools.broken{int(returns)}(x=1),",
        '    tools.send_email(to="max", body="x"),',
        f"    return_exceptions={returns},",
        ")",
        'print("got:", got)',
    )
    paused = on_loop(model_call(kb, code))
    assert paused.status == ResultStatus.PAUSED, paused.text
    assert desk.calls == {"broken": 1}

    went_on = on_loop(bounded(kb.approve(paused.reference or "")))

    assert went_on is not None
    assert "RuntimeError: upstream down" in went_on.text  # the failure is reported once
    if returns:
        assert went_on.status == ResultStatus.OK, went_on.text
        assert "'sent to max'" in went_on.text
    else:
        assert went_on.status == ResultStatus.ERROR, went_on.text
    assert desk.calls["broken"] == 1  # the failed call is not made again
    assert desk.calls["send_email"] <= 1 and kb.pending_approvals() == []


def test_a_tracer_set_before_a_program_that_catches_its_pause_is_still_set_after(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    tracer = "import sys\ndef tracer(frame, event, arg):\n    return None\nsys.settrace(tracer)\n"
    assert on_loop(model_call(kb, tracer)).status == ResultStatus.OK
    try:
        code = long_program(
            "try:",
            '    sent = await tools.send_email(to="cy", body="x")',
            "except BaseException:",
            '    sent = "swallowed"',
        )
        paused = on_loop(model_call(kb, code))
        assert paused.status == ResultStatus.PAUSED, paused.text
        continued(on_loop(bounded(kb.approve(paused.reference or ""))))

        after = on_loop(model_call(kb, "print('tracer:', sys.gettrace() is tracer)"))
        assert "tracer: True" in after.text, after.text  # coverage or a debugger goes on
    finally:
        on_loop(model_call(kb, "sys.settrace(None)"))


def test_a_plain_function_as_approver_is_refused_at_once_saying_to_make_it_async() -> None:
    def yes(call: PendingApproval) -> bool:
        return True

    with pytest.raises(TypeError, match="approver must be an async function") as raised:
        KernelBackend(approver=yes)  # type: ignore[arg-type]
    assert "not the plain function 'yes'" in str(raised.value)
    assert "asyncio.to_thread" in str(raised.value)


def test_a_helper_an_earlier_program_defined_that_catches_the_pause_stops_too(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    helper = long_program(
        "async def with_retries(make, tries=3):",
        "    for attempt in range(tries):",
        "        try:",
        "            return await make()",
        "        except:",
        '            print("retrying", attempt)',
        '    return "gave up"',
    )
    assert on_loop(model_call(kb, helper)).status == ResultStatus.OK
    code = long_program(
        'got = await with_retries(lambda: tools.send_email(to="hal", body="x"))',
        'print("got:", got)',
    )
    paused = on_loop(model_call(kb, code))

    assert paused.status == ResultStatus.PAUSED, paused.text
    assert "retrying" not in paused.text  # a `while True` helper would retry forever
    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))
    assert "got: sent to hal" in went_on.text and "retrying" not in went_on.text
    assert desk.calls == {"send_email": 1}
