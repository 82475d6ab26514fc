"""``@ptc_retry.recorded``: a function defined inside the kernel whose calls are recorded
with the program that makes them and reused by its replays, as host tools' calls are."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .call_lines import RECORDED, CallRecord, json_copy
from .fingerprint import WRAPPED, code_digest, reads_digest
from .tool_calls import ProgramCalls, current_calls

F = TypeVar("F", bound=Callable[..., Any])


def recorded(function: F) -> F:
    """Record every call of ``function`` (sync or async) that a program makes; a replay of
    that program gets the recorded result instead of calling it again, when the same call
    would return it now.

    A call's arguments (by parameter name, defaults filled in, so ``f(1)`` and ``f(1, y=2)``
    are one call when ``y=2`` is the default) and result are recorded as JSON; a result that
    would not come back the same from JSON (a tuple, a set, an object) is recorded as not
    reusable, and that call runs again in a replay. A call whose function's code was edited,
    or that reads other values than when it was recorded (a global, a closure cell, a
    helper function's code; see :mod:`.fingerprint`), or reads one that cannot be
    fingerprinted, runs again; the calls after it are still reused when they match.
    Outside a program (another thread, no ptc-retry) it is a plain call.
    """
    tool = f"{RECORDED}{function.__module__}.{function.__qualname__}"
    code = code_digest(function)
    try:
        signature: inspect.Signature | None = inspect.signature(function)
    except (TypeError, ValueError):  # some builtins have none
        signature = None

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[ProgramCalls, CallRecord]:
        calls = current_calls()
        if calls is None:
            raise _Outside
        arguments = _arguments(signature, args, kwargs)
        reads = reads_digest(function)
        return calls, calls.begin(
            tool, arguments, code=code, reads=reads, reusable=reads is not None
        )

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
            try:
                calls, record = begin(args, kwargs)
            except _Outside:
                return await function(*args, **kwargs)
            changed = _changed(signature, args, kwargs, record)
            if record.reused_from is not None:
                return record.result
            with calls.inside(record), _Outcome(calls, record, changed) as outcome:
                outcome.result = await function(*args, **kwargs)
            return outcome.result

        WRAPPED[run_async] = function
        return run_async  # type: ignore[return-value]

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        try:
            calls, record = begin(args, kwargs)
        except _Outside:
            return function(*args, **kwargs)
        changed = _changed(signature, args, kwargs, record)
        if record.reused_from is not None:
            return record.result
        with calls.inside(record), _Outcome(calls, record, changed) as outcome:
            outcome.result = function(*args, **kwargs)
        return outcome.result

    WRAPPED[run] = function
    return run  # type: ignore[return-value]


class _Outside(Exception):
    """No program is running in this thread: the call is not recorded."""


class _Outcome:
    """Records a live call when it ends: its result, or the exception it raised."""

    def __init__(
        self, calls: ProgramCalls, record: CallRecord, changed: Callable[[], bool]
    ) -> None:
        self._calls = calls
        self._record = record
        self._changed = changed
        self.result: Any = None

    def __enter__(self) -> _Outcome:
        return self

    def __exit__(self, etype: type[BaseException] | None, error: Any, tb: Any) -> None:
        if error is not None:
            ename = type(error).__name__
            self._calls.finish(self._record, error=f"{ename}: {error}", ename=ename)
            return
        # A result JSON would change (or not hold) is kept out of the recording and of reuse,
        # and so is the call of a function that changed its own arguments (appended to a
        # list it was given): its result does not stand for all it did.
        reusable, copy = json_copy(self.result)
        reusable = reusable and not self._changed()
        self._calls.finish(self._record, result=copy, reusable=reusable)


def _changed(
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    record: CallRecord,
) -> Callable[[], bool]:
    """Whether the arguments of the call ``record`` stands for are, once it ran, other than
    those it was called with (it changed what it was given)."""
    return lambda: _arguments(signature, args, kwargs) != record.arguments


def _arguments(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A call's arguments as a JSON object by parameter name (positional ones under their
    names, the defaults of those left out filled in); None when they are not JSON (a
    default included) or do not bind (the function will say why)."""
    if signature is None:
        value: dict[str, Any] = {"args": list(args), "kwargs": kwargs}
    else:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        value = dict(bound.arguments)
        for name, parameter in signature.parameters.items():
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL and name in value:
                value[name] = list(value[name])
    # Compared exactly: arguments that JSON would change (a tuple, an int key) are no match.
    reusable, copy = json_copy(value)
    return copy if reusable else None
