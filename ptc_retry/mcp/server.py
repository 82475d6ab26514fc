"""One kernel's MCP face: the ``run_code`` tool, the prompt section as the server's
``instructions``, progress while a program runs, and a host's cancellation as an interrupt.

``KernelTools(kb).server()`` is a low-level ``mcp`` ``Server`` over a started
``KernelBackend``; ``serve_stdio`` (:mod:`.stdio`) runs one for the host that started this
process, and ``ptc_retry.mcp.http`` runs one per Streamable HTTP session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from ..backend import RUN_CODE, KernelBackend, PendingApproval
from ..core import sentences as said
from ..core.errors import BackendError
from ..core.status import ResultStatus
from ..core.version import __version__
from .upstream import Upstreams
from .upstream_config import UpstreamConfig

__all__ = [
    "CANNOT_ASK",
    "ERROR_STATUSES",
    "RUN_CODE_ANNOTATIONS",
    "SERVER_NAME",
    "AskThePerson",
    "KernelTools",
    "ServerOptions",
    "is_error",
    "start_kernel",
    "stop_kernel",
    "unstarted_note",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

SERVER_NAME = "ptc-retry"
#: The ``RunResult`` statuses a host sees as ``isError: true``: the program failed, ran
#: past its time limit, was refused by the repeated-failure guard, killed its kernel, or
#: was cut off. A call that ran nothing (arguments without a program) is an error too.
ERROR_STATUSES = frozenset(set(ResultStatus) - {ResultStatus.OK})
#: What ``run_code`` does, as MCP's hints say it: a program can change files, reach the
#: network and call anything, and running it twice is not running it once.
RUN_CODE_ANNOTATIONS = types.ToolAnnotations(
    title="Run Python in a persistent kernel",
    read_only_hint=False,
    destructive_hint=True,
    idempotent_hint=False,
    open_world_hint=True,
)
#: Characters of a running program's latest output a progress notification carries.
PROGRESS_TAIL_CHARS = 2_000
#: Seconds a cancelled program's interrupt may take before the server stops waiting for it
#: (the backend restarts a kernel that ignores the interrupt for ``interrupt_grace``).
CANCEL_GRACE = 15.0


@dataclass(frozen=True)
class ServerOptions:
    """How the server makes and runs its kernels (``ptc-retry mcp``'s options).

    ``kernel_name``: the kernelspec (default ``ptc-retry``). ``gateway_url`` / ``token``:
    kernels behind Kernel Gateway or Enterprise Gateway instead of local ones. ``root``:
    the checkpoint root (default the store's). ``timeout``: seconds a program may run
    (None: no limit). ``progress_every``: seconds between progress notifications while a
    program runs, the first after that long too. ``upstreams``: the upstream MCP servers
    whose tools a session's programs call (``--config`` / ``--upstream``); each session
    starts its own.
    """

    kernel_name: str | None = None
    gateway_url: str | None = None
    token: str | None = None
    root: Path | None = None
    timeout: float | None = None
    progress_every: float = 5.0
    upstreams: tuple[UpstreamConfig, ...] = ()
    #: ``--approve-destructive``: a call of an upstream tool marked ``destructiveHint``
    #: waits for the person, whom the host asks (``AskThePerson``).
    approve_destructive: bool = False

    def check(self) -> None:
        """ValueError, saying what is wrong, when these options cannot make a kernel."""
        self.backend()

    def backend(self) -> KernelBackend:
        """A new, not yet started ``KernelBackend`` for one MCP session."""
        return KernelBackend(
            "code",
            kernel_name=self.kernel_name,
            gateway_url=self.gateway_url,
            token=self.token,
            root=self.root,
            default_timeout=self.timeout,
            approver=AskThePerson() if self.approve_destructive else None,
        )


#: What a call that needs approval is denied with when the host cannot ask the person.
CANNOT_ASK = said.CANNOT_ASK.render()
#: What the host shows the person (elicitation's message): which tool, which arguments,
#: and what each answer does.
APPROVAL_QUESTION = (
    "A program the assistant wrote wants to call tools.{tool} with these arguments: "
    "{arguments}\n"
    "Allow: the call runs once, with exactly these arguments, and the program goes on with "
    "its result.\n"
    "Deny (or decline): the call is not made; the program is told that a person denied it, "
    "and may go on without it."
)
#: The longest the arguments are shown in the question; longer ones are cut, saying so.
ARGUMENTS_SHOWN = 2000
#: The form the host shows: one yes or no.
APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Allow this call",
            "description": "Yes: run it once, as shown. No: do not make it.",
        }
    },
    "required": ["approve"],
}


class AskThePerson:
    """The approver of an MCP session's backend with ``--approve-destructive``: it asks the
    person, through the host whose ``run_code`` call is running (MCP elicitation), and
    returns their answer. A host that cannot ask, or a person who declines or cancels,
    denies the call: a program never waits for a decision nobody can make."""

    def __init__(self) -> None:
        #: The request context of the host's call that runs now (set by ``KernelTools``).
        self.request: Any = None

    async def __call__(self, pending: PendingApproval) -> bool | str:
        request = self.request
        if request is None:
            return CANNOT_ASK
        arguments = json.dumps(pending.arguments, ensure_ascii=False)
        if len(arguments) > ARGUMENTS_SHOWN:
            cut = len(arguments) - ARGUMENTS_SHOWN
            arguments = f"{arguments[:ARGUMENTS_SHOWN]}... ({cut} more characters not shown)"
        message = APPROVAL_QUESTION.format(tool=pending.tool, arguments=arguments)
        try:
            # Related to the running call: on a transport whose back-channel is the call's
            # own exchange, that is the one way the question reaches the host.
            answer = await request.session.elicit_form(
                message, APPROVAL_FORM, related_request_id=request.request_id
            )
        except Exception as exc:  # no elicitation in this host, or it went away
            log.info("could not ask about %s: %s", pending.tool, exc)
            return CANNOT_ASK
        if answer.action == "accept" and (answer.content or {}).get("approve") is True:
            return True
        return said.PERSON_DECLINED.render(action=answer.action)


def is_error(result: Any) -> bool:
    """Whether a call whose ``RunResult`` is ``result`` (None: nothing ran) is an error."""
    return result is None or result.status in ERROR_STATUSES


async def start_kernel(options: ServerOptions) -> tuple[KernelBackend, Upstreams]:
    """One MCP session's started backend and its started ``Upstreams``, whose tools are
    registered before the kernel starts (so the prompt section lists them).

    An upstream that does not start is left out (``Upstreams.failures``). Raises what
    ``backend.start()`` raises, or UpstreamConfigError when two upstream tools would get
    one name; whatever was started is stopped again first.
    """
    backend, upstreams = options.backend(), Upstreams(options.upstreams)
    try:
        await upstreams.start()
        upstreams.register(backend, options.approve_destructive)
        await backend.start()
    except BaseException:
        await stop_kernel(backend, upstreams, keep=False)
        raise
    return backend, upstreams


async def stop_kernel(backend: KernelBackend, upstreams: Upstreams, keep: bool = True) -> None:
    """Shut the session's kernel down (its directory kept when ``keep``), then close its
    upstream servers; not cut short by a cancellation."""
    with anyio.CancelScope(shield=True):
        try:
            await backend.shutdown(keep=keep)
        finally:
            await upstreams.close()


def unstarted_note(upstreams: Upstreams | None) -> str:
    """The line the instructions end with when upstream servers did not start (else ""):
    their names only; why is in the server's log, which may quote their stderr."""
    if upstreams is None or not upstreams.failures:
        return ""
    return said.UPSTREAMS_NOT_STARTED.render(names=", ".join(upstreams.failures))


class KernelTools:
    """The MCP server of one started ``KernelBackend``: ``run_code`` runs each program with
    ``handle_tool_call``, whose text is the result; the instructions are its prompt section
    (which lists the registered upstream tools), and ``unstarted_note(upstreams)`` after it.
    """

    def __init__(
        self,
        backend: KernelBackend,
        progress_every: float = 5.0,
        upstreams: Upstreams | None = None,
    ) -> None:
        self.backend = backend
        self.progress_every = progress_every
        #: Fixed at start: byte-identical for the session's life. An upstream that failed
        #: its start is never started again in the session, so the note stays true.
        self.instructions = backend.system_prompt() + unstarted_note(upstreams)
        self._one_at_a_time = asyncio.Lock()

    def server(self) -> Server[Any]:
        """A low-level ``Server`` offering ``run_code``, with the prompt as instructions."""
        return Server(
            SERVER_NAME,
            version=__version__,
            instructions=self.instructions,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def tools(self) -> list[types.Tool]:
        """The tools the host lists: ``run_code``, described as the backend describes it."""
        schema = self.backend.tool_schema("anthropic", RUN_CODE)
        return [
            types.Tool(
                name=schema["name"],
                description=schema["description"],
                input_schema=schema["input_schema"],
                annotations=RUN_CODE_ANNOTATIONS,
            )
        ]

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools())

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        progress = ctx.session if wants_progress(params) else None
        text, error = await self.call(params.name, params.arguments or {}, progress, asker=ctx)
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            is_error=error,
        )

    async def call(
        self, name: str, arguments: dict[str, Any], session: Any = None, *, asker: Any = None
    ) -> tuple[str, bool]:
        """Run one tool call: ``(text, is_error)``. ``session`` (None: none) gets progress
        notifications while the program runs: pass the request's session only when the
        request carried a progress token (``wants_progress``). ``asker``: the request context
        of the call, through which the host asks the person about calls that need approval
        (with ``--approve-destructive``).

        Calls run one at a time, in the order they came. A cancelled call interrupts its
        program and waits (up to ``CANCEL_GRACE``) until the kernel has stopped it, so the
        next call finds the kernel free.
        """
        # Its own task: anyio's cancellation would cancel every await of the backend's
        # cleanup (the interrupt among them); a task cancelled once runs its cleanup.
        task = _eager_task(self._run(name, arguments, session, asker))
        try:
            return await asyncio.shield(task)
        except BackendError as exc:  # the kernel is gone and cannot come back
            return said.MCP_KERNEL_GONE.render(problem=exc), True
        except Exception as exc:  # a fault of the server's, not the program's
            log.exception("run_code failed in the server")
            return said.MCP_SERVER_FAULT.render(ename=type(exc).__name__, problem=exc), True
        except BaseException:  # the host cancelled the call, or the server stops
            task.cancel()
            with anyio.move_on_after(CANCEL_GRACE, shield=True):
                with contextlib.suppress(BaseException):
                    await task
            raise

    async def _run(
        self, name: str, arguments: dict[str, Any], session: Any, asker: Any
    ) -> tuple[str, bool]:
        # One at a time: the backend's last_result and running output are this call's own
        # only while no other call of the session runs.
        async with self._one_at_a_time:
            approver = self.backend.approver
            if isinstance(approver, AskThePerson):
                approver.request = asker
            if session is None:  # no task per call for a host that asked for no progress
                text = await self.backend.handle_tool_call(name, arguments)
                return text, is_error(self.backend.last_result)
            reporter = asyncio.ensure_future(self._report_progress(session))
            try:
                text = await self.backend.handle_tool_call(name, arguments)
            finally:
                reporter.cancel()
            return text, is_error(self.backend.last_result)

    async def _report_progress(self, session: Any) -> None:
        """Every ``progress_every`` seconds: how long the program has run and the end of
        what it printed (a no-op for a request without a progress token)."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(self.progress_every)
            elapsed = time.monotonic() - started
            printed = self.backend.running_output()
            if printed is None:
                continue  # still waiting for the backend, or already done
            message = progress_message(elapsed, printed)
            try:
                await session.report_progress(elapsed, None, message)
            except Exception as exc:  # a host that went away: the program goes on
                log.debug("progress notification not sent: %s", exc)


def _eager_task(coroutine: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """A task of ``coroutine`` that runs at once up to its first wait (Python >= 3.12), not
    one turn of the event loop later: a call's start takes no hop through the loop."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coroutine, loop=asyncio.get_running_loop(), eager_start=True)
    return asyncio.ensure_future(coroutine)


def wants_progress(params: types.RequestParams) -> bool:
    """Whether the request carried a progress token (``_meta.progressToken``)."""
    return (params.meta or {}).get("progress_token") is not None


def progress_message(elapsed: float, printed: str) -> str:
    """A progress notification's text: the seconds run and the end of what was printed."""
    if not printed:
        return f"running for {elapsed:.0f} s; nothing printed yet"
    tail = printed[-PROGRESS_TAIL_CHARS:]
    cut = " (its end)" if len(tail) < len(printed) else ""
    return f"running for {elapsed:.0f} s; printed so far{cut}:\n{tail}"
