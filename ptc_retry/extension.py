"""The IPython extension: checkpoint every program, add the notice on failure.

Load it in any IPython or ipykernel session::

    %load_ext ptc_retry

or for every session, in ``ipython_config.py``::

    c.InteractiveShellApp.extensions = ["ptc_retry"]
    c.PtcRetry.notice_min_bytes = 150

Every cell that runs is saved to the checkpoint store *before* it runs. When a
cell fails and its program is at least ``PtcRetry.notice_min_bytes`` long, one
line is appended to the end of its traceback (``ename`` and ``evalue`` stay as
they were): the checkpoint id, its path, and the helper call
``await ptc_retry.replay("<id>", "<old>", "<new>")``.

When the execute_request carries ``metadata["ptc_retry"]`` (see the README), its
call id, raw arguments, tool, turn and step are used; otherwise ids are ``c1,
c2, ...`` and each cell is its own step. ``%unload_ext ptc_retry`` removes every
hook, name and magic this extension added and restores what it replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_magic, magics_class
from traitlets import Integer, List, Unicode
from traitlets.config import Configurable

from .errors import PtcRetryError
from .history import format_history
from .notice import failure_notice
from .store import Call, CheckpointStore

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .replay import Replay

#: The metadata key of execute_requests and execute_replies.
METADATA_KEY = "ptc_retry"


class PtcRetry(Configurable):
    """Configuration of ptc-retry in a kernel (``--PtcRetry.<name>=...``, ``%config``)."""

    root_dir = Unicode(
        None,
        allow_none=True,
        help="""Directory that holds the checkpoints of every session. None means
        $PTC_RETRY_ROOT, else <tempdir>/ptc-retry-<uid>. It must be a directory
        the kernel's user owns and not a symlink.""",
    ).tag(config=True)

    session_id = Unicode(
        None,
        allow_none=True,
        help="""Name of this kernel's session directory under root_dir. None means
        $PTC_RETRY_SESSION, else an id derived from the kernel's connection file
        (so a restarted kernel continues its session), else a fresh short id.""",
    ).tag(config=True)

    notice_min_bytes = Integer(
        150,
        min=0,
        help="""A failed program gets the replay notice only when its saved arguments
        are at least this many UTF-8 bytes: below it, re-sending the program costs
        the model less than reading the notice. 0 notices every failure.""",
    ).tag(config=True)

    control_flow_exceptions = List(
        Unicode(),
        default_value=["FinalAnswerException"],
        help="""Names of exception classes that end a program on purpose and are not
        failures: they get no notice. SystemExit is always one of them.""",
    ).tag(config=True)


@dataclass
class _Running:
    """A program between pre_run_cell and post_run_cell."""

    info: Any
    call: Call | None
    notice: str | None = None
    replays: list[Replay] = field(default_factory=list)


class PtcRetryExtension:
    """The state of ptc-retry in one shell: its store, hooks and last reply metadata."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.config = PtcRetry(parent=shell)
        self.config.observe(self._reopen, names=["root_dir", "session_id"])
        self.store: CheckpointStore | None = None
        #: What the kernel puts into the execute_reply's ``metadata["ptc_retry"]``.
        self.reply_metadata: dict[str, Any] | None = None
        self._running: list[_Running] = []
        self._reported: str | None = None
        self._replaced_showtraceback: Any = None
        self._had_own_showtraceback = False
        self._magics: Any = None

    # -- store ---------------------------------------------------------------

    def open_store(self) -> CheckpointStore | None:
        """Open the store if it is not open; on failure warn once and return None."""
        if self.store is None:
            try:
                self.store = CheckpointStore(self.config.root_dir, self.session_name())
            except (OSError, PtcRetryError) as exc:
                self.warn_once(f"checkpoints are off: {exc}")
        return self.store

    def session_name(self) -> str | None:
        if self.config.session_id:
            return self.config.session_id
        if os.environ.get("PTC_RETRY_SESSION"):
            return os.environ["PTC_RETRY_SESSION"]
        return kernel_session_name()

    def _reopen(self, change: Any = None) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        self._reported = None

    def warn_once(self, message: str) -> None:
        # One warning per distinct problem: an agent pays for every line it reads.
        if message != self._reported:
            self._reported = message
            print(f"ptc-retry: {message}. Programs still run as usual.", file=sys.stderr)

    # -- hooks ---------------------------------------------------------------

    def pre_run_cell(self, info: Any) -> None:
        request = self.request_metadata()
        source = info.raw_cell
        call = None
        store = self.open_store()
        if store is not None:
            try:
                call = store.begin(
                    checkpoint_arguments(source, request.get("arguments")),
                    call_id=request.get("call_id"),
                    tool=request.get("tool", "run_code"),
                    turn=request.get("turn", 0),
                    step=request.get("step"),
                )
            except (OSError, PtcRetryError) as exc:
                self.warn_once(f"could not save this program ({exc})")
            else:
                self._reported = None
        self._running.append(_Running(info, call))

    def post_run_cell(self, result: Any) -> None:
        running = self._pop(result)
        if running is None:
            return  # an empty cell: IPython fires post_run_cell without pre_run_cell
        error = None
        if result is not None:
            error = result.error_before_exec or result.error_in_exec
        status = self._status(error, cancelled=result is None)
        call = running.call
        if call is not None and self.store is not None:
            extra: dict[str, Any] = {}
            if error is not None:
                extra["ename"] = type(error).__name__
            try:
                self.store.finish(call, status, **extra)
            except (OSError, PtcRetryError) as exc:
                self.warn_once(f"could not write the history ({exc})")
        self.reply_metadata = {
            "call_id": call.id if call else None,
            "checkpoint": str(call.path) if call else None,
            "ordinal": call.ordinal if call else None,
            "status": status,
            "notice": running.notice,
            "guard": None,
        }
        for replay in running.replays:
            if not replay.awaited:
                print(replay.not_awaited_message(), file=sys.stderr)

    def _pop(self, result: Any) -> _Running | None:
        if not self._running:
            return None
        info = getattr(result, "info", None)
        if result is None or self._running[-1].info is info:
            return self._running.pop()
        return None

    def _status(self, error: BaseException | None, *, cancelled: bool) -> str:
        if cancelled or isinstance(error, KeyboardInterrupt):
            return "interrupted"
        if error is None or self.is_control_flow(error):
            return "ok"
        return "error"

    def is_control_flow(self, error: BaseException) -> bool:
        if isinstance(error, SystemExit):
            return True
        names = set(self.config.control_flow_exceptions)
        return any(cls.__name__ in names for cls in type(error).__mro__)

    def request_metadata(self) -> dict[str, Any]:
        """``metadata["ptc_retry"]`` of the execute_request being run, checked field by field.

        Plain IPython has no request; a field of the wrong type is ignored, so a
        backend's mistake never stops a program.
        """
        kernel = getattr(self.shell, "kernel", None)
        if kernel is None:
            return {}
        try:
            parent = kernel.get_parent("shell")
        except Exception:
            return {}
        if not isinstance(parent, dict):
            return {}
        raw = (parent.get("metadata") or {}).get(METADATA_KEY)
        if not isinstance(raw, dict):
            return {}
        wanted = {"call_id": str, "arguments": str, "tool": str, "turn": int, "step": int}
        return {
            key: value
            for key, value in raw.items()
            if key in wanted and isinstance(value, wanted[key]) and not isinstance(value, bool)
        }

    def show_traceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
        """Wraps the shell's ``_showtraceback``: IPython formats, we append the notice."""
        try:
            stb = self._with_notice(evalue, stb)
        finally:
            self._replaced_showtraceback(etype, evalue, stb)

    def _with_notice(self, evalue: BaseException, stb: list[str]) -> list[str]:
        if not self._running:
            return stb
        running = self._running[-1]
        call = running.call
        if (
            call is None
            or running.notice is not None
            or self.is_control_flow(evalue)
            or call.bytes < self.config.notice_min_bytes
        ):
            return stb
        running.notice = failure_notice(call.id, call.path)
        return [*stb, running.notice]

    def current_call(self) -> _Running | None:
        """The program that is running now (the innermost one), if any."""
        return self._running[-1] if self._running else None

    # -- load / unload -------------------------------------------------------

    def register(self) -> None:
        shell = self.shell
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)
        # IPython formats every traceback (runtime, syntax, interrupt) and hands the
        # lines to _showtraceback, which ipykernel turns into the error output and
        # the reply: the one place where appending a line reaches every client.
        self._had_own_showtraceback = "_showtraceback" in shell.__dict__
        self._replaced_showtraceback = shell._showtraceback
        shell._showtraceback = self.show_traceback
        shell.configurables.append(self.config)
        import ptc_retry

        shell.user_ns["ptc_retry"] = ptc_retry
        shell.user_ns_hidden["ptc_retry"] = ptc_retry
        self._magics = PtcRetryMagics(shell, extension=self)
        shell.register_magics(self._magics)
        # The store opens at the first program, so that a problem with it is
        # reported in that program's output, where the model reads it, rather
        # than in a kernel log nobody sees.

    def unregister(self) -> None:
        shell = self.shell
        shell.events.unregister("pre_run_cell", self.pre_run_cell)
        shell.events.unregister("post_run_cell", self.post_run_cell)
        if shell.__dict__.get("_showtraceback") == self.show_traceback:
            if self._had_own_showtraceback:
                shell._showtraceback = self._replaced_showtraceback
            else:
                del shell._showtraceback
        for configurable in (self.config, self._magics):
            if configurable in shell.configurables:
                shell.configurables.remove(configurable)
        if shell.magics_manager.registry.get(type(self._magics).__name__) is self._magics:
            del shell.magics_manager.registry[type(self._magics).__name__]
        import ptc_retry

        if shell.user_ns.get("ptc_retry") is ptc_retry:
            del shell.user_ns["ptc_retry"]
        shell.user_ns_hidden.pop("ptc_retry", None)
        for kind, names in MAGIC_NAMES.items():
            for name in names:
                shell.magics_manager.magics[kind].pop(name, None)
        if self.store is not None:
            self.store.close()
            self.store = None


def checkpoint_arguments(source: str, arguments: str | None) -> str:
    """What ``by-id/<id>.json`` holds: the backend's raw arguments when their
    ``"code"`` is the source that runs, else ``{"code": source}``."""
    if arguments is not None:
        try:
            decoded = json.loads(arguments)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("code") == source:
            return arguments
    return json.dumps({"code": source}, ensure_ascii=False)


def kernel_session_name() -> str | None:
    """A session name derived from the kernel's connection file, or None outside a kernel.

    A restarted kernel keeps its connection file, so it continues its session.
    """
    app_module = sys.modules.get("ipykernel.kernelapp")
    if app_module is None or not app_module.IPKernelApp.initialized():
        return None
    app = app_module.IPKernelApp.instance()
    path = getattr(app, "abs_connection_file", None) or app.connection_file
    if not path:
        return None
    digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()
    return "k" + digest[:10]


# -- IPython connectivity ------------------------------------------------------

_active: dict[int, PtcRetryExtension] = {}


def active_for(shell: Any) -> PtcRetryExtension | None:
    """The extension loaded in ``shell``, if any."""
    return _active.get(id(shell))


def active_extension() -> PtcRetryExtension:
    """The extension loaded in the running IPython shell; PtcRetryError if none."""
    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    extension = _active.get(id(shell)) if shell is not None else None
    if extension is None:
        raise PtcRetryError(
            "ptc-retry is not loaded in this kernel: run `%load_ext ptc_retry` first, "
            "or start the `ptc-retry` kernel"
        )
    return extension


MAGIC_NAMES = {"line": ["ptc_history", "ptc_show"]}


@magics_class
class PtcRetryMagics(Magics):
    """Magics for a person at the notebook."""

    def __init__(self, shell: Any, extension: PtcRetryExtension) -> None:
        super().__init__(shell)
        self.extension = extension

    @line_magic
    def ptc_history(self, line: str) -> None:
        """%ptc_history [N]: the last N calls of this session (default 20)."""
        store = self.extension.open_store()
        if store is None:
            return
        count = int(line) if line.strip().isdigit() else 20
        print(format_history(store.history()[-count:], session_dir=store.session_dir))

    @line_magic
    def ptc_show(self, line: str) -> None:
        """%ptc_show ID|N: the program saved for a call id, or previous/N.json."""
        store = self.extension.open_store()
        if store is None:
            return
        text = line.strip()
        if not text:
            print("usage: %ptc_show <call id>, or a number N for previous/N.json")
            return
        target: str | int = int(text) if text.isdigit() else text
        try:
            call_id, code = store.load_code(target)
        except PtcRetryError as exc:
            print(exc, file=sys.stderr)
            return
        print(f"# {call_id}: {store.path_for(target)}\n{code}")


def load_ipython_extension(shell: InteractiveShell) -> None:
    """``%load_ext ptc_retry``: loading twice in one shell is a no-op."""
    if id(shell) in _active:
        return
    extension = PtcRetryExtension(shell)
    _active[id(shell)] = extension
    extension.register()


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """``%unload_ext ptc_retry``: remove every hook, name and magic, restore what was replaced."""
    extension = _active.pop(id(shell), None)
    if extension is not None:
        extension.unregister()
