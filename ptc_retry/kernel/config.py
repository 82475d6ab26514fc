"""The ``PtcRetry`` configurable: every option of ptc-retry in a kernel, set on the kernel's
command line (``--PtcRetry.guard_mode=pause``), in ``ipython_config.py`` or with ``%config``."""

from __future__ import annotations

import contextlib
import math
from typing import Any

from traitlets import Enum, Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from ..core.guard import GUARD_MODES
from ..core.notice import NOTICE_MIN_BYTES
from ..core.time_limit import NEVER, read_limit


class Seconds(Float):
    """A Float that also takes an int too large for a float (``10**400``): as ``inf``."""

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value >= NEVER:
            value = math.inf
        return super().validate(obj, value)


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
        NOTICE_MIN_BYTES,
        min=0,
        help="""A failed program gets the replay notice only when its saved arguments
        are at least this many UTF-8 bytes: below it, re-sending the program costs
        the model less than reading the notice and writing a replay (the default is
        the break-even the evaluation measured). 0 notices every failure.""",
    ).tag(config=True)

    control_flow_exceptions = List(
        Unicode(),
        default_value=["FinalAnswerException"],
        help="""Names of exception classes that end a program on purpose and are not
        failures: they get no notice. SystemExit is always one of them.""",
    ).tag(config=True)

    guard_mode = Enum(
        list(GUARD_MODES),
        default_value="observe",
        help="""What the repeated-failure guard does when one program fails the same way
        failure_limit times in a row within a turn. "observe": the notice of that failure
        says so, once per streak. "pause": also, every later program is refused (error
        RetryGuardPaused) until a new instruction or a person's `%ptc_guard reset`.
        "off": no guard. Changing any guard option starts the guard fresh.""",
    ).tag(config=True)

    unwritten_tool_calls_bytes = Integer(
        16 * 2**20,
        min=0,
        help="""How many bytes of tool-call lines the kernel keeps in memory while the store
        cannot write them (a full disk), to write them once it can. Past it, a line is kept
        without its result (a fix makes that call live again, and goes on matching after
        it), and past twice it, lines are dropped (a fix makes every call from the first
        dropped one on live); stderr says which, once.""",
    ).tag(config=True)

    failure_limit = Integer(
        3,
        help="""How many identical failures in a row trip the guard: an integer >= 2.""",
    ).tag(config=True)

    guard_exclude = List(
        Unicode(),
        default_value=[],
        help="""Tool names (exact) whose calls the guard never counts; a call of one
        of them ends a streak.""",
    ).tag(config=True)

    max_resumes_per_turn = Integer(
        3,
        min=0,
        help="""How many times a turn may resume a program (replay with resume=True, or
        ptc_retry.resume) before a resume runs the whole program instead, so a loop of
        resumes cannot go on forever. A new turn, a new instruction or a program that
        succeeds gives a fresh budget. 0 turns resume off.""",
    ).tag(config=True)

    resume_min_seconds = Float(
        1.0,
        min=0.0,
        help="""A failure's notice offers resume=True (skip the statements that completed)
        only when the program had run at least this many seconds when it failed: below it,
        running those statements again costs less than the words that offer to skip them.
        0 offers it whenever a statement completed.""",
    ).tag(config=True)

    time_limit = Seconds(
        None,
        allow_none=True,
        help="""Seconds a program may run before the kernel stops it (a KeyboardInterrupt,
        or CancelledError while it awaits, keeping its output); the next program runs at
        once. None means no limit, and so does a limit too long ever to pass (inf, or
        about 292 years and more). A request's metadata["ptc_retry"]["time_limit"]
        overrides it for one call.""",
    ).tag(config=True)

    @validate("failure_limit")
    def _check_failure_limit(self, proposal: Any) -> int:
        value = proposal["value"]
        if isinstance(value, bool) or value < 2:
            raise TraitError(
                f"PtcRetry.failure_limit must be an integer >= 2 (how many identical failures "
                f"in a row trip the guard), not {value!r}."
            )
        return int(value)

    @validate("time_limit")
    def _check_time_limit(self, proposal: Any) -> float | None:
        try:
            return read_limit(proposal["value"], "PtcRetry.time_limit")
        except ValueError as exc:
            raise TraitError(f"{exc}.") from None

    def limit_for(self, requested: object) -> float | None:
        """A program's time limit in seconds (None: none): ``requested`` (its request's),
        else ``time_limit``. A requested limit that is no number of seconds > 0 is a
        backend's mistake the model cannot fix: ignored, as a field of the wrong type is."""
        if requested is not None:
            with contextlib.suppress(ValueError):
                return read_limit(requested)
        return self.time_limit
