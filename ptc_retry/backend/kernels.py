"""The transport of a ``KernelBackend``: the one it is given, or the one its kernel keywords
(``kernel_name``, ``gateway_url``, ...) describe."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..kernelspec import KERNEL_NAME
from .gateway import GatewayKernel
from .local import LocalKernel
from .transport import Transport

__all__ = ["kernel_transport"]


def kernel_transport(
    transport: Transport | None = None,
    *,
    kernel_name: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    extra_arguments: Sequence[str] | None = None,
    startup_timeout: float | None = None,
    extension: bool | None = None,
    gateway_url: str | None = None,
    token: str | None = None,
) -> Transport:
    """``transport``, or the one the kernel keywords describe (None: the default).

    ValueError when both are given, or a keyword does not apply to a gateway's kernel.
    """
    if transport is not None:
        keywords: dict[str, object] = {"kernel_name": kernel_name, "cwd": cwd, "env": env}
        keywords.update(extra_arguments=extra_arguments, startup_timeout=startup_timeout)
        keywords.update(extension=extension, gateway_url=gateway_url, token=token)
        given = [keyword for keyword, value in keywords.items() if value is not None]
        if given:
            raise ValueError(
                f"give transport= or {', '.join(given)}, not both: they describe a "
                "transport's kernel, so pass them to the transport"
            )
        return transport
    name = KERNEL_NAME if kernel_name is None else kernel_name
    waits = 60.0 if startup_timeout is None else startup_timeout
    if gateway_url is None:
        return LocalKernel(
            name,
            extension=extension is not False,
            cwd=cwd,
            env=env,
            extra_arguments=extra_arguments or (),
            startup_timeout=waits,
        )
    if cwd is not None or extra_arguments or extension is False:
        raise ValueError(
            "cwd, extra_arguments and extension=False do not apply to a kernel behind "
            "a gateway: its kernelspec on the gateway decides how it starts"
        )
    return GatewayKernel(gateway_url, token=token, kernel_name=name, env=env, startup_timeout=waits)
