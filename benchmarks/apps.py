"""The trivial apps the middleware benchmark compares, as uvicorn factories.

``bare`` is a Starlette app with one ``GET /ping`` route answering a small
JSON object. Every other factory is the same app with one middleware, mounted
the way its documentation says, with its defaults (the global registry, route
templates as labels where it has them):

* ``noop``: a pure-ASGI middleware that wraps ``send`` and does nothing else,
  the floor any ASGI middleware pays;
* ``correlation_id``: asgi-correlation-id (a request id, nothing else);
* ``mmobs``: :class:`~mmobs.asgi.middleware.MMObsMiddleware`;
* ``starlette_exporter``: starlette_exporter's ``PrometheusMiddleware``;
* ``instrumentator``: prometheus-fastapi-instrumentator.

Run one with: ``uvicorn apps:mmobs --factory --app-dir benchmarks``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def ping(request: Request) -> JSONResponse:
    return JSONResponse({"ping": "pong"})


class NoopMiddleware:
    """Wraps ``send`` and passes every message on: what any pure-ASGI middleware costs at least."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            await send(message)

        await self.app(scope, receive, send_wrapper)


def _app(middleware: list[Middleware]) -> Starlette:
    return Starlette(routes=[Route("/ping", ping, methods=["GET"])], middleware=middleware)


def bare() -> Starlette:
    return _app([])


def noop() -> Starlette:
    return _app([Middleware(NoopMiddleware)])


def correlation_id() -> Starlette:
    from asgi_correlation_id import CorrelationIdMiddleware

    return _app([Middleware(CorrelationIdMiddleware)])


def mmobs() -> Starlette:
    from mmobs.asgi.middleware import MMObsMiddleware

    return _app([Middleware(MMObsMiddleware)])


def starlette_exporter() -> Starlette:
    from starlette_exporter import PrometheusMiddleware, handle_metrics

    app = _app([Middleware(PrometheusMiddleware)])
    app.add_route("/metrics", handle_metrics)
    return app


def instrumentator() -> Starlette:
    from prometheus_fastapi_instrumentator import Instrumentator

    app = _app([])
    Instrumentator().instrument(app).expose(app)  # type: ignore[arg-type]
    return app


FACTORIES: dict[str, Callable[[], Any]] = {
    "bare": bare,
    "noop": noop,
    "correlation_id": correlation_id,
    "mmobs": mmobs,
    "starlette_exporter": starlette_exporter,
    "instrumentator": instrumentator,
}
#: The package each competitor needs (pip install 'mmobs[bench]'), to skip it with a reason when absent.
PACKAGES = {
    "correlation_id": "asgi_correlation_id",
    "starlette_exporter": "starlette_exporter",
    "instrumentator": "prometheus_fastapi_instrumentator",
}
