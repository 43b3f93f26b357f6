"""The trivial apps the middleware benchmark compares, as uvicorn factories.

``bare`` is a Starlette app with one ``GET /ping`` route; ``mmobs`` is the
same app with :class:`~mmobs.middleware.MMObsMiddleware` (as a user mounts it:
the global registry, ``/metrics`` served); ``exporter`` is the same app with
starlette_exporter's ``PrometheusMiddleware`` (its defaults: the global
registry, route templates as labels), the usual alternative.

Run one with: ``uvicorn apps:mmobs --factory --app-dir benchmarks``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def ping(request: Request) -> PlainTextResponse:
    return PlainTextResponse("pong")


def _app(middleware: list[Middleware]) -> Starlette:
    return Starlette(routes=[Route("/ping", ping, methods=["GET"])], middleware=middleware)


def bare() -> Starlette:
    return _app([])


def mmobs() -> Starlette:
    from mmobs.middleware import MMObsMiddleware

    return _app([Middleware(MMObsMiddleware)])


def exporter() -> Starlette:
    from starlette_exporter import PrometheusMiddleware, handle_metrics

    app = _app([Middleware(PrometheusMiddleware)])
    app.add_route("/metrics", handle_metrics)
    return app


FACTORIES = {"bare": bare, "mmobs": mmobs, "starlette_exporter": exporter}
