"""The transport of a ``KernelBackend``: the one it is given, or the one its kernel keywords
(``KernelKeywords``: ``kernel_name``, ``gateway_url``, ...) describe."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from ..kernelspec import KERNEL_NAME
from .gateway import GatewayKernel
from .local import LocalKernel
from .transport import Transport

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["KERNEL_KEYWORDS", "KernelKeywords", "check_kernel_keywords", "kernel_transport"]


class KernelKeywords(TypedDict, total=False):
    """What describes a backend's kernel when no transport is given; None (or left out)
    means the default. ``gateway_url`` (with ``token``) makes a ``GatewayKernel``, else
    the kernel is a ``LocalKernel``; see those classes for each keyword."""

    kernel_name: str | None
    cwd: str | os.PathLike[str] | None
    env: Mapping[str, str] | None
    extra_arguments: Sequence[str] | None
    startup_timeout: float | None
    extension: bool | None
    gateway_url: str | None
    token: str | None


#: The names of the kernel keywords, in their documented order.
KERNEL_KEYWORDS = tuple(KernelKeywords.__annotations__)


def check_kernel_keywords(keywords: Mapping[str, object], caller: str) -> None:
    """TypeError, as Python words it, when ``keywords`` holds a name that is no kernel keyword."""
    for name in keywords:
        if name not in KERNEL_KEYWORDS:
            raise TypeError(f"{caller} got an unexpected keyword argument {name!r}")


def kernel_transport(
    transport: Transport | None = None, **keywords: Unpack[KernelKeywords]
) -> Transport:
    """``transport``, or the one the kernel keywords describe (None: the default).

    ValueError when both are given, or a keyword does not apply to a gateway's kernel.
    """
    check_kernel_keywords(keywords, "kernel_transport()")
    if transport is not None:
        given = [name for name in KERNEL_KEYWORDS if keywords.get(name) is not None]
        if given:
            raise ValueError(
                f"give transport= or {', '.join(given)}, not both: they describe a "
                "transport's kernel, so pass them to the transport"
            )
        return transport
    kernel_name = keywords.get("kernel_name")
    startup_timeout = keywords.get("startup_timeout")
    name = KERNEL_NAME if kernel_name is None else kernel_name
    waits = 60.0 if startup_timeout is None else startup_timeout
    cwd, env = keywords.get("cwd"), keywords.get("env")
    extra_arguments, extension = keywords.get("extra_arguments"), keywords.get("extension")
    gateway_url = keywords.get("gateway_url")
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
    token = keywords.get("token")
    return GatewayKernel(gateway_url, token=token, kernel_name=name, env=env, startup_timeout=waits)
