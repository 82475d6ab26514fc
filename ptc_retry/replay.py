"""The replay helper: fix a saved program with a literal replacement and run it again.

``await ptc_retry.replay("c3", "retries=3", "retries=5")`` does what a person
would do by hand, in the same order:

1. read the checkpoint ``by-id/c3.json`` and ``json.loads`` it;
2. replace the old text with the new in its ``"code"`` (exactly one match);
3. save the corrected program as this call's own checkpoint, so replaying this
   call later edits the corrected program, not the one-line loader;
4. run the corrected program as an async function in the kernel's namespace:
   top-level ``await`` works, a top-level ``return`` ends it with a value, else
   the value of its last expression is the result.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

from .edits import apply_edits, normalize_edits
from .errors import CheckpointError, PtcRetryError, ReplayError
from .program import run_program

if TYPE_CHECKING:
    from .extension import PtcRetryExtension


def replay(
    target: str | int,
    old: str | None = None,
    new: str | None = None,
    *,
    replace_all: bool = False,
    edits: Iterable[tuple[str, str]] | None = None,
) -> Replay:
    """Replay a saved program with a small fix; must be awaited.

    ``target`` is a checkpoint id (``"c3"``, ``"call_7"``) or an int n for
    ``previous/n.json``. Give either ``old, new`` or ``edits=[(old, new), ...]``
    (applied in order). Each old text must occur exactly once, unless
    ``replace_all``. Raises :class:`ReplayError` when the edits are malformed or
    ptc-retry is not loaded; matching errors come when the replay is awaited.
    """
    pairs = normalize_edits(old, new, edits)
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise ReplayError(
            f'replay target must be a checkpoint id like "c3" or an int n for previous/n.json, '
            f"not {type(target).__name__}"
        )
    from .extension import active_extension

    try:
        extension = active_extension()
    except PtcRetryError as exc:
        raise ReplayError(str(exc)) from None
    pending = Replay(extension, target, pairs, replace_all=replace_all)
    running = extension.current_call()
    if running is not None:
        running.replays.append(pending)
    return pending


class Replay:
    """A replay waiting to be awaited. Not awaiting it is reported in the cell's output."""

    def __init__(
        self,
        extension: PtcRetryExtension,
        target: str | int,
        edits: list[tuple[str, str]],
        *,
        replace_all: bool,
    ) -> None:
        self.extension = extension
        self.target = target
        self.edits = edits
        self.replace_all = replace_all
        self.awaited = False

    def __await__(self) -> Generator[Any, None, Any]:
        self.awaited = True
        return self._run().__await__()

    def __repr__(self) -> str:
        return self.not_awaited_message() if not self.awaited else f"<replay of {self.target!r}>"

    def not_awaited_message(self) -> str:
        return (
            f"ptc_retry.replay({self.target!r}, ...) did not run: it must be awaited. "
            f"Write: await ptc_retry.replay({self.target!r}, ...)"
        )

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
        if running is not None and running.call is not None and running.call.id == call_id:
            raise ReplayError(
                f"{call_id!r} is this replay call itself; replay the call that failed before it"
            )
        # 2. The literal replacements.
        corrected = apply_edits(code, self.edits, replace_all=self.replace_all)
        # 3. This call's checkpoint becomes the corrected program.
        name = call_id
        if running is not None and running.call is not None:
            if running.call.replay_of is not None:
                raise ReplayError(
                    "a program can replay only once; send each replay as its own call"
                )
            try:
                store.replace_arguments(
                    running.call,
                    json.dumps({"code": corrected}, ensure_ascii=False),
                    replay_of=call_id,
                )
            except OSError as exc:
                extension.warn_once(f"could not save the corrected program ({exc})")
            name = running.call.id
        # 4. Run it as an async function in the kernel's namespace.
        shell = extension.shell
        return await run_program(
            corrected,
            f"<ptc-retry {name}>",
            shell.user_ns,
            transformed=shell.transform_cell(corrected),
        )
