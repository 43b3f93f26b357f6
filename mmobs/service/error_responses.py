"""How the service answers what it cannot do: OpenAI-style JSON errors that say whose fault it is.

The client's fault is a 4xx that names what to fix; the server's shortage a
``503`` with ``Retry-After``, so that clients back off instead of failing; a
set-up the server lacks a ``501``; a bug a ``500`` that points at the log line
(the request id names it) and never shows the exception's text. Routes and
methods the app does not have get the same JSON shape as everything else.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mmobs.asgi.http_errors import bad_image_body, error_body
from mmobs.errors import BadImageError
from mmobs.service.hash_request import RequestError

_INTERNAL_ERROR = "internal error; the request id names it in the server log"


def error_response(error: RequestError) -> JSONResponse:
    """A request the service refuses, with the status, code and parameter the error carries."""
    return JSONResponse(error_body(error.message, code=error.code, param=error.param), status_code=error.status)


def bad_image_response(error: BadImageError) -> JSONResponse:
    """An image that cannot be keyed: ``400`` with the reason and the image's parameter."""
    return JSONResponse(bad_image_body(error), status_code=400)


def busy_response(message: str, retry_after: int) -> JSONResponse:
    """The server's own shortage: worth retrying after ``retry_after`` seconds."""
    return JSONResponse(
        error_body(message, code="server_busy", type="server_error"),
        status_code=503,
        headers={"Retry-After": str(retry_after)},
    )


def not_implemented_response(message: str) -> JSONResponse:
    """Something this server was installed without: not the client's fault, and not worth retrying."""
    return JSONResponse(error_body(message, code="not_implemented", type="server_error"), status_code=501)


def internal_error_response() -> JSONResponse:
    """A bug: ``500``, with nothing of the exception in the answer (the log has its traceback)."""
    return JSONResponse(error_body(_INTERNAL_ERROR, code="internal_error", type="server_error"), status_code=500)


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's HTTP errors (an unknown route, a wrong method) in the service's JSON shape."""
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    message = {404: f"no route {request.url.path[:100]!r}; try POST /v1/hash", 405: "method not allowed"}.get(
        exc.status_code, str(exc.detail)
    )
    return JSONResponse(
        error_body(message, code=codes.get(exc.status_code, "http_error")),
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def server_error_handler(request: Request, exc: Exception) -> Response:
    """What an exception that escaped every endpoint becomes (Starlette's ``500`` handler)."""
    return internal_error_response()
