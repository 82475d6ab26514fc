"""The replay helper: fix a saved program with a literal replacement and run it again.

``await ptc_retry.replay("#3", "retries=3", "retries=5")`` does what a person
would do by hand, in the same order:

1. read the checkpoint of program #3 (``calls/3.json``, the same file as
   ``by-id/<its call id>.json``) and ``json.loads`` it;
2. replace the old text with the new in its ``"code"`` (exactly one match);
3. save the corrected program as this call's own checkpoint, so replaying this
   call later edits the corrected program, not the one-line loader;
4. run the corrected program as an async function in the kernel's namespace:
   top-level ``await`` works, a top-level ``return`` ends it with a value, else
   the value of its last expression is the result.

With ``resume=True`` step 4 skips the top-level statements that completed before
the target failed (their effects are still in the namespace): the program runs
from the earlier of the statement that failed and the first statement an edit
touches. ``await ptc_retry.resume("#3")`` does that with no edit, e.g. after an
interrupt. A statement that was cut off half-way runs again whole: a loop starts
again from its first iteration. The whole program runs instead, with one line
saying why, when the target did not fail, when the kernel restarted since it ran
(its state is gone), or when this turn used up ``PtcRetry.max_resumes_per_turn``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

from ..core.edits import apply_edits, normalize_edits
from ..core.errors import CheckpointError, PtcRetryError, ReplayError
from ..core.program import run_program, statement_spans

if TYPE_CHECKING:
    from .extension import PtcRetryExtension


def replay(
    target: str | int,
    old: str | None = None,
    new: str | None = None,
    *,
    replace_all: bool = False,
    edits: Iterable[tuple[str, str]] | None = None,
    resume: bool = False,
) -> Replay:
    """Replay a saved program with a small fix; must be awaited.

    ``target`` is a reference ``"#7"`` (program 7 of this session, as a notice names it),
    a call id (``"c3"``, ``"call_7"``) or an int n for ``previous/n.json``. Give either
    ``old, new`` or ``edits=[(old, new), ...]``
    (applied in order). Each old text must occur exactly once, unless
    ``replace_all``. ``resume=True`` skips the statements that completed before
    the target failed (see the module doc); with it, the edits may be left out.
    Raises :class:`ReplayError` when the edits are malformed or ptc-retry is not
    loaded; matching errors come when the replay is awaited.
    """
    nothing = old is None and new is None and edits is None
    pairs = [] if resume and nothing else normalize_edits(old, new, edits)
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise ReplayError(
            f'replay target must be a reference like "#7", a call id like "call_7" or an int n '
            f"for previous/n.json, not {type(target).__name__}"
        )
    from .extension import active_extension

    try:
        extension = active_extension()
    except PtcRetryError as exc:
        raise ReplayError(str(exc)) from None
    pending = Replay(extension, target, pairs, replace_all=replace_all, resume=resume)
    running = extension.current_call()
    if running is not None:
        running.replays.append(pending)
    return pending


def resume(target: str | int) -> Replay:
    """Run a saved program again from the statement where it failed or was interrupted.

    ``await ptc_retry.resume("#3")`` is ``await ptc_retry.replay("#3", resume=True)``:
    no edit, and the statements that completed are not run again.
    """
    return replay(target, resume=True)


class Replay:
    """A replay waiting to be awaited. Not awaiting it is reported in the cell's output."""

    def __init__(
        self,
        extension: PtcRetryExtension,
        target: str | int,
        edits: list[tuple[str, str]],
        *,
        replace_all: bool,
        resume: bool = False,
    ) -> None:
        self.extension = extension
        self.target = target
        self.edits = edits
        self.replace_all = replace_all
        self.resume = resume
        self.awaited = False

    def __await__(self) -> Generator[Any, None, Any]:
        self.awaited = True
        return self._run().__await__()

    def __repr__(self) -> str:
        # Shown as the value when a cell ends with the call; the message itself follows once.
        state = "" if self.awaited else ", not awaited"
        return f"<ptc_retry replay of {self.target!r}{state}>"

    def not_awaited_message(self) -> str:
        if self.resume and not self.edits:
            call = f"resume({self.target!r})"
        else:
            call = f"replay({self.target!r}, ...)"
        return f"ptc_retry.{call} did not run: it must be awaited. Write: await ptc_retry.{call}"

    async def _run(self) -> Any:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        extension = self.extension
        store = extension.open_store()
        if store is None:
            raise ReplayError("checkpoints are off in this kernel (see the warning above)")
        # 1. Read the saved program and json.loads it.
        try:
            call_id, code = store.load_code(self.target)
        except CheckpointError as exc:
            raise ReplayError(str(exc)) from None
        running = extension.current_call()
        if running is None:
            # Never attach to the program of another thread (another subshell's cell).
            raise ReplayError(
                "a replay runs as part of a program: await it in the program's own code, not "
                "from another thread or a silent request"
            )
        if running.call is not None and running.call.id == call_id:
            raise ReplayError(
                f"{call_id!r} is this replay call itself; replay the call that failed before it"
            )
        # 2. The literal replacements.
        corrected = code
        if self.edits:
            corrected = apply_edits(code, self.edits, replace_all=self.replace_all)
        # 3. This call's checkpoint becomes the corrected program.
        try:
            corrected.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ReplayError(
                f"the corrected program holds a lone surrogate ({exc.reason} at index "
                f"{exc.start}), which cannot be saved or run as UTF-8; write it as an escape "
                'inside a string literal, such as "\\ud800"'
            ) from None
        name = call_id
        # Only a call that is the replay and nothing else becomes the corrected program: a
        # program that replays and does more keeps its own checkpoint, byte for byte, and a
        # failure after the replay is a failure of that program.
        # A replay inside a replayed program is part of that program too.
        whole_call = (
            running.call is not None
            and running.program is None
            and running.call.replay_of is None
            and _only_statement(extension.cell_text(running.info))
        )
        if running.call is not None and whole_call:
            try:
                store.replace_arguments(
                    running.call,
                    json.dumps({"code": corrected}, ensure_ascii=False),
                    replay_of=call_id,
                    code_bytes=len(corrected.encode("utf-8")),
                )
            except (OSError, PtcRetryError) as exc:
                extension.warn_once(f"could not save the corrected program ({exc})")
            name = running.call.id
        # 4. Run it as an async function in the kernel's namespace, from the statement
        #    where a resume starts.
        shell = extension.shell
        filename = f"<ptc-retry {name}>"
        transformed = shell.transform_cell(corrected)
        start = 0
        if self.resume:
            start = extension.resume_start(call_id, code, corrected, transformed)
        if whole_call:
            running.program = (filename, transformed)
            running.resumed_from = start or None
        return await run_program(
            corrected, filename, shell.user_ns, transformed=transformed, start=start
        )


def _only_statement(source: str | None) -> bool:
    """Whether a cell is one top-level statement: a replay call with nothing around it."""
    try:
        return source is not None and len(statement_spans(source)) == 1
    except SyntaxError:
        return False


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
