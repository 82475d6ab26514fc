"""What a ``GatewayKernel`` raises when a gateway refuses or fails a request: each error
reads the gateway's own answer and says what to do (docs/gateway.md lists them)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from ..core.errors import BackendError, GatewayError, KernelStartError, MessageTooLarge

__all__ = [
    "MAX_SAID_CHARS",
    "gateway_said",
    "http_error",
    "logged",
    "start_error",
    "start_failure",
    "too_large",
]

log = logging.getLogger("ptc_retry.backend.gateway")

_Error = TypeVar("_Error", bound=BackendError)
#: How the gateway refuses the user a kernel would run as: Enterprise Gateway's words for a
#: KERNEL_USERNAME in its unauthorized_users, or missing from its authorized_users.
_USER_REFUSED = re.compile(r"not authorized to start|users authorized|KERNEL_USERNAME")
#: How the gateway says it runs as many kernels as it allows (max_kernels and, on Enterprise
#: Gateway, max_kernels_per_user).
_LIMIT_REACHED = re.compile(r"Resource Limit|max kernels", re.IGNORECASE)
#: The longest part of a gateway's answer that goes into an error message.
MAX_SAID_CHARS = 500
#: What a message of each type is, in an error that says it is too large to send.
_MESSAGE_NAMES = {
    "execute_request": "the program's execute_request",
    "input_reply": "the reply to the kernel's tool request",
}
_TOKEN_HINT = (
    "pass its auth token (KG_AUTH_TOKEN of Kernel Gateway, EG_AUTH_TOKEN of Enterprise "
    "Gateway) as token=..."
)


def gateway_said(exc: Any) -> str:
    """What a gateway's error answer (tornado's HTTPClientError ``exc``) says: the JSON
    ``message`` of its body, else its ``reason``; for an internal error, the last line of the
    traceback it sent. The HTTP reason phrase when the body says nothing."""
    body: Any = None
    if exc.response is not None and exc.response.body:
        with contextlib.suppress(ValueError):
            body = json.loads(exc.response.body)
    if not isinstance(body, dict):
        body = {}
    message, reason, trace = (body.get(key) for key in ("message", "reason", "traceback"))
    if message == "Unknown server error" and isinstance(trace, str) and trace.strip():
        message = trace.strip().splitlines()[-1]
    for said in (message, reason, exc.message):
        if isinstance(said, str) and said.strip():
            said = " ".join(said.split())
            if len(said) > MAX_SAID_CHARS:
                said = said[: MAX_SAID_CHARS - 3] + "..."
            return said
    return "no reason given"


def logged(error: _Error) -> _Error:
    """``error``, logged for an operator as it is raised."""
    log.warning("%s", error)
    return error


def http_error(url: str, token: str | None, method: str, path: str, exc: Any) -> BackendError:
    """The error to raise for the gateway's error answer ``exc`` to ``method path``."""
    code = exc.code
    said = gateway_said(exc)
    if code == 401:
        return _token_error(url, token, said)
    if code == 599:  # tornado's own: no answer in time, or the connection broke
        return GatewayError(
            f"the gateway at {url} did not answer {method} {path} ({exc.message}); is it running?"
        )
    if code == 403:
        return GatewayError(
            f"the gateway at {url} refused {method} {path} (HTTP 403: {said}); check "
            "that token= is the gateway's and that the gateway allows this request"
        )
    return GatewayError(f"{method} {path} failed at the gateway at {url} (HTTP {code}: {said})")


def _token_error(url: str, token: str | None, said: str) -> GatewayError:
    if not token:
        return GatewayError(
            f"the gateway at {url} asks for a token (HTTP 401: {said}); {_TOKEN_HINT}"
        )
    return GatewayError(f"the gateway at {url} refused the token (HTTP 401: {said}); {_TOKEN_HINT}")


def start_error(
    url: str, token: str | None, env: Mapping[str, str], exc: Any
) -> BackendError | None:
    """The error to raise when the gateway refuses a kernel start request with ``exc``: a
    token, a user, a limit or a URL it will not take. None when it may be the kernelspec
    (``start_failure`` says, once the gateway's kernelspecs are known)."""
    code = exc.code
    said = gateway_said(exc)
    where = f"the gateway at {url}"
    if code == 401:
        return _token_error(url, token, said)
    if code == 403 and _USER_REFUSED.search(said):
        user = env.get("KERNEL_USERNAME")
        if user is None:
            return KernelStartError(
                f"{where} refused to start a kernel for the user it runs as (HTTP 403: "
                f"{said}); name the user the kernel is for: "
                "env={'KERNEL_USERNAME': '<user>'} (Enterprise Gateway refuses the users in "
                "its unauthorized_users, root unless its operator changes that)"
            )
        return KernelStartError(
            f"{where} refused to start a kernel for KERNEL_USERNAME {user!r} (HTTP 403: "
            f"{said}); pass a user it allows, or have its operator change its "
            "unauthorized_users or authorized_users"
        )
    if code == 403 and _LIMIT_REACHED.search(said):
        return KernelStartError(
            f"{where} runs as many kernels as it allows (HTTP 403: {said}); shut down the "
            "backends you no longer use, or have its operator raise max_kernels "
            "(--KernelGatewayApp.max_kernels, --EnterpriseGatewayApp.max_kernels or "
            "max_kernels_per_user)"
        )
    if code == 403:
        return http_error(url, token, "POST", "/api/kernels", exc)
    if code == 404 and "kernel" not in said.lower():
        return GatewayError(
            f"{where} has no /api/kernels (HTTP 404: {said}); is the URL right, with the "
            "gateway's base path?"
        )
    return None


def start_failure(url: str, kernel_name: str, exc: Any, names: list[str]) -> KernelStartError:
    """The error to raise when the gateway could not start ``kernel_name`` (``exc``), and
    its kernelspecs are ``names`` ([] when it would not say)."""
    code = exc.code
    said = gateway_said(exc)
    where = f"the gateway at {url}"
    if names and kernel_name not in names:
        return KernelStartError(
            f"{where} has no kernel named {kernel_name!r} (HTTP {code}: {said}); its "
            f"kernels are: {', '.join(names)}; pass one as kernel_name=..., or install the "
            "ptc-retry kernelspec there (ptc-retry install-kernel)"
        )
    return KernelStartError(
        f"{where} could not start the {kernel_name!r} kernel (HTTP {code}: {said}); "
        "the gateway's log says more"
    )


def too_large(url: str, limit: int, msg_type: str, size: int) -> MessageTooLarge:
    """The error for a message of ``size`` bytes that the gateway, taking at most ``limit``
    in one message, would refuse; nothing was sent."""
    what = _MESSAGE_NAMES.get(msg_type, f"the {msg_type}")
    return MessageTooLarge(
        f"{what} would be {size:,} bytes on the websocket, over the {limit:,} "
        f"({limit / 2**20:.3g} MiB) that the gateway at {url} takes in one message, "
        "so it was not sent",
        size=size,
        limit=limit,
    )
