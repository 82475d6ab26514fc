"""The checkpoint store as a kernel uses it: opened at the first program, reopened when
``root_dir`` or ``session_id`` change, and never allowed to stop a program: a failure is
said once in the program's output and logged for the operator."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from ..core import sentences as said
from ..core.errors import PtcRetryError
from ..core.store import Call, CheckpointStore
from ..core.warn import WarnOnce

if TYPE_CHECKING:
    from .config import PtcRetry
    from .requests import Request

# Records are INFO: with no logging configured, Python prints WARNING records on
# sys.stderr, which in a kernel is the program's output, where the model already reads
# the problem once. An operator who configures the "ptc_retry" logger gets them all.
logger = logging.getLogger(__name__)

_STORE_ERRORS = (OSError, PtcRetryError)


def _print_warning(message: str) -> None:
    sentence = message.rstrip(".")
    print(said.STORE_PROBLEM.render(problem=sentence), file=sys.stderr)


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


class Checkpoints:
    """The kernel's store, and the one channel of its warnings."""

    def __init__(self, config: PtcRetry) -> None:
        self._config = config
        self.store: CheckpointStore | None = None
        #: The recording lines the store could not write yet, by call id, in order, with
        #: their sizes as JSON (0 for the first, which was not measured).
        self._unwritten: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
        #: The bytes ``_unwritten`` holds, as JSON; the call ids whose lines were dropped.
        self._unwritten_bytes = 0
        self._dropped: set[str] = set()
        self._thinned: set[str] = set()  # those whose lines were kept without their result
        #: Why the store could not open, or the last thing it could not do.
        self.problem: str | None = None
        self._warn_once = WarnOnce(_print_warning)
        config.observe(self._reopen, names=["root_dir", "session_id"])

    def warn(self, message: str) -> None:
        """``ptc-retry: <message>. Programs still run as usual.`` on stderr, unless it was
        the last warning (an agent pays for every line it reads)."""
        self._warn_once(message)

    def open(self) -> CheckpointStore | None:
        """The store, opened if it is not open; on failure warn once and return None."""
        if self.store is None:
            try:
                self.store = CheckpointStore(
                    self._config.root_dir, self.session_name(), owner=kernel_session_name()
                )
            except _STORE_ERRORS as exc:
                self.problem = f"checkpoints are off: {exc}"
                logger.info("%s", self.problem)
                self.warn(self.problem)
            else:
                if self.store.warning:  # e.g. the session was another kernel's: said once
                    self.warn(self.store.warning)
        return self.store

    def person_name(self, call_id: str) -> str:
        """The name a person and the model were given for the program saved as ``call_id``:
        its ``#n``, or the call id where it has none."""
        store = self.store
        return (store.reference_of(call_id) if store is not None else None) or call_id

    def session_name(self) -> str | None:
        if self._config.session_id:
            return self._config.session_id
        if os.environ.get("PTC_RETRY_SESSION"):
            return os.environ["PTC_RETRY_SESSION"]
        return kernel_session_name()

    def _reopen(self, change: object = None) -> None:
        self.close()
        self._warn_once.reset()

    def close(self) -> None:
        self._unwritten.clear()  # they belong to this store's session
        self._unwritten_bytes = 0
        self._dropped.clear()
        self._thinned.clear()
        if self.store is not None:
            self.store.close()
            self.store = None

    def begin(self, source: str, arguments: str, request: Request) -> Call | None:
        """Save the program before it runs; None (and a warning, once) when it cannot be."""
        store = self.open()
        if store is None:
            return None
        fields = request.fields
        try:
            call = store.begin(
                arguments,
                call_id=fields.get("call_id"),
                tool=request.tool,
                turn=request.turn,
                step=fields.get("step"),
                code_bytes=len(source.encode("utf-8", "surrogatepass")),
            )
        except _STORE_ERRORS as exc:
            self._failed("could not save this program", exc)
            return None
        self._warn_once.reset()
        self._write_all_waiting()
        return call

    def finish(self, call: Call, status: str, **extra: object) -> None:
        """Write ``call``'s history line."""
        if self.store is not None:
            try:
                self.store.finish(call, status, **extra)
            except _STORE_ERRORS as exc:
                self._failed("could not write the history", exc)
            else:
                self._write_all_waiting()

    def link_number(self, call: Call) -> None:
        """``calls/<n>.json``, for a model that reads the file without the helper."""
        if self.store is not None:
            try:
                self.store.link_number(call)
            except _STORE_ERRORS as exc:
                self._failed(f"could not save calls/{call.n}.json", exc)

    def save_corrected(
        self,
        call: Call,
        corrected: str,
        *,
        replay_of: str | None = None,
        extend_of: str | None = None,
    ) -> None:
        """``call``'s checkpoint becomes ``corrected``, the program its replay (or the
        extend of a cut-off call) runs."""
        if self.store is not None:
            try:
                self.store.replace_arguments(
                    call,
                    json.dumps({"code": corrected}, ensure_ascii=False),
                    replay_of=replay_of,
                    extend_of=extend_of,
                    code_bytes=len(corrected.encode("utf-8")),
                )
            except _STORE_ERRORS as exc:
                self._failed("could not save the corrected program", exc)

    def save_partial(self, call: Call, raw: str) -> bool:
        """Keep the arguments of a call cut off mid-stream as they arrived, beside its
        checkpoint; False (and a warning, once) when they cannot be."""
        if self.store is None:
            return False
        try:
            self.store.save_partial(call, raw)
        except _STORE_ERRORS as exc:
            self._failed("could not save the cut-off arguments", exc)
            return False
        return True

    def record_tool_call(self, call: Call | str, line: dict[str, Any]) -> None:
        """Append ``line`` to the recording of the tool calls of ``call`` (or its call id).

        A line the store cannot write (a full disk) is kept here, and written, in order,
        before the next line of that program once the store can: a replay in this kernel
        still finds it, so a full disk never makes a fix repeat a call. What is kept is
        bounded (``PtcRetry.unwritten_tool_calls_bytes``, :meth:`_keep`), and stderr says
        what is not."""
        call_id = call if isinstance(call, str) else call.id
        if self.store is None:
            return
        self._keep(call_id, line)
        waiting, sizes = self._unwritten[call_id]
        try:
            self._write_waiting(call_id)
        except _STORE_ERRORS as exc:
            self._failed(f"could not record the tool calls of {call_id}", exc)
            if sizes == [0]:  # the line that was to be written at once is kept: bound it
                del waiting[0], sizes[0]
                self._keep(call_id, line, measure=True)
        if not waiting:
            del self._unwritten[call_id]

    def _write_waiting(self, call_id: str) -> None:
        """Write the lines of ``call_id`` that wait, in order, as far as the store can (the
        store's error, past the last one written)."""
        assert self.store is not None
        waiting, sizes = self._unwritten[call_id]
        while waiting:
            self.store.record_tool_call(call_id, waiting[0])
            del waiting[0]
            self._unwritten_bytes -= sizes.pop(0)

    def _write_all_waiting(self) -> None:
        """Write every program's lines that wait, when the store can: a program that ended
        while the disk was full has no next line to write them before, and a kernel that
        restarts would lose them (its fix would make those calls again). Their failure was
        said when they were kept: one now is only logged."""
        if self.store is None:
            return
        for call_id in list(self._unwritten):
            try:
                self._write_waiting(call_id)
            except _STORE_ERRORS as exc:
                logger.info("could not write the kept tool calls of %s: %s", call_id, exc)
                return
            del self._unwritten[call_id]

    def _keep(self, call_id: str, line: dict[str, Any], *, measure: bool = False) -> None:
        """Put ``line`` after the lines of ``call_id`` that wait to be written: whole while
        what is kept stays within the limit; past it without its result or error (not
        reusable: a fix makes that call again, and goes on matching after it); past twice
        it, or after a line of the same program was dropped, not at all (the recording
        ends before it: a fix makes every call from there on live)."""
        waiting, sizes = self._unwritten.setdefault(call_id, ([], []))
        if not waiting and call_id not in self._dropped and not measure:
            waiting.append(line)  # it is likely written at once: not measured
            sizes.append(0)
            return
        limit = self._config.unwritten_tool_calls_bytes
        size = _size(line)
        if call_id not in self._dropped and self._unwritten_bytes + size > limit:
            line = dict(line, reusable=False, kept_without_result=True)
            line.pop("result", None)
            if "error" in line:
                line["error"] = "its error was not kept: the disk was full"
            size = _size(line)
        if call_id in self._dropped or self._unwritten_bytes + size > 2 * limit:
            if call_id not in self._dropped:
                self._dropped.add(call_id)
                self.warn(said.TOOL_CALLS_DROPPED.render(call_id=call_id, k=line.get("k")))
            return
        if line.get("kept_without_result") and call_id not in self._thinned:
            self._thinned.add(call_id)
            self.warn(said.TOOL_CALLS_THINNED.render(call_id=call_id))
        waiting.append(line)
        sizes.append(size)
        self._unwritten_bytes += size

    def tool_calls(self, call_id: str) -> list[dict[str, Any]]:
        """The recorded tool calls of ``call_id``, those kept for want of room last; [] (and
        a warning) when unreadable."""
        kept = list(self._unwritten.get(call_id, ([], []))[0])
        if self.store is not None:
            try:
                return self.store.tool_calls(call_id) + kept
            except _STORE_ERRORS as exc:
                self._failed(f"could not read the tool calls of {call_id}", exc)
        return kept

    def _failed(self, what: str, exc: BaseException) -> None:
        self.problem = f"{what}: {exc}"
        logger.info("%s: %s", what, exc)
        self.warn(f"{what} ({exc})")


def _size(line: dict[str, Any]) -> int:
    """About how many bytes ``line`` takes as JSON (what it would take on disk)."""
    return len(json.dumps(line, ensure_ascii=False, default=repr))
