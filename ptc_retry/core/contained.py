"""Calls into OpenTelemetry that cannot fail ours: an SDK, a span processor or an exporter the
application configured may raise anywhere (a span's start, an attribute, its end, a counter),
and a trace is never worth a program, a tool call or a backend call.

``Contained`` is the one way the backend's and the kernel's tracing modules call
OpenTelemetry: each of their methods that does is wrapped with ``contained.method(default)``
(what it returns when the call raised), and a single call goes through ``contained.call``.
An ``Exception`` is logged, once per distinct problem (the function that raised and the
exception's type, whatever its message says), and the caller goes on; anything else (a
cancellation, ``KeyboardInterrupt``) goes on as it came.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["Contained"]

P = ParamSpec("P")
R = TypeVar("R")

#: How many distinct problems are remembered (and so logged once each); past it, none more
#: is logged.
_PROBLEMS = 64


class Contained:
    """Runs OpenTelemetry calls, logging what they raise on ``logger`` at ``level``."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        self._logger = logger
        self._level = level
        # Each problem logged, by where and what: a processor that raises at every span's
        # start and end would otherwise be logged for every program, the two in turn.
        self._logged: set[tuple[str, str]] = set()

    def call(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """``function(*args, **kwargs)``, or None when it raised."""
        try:
            return function(*args, **kwargs)
        except Exception as exc:
            self._failed(function, exc)
            return None

    def method(self, default: Any = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: the wrapped function returns ``default`` when it raised."""

        def wrap(function: Callable[P, R]) -> Callable[P, R]:
            @functools.wraps(function)
            def contained(*args: P.args, **kwargs: P.kwargs) -> R:
                try:
                    return function(*args, **kwargs)
                except Exception as exc:
                    self._failed(function, exc)
                    return default

            return contained

        return wrap

    def _failed(self, function: Callable[..., Any], exc: Exception) -> None:
        name = getattr(function, "__qualname__", repr(function))
        problem = (name, type(exc).__qualname__)
        if problem in self._logged or len(self._logged) >= _PROBLEMS:
            return
        self._logged.add(problem)
        self._logger.log(
            self._level,
            "%s",
            f"OpenTelemetry raised {type(exc).__name__} in {name} ({exc}); the call went on "
            "without that part of its trace",
        )
