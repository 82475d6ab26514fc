"""Calls into OpenTelemetry that cannot fail ours: an SDK, a span processor or an exporter the
application configured may raise anywhere (a span's start, an attribute, its end, a counter),
and a trace is never worth a program, a tool call or a backend call.

``Contained`` is the one way the backend's and the kernel's tracing modules call
OpenTelemetry: each of their methods that does is wrapped with ``contained.method(default)``
(what it returns when the call raised), and a single call goes through ``contained.call``.
An ``Exception`` is logged, once per distinct problem, and the caller goes on; anything
else (a cancellation, ``KeyboardInterrupt``) goes on as it came.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from .warn import WarnOnce

__all__ = ["Contained"]

P = ParamSpec("P")
R = TypeVar("R")


class Contained:
    """Runs OpenTelemetry calls, logging what they raise on ``logger`` at ``level``."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        self._warn = WarnOnce(lambda message: logger.log(level, "%s", message))

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
        self._warn(
            f"OpenTelemetry raised {type(exc).__name__} in {name} ({exc}); the call went on "
            "without that part of its trace"
        )
