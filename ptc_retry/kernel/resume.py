"""Where a resume starts: the statement that failed or the first one an edit touched, or
the whole program (with one line on stderr saying why), within a budget per turn."""

from __future__ import annotations

import ast
import io
import os
import secrets
import sys
from typing import TYPE_CHECKING, Any

from ..core import sentences as said
from ..core.program import statement_spans
from ..core.status import STOPPED, HistoryStatus

if TYPE_CHECKING:
    from ..core.store import CheckpointStore
    from .config import PtcRetry

#: Names this kernel process in history lines, so a resume can tell that the kernel
#: restarted since a program ran (and its state is gone).
KERNEL_TOKEN = f"{os.getpid()}-{secrets.token_hex(4)}"


class Namespace:
    """How many times ``%reset`` emptied this kernel's namespace (kept across reloads of the
    extension, as the kernel's token is). A program's history line carries the count as
    ``namespace`` once it is above 0, so a resume can tell that what it bound is gone."""

    resets = 0


class ResumePolicy:
    """Decides where each resume starts, and counts the resumes of the current turn
    (``PtcRetry.max_resumes_per_turn``) so a loop of resumes cannot go on forever."""

    def __init__(self, config: PtcRetry) -> None:
        self._config = config
        self._turn: int | None = None
        self._used = 0

    def begin_program(self, turn: int, *, new_instruction: bool) -> None:
        """An agent's program starts: a new instruction or a new turn renews the budget."""
        if new_instruction:
            self._used = 0
        if turn != self._turn:
            self._turn, self._used = turn, 0

    def renew(self) -> None:
        """A program succeeded: the budget is whole again."""
        self._used = 0

    def start(
        self, store: CheckpointStore, call_id: str, code: str, corrected: str, transformed: str
    ) -> int:
        """The top-level statement a resume of ``call_id`` starts at (0-based).

        ``code`` is the program ``call_id`` ran, ``corrected`` the program to run now
        and ``transformed`` that as compiled. The start is the earlier of the statement
        that failed and the first statement an edit touched. 0 when the whole program
        must run: then one line on stderr says why, unless nothing had run anyway
        (e.g. a syntax error).
        """
        line = history_line(store, call_id) or {}
        status = line.get("status")
        name = store.reference_of(call_id) or call_id  # what a person and the model were given
        restarted = said.RUN_WHOLE_RESTARTED.render(call_id=name)
        if status == HistoryStatus.UNFINISHED:  # the kernel died while it ran
            return _run_whole(restarted)
        if status not in STOPPED:
            return _run_whole(said.RUN_WHOLE_DID_NOT_FAIL.render(call_id=name))
        failed = line.get("failed_statement")
        index = failed.get("index") if isinstance(failed, dict) else None
        if not isinstance(index, int):
            return 0  # no statement ran (a syntax error): the whole program it is
        if line.get("kernel") != KERNEL_TOKEN:
            return _run_whole(restarted)
        if line.get("namespace", 0) != Namespace.resets:
            return _run_whole(said.RUN_WHOLE_NAMESPACE_RESET.render(call_id=name))
        paused = status == HistoryStatus.PAUSED
        if paused and ran_since(store, call_id):
            return _run_whole(said.RUN_WHOLE_RAN_SINCE_PAUSE.render(call_id=name))
        if index == 0:
            return 0
        touched = edited_statement(code, corrected, transformed)
        start = index if touched is None else min(index, touched)
        if start == 0:
            return 0
        if paused:  # going on after a person's decision is not one of the model's retries
            return start
        budget = self._config.max_resumes_per_turn
        if self._used >= budget:
            return _run_whole(said.RUN_WHOLE_RESUMES_USED.render(budget=budget))
        self._used += 1
        return start


def history_line(store: CheckpointStore, call_id: str) -> dict[str, Any] | None:
    """The latest history line of ``call_id``, if it has one."""
    for line in reversed(store.history()):
        if line.get("id") == call_id:
            return line
    return None


#: The longest part of a statement's first line that ``where_resumed`` quotes.
_QUOTED_CHARS = 60


def where_resumed(reference: str, transformed: str, start: int) -> str:
    """The line a resume of ``reference`` says: the top-level statement it starts at
    (``start``, 0-based, of ``transformed``, the program as compiled), by its line and its
    first line's text (ending ``...`` when a statement that is not a block goes on), and,
    when that statement is a loop, that the loop runs again from its first iteration."""
    statement = ast.parse(transformed).body[start]
    first, last = statement_spans(transformed)[start]
    text = transformed.splitlines()[first - 1].strip()
    if len(text) > _QUOTED_CHARS:
        text = text[: _QUOTED_CHARS - 3] + "..."
    elif last > first and not text.endswith(":"):  # it goes on, and no block header says so
        text += " ..."
    loop = isinstance(statement, (ast.For, ast.AsyncFor, ast.While))
    return said.RESUMED_AT.render(
        reference=reference,
        line=first,
        statement=text,
        loop=said.LOOP_FROM_START if loop else "",
    )


def ran_since(store: CheckpointStore, call_id: str) -> bool:
    """Whether a program other than ``call_id`` ended after ``call_id``'s latest history
    line: its names in the namespace may no longer be the ones ``call_id`` bound. The
    program running now (its line, if any, still ``unfinished``) does not count."""
    lines = store.history()
    last = max((i for i, line in enumerate(lines) if line.get("id") == call_id), default=None)
    if last is None:
        return False
    return any(
        line.get("id") != call_id and line.get("status") != HistoryStatus.UNFINISHED
        for line in lines[last + 1 :]
    )


def _run_whole(reason: str) -> int:
    print(said.RUN_WHOLE.render(reason=reason), file=sys.stderr)
    return 0


def edited_statement(code: str, corrected: str, transformed: str) -> int | None:
    """Index of the first top-level statement of ``corrected`` that an edit touched.

    ``transformed`` is ``corrected`` as it is compiled (IPython keeps the lines).
    Work is by line, so a statement sharing a line with an edit counts as touched.
    None when the texts are equal or the edits touch no statement (a comment at
    the end); 0 when ``transformed`` does not parse (the whole program then fails
    to compile anyway).
    """
    if code == corrected:
        return None
    # The length of the common prefix, by bisection: each comparison runs in C.
    low, high = 0, min(len(code), len(corrected))
    while low < high:
        middle = (low + high + 1) // 2
        if code[:middle] == corrected[:middle]:
            low = middle
        else:
            high = middle - 1
    # Line ends as the compiler counts them: "\r\n", "\r" or "\n".
    line = len(io.StringIO(corrected[:low] + "x", newline=None).readlines())
    try:
        spans = statement_spans(transformed)
    except SyntaxError:
        return 0
    for index, (_, last) in enumerate(spans):
        if last >= line:
            return index
    return None
