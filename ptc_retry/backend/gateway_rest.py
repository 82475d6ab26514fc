"""A gateway's REST API as one ``GatewayKernel`` calls it: JSON requests sent with its
token, JSON answers, and errors that say what the gateway said (:mod:`.gateway_errors`).
The HTTP client is tornado's, already a dependency of jupyter_client and ipykernel."""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import GatewayError
from .gateway_errors import http_error, logged

__all__ = ["REQUEST_TIMEOUT", "GatewayRest"]

#: Seconds a REST call other than a (re)start may take before the gateway counts as gone.
REQUEST_TIMEOUT = 10.0


class GatewayRest:
    """The REST API of the gateway at ``url``, until ``close``. ``token``: its auth token."""

    def __init__(self, url: str, token: str | None) -> None:
        from tornado.httpclient import AsyncHTTPClient

        self.url = url
        self.token = token
        self._http = AsyncHTTPClient(force_instance=True)

    def headers(self) -> dict[str, str]:
        """The headers of every request, the websocket's handshake too."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        return headers

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float,
        missing: Any = ...,
        translate: bool = True,
    ) -> Any:
        """The JSON the gateway answered; ``missing`` instead of a 404 when it is given.

        An error answer raises GatewayError (or KernelStartError), or with ``translate=False``
        tornado's HTTPClientError for the caller to read.
        """
        from tornado.httpclient import HTTPClientError, HTTPRequest

        request = HTTPRequest(
            self.url + path,
            method=method,
            headers=self.headers(),
            body=json.dumps(body) if body is not None else None,
            connect_timeout=min(timeout, REQUEST_TIMEOUT),
            request_timeout=timeout,
        )
        try:
            response = await self._http.fetch(request)
        except HTTPClientError as exc:
            if exc.code == 404 and missing is not ...:
                return missing
            if not translate and exc.code != 599:
                raise
            raise logged(http_error(self.url, self.token, method, path, exc)) from None
        except OSError as exc:
            raise logged(
                GatewayError(
                    f"cannot reach the gateway at {self.url} ({exc}); is it running, and is the "
                    "URL right?"
                )
            ) from None
        return json.loads(response.body) if response.body else None

    def close(self) -> None:
        self._http.close()
