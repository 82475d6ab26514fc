"""The ``ptc-retry`` kernelspec (its home is :mod:`ptc_retry.kernelspec`)."""

from __future__ import annotations

from ptc_retry.kernelspec import builtin_spec, install, kernel_argv, kernel_spec_manager

__all__ = ["builtin_spec", "install", "kernel_argv", "kernel_spec_manager"]
