"""A kernel started on this machine, in a subprocess, through jupyter_client: the backend's
local transport."""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import queue
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import BackendError, KernelStartError, PtcRetryError, SessionInUseError
from ..core.protocol import execute_request
from ..core.session_files import session_in_use
from ..core.store import CheckpointStore
from ..kernelspec import KERNEL_NAME
from .remote import connect_expression
from .transport import KernelSetup

log = logging.getLogger(__name__)

__all__ = ["NATIVE_KERNEL_DIR", "LocalKernel", "check_checkpoints", "remove_session_dir"]

#: Native mode keeps the kernel's own checkpoints in ``<session_dir>/kernel/<session_id>``,
#: apart from the tool-call journal: two processes never share one session directory.
NATIVE_KERNEL_DIR = "kernel"
#: How many times ``start`` starts a kernel that dies before it answers (kernel_info).
_STARTS = 2


class LocalKernel:
    """A kernel started here through jupyter_client's AsyncKernelManager.

    ``kernel_name``: ``"ptc-retry"`` (works without an installed kernelspec) or another
    IPython kernel, which gets ``--ext=ptc_retry`` unless ``extension`` is False (a stock
    kernel, for comparisons; not allowed for the ``ptc-retry`` kernel). ``cwd``: the
    kernel's working directory. ``env``: variables added to this process's environment for
    the kernel (the session's root and id win over ``PTC_RETRY_ROOT``/``PTC_RETRY_SESSION``
    there). ``extra_arguments``: appended to the kernel's argv. ``startup_timeout``: seconds
    to wait for the kernel to answer after (re)starting.
    """

    url: str | None = None
    #: The kernel runs here: the backend reads its checkpoints and removes what it made.
    checkpoints_here = True

    def __init__(
        self,
        kernel_name: str = KERNEL_NAME,
        *,
        extension: bool = True,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        extra_arguments: Sequence[str] = (),
        startup_timeout: float = 60,
    ) -> None:
        if not extension and kernel_name == KERNEL_NAME:
            raise ValueError(
                f"the {KERNEL_NAME!r} kernel always loads ptc-retry; for a stock kernel pass "
                "kernel_name='python3' with extension=False"
            )
        self.kernel_name = kernel_name
        self.extension = extension
        self.cwd = cwd
        self.env = dict(env or {})
        self.extra_arguments = list(extra_arguments)
        self.startup_timeout = startup_timeout
        self.manager: Any = None  # jupyter_client AsyncKernelManager, once started
        self.client: Any = None  # its AsyncKernelClient
        self._msg_id: str | None = None
        self._idle = False  # the current request's idle status came: read its reply next

    def __repr__(self) -> str:
        return f"<LocalKernel {self.kernel_name}>"

    async def start(self, setup: KernelSetup) -> Path:
        from jupyter_client.kernelspec import NoSuchKernel
        from jupyter_client.manager import AsyncKernelManager

        from ..kernelspec import kernel_spec_manager

        if setup.root is None:
            raise ValueError("a local kernel needs the checkpoint root (KernelSetup.root)")
        launch: dict[str, Any] = {"env": self._env(setup), "extra_arguments": self._argv(setup)}
        if self.cwd is not None:
            launch["cwd"] = os.fspath(self.cwd)
        specs = kernel_spec_manager()
        for attempt in range(_STARTS):
            manager = AsyncKernelManager(kernel_name=self.kernel_name, kernel_spec_manager=specs)
            try:
                await manager.start_kernel(**launch)
            except NoSuchKernel:
                names = ", ".join(sorted({KERNEL_NAME, *specs.find_kernel_specs()}))
                raise KernelStartError(
                    f"no kernel named {self.kernel_name!r}; the kernels here are: {names}"
                ) from None
            except Exception as exc:
                raise KernelStartError(
                    f"could not start the {self.kernel_name!r} kernel: {exc}"
                ) from exc
            client = manager.client()
            client.start_channels()
            self.manager, self.client = manager, client
            try:
                await client.wait_for_ready(timeout=self.startup_timeout)
                break
            except Exception as exc:
                died = not await manager.is_alive()
                await self.shutdown(None)
                if not died or attempt == _STARTS - 1:
                    raise KernelStartError(self._no_answer(exc, died)) from exc
                # Died before it answered: most often a port that jupyter_client picked and
                # another process bound first. A new kernel gets new ports.
                log.info("the %r kernel died as it started; starting it again", self.kernel_name)
        session_dir = setup.root / setup.session_id
        if self.extension:
            held = await self._open_session(setup)
            if held is not None and held != session_dir:
                await self.shutdown(None)
                raise BackendError(in_use(setup.session_id, setup.root))
        return session_dir

    async def _open_session(self, setup: KernelSetup) -> Path | None:
        """Make the kernel open its session now, not at its first program, and say which
        directory it got: the one asked for, unless another live kernel holds that one.
        Held from the start, a session refuses a second backend in its ``start()``
        (:func:`check_checkpoints`), before either has run a program. None when the kernel
        does not say (logged): its first program then opens it, as before."""
        expression = connect_expression(setup.session_id, str(setup.root))
        content = execute_request("", silent=True, user_expressions={"session": expression})
        msg_id = await self.send_execute(content, {})
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            message = await self.receive(msg_id, min(0.5, deadline - time.monotonic()))
            if message is not None and message["msg_type"] == "execute_reply":
                found = message["content"].get("user_expressions", {}).get("session", {})
                try:
                    answer = ast.literal_eval(found["data"]["text/plain"])
                    return Path(answer["session_dir"]) if answer["session_dir"] else None
                except Exception as exc:  # an odd answer: the first program opens it
                    log.info("the kernel did not say which session it holds: %r", exc)
                    return None
        log.info("the kernel did not say in time which session it holds")
        return None

    def _env(self, setup: KernelSetup) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env["PTC_RETRY_ROOT"] = str(setup.root)
        env["PTC_RETRY_SESSION"] = setup.session_id
        return env

    def _argv(self, setup: KernelSetup) -> list[str]:
        argv = list(self.extra_arguments)
        if not self.extension:
            return argv
        if self.kernel_name != KERNEL_NAME:
            # Fail at startup, loudly, rather than run without checkpoints.
            ext = ["--ext=ptc_retry", "--IPKernelApp.reraise_ipython_extension_failures=True"]
            argv = ext + argv
        return argv + list(setup.options)  # last, so they win

    def _no_answer(self, exc: BaseException, died: bool) -> str:
        hint = ""
        if self.kernel_name != KERNEL_NAME and self.extension:
            hint = (
                f" (the {self.kernel_name!r} kernel must be an IPython kernel whose Python can "
                "import ptc_retry)"
            )
        if died:
            return (
                f"the {self.kernel_name!r} kernel died as it started, {_STARTS} times; its "
                f"error is on this process's stderr{hint}"
            )
        return (
            f"the {self.kernel_name!r} kernel did not answer within {self.startup_timeout:g} s "
            f"after starting: {exc}{hint}"
        )

    async def send_execute(self, content: dict[str, Any], metadata: dict[str, Any]) -> str:
        msg = self.client.session.msg("execute_request", content, metadata=metadata)
        self.client.shell_channel.send(msg)
        self._msg_id, self._idle = msg["header"]["msg_id"], False
        return self._msg_id

    async def receive(self, msg_id: str, timeout: float) -> dict[str, Any] | None:
        # iopub (and stdin, where a running program asks for input) until the request's idle
        # status, then shell for its reply: its outputs all come before the idle status.
        client = self.client
        idle = self._idle and msg_id == self._msg_id
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                if idle:
                    message = await client.get_shell_msg(timeout=left)
                else:
                    message = await self._iopub_or_stdin(left)
            except queue.Empty:
                # A pause on iopub: the reply may be in although the idle status was lost
                # (zmq drops what overflows a subscriber's queue when a program floods it).
                return None if idle else await self._reply_waiting(msg_id)
            if message["parent_header"].get("msg_id") != msg_id:
                continue  # left over from an earlier request, or kernel_info traffic
            if message["msg_type"] == "status" and msg_id == self._msg_id:
                self._idle = message["content"].get("execution_state") == "idle"
            return message

    async def _iopub_or_stdin(self, timeout: float) -> dict[str, Any]:
        """The next iopub or stdin message; queue.Empty when none came within ``timeout``."""
        import zmq
        import zmq.asyncio

        iopub, stdin = self.client.iopub_channel, self.client.stdin_channel
        poller = zmq.asyncio.Poller()
        poller.register(iopub.socket, zmq.POLLIN)
        poller.register(stdin.socket, zmq.POLLIN)
        ready = dict(await poller.poll(timeout * 1000))
        # iopub first: the kernel flushes what a program printed before it asks for input.
        for channel in (iopub, stdin):
            if channel.socket in ready:
                return await channel.get_msg(timeout=0)
        raise queue.Empty

    async def send_input_reply(self, value: str, request: dict[str, Any]) -> None:
        msg = self.client.session.msg("input_reply", {"value": value}, parent=request)
        self.client.stdin_channel.send(msg)

    async def _reply_waiting(self, msg_id: str) -> dict[str, Any] | None:
        while True:
            try:
                message = await self.client.get_shell_msg(timeout=0)
            except queue.Empty:
                return None
            if message["parent_header"].get("msg_id") == msg_id:
                return message

    async def interrupt(self) -> None:
        await self.manager.interrupt_kernel()

    async def restart(self) -> None:
        await self.manager.restart_kernel(now=True)
        await self.client.wait_for_ready(timeout=self.startup_timeout)

    async def is_alive(self) -> bool:
        return bool(await self.manager.is_alive())

    async def exit_description(self) -> str:
        code = None
        with contextlib.suppress(Exception):
            code = await self.manager.provisioner.poll()
        if isinstance(code, int) and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason = ", e.g. out of memory or killed from outside" if -code == 9 else ""
            return f"killed by {name}{reason}"
        if isinstance(code, int):
            return f"exit code {code}"
        return "it stopped responding"

    async def shutdown(self, remove: str | None) -> None:
        client, manager = self.client, self.manager
        self.client = self.manager = None
        try:
            if client is not None:
                client.stop_channels()
            if manager is not None and manager.has_kernel:
                await manager.shutdown_kernel(now=False)
        finally:
            if remove is not None:
                remove_session_dir(Path(remove))  # also when the kernel never started


def check_checkpoints(kernel_dir: Path, session_id: str) -> None:
    """Open the kernel's session here first: a root it cannot use fails now, clearly
    (BackendError), and not with every program unsaved while the notices and the prompt
    section name files that do not exist. ``kernel_dir``: ``<root>/<session_id>``."""
    try:
        store = CheckpointStore(kernel_dir.parent, session_id, moves=False)
    except SessionInUseError:
        raise BackendError(in_use(session_id, kernel_dir.parent)) from None
    except (OSError, PtcRetryError) as exc:
        # The OS's own words ("Read-only file system"): the path is named just before.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        reason = reason.rstrip(".")
        raise BackendError(
            f"cannot keep checkpoints in {kernel_dir}: {reason}. Pass root= (or set "
            "PTC_RETRY_ROOT to) a directory you can write; nothing was started."
        ) from None
    try:
        if store.session_dir != kernel_dir:
            raise BackendError(in_use(session_id, kernel_dir.parent))
    finally:
        store.close()


def in_use(session_id: str, root: Path) -> str:
    """What a backend given a session another live kernel holds is told."""
    return (
        f"the session {session_id!r} in {root} is in use by another kernel; pass another "
        "session_id, or none for a fresh one"
    )


def remove_session_dir(path: Path) -> None:
    """Remove a session directory the backend made, unless a live kernel holds it (or, in
    native mode, the kernel store inside it). A symlink is unlinked, never followed."""
    kernels = path / NATIVE_KERNEL_DIR
    if session_in_use(path) or (kernels.is_dir() and _kernels_in_use(kernels)):
        return
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _kernels_in_use(directory: Path) -> bool:
    return any(session_in_use(child) for child in directory.iterdir() if child.is_dir())
