"""Approvals: a program stops before a tool call that needs a person's approval, and goes on
from that statement once a person decides, making no call twice.

Every test follows the path a loop takes: the model's program is a ``run_code`` call, the
person's decision is ``kb.approve`` / ``kb.deny``, and the host's tools count their calls.
The main scenario runs on a local kernel and behind a real Kernel Gateway; the rest share
one local backend, whose inline approver decides nothing unless a test tells it to.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import ApprovalError, KernelBackend, PendingApproval, RunResult
from ptc_retry.core.history_table import format_tool_calls
from ptc_retry.core.status import HistoryStatus, ResultStatus

from .gateway_server import KERNEL_GATEWAY
from .helpers import OnLoop, StartBackend, line_of, long_program, tool_call_lines

#: The main scenario runs locally and behind a real Kernel Gateway.
TRANSPORTS = ["local", KERNEL_GATEWAY]
#: Seconds within which each call of these tests must end (hang tests fail on this bound).
BOUND = 40


class Office:
    """The agent's side: tools with side effects, each call counted on the host."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.sent: list[dict[str, Any]] = []
        #: What the inline approver answers (None: no decision, the call pauses).
        self.answer: Any = None
        self.asked: list[PendingApproval] = []

    def search(self, q: str) -> list[str]:
        """Find the people a query names."""
        self.calls["search"] += 1
        return [f"{q}-owner"]

    def lookup(self, name: str) -> str:
        """The address of a person."""
        self.calls["lookup"] += 1
        return f"{name}@example.com"

    def send_email(self, to: str, body: str) -> str:
        """Send an email."""
        self.calls["send_email"] += 1
        self.sent.append({"to": to, "body": body})
        return f"sent to {to}"

    def pay(self, amount: int) -> str:
        """Pay an invoice."""
        self.calls["pay"] += 1
        return f"paid {amount}"

    async def approver(self, call: PendingApproval) -> Any:
        self.asked.append(call)
        return self.answer(call) if callable(self.answer) else self.answer

    def register(self, kb: KernelBackend) -> None:
        kb.register_tool(self.search)
        kb.register_tool(self.lookup)
        kb.register_tool(self.send_email, approval=True)
        kb.register_tool(self.pay, approval=large_or_odd)


def large_or_odd(arguments: dict[str, Any]) -> bool:
    """The policy of ``pay``: a person approves amounts over 100; a negative one raises."""
    if arguments["amount"] < 0:
        raise ValueError("a negative amount")
    return bool(arguments["amount"] > 100)


#: Two harmless calls, an email that needs approval, then a print.
CHASE = long_program(
    'hits = await tools.search(q="invoice")',
    "owner = await tools.lookup(name=hits[0])",
    'sent = await tools.send_email(to=owner, body="Your invoice is due.")',
    'print("done:", sent, "| found before the pause:", hits, owner)',
)


async def model_call(kb: KernelBackend, code: str) -> RunResult:
    """One ``run_code`` call of the model, bounded; the result as the loop sees it."""
    await asyncio.wait_for(kb.handle_tool_call("run_code", json.dumps({"code": code})), BOUND)
    assert kb.last_result is not None
    return kb.last_result


async def bounded(call: Any) -> Any:
    return await asyncio.wait_for(call, BOUND)


def continued(result: RunResult | None, status: ResultStatus = ResultStatus.OK) -> RunResult:
    """The continuation a decision ran, once it is known to have ended with ``status``."""
    assert result is not None, "the decision ran nothing"
    assert result.status == status, result.text
    return result


def deny_all(kb: KernelBackend, on_loop: OnLoop[Any]) -> None:
    """Deny what waits until nothing does (a program that swallowed its pause and runs again
    whole may pause again), within a few rounds."""
    for _ in range(5):
        waiting = kb.pending_approvals()
        if not waiting:
            return
        on_loop(bounded(kb.deny(waiting[0].reference, "cleanup")))
    assert kb.pending_approvals() == []


@pytest.fixture(scope="module")
def office(transport: str, desk: Office) -> Office:
    return desk if transport == "local" else Office()


@pytest.fixture(scope="module")
def backend(
    transport: str, start_backend: StartBackend, office: Office, request: pytest.FixtureRequest
) -> KernelBackend:
    """The main scenario's backend: the shared local one, or one behind the gateway."""
    if transport == "local":
        found: KernelBackend = request.getfixturevalue("kb")
        return found
    kb = start_backend(**request.getfixturevalue("options"))
    office.register(kb)
    return kb


@pytest.fixture(scope="module")
def desk() -> Office:
    """The host of the local backend the other tests share."""
    return Office()


@pytest.fixture(scope="module")
def local_options(
    roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    return {"root": roots["local"], "env": {"IPYTHONDIR": str(tmp_path_factory.mktemp("ipy"))}}


@pytest.fixture(scope="module")
def kb(start_backend: StartBackend, desk: Office, local_options: dict[str, Any]) -> KernelBackend:
    kb = start_backend(approver=desk.approver, **local_options)
    desk.register(kb)
    return kb


@pytest.fixture(autouse=True)
def fresh_desk(desk: Office) -> Iterator[None]:
    yield
    desk.answer = None
    desk.calls.clear()
    desk.asked.clear()


def test_a_program_pauses_before_the_email_and_goes_on_once_approved(
    backend: KernelBackend, office: Office, on_loop: OnLoop[Any]
) -> None:
    paused = on_loop(model_call(backend, CHASE))

    assert paused.status == ResultStatus.PAUSED
    assert office.calls == {"search": 1, "lookup": 1}  # everything before the pause ran
    last = paused.text.splitlines()[-1]
    assert "Paused before tools.send_email" in last and "Do not send it again" in last
    assert paused.reference is not None and paused.reference in last
    (waiting,) = backend.pending_approvals()
    assert (waiting.tool, waiting.reference) == ("send_email", paused.reference)
    assert waiting.arguments == {"to": "invoice-owner@example.com", "body": "Your invoice is due."}
    assert paused.metadata is not None and paused.metadata["pending"][0]["tool"] == "send_email"
    if backend.transport.checkpoints_here:
        line = line_of(backend.session_dir, paused.call_id or "")
        assert line["status"] == HistoryStatus.PAUSED
        assert line["pending"][0]["arguments"] == waiting.arguments
        listing = format_tool_calls(tool_call_lines(backend.session_dir, paused.call_id or ""), "")
        assert [row.split()[2:4] for row in listing.splitlines()[2:]] == [
            ["search", "ok"],
            ["lookup", "ok"],
            ["send_email", "paused"],
        ]

    went_on = continued(on_loop(bounded(backend.approve(paused.reference))))

    assert office.calls == {"search": 1, "lookup": 1, "send_email": 1}  # 2 + 1, none repeated
    assert "done: sent to invoice-owner@example.com" in went_on.text
    assert "found before the pause: ['invoice-owner'] invoice-owner@example.com" in went_on.text
    assert backend.pending_approvals() == []


def test_a_denial_the_program_catches_goes_on_without_the_call(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        'owner = await tools.lookup(name="ann")',
        "try:",
        '    await tools.send_email(to=owner, body="hi")',
        "except ptc_retry.ToolDenied as denied:",
        '    print("not sent:", denied.reason)',
        'print("after", owner)',
    )
    paused = on_loop(model_call(kb, code))
    assert paused.status == ResultStatus.PAUSED, paused.text

    went_on = continued(on_loop(bounded(kb.deny(paused.reference or "", "not to customers"))))

    assert "not sent: not to customers" in went_on.text
    assert "after ann@example.com" in went_on.text
    assert desk.calls == {"lookup": 1}


def test_a_denial_the_program_does_not_catch_fails_it_with_the_ordinary_notice(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program('await tools.search(q="x")', 'await tools.send_email(to="a@b", body="x")')
    paused = on_loop(model_call(kb, code))

    failed = continued(on_loop(bounded(kb.deny(paused.reference or "", "no"))), ResultStatus.ERROR)

    assert failed.ename == "ToolDenied" and "tools.send_email was denied: no" in failed.text
    assert failed.notice is not None and "ptc_retry.replay" in failed.notice
    assert desk.calls == {"search": 1}
    assert kb.pending_approvals() == []


def test_approval_after_a_kernel_restart_reruns_the_program_reusing_every_result(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    paused = on_loop(model_call(kb, CHASE))
    on_loop(bounded(kb.restart()))

    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))

    assert "the kernel restarted" in went_on.text  # it says why it ran the whole program
    assert "done: sent to invoice-owner@example.com" in went_on.text
    assert desk.calls == {"search": 1, "lookup": 1, "send_email": 1}


def test_a_new_backend_on_the_same_session_lists_and_decides_what_waits(
    start_backend: StartBackend, options: dict[str, Any], on_loop: OnLoop[Any]
) -> None:
    host = Office()
    first = start_backend(session_id="left-waiting", **options)
    host.register(first)
    paused = on_loop(model_call(first, CHASE))
    on_loop(first.shutdown(keep=True))

    second = start_backend(session_id="left-waiting", **options)
    host.register(second)
    (waiting,) = second.pending_approvals()
    assert (waiting.tool, waiting.reference) == ("send_email", paused.reference)

    went_on = continued(on_loop(bounded(second.approve(waiting.ref))))

    assert "done: sent to invoice-owner@example.com" in went_on.text
    assert host.calls == {"search": 1, "lookup": 1, "send_email": 1}
    assert second.pending_approvals() == []


def test_a_gather_of_three_calls_waits_for_all_and_each_is_decided_on_its_own(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        "import asyncio",
        'people = ["ann", "bob", "cy"]',
        "sent = await asyncio.gather(",
        '    *(tools.send_email(to=p, body="hi") for p in people), return_exceptions=True',
        ")",
        "print([type(s).__name__ if isinstance(s, Exception) else s for s in sent])",
    )
    paused = on_loop(model_call(kb, code))
    waiting = kb.pending_approvals()
    assert sorted(call.arguments["to"] for call in waiting) == ["ann", "bob", "cy"]
    assert {call.reference for call in waiting} == {paused.reference}
    by_name = {call.arguments["to"]: call.ref for call in waiting}

    assert on_loop(kb.approve(by_name["ann"])) is None  # the others still wait
    assert on_loop(kb.deny(by_name["bob"], "not bob")) is None
    went_on = continued(on_loop(bounded(kb.approve(by_name["cy"]))))

    assert "['sent to ann', 'ToolDenied', 'sent to cy']" in went_on.text
    assert sorted(mail["to"] for mail in desk.sent[-2:]) == ["ann", "cy"]
    assert desk.calls == {"send_email": 2}


def test_an_approval_covers_that_exact_call_and_a_different_one_pauses_again(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        "for amount in (50, 500, 900):",
        "    print(await tools.pay(amount=amount))",
    )
    paused = on_loop(model_call(kb, code))
    assert paused.status == ResultStatus.PAUSED
    assert [call.arguments for call in kb.pending_approvals()] == [{"amount": 500}]
    assert desk.calls == {"pay": 1}  # 50 needs nobody

    again = continued(on_loop(bounded(kb.approve(paused.reference or ""))), ResultStatus.PAUSED)

    assert [call.arguments for call in kb.pending_approvals()] == [{"amount": 900}]
    done = continued(on_loop(bounded(kb.approve(again.reference or ""))))
    assert desk.calls == {"pay": 3}  # 50, 500 and 900 once each
    assert "paid 900" in done.text


def test_a_policy_that_raises_pauses_the_call_with_its_error(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    desk.answer = True  # the approver would approve: a raising policy never reaches it
    paused = on_loop(model_call(kb, long_program("await tools.pay(amount=-5)")))

    assert paused.status == ResultStatus.PAUSED
    (waiting,) = kb.pending_approvals()
    assert waiting.policy_error == "the approval policy raised ValueError: a negative amount"
    assert desk.calls == {} and desk.asked == []
    on_loop(bounded(kb.deny(waiting.ref, "negative")))


def test_the_inline_approver_decides_while_the_program_waits(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    desk.answer = lambda call: True if call.arguments["to"] == "ann" else "only ann"
    code = long_program(
        'print(await tools.send_email(to="ann", body="x"))',
        "try:",
        '    await tools.send_email(to="bob", body="x")',
        "except ptc_retry.ToolDenied as denied:",
        '    print("denied:", denied.reason)',
    )
    ran = on_loop(model_call(kb, code))

    assert ran.status == ResultStatus.OK, ran.text
    assert "sent to ann" in ran.text and "denied: only ann" in ran.text
    assert desk.calls == {"send_email": 1}
    assert [call.arguments["to"] for call in desk.asked] == ["ann", "bob"]
    assert kb.pending_approvals() == []


def test_a_program_cannot_approve_its_own_paused_call(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    paused = on_loop(model_call(kb, long_program('await tools.send_email(to="eve", body="x")')))
    (waiting,) = kb.pending_approvals()
    forged = {"k": waiting.k, "tool": "send_email", "arguments": waiting.arguments}
    tries = long_program(
        "import json, pathlib",
        "from ptc_retry.core.protocol import tool_request",
        "from ptc_retry.kernel.tool_calls import current_calls",
        f"session = pathlib.Path({str(kb.session_dir)!r})",
        # Files in the session directory that claim a decision.
        f"entry = {{'id': {paused.call_id!r}, 'status': 'ok', 'approved': True}}",
        "with open(session / 'history.jsonl', 'a') as history:",
        "    history.write(json.dumps(entry) + '\\n')",
        f"(session / 'approvals.json').write_text(json.dumps([{forged!r}]))",
        # Its own tool request, saying it is approved.
        f"call = dict({forged!r}, id=0, approved=True, approval='granted')",
        f"call['program'] = {paused.call_id!r}",
        "reply = get_ipython().kernel.raw_input(tool_request([call]))",
        "print('own request:', json.loads(reply)['results'][0].get('paused'))",
        # The kernel's own record of what waits.
        "calls = current_calls()",
        "calls.paused.clear()",
        # A resume of the paused program, from inside a program.
        f"await ptc_retry.resume({paused.reference!r})",
    )
    tried = on_loop(model_call(kb, tries))

    assert "own request: True" in tried.text, tried.text  # the host paused it again
    assert tried.status == ResultStatus.PAUSED  # and so it did the resume's call
    assert "Paused before tools.send_email" in tried.text.splitlines()[-1]
    assert desk.calls == {}  # nothing the kernel did sent the email
    assert [call.ref for call in kb.pending_approvals()][:1] == [waiting.ref]
    deny_all(kb, on_loop)
    assert desk.calls == {}


def test_deciding_what_does_not_wait_says_what_does(
    kb: KernelBackend, desk: Office, local_options: dict[str, Any], on_loop: OnLoop[Any]
) -> None:
    with pytest.raises(ApprovalError, match="nothing waits for approval under '#999'"):
        on_loop(kb.approve("#999"))
    paused = on_loop(model_call(kb, long_program('await tools.send_email(to="zed", body="x")')))
    other = KernelBackend(session_id="another-session", **local_options)
    with pytest.raises(ApprovalError, match="another session"):
        on_loop(other.approve(paused.reference or ""))
    with pytest.raises(ApprovalError, match="a reference such as '#3'"):
        on_loop(kb.approve(3))  # type: ignore[arg-type]

    on_loop(bounded(kb.approve(paused.reference or "")))
    with pytest.raises(ApprovalError, match=f"under '{paused.reference}'.*nothing waits now"):
        on_loop(kb.approve(paused.reference or ""))
    assert desk.calls == {"send_email": 1}


def test_register_tool_refuses_an_approval_that_is_neither_bool_nor_policy(
    kb: KernelBackend,
) -> None:
    with pytest.raises(TypeError, match="approval must be True, False or a policy"):
        kb.register_tool(lambda: None, name="odd", approval="yes")  # type: ignore[arg-type]


def test_register_tool_refuses_an_async_policy_whose_answer_is_never_a_bool(
    kb: KernelBackend, desk: Office
) -> None:
    async def policy(arguments: dict[str, Any]) -> bool:
        return False

    with pytest.raises(TypeError, match="approval policy of 'late' is async.*approver="):
        kb.register_tool(desk.pay, name="late", approval=policy)  # type: ignore[arg-type]
    assert "late" not in kb.system_prompt()


def test_the_prompt_marks_the_tools_that_need_approval(kb: KernelBackend) -> None:
    lines = {
        line.split("(")[0]: line for line in kb.system_prompt().splitlines() if "tools." in line
    }
    assert lines["await tools.send_email"].endswith("(waits for a person's approval)")
    assert lines["await tools.pay"].endswith("(waits for a person's approval)")
    assert "approval" not in lines["await tools.search"]


def test_an_approval_is_used_by_its_continuation_never_by_another_program_running_meanwhile(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    email = 'print("sent:", await tools.send_email(to="ann", body="due"))'
    paused = on_loop(model_call(kb, long_program(email)))
    # Another program with the same call is running while the person approves the first.
    meanwhile = long_program("import asyncio", "await asyncio.sleep(1)", email)

    async def approve_while_another_runs() -> tuple[RunResult, RunResult | None]:
        other = asyncio.ensure_future(model_call(kb, meanwhile))
        await asyncio.sleep(0.3)
        approved = await bounded(kb.approve(paused.reference or ""))
        return await other, approved

    other, approved = on_loop(approve_while_another_runs())

    assert "sent: sent to ann" in continued(approved).text
    assert other.status == ResultStatus.PAUSED, other.text  # it waits for a decision of its own
    assert [call.reference for call in kb.pending_approvals()] == [other.reference]
    assert desk.calls == {"send_email": 1}
    deny_all(kb, on_loop)
    assert desk.calls == {"send_email": 1}


def test_two_programs_paused_at_the_same_call_each_go_on_when_approved_together(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    email = 'print("sent:", await tools.send_email(to="bo", body="due"))'
    first = on_loop(model_call(kb, long_program("# the first", email)))
    second = on_loop(model_call(kb, long_program("# the second", email)))

    async def approve_both() -> list[RunResult | None]:
        both = (kb.approve(first.reference or ""), kb.approve(second.reference or ""))
        return list(await bounded(asyncio.gather(*both)))

    for went_on in on_loop(approve_both()):
        assert "sent: sent to bo" in continued(went_on).text
    assert desk.calls == {"send_email": 2}  # each approved once, each sent once
    assert kb.pending_approvals() == []


def test_an_approval_given_up_on_after_its_call_ran_never_runs_it_again(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        'sent = await tools.send_email(to="cy", body="due")',
        "import time",
        "time.sleep(3)",
        "print(sent)",
    )
    paused = on_loop(model_call(kb, code))

    async def give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(kb.approve(paused.reference or ""), 1.5)

    on_loop(give_up())

    assert desk.calls == {"send_email": 1}
    assert kb.pending_approvals() == []  # the continuation reached the kernel: it is the program
    with pytest.raises(ApprovalError, match="nothing waits now"):
        on_loop(kb.approve(paused.reference or ""))
    assert desk.calls == {"send_email": 1}


def test_an_approval_given_up_on_before_its_continuation_reached_the_kernel_still_waits(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    paused = on_loop(
        model_call(kb, long_program('print(await tools.send_email(to="di", body="due"))'))
    )
    busy = long_program("import time", "time.sleep(2)")

    async def give_up_while_another_runs() -> None:
        other = asyncio.ensure_future(model_call(kb, busy))
        await asyncio.sleep(0.3)
        with pytest.raises(asyncio.TimeoutError):  # it waited for the kernel all along
            await asyncio.wait_for(kb.approve(paused.reference or ""), 0.5)
        await other

    on_loop(give_up_while_another_runs())

    assert [call.reference for call in kb.pending_approvals()] == [paused.reference]
    assert desk.calls == {}
    assert "sent to di" in continued(on_loop(bounded(kb.approve(paused.reference or "")))).text
    assert desk.calls == {"send_email": 1}


def test_approval_after_another_program_rebound_its_names_reruns_it_with_its_own(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        'who = "ann-1"',
        "hits = await tools.search(q=who)",
        'await tools.send_email(to=hits[0], body="receipt")',
        'print("looked up:", await tools.lookup(name=who))',
    )
    paused = on_loop(model_call(kb, code))
    on_loop(model_call(kb, long_program('who = "bob-2"')))  # the model works on meanwhile

    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))

    assert "looked up: ann-1@example.com" in went_on.text  # the paused program's own names
    assert f"another program ran after {paused.reference} paused" in went_on.text
    assert desk.sent[-1]["to"] == "ann-1-owner"
    assert desk.calls == {"search": 1, "send_email": 1, "lookup": 1}


def test_approvals_in_one_turn_beyond_the_resume_budget_each_go_on_from_their_call(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    people = ["p1", "p2", "p3", "p4", "p5"]  # more approvals than max_resumes_per_turn (3)
    code = long_program(
        "import secrets",
        "token = secrets.token_hex(4)",  # a whole re-run would ask about other emails
        *(f'await tools.send_email(to="{p}", body=f"ref {{token}}")' for p in people),
        'print("all sent")',
    )
    result = on_loop(model_call(kb, code))
    for _ in people:
        assert result.status == ResultStatus.PAUSED, result.text
        went_on = on_loop(bounded(kb.approve(result.reference or "")))
        assert went_on is not None
        result = went_on

    assert result.status == ResultStatus.OK and "all sent" in result.text, result.text
    assert "resumes" not in result.text
    assert [mail["to"] for mail in desk.sent[-5:]] == people
    assert len({mail["body"] for mail in desk.sent[-5:]}) == 1  # one run's token, never re-drawn
    assert desk.calls == {"send_email": 5}


def exiting(arguments: dict[str, Any]) -> bool:
    """A policy that calls ``sys.exit``, as a command-line parser does on odd input."""
    raise SystemExit(2)


def interrupted(call: PendingApproval) -> Any:
    """An approver's answer that is Ctrl-C, as an interactive prompt raises it."""
    raise KeyboardInterrupt


def test_a_policy_or_approver_raising_systemexit_or_keyboardinterrupt_leaves_the_call_waiting(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    kb.register_tool(desk.pay, name="refund", approval=exiting)
    paused = on_loop(model_call(kb, long_program("await tools.refund(amount=5)")))

    assert paused.status == ResultStatus.PAUSED, paused.text
    (waiting,) = kb.pending_approvals()
    assert waiting.policy_error == "the approval policy raised SystemExit: 2"

    desk.answer = interrupted
    asked = on_loop(model_call(kb, long_program('await tools.send_email(to="ed", body="x")')))

    assert asked.status == ResultStatus.PAUSED, asked.text
    assert [call.arguments["to"] for call in desk.asked] == ["ed"]
    assert desk.calls == {}
    deny_all(kb, on_loop)
    assert desk.calls == {}


def test_the_live_count_leaves_out_calls_that_were_paused_or_denied(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        'owner = await tools.lookup(name="fay")', 'await tools.send_email(to=owner, body="hi")'
    )
    paused = on_loop(model_call(kb, code))
    edited = f"await ptc_retry.replay({paused.reference!r}, 'body=\"hi\"', 'body=\"hello\"')"

    again = on_loop(model_call(kb, edited))

    assert again.status == ResultStatus.PAUSED, again.text
    assert f"1 tool result reused from {paused.reference}; 0 calls made live" in again.text
    deny_all(kb, on_loop)

    desk.answer = "not now"  # the inline approver denies the email of a gather
    gathered = long_program(
        "import asyncio",
        "print(await asyncio.gather(",
        '    tools.lookup(name="gus"), tools.send_email(to="gus", body="x"),',
        "    return_exceptions=True,",
        "))",
    )
    ran = on_loop(model_call(kb, gathered))

    assert ran.status == ResultStatus.OK and "ToolDenied" in ran.text, ran.text
    assert (ran.metadata or {})["tool_calls"] == {"reused": 0, "live": 1}
    assert desk.calls == {"lookup": 2}


def test_a_pause_waits_for_the_calls_other_tasks_have_in_flight_and_approval_reuses_them(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    started: list[int] = []

    async def charge(amount: int) -> str:
        """Charge a card, slowly."""
        started.append(amount)
        await asyncio.sleep(1)
        desk.calls["charge"] += 1
        return f"charged {amount}"

    kb.register_tool(charge)
    code = long_program(
        "import asyncio",
        "charging = asyncio.create_task(tools.charge(amount=5))",
        "await asyncio.sleep(0.1)",  # the charge is in flight when the email pauses
        'sent = await tools.send_email(to="hal", body="receipt")',
        "print(await charging, sent)",
    )
    paused = on_loop(model_call(kb, code))

    assert paused.status == ResultStatus.PAUSED, paused.text
    assert desk.calls == {"charge": 1}  # it ended before the pause ended the program

    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))

    assert "charged 5 sent to hal" in went_on.text
    assert started == [5] and desk.calls == {"charge": 1, "send_email": 1}


def test_a_paused_program_sent_again_runs_nothing_and_says_it_still_waits(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        'owner = await tools.lookup(name="ivy")',
        'print(await tools.send_email(to=owner, body="again?"))',
    )
    paused = on_loop(model_call(kb, code))

    again = on_loop(model_call(kb, code))

    assert again.status == ResultStatus.PAUSED and again.reference == paused.reference
    assert again.text.startswith(f"[ptc-retry] Not run: {paused.reference} still waits")
    assert desk.calls == {"lookup": 1}
    assert [call.reference for call in kb.pending_approvals()] == [paused.reference]
    went_on = continued(on_loop(bounded(kb.approve(paused.reference or ""))))
    assert "sent to ivy@example.com" in went_on.text
    assert desk.calls == {"lookup": 1, "send_email": 1}


def test_a_replay_that_fails_before_the_paused_call_leaves_it_waiting_until_one_goes_on(
    kb: KernelBackend, desk: Office, on_loop: OnLoop[Any]
) -> None:
    code = long_program(
        'owner = await tools.lookup(name="jo")',
        'note = "due"',
        "print(await tools.send_email(to=owner, body=note))",
    )
    paused = on_loop(model_call(kb, code))
    broken = on_loop(
        model_call(kb, f"await ptc_retry.replay({paused.reference!r}, '\"due\"', 'nope')")
    )

    assert broken.status == ResultStatus.ERROR and "NameError" in broken.text, broken.text
    assert [call.reference for call in kb.pending_approvals()] == [paused.reference]

    fixed = on_loop(
        model_call(kb, f"await ptc_retry.replay({broken.reference!r}, 'nope', '\"late\"')")
    )

    assert fixed.status == ResultStatus.PAUSED, fixed.text
    (waiting,) = kb.pending_approvals()  # the fix replaces both: one email waits, not two
    assert (waiting.reference, waiting.arguments["body"]) == (fixed.reference, "late")
    continued(on_loop(bounded(kb.approve(fixed.reference or ""))))
    assert desk.calls == {"lookup": 1, "send_email": 1}
