"""The agent's own functions that programs call as ``await tools.<name>(...)``: their
registry, the catalog the kernel is sent, and the host side of one call (checked arguments,
the function run, a JSON result or the error the program's ``ToolError`` says)."""

from __future__ import annotations

import asyncio
import inspect
import json
import keyword
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.approvals import (
    DENIED,
    WAITS,
    Approval,
    Approver,
    Decisions,
    PendingApproval,
    call_key,
    check_approval,
    needs_approval,
)
from ..core.protocol import sendable_text
from ..core.schema import first_paragraph, signature_schema
from .tool_checks import (
    Refused,
    check_arguments,
    check_result,
    check_signature,
    is_async,
    raised,
)
from .tracing import NO_HOST_SPAN, HostSpan, Tracing
from .within import within

__all__ = ["Completed", "HostTool", "HostTools"]

log = logging.getLogger(__name__)

#: ``completed(call, result)``: told of each call whose function returned a JSON result.
Completed = Callable[[dict[str, Any], Any], None]

#: How many cut-off sync calls that returned are kept for a replay that makes one again.
_CUT_OFF_KEPT = 32


@dataclass(frozen=True)
class HostTool:
    """One registered function: what the model and the kernel are told, and how it runs."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the keyword arguments
    function: Callable[..., Any]
    is_async: bool  # awaited on the loop; otherwise run in a worker thread
    #: Whether a call needs a person's approval first: False, True, or a policy of its
    #: arguments (see ``register_tool``).
    approval: Approval = False

    def spec(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}``, and ``"approval": True`` for a tool
        whose calls may need a person's approval: the tool as the kernel's catalog has it."""
        spec: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.approval is not False:
            spec["approval"] = True
        return spec


class HostTools:
    """The functions a backend offers to programs, in registration order."""

    def __init__(self, tracing: Tracing | None = None) -> None:
        #: Where the span of each call goes (docs/operators.md); None: no spans.
        self.tracing = tracing
        self._tools: dict[str, HostTool] = {}
        #: Sync functions of cancelled batches that still run in their threads.
        self._running: set[asyncio.Future[Any]] = set()
        #: Those of ``_running`` that a whole wait already waited for (see wait_for_threads).
        self._waited: set[asyncio.Future[Any]] = set()
        #: The threads of the sync calls that a cancelled batch left, running or returned, by
        #: the recording line they are (program, k), with the call's tool and arguments; the
        #: most recent last.
        self._cut_off: OrderedDict[tuple[Any, Any], tuple[str, str, asyncio.Future[Any]]] = (
            OrderedDict()
        )
        #: The programs whose calls were given each kept call's outcome: one call each.
        self._taken: dict[tuple[Any, Any], set[Any]] = {}
        #: What people decided, for calls that need approval: only the host adds to it.
        self.decisions = Decisions()
        #: Awaited for a call that needs approval and has no decision (None: it pauses).
        self.approver: Approver | None = None
        #: Seconds the approver may take on one call before it waits for a person instead.
        self.approver_timeout = 300.0
        #: The calls answered with a pause, since the backend last took them.
        self.paused: list[PendingApproval] = []

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def catalog(self) -> list[dict[str, Any]]:
        """Every tool's spec, as ``metadata["ptc_retry"]["tools"]`` carries them."""
        return [tool.spec() for tool in self._tools.values()]

    def register(
        self,
        function: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        approval: Approval = False,
    ) -> HostTool:
        """Add ``function`` as ``tools.<name>`` (default its ``__name__``).

        The schema comes from its type hints, the description (default) from its docstring's
        first paragraph. ``approval``: True, or a policy (the arguments -> whether this call
        needs a person), makes the calls that need it wait for a decision. TypeError for
        what cannot be called with JSON keyword arguments (not callable, ``*args``,
        positional-only parameters) and for an ``approval`` that is neither (an async policy
        included); ValueError for a name that is not a public identifier or is taken.
        """
        if not callable(function):
            raise TypeError(f"register_tool takes a function, not {type(function).__name__}")
        tool_name = name if name is not None else getattr(function, "__name__", None)
        if not isinstance(tool_name, str):
            raise ValueError(f"register_tool: give {function!r} a name (name=...)")
        self._check_name(tool_name)
        check_signature(function, tool_name)
        if description is not None and not isinstance(description, str):
            raise TypeError(f"register_tool: description must be a str, not {description!r}")
        checked = check_approval(approval)
        if callable(checked) and is_async(checked):
            # Its coroutine is no bool: every call would wait, whatever it would answer.
            raise TypeError(
                f"register_tool: the approval policy of {tool_name!r} is async; a policy is a "
                "plain function of the arguments that returns True or False at once. To ask "
                "a person while the program waits, pass KernelBackend(approver=...)"
            )
        tool = HostTool(
            tool_name,
            " ".join(description.split()) if description is not None else first_paragraph(function),
            signature_schema(function, defaults=True),
            function,
            is_async(function),
            checked,
        )
        return self.add(tool)

    def add(self, tool: HostTool) -> HostTool:
        """Add ``tool`` as ``tools.<tool.name>``, as built: a tool described by a JSON schema
        rather than a Python signature (an upstream MCP server's, say). Its ``function`` is
        called with the checked keyword arguments. ValueError as ``register`` for its name.
        """
        self._check_name(tool.name)
        self._tools[tool.name] = tool
        return tool

    def _check_name(self, tool_name: str) -> None:
        """ValueError unless ``tool_name`` can be ``tools.<name>`` and is free."""
        if not tool_name.isidentifier() or keyword.iskeyword(tool_name) or tool_name[0] == "_":
            raise ValueError(
                f"register_tool: {tool_name!r} cannot be a tool's name: programs call it as "
                "tools.<name>, so it must be a Python identifier that is not a keyword and "
                "does not start with '_'; pass name=..."
            )
        if tool_name in self._tools:
            raise ValueError(
                f"register_tool: a tool named {tool_name!r} is already registered; pass "
                "name=... to register this one under another name"
            )

    async def answer(
        self, calls: list[dict[str, Any]], completed: Completed | None = None
    ) -> list[dict[str, Any]]:
        """The results of one batch of calls, made concurrently, in the order of ``calls``.

        Each is ``{"id", "ok": True, "result"}`` or ``{"id", "ok": False, "error"}``, and each
        result can travel on the wire (JSON, valid UTF-8). Nothing a call does raises here:
        an exception, ``SystemExit``, ``KeyboardInterrupt``, any other ``BaseException`` and a
        ``CancelledError`` the tool raises itself become that call's error. Cancelling the
        batch cancels its async functions, and raises CancelledError once they have ended; a
        sync one runs on in its thread to its end (``wait_for_threads`` waits for it).
        ``completed(call, result)`` is called for each call whose function returned a
        result that can travel, as it returns: also for a sync function that returns after
        its batch was cancelled, and never for one that raised.
        """
        # With return_exceptions, a call that ends cancelled although the batch was not (its
        # tool raised CancelledError) is an outcome like any other; cancelling the batch
        # still cancels every call and raises.
        outcomes = await asyncio.gather(
            *(self._answer(call, completed) for call in calls), return_exceptions=True
        )
        return [_outcome(call, outcome) for call, outcome in zip(calls, outcomes)]

    async def wait_for_threads(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, for the sync functions of cancelled batches
        that still run in their threads; True once none does. Each is waited for once:
        one that never returns holds back a single wait, not every later one (what it
        returns, if it ever does, still goes to its ``completed``)."""
        waiting = self._running - self._waited
        if not waiting:
            return True
        # Marked waited-for only once a wait ran its course: a wait that is cancelled (its
        # caller gave up) leaves them for the next one.
        await asyncio.wait(waiting, timeout=timeout)
        self._waited |= {thread for thread in waiting if not thread.done()}
        return all(thread.done() for thread in waiting)

    async def _answer(self, call: dict[str, Any], completed: Completed | None) -> dict[str, Any]:
        call_id = call.get("id")
        earlier = self._made_before(call)
        span = self._span(call) if earlier is None else NO_HOST_SPAN  # a join makes no call
        try:
            with span.running():
                try:
                    if earlier is None:
                        result = await self._call(call, completed)
                    else:
                        result = await self._join(earlier, call, completed)
                except Refused as refused:
                    span.failed(refused.ename)  # while the span is open
                    raise
        except _Undecided as undecided:
            return {"id": call_id, "ok": False, "paused": True, "error": str(undecided)}
        except _Denied as denied:
            reason = sendable_text(str(denied))
            return {"id": call_id, "ok": False, "denied": reason, "error": reason}
        except Refused as refused:
            # A message may quote what the tool said, lone surrogates and all.
            failed = {"id": call_id, "ok": False, "error": sendable_text(str(refused))}
            return failed if earlier is None else {**failed, "joined": True}
        if completed is not None:
            completed(call, result)
        answer = {"id": call_id, "ok": True, "result": result}
        if earlier is not None:  # the kernel counts it as reused, not made live
            answer["joined"] = True
        return answer

    def _span(self, call: dict[str, Any]) -> HostSpan:
        return self.tracing.host_call(call) if self.tracing is not None else NO_HOST_SPAN

    async def _call(self, call: dict[str, Any], completed: Completed | None) -> Any:
        name, arguments = call.get("tool"), call.get("arguments")
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            offered = ", ".join(self._tools) or "none"
            raise Refused(f"there is no tool named {name!r}; the tools are: {offered}")
        check_arguments(tool.parameters, arguments)
        assert isinstance(arguments, dict)  # check_arguments made sure
        await self._decided(tool, arguments, call)
        result = await self._run(tool, arguments, call, completed)
        check_result(result)
        return result

    async def _decided(
        self, tool: HostTool, arguments: dict[str, Any], call: dict[str, Any]
    ) -> None:
        """Return when ``tool`` may run with ``arguments``: it needs no approval, or a person
        approved this exact call for the program making it (a decision of ``decisions``, used
        up, else the approver's). _Denied with the reason of a denial; _Undecided when nobody
        decided: the program pauses, and ``paused`` lists the call. Nothing in the kernel can
        approve a call: a decision names the continuation's call id, which no program knows
        before that continuation runs."""
        needed, policy_error = needs_approval(tool.approval, arguments)
        if not needed:
            return
        program = str(call.get("program") or "")
        decided, denial = self.decisions.take(program, call_key(tool.name, arguments))
        k = call.get("k")
        number = k if isinstance(k, int) and not isinstance(k, bool) else 0
        waiting = PendingApproval(
            f"{program}/{number}", program, program, tool.name, arguments, number, policy_error
        )
        if not decided and self.approver is not None and policy_error is None:
            decided, denial = await self._ask(waiting)
        if not decided:
            self.paused.append(waiting)
            raise _Undecided(policy_error or WAITS)
        if denial is not None:
            raise _Denied(denial)

    async def _ask(self, waiting: PendingApproval) -> tuple[bool, str | None]:
        """The inline approver's decision on ``waiting``: ``(decided, denial)``. One that
        raises decides nothing (the call pauses), and the backend logs why: also one that
        raises ``SystemExit`` or ``KeyboardInterrupt`` (a prompt on Ctrl-C), which must not
        end the agent's process; so does one that gives no answer within
        ``approver_timeout`` seconds, or answers neither True, False, None nor a str. A
        CancelledError passes: the batch may be cancelled."""
        assert self.approver is not None
        try:
            answer = await within(self.approver(waiting), self.approver_timeout)
        except asyncio.TimeoutError:
            log.warning(
                "the approver gave no answer on tools.%s within %g s: the call waits",
                waiting.tool, self.approver_timeout,
            )  # fmt: skip
            return False, None
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.warning(
                "the approver raised on tools.%s: the call waits", waiting.tool, exc_info=True
            )
            return False, None
        if answer is None:
            return False, None
        if answer is True:
            return True, None
        if answer is False or isinstance(answer, str):
            return True, answer if isinstance(answer, str) and answer.strip() else DENIED
        log.warning(
            "the approver answered %r on tools.%s, not True, False, None or a str: the call "
            "waits", answer, waiting.tool,
        )  # fmt: skip
        return False, None

    async def _run(
        self,
        tool: HostTool,
        arguments: dict[str, Any],
        call: dict[str, Any],
        completed: Completed | None,
    ) -> Any:
        """What ``tool`` returns; Refused with what it raised instead, BaseException
        included: a tool that calls ``sys.exit`` (argparse does on bad input) or raises
        KeyboardInterrupt must not end the agent's loop. A CancelledError passes: only the
        batch can tell its own cancellation from one the tool raised."""
        try:
            if tool.is_async:
                return await tool.function(**arguments)
            result = await self._in_thread(tool, arguments, call, completed)
            if inspect.isawaitable(result):
                result = await result
            return result
        except (asyncio.CancelledError, Refused):
            raise
        except BaseException as exc:
            log.info("host tool %r raised %s", tool.name, type(exc).__name__, exc_info=True)
            raise Refused(raised(exc), ename=type(exc).__name__) from None

    async def _in_thread(
        self,
        tool: HostTool,
        arguments: dict[str, Any],
        call: dict[str, Any],
        completed: Completed | None,
    ) -> Any:
        """``tool``'s sync function, run in a worker thread, so that a slow function keeps
        neither the loop nor the other calls of its batch waiting. A thread cannot be
        stopped: when the batch is cancelled the function runs on, and what it returns
        still goes to ``completed`` (the host did make that call)."""
        running = asyncio.ensure_future(asyncio.to_thread(_in_worker, tool, arguments))
        return await self._thread(running, call, completed)

    async def _join(
        self, earlier: asyncio.Future[Any], call: dict[str, Any], completed: Completed | None
    ) -> Any:
        """What ``earlier`` returns: the thread of the cut-off call that ``call`` makes again.
        Refused with what it raised, as for any call."""
        log.info(
            "host tool %r: given the outcome of cut-off call %s",
            call.get("tool"),
            call.get("retry_of"),
        )
        try:
            result = await self._thread(earlier, call, completed)
            if inspect.isawaitable(result):
                result = await result
        except (asyncio.CancelledError, Refused):
            raise
        except BaseException as exc:
            raise Refused(raised(exc)) from None
        check_result(result)
        return result

    async def _thread(
        self, running: asyncio.Future[Any], call: dict[str, Any], completed: Completed | None
    ) -> Any:
        """Await ``running``, a sync function's thread, for ``call``; when the batch is
        cancelled, the thread is kept for a retry and what it returns still completes."""
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            # Also when it has just returned: its result is not lost to the cancellation.
            self._running.add(running)
            running.add_done_callback(lambda done: self._returned_late(call, done, completed))
            self._keep_cut_off(call, running)
            raise

    def _made_before(self, call: dict[str, Any]) -> asyncio.Future[Any] | None:
        """The thread of the cut-off call that ``call`` makes again, if ``call`` says it is
        one (``retry_of``: a replay or resume matched that call's failed line) and it is still
        running or has returned: the retry gets its outcome, and the function runs once. A
        call that raised, or is not the same call, is made again."""
        retry_of = call.get("retry_of")
        if not (isinstance(retry_of, list) and len(retry_of) == 2):
            return None
        name = call.get("tool")
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None or tool.is_async:  # an async call is cancelled with its batch
            return None
        same = (call.get("tool"), _canonical(call.get("arguments")))
        program = str(retry_of[0])
        named = (program, retry_of[1])
        # The call it names first; else, since a fix may reorder or add calls, any cut-off
        # call of that program that is the same call and no call of this run has taken.
        for key in [named, *(key for key in self._cut_off if key[0] == program and key != named)]:
            kept = self._cut_off.get(key)
            if kept is None or kept[:2] != same or not _joinable(kept[2]):
                continue
            taken = self._taken.setdefault(key, set())
            if call.get("program") in taken:
                continue
            taken.add(call.get("program"))
            return kept[2]
        return None

    def _keep_cut_off(self, call: dict[str, Any], running: asyncio.Future[Any]) -> None:
        program, k = call.get("program"), call.get("k")
        if program is None or not isinstance(k, int):
            return
        key = (str(program), k)
        self._cut_off[key] = (str(call.get("tool")), _canonical(call.get("arguments")), running)
        self._cut_off.move_to_end(key)
        # Every call still running is kept; of those that returned, the latest few.
        returned = [stale for stale, (_, _, thread) in self._cut_off.items() if thread.done()]
        for stale in returned[: max(0, len(returned) - _CUT_OFF_KEPT)]:
            del self._cut_off[stale]
            self._taken.pop(stale, None)

    def _returned_late(
        self, call: dict[str, Any], done: asyncio.Future[Any], completed: Completed | None
    ) -> None:
        self._running.discard(done)
        self._waited.discard(done)
        if done.cancelled() or done.exception() is not None or completed is None:
            return
        result = done.result()
        if inspect.isawaitable(result):  # nobody is left to await it
            log.info(
                "host tool %r returned an awaitable after its batch was cancelled", call.get("tool")
            )
            return
        try:
            check_result(result)
        except Refused:
            return  # not a result the program could have had
        completed(call, result)


def _joinable(thread: asyncio.Future[Any]) -> bool:
    """A kept call's thread still runs, or returned a result (one that raised is made again)."""
    return not thread.done() or (not thread.cancelled() and thread.exception() is None)


def _canonical(arguments: Any) -> str:
    """``arguments`` as one string, the same for the same JSON value."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=repr)


def _in_worker(tool: HostTool, arguments: dict[str, Any]) -> Any:
    """``tool``'s sync function, in its worker thread. What it raises beyond Exception
    (``sys.exit``) is turned into Refused there: left as it is, it would end the task that
    awaits the thread, and with it the agent's event loop."""
    try:
        return tool.function(**arguments)
    except Exception:
        raise
    except BaseException as exc:
        log.info("host tool %r raised %s", tool.name, type(exc).__name__, exc_info=True)
        raise Refused(raised(exc), ename=type(exc).__name__) from None


def _outcome(call: dict[str, Any], outcome: dict[str, Any] | BaseException) -> dict[str, Any]:
    """The result of a call that ended on its own (the batch was not cancelled)."""
    if isinstance(outcome, asyncio.CancelledError):  # so the tool raised it itself
        error = "CancelledError (the tool raised it; nothing cancelled the call)"
        return {"id": call.get("id"), "ok": False, "error": error}
    if isinstance(outcome, BaseException):  # a fault of the backend's own: answer anyway
        log.error("answering a call of %r failed", call.get("tool"), exc_info=outcome)
        error = sendable_text(f"the backend could not answer this call ({raised(outcome)})")
        return {"id": call.get("id"), "ok": False, "error": error}
    return outcome


class _Undecided(Exception):
    """A call that needs a person's approval and has no decision: the program pauses."""


class _Denied(Exception):
    """A call a person denied: the program gets ToolDenied with this reason."""
