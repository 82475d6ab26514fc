"""Approvals, as the host keeps them: which tool calls need a person, the calls that wait
for one (``PendingApproval``), and the decisions a person made, each for one exact call.

The trust boundary: a decision is only ever made on the host, by ``kb.approve`` /
``kb.deny`` or the backend's ``approver`` callback, and kept here, in the host's memory.
The kernel is told nothing but the outcome of a call (a result, a denial, or a pause);
nothing it sends, writes or runs can add a decision. What waits is read back from the
session's history after a restart; naming a call there only lets a person decide it, and a
decision still covers exactly the tool and arguments it names.
"""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from . import sentences as said
from .status import HistoryStatus

__all__ = [
    "DENIED",
    "WAITS",
    "Approval",
    "Approver",
    "Decisions",
    "PendingApproval",
    "Policy",
    "call_key",
    "check_approval",
    "check_approver",
    "needs_approval",
    "pending_calls",
    "pending_in_history",
    "waiting_calls",
]

#: A policy: the call's arguments -> whether this call needs a person's approval.
Policy = Callable[[dict[str, Any]], bool]
#: What ``register_tool(approval=...)`` takes: False (never), True (always) or a policy.
Approval = bool | Policy
#: The backend's inline approver: awaited while the program waits on the call. True
#: approves; a str (or False) denies, with that reason; None decides nothing: the program
#: pauses, as without an approver.
Approver = Callable[["PendingApproval"], Awaitable["bool | str | None"]]

#: The reason a denial gives when the person gave none.
DENIED = "a person denied this call"
#: What a paused call's error says (in its recording line, and on the wire), unless the
#: tool's policy raised: then what it raised.
WAITS = "waits for a person's approval"


@dataclass(frozen=True)
class PendingApproval:
    """A tool call that waits for a person's decision.

    ``ref`` names this call alone (``"#3/2"``: call 2 of program #3); ``reference`` names
    its program (``"#3"``, or its call id before the kernel numbered it), whose every waiting
    call ``approve(reference)`` decides at once. ``policy_error``: what the tool's policy
    raised, when it could not say whether the call needs approval.
    """

    ref: str
    reference: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    k: int
    policy_error: str | None = None

    def key(self) -> tuple[str, str]:
        return call_key(self.tool, self.arguments)


def waiting_calls(tools: list[str]) -> str:
    """How a pause names the calls of ``tools`` (their tools, first paused first): the
    first alone, or the first and how many more wait (``tools.pay and 2 more``), so that
    the line stays short however many calls wait."""
    if len(tools) <= 1:
        return "".join(f"tools.{tool}" for tool in tools)
    return said.WAITING_CALLS.render(tool=tools[0], more=len(tools) - 1)


def call_key(tool: str, arguments: Any) -> tuple[str, str]:
    """What makes two calls the same call: the tool and its arguments, as canonical JSON."""
    return tool, json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=repr)


def check_approver(approver: object) -> Approver | None:
    """``approver`` as ``KernelBackend`` takes it; TypeError for what is no async function:
    a plain function's answer cannot be awaited, and every call would wait for a person."""
    if approver is None:
        return None
    plain = inspect.isfunction(approver) or inspect.ismethod(approver)
    if plain and inspect.iscoroutinefunction(approver) or callable(approver) and not plain:
        return cast(Approver, approver)  # an object or a partial: awaited as it is
    name = getattr(approver, "__name__", "")
    what = f"the plain function {name!r}" if plain else repr(approver)
    raise TypeError(
        f"approver must be an async function (async def), not {what}: its answer could not "
        "be awaited, so every call that needs approval would pause (for a blocking prompt, "
        "await asyncio.to_thread(prompt, pending) inside an async def)"
    )


def check_approval(approval: object) -> Approval:
    """``approval`` as ``register_tool`` takes it; TypeError for anything else."""
    if isinstance(approval, bool) or callable(approval):
        return approval
    raise TypeError(
        "register_tool: approval must be True, False or a policy (a function of the call's "
        f"arguments that returns whether it needs a person's approval), not {approval!r}"
    )


def needs_approval(approval: Approval, arguments: dict[str, Any]) -> tuple[bool, str | None]:
    """Whether a call with ``arguments`` needs approval, and what the policy raised: a
    policy that raises (or answers no bool) makes the call wait, with its error: also one
    that raises ``SystemExit`` or ``KeyboardInterrupt``, which must not end the agent's
    process."""
    if not callable(approval):
        return bool(approval), None
    try:
        answer = approval(dict(arguments))
    except BaseException as exc:  # a policy is sync: nothing it raises is our cancellation
        return True, f"the approval policy raised {type(exc).__name__}: {exc}"
    if not isinstance(answer, bool):
        return True, f"the approval policy returned {answer!r}, not True or False"
    return answer, None


class Decisions:
    """The decisions a person made, each for one exact call of one continuation, used once:
    approvals, and denials with their reasons. Only the host's own code adds to them.

    A decision is bound to the program that may use it (the continuation ``kb.approve`` /
    ``kb.deny`` runs, under a call id of its own that no program can know before it runs):
    a call of any other program, with the same tool and arguments, finds no decision."""

    def __init__(self) -> None:
        self._approved: Counter[tuple[str, str, str]] = Counter()
        self._denied: dict[tuple[str, str, str], list[str]] = {}

    def add(self, program: str, key: tuple[str, str], denial: str | None) -> None:
        """Decide the call ``key`` for program ``program``: approve it (``denial`` None) or
        deny it with that reason."""
        bound = (program, *key)
        if denial is None:
            self._approved[bound] += 1
        else:
            self._denied.setdefault(bound, []).append(denial)

    def take(self, program: str, key: tuple[str, str]) -> tuple[bool, str | None]:
        """``(decided, denial)`` for program ``program``'s call ``key``, which needs approval,
        used up: decided False when nobody decided it for that program; a denial's reason, or
        None for an approval."""
        bound = (program, *key)
        if self._approved[bound] > 0:
            self._approved[bound] -= 1
            return True, None
        self._approved.pop(bound, None)
        reasons = self._denied.get(bound)
        if reasons:
            reason = reasons.pop(0)
            if not reasons:
                del self._denied[bound]
            return True, reason
        return False, None

    def drop(self, program: str) -> None:
        """Forget what is left of the decisions for ``program``: a decision covers the
        continuation it was made for, never a later program."""
        for bound in [bound for bound in self._approved if bound[0] == program]:
            del self._approved[bound]
        for bound in [bound for bound in self._denied if bound[0] == program]:
            del self._denied[bound]


def pending_in_history(lines: Iterable[Mapping[str, Any]]) -> list[PendingApproval]:
    """The calls that wait for approval, as a session's history lines say: those of each
    program whose latest line is ``paused`` and that no later program went on from
    (``replay_of``). What the lines say is only what to offer a person to decide."""
    latest: dict[str, Mapping[str, Any]] = {}
    continued: set[str] = set()
    for line in lines:
        call_id = line.get("id")
        if not isinstance(call_id, str):
            continue
        latest.pop(call_id, None)  # keep the order of each program's latest line
        latest[call_id] = line
        replay_of = line.get("replay_of")
        if isinstance(replay_of, str):
            continued.add(replay_of)
    found: list[PendingApproval] = []
    for call_id, line in latest.items():
        if line.get("status") != HistoryStatus.PAUSED or call_id in continued:
            continue
        n = line.get("n")
        reference = f"#{n}" if isinstance(n, int) and not isinstance(n, bool) else call_id
        found.extend(pending_calls(reference, call_id, line.get("pending")))
    return found


def pending_calls(reference: str, call_id: str, pending: object) -> list[PendingApproval]:
    """The ``PendingApproval`` of each well-formed entry of ``pending`` (a history line's or
    a reply's ``{"k", "tool", "arguments", "policy_error"}`` list) of program ``call_id``."""
    calls = []
    for entry in pending if isinstance(pending, list) else ():
        if not isinstance(entry, dict):
            continue
        k, tool, arguments = entry.get("k"), entry.get("tool"), entry.get("arguments")
        if isinstance(k, bool) or not isinstance(k, int) or not isinstance(tool, str):
            continue
        if not isinstance(arguments, dict):
            continue
        error = entry.get("policy_error")
        calls.append(
            PendingApproval(
                f"{reference}/{k}",
                reference,
                call_id,
                tool,
                arguments,
                k,
                error if isinstance(error, str) else None,
            )
        )
    return calls
