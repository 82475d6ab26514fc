"""Install the ``ptc-retry`` kernelspec."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

KERNEL_NAME = "ptc-retry"
DISPLAY_NAME = "Python 3 (ptc-retry)"


def kernel_argv(python: str | None = None) -> list[str]:
    """The argv that starts the ptc-retry kernel with this (or the given) interpreter."""
    return [python or sys.executable, "-m", "kernel_ext", "-f", "{connection_file}"]


def install(
    *,
    user: bool = False,
    prefix: str | None = None,
    name: str = KERNEL_NAME,
    display_name: str = DISPLAY_NAME,
) -> str:
    """Install the kernelspec and return the directory it went to.

    ``user`` installs into the user's Jupyter data directory, ``prefix`` into
    ``PREFIX/share/jupyter/kernels`` (``sys.prefix`` for a virtual environment);
    neither means the system-wide location.
    """
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as tmp:
        source = write_kernel_spec(
            Path(tmp) / name,
            overrides={"argv": kernel_argv(), "display_name": display_name, "language": "python"},
        )
        return KernelSpecManager().install_kernel_spec(
            str(source), kernel_name=name, user=user, prefix=prefix
        )


def builtin_spec() -> Any:
    """The ptc-retry kernelspec as this Python would install it, without installing it."""
    from jupyter_client.kernelspec import KernelSpec

    return KernelSpec(
        argv=kernel_argv(),
        display_name=DISPLAY_NAME,
        language="python",
        interrupt_mode="signal",
        metadata={"debugger": True},
    )


def kernel_spec_manager() -> Any:
    """A KernelSpecManager that knows ``ptc-retry`` even where it was never installed.

    An installed ``ptc-retry`` kernelspec wins; without one, the kernel runs
    with the current interpreter, so ``ptc-retry demo`` works on a fresh machine.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    class WithBuiltinSpec(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> Any:
            try:
                return super().get_kernel_spec(kernel_name)
            except NoSuchKernel:
                if kernel_name != KERNEL_NAME:
                    raise
                return builtin_spec()

    return WithBuiltinSpec()
