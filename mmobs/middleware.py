"""MMObsMiddleware: mount mmobs on any ASGI app.

A pure ASGI middleware (a class whose ``__call__`` wraps ``send``), in the
shape of Starlette's own ``GZipMiddleware``. It never uses
``BaseHTTPMiddleware``, which breaks contextvars, streaming and background
tasks. Per-request state lives in locals, never on ``self``.

For each HTTP request it:

* takes a request id from ``X-Request-ID`` when it is safe (bounded length,
  ``[A-Za-z0-9._:-]``) or makes one, and echoes it in the response;
* binds ``request_id`` and the route template into structlog's contextvars,
  so every hashing event logged during the request carries them;
* turns a :class:`~mmobs.errors.BadImageError` escaping the app before the
  response started into a 400 with an OpenAI-style JSON error;
* counts the request by route, method and status class, times it to the last
  body chunk, and counts requests that loaded images or hit an EXIF fallback;
* serves ``/metrics`` (configurable, or off).

``lifespan`` and ``websocket`` scopes pass through untouched.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Any

import structlog
from prometheus_client import REGISTRY, CollectorRegistry
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .context import RequestStats, current_request
from .errors import BadImageError
from .events import get_observer
from .exposition import MetricsEndpoint
from .http_errors import bad_image_body, send_json
from .image_io import bad_image_from_pillow, pillow_error_reason, report_bad_image
from .instrument import Instrumentation, install, metrics_for, set_hasher_info
from .logs import safe_text
from .metrics import STATUS_CLASSES, HttpMetrics
from .routing import RouteResolver, endpoint_templates

__all__ = ["MMObsMiddleware", "REQUEST_ID_PATTERN"]

#: What a client-supplied request id may look like; anything else is replaced.
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_log = structlog.get_logger("mmobs")
_http_metrics: weakref.WeakKeyDictionary[CollectorRegistry, HttpMetrics] = weakref.WeakKeyDictionary()


def _http_metrics_for(registry: CollectorRegistry) -> HttpMetrics:
    """One set of request metrics per registry, shared by every middleware on it."""
    metrics = _http_metrics.get(registry)
    if metrics is None:
        metrics = _http_metrics[registry] = HttpMetrics(registry)
    return metrics


class MMObsMiddleware:
    """Request context, bad-image 400s, request metrics and ``/metrics`` for an ASGI app.

    :param app: the ASGI app to wrap.
    :param registry: where the metrics live (prometheus_client's global one by default).
    :param metrics_path: where to serve the metrics; ``None`` to not serve them.
    :param metrics_token: require ``Authorization: Bearer <token>`` on ``metrics_path``.
    :param request_id_header: the header a request id is read from and echoed in.
    :param pillow_errors_as_bad_images: also answer Pillow's own decode errors
        (``UnidentifiedImageError``, ``DecompressionBombError``, truncation)
        with a 400 instead of letting them become a 500.
    :param route_resolver: maps a scope to its route template.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: CollectorRegistry | None = None,
        metrics_path: str | None = "/metrics",
        metrics_token: str | None = None,
        request_id_header: str = "x-request-id",
        pillow_errors_as_bad_images: bool = False,
        route_resolver: Callable[[Scope], str] | None = None,
    ) -> None:
        self.app = app
        self.registry = REGISTRY if registry is None else registry
        self.metrics_path = metrics_path
        self.metrics_endpoint = MetricsEndpoint(self.registry, metrics_token) if metrics_path else None
        self.request_id_header = request_id_header.lower()
        self._request_id_key = self.request_id_header.encode("latin-1")
        self.pillow_errors_as_bad_images = pillow_errors_as_bad_images
        self.resolve_route = route_resolver or RouteResolver(app=app)
        # Label children by (metric, label values): labels() locks and
        # validates on every call. Routes come from the app's table: bounded.
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        self.metrics: HttpMetrics | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self.metrics is None:
            await self.app(scope, self._warm_on_startup(scope, receive), send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = perf_counter()
        if self.metrics is None:
            self._warm(scope)
        request_id = self._request_id(scope)
        metrics_request = self.metrics_endpoint is not None and scope["path"] == self.metrics_path
        route = self.metrics_path if metrics_request else self.resolve_route(scope)
        method = scope["method"] if scope["method"] in _METHODS else "other"
        stats = RequestStats(request_id, route)
        status = 500
        finished: float | None = None
        response_started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, finished, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                # "headers" is optional in ASGI and may be any iterable: normalise it.
                message["headers"] = list(message.get("headers", ()))
                headers = MutableHeaders(scope=message)
                if self.request_id_header not in headers:
                    headers.append(self.request_id_header, request_id)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = perf_counter()
            await send(message)

        stats_token = current_request.set(stats)
        log_tokens = structlog.contextvars.bind_contextvars(request_id=request_id, route=route)
        try:
            if metrics_request:
                assert self.metrics_endpoint is not None
                await self.metrics_endpoint(scope, receive, send_wrapper)
            else:
                await self.app(scope, receive, send_wrapper)
        except Exception as error:  # noqa: BLE001 - re-raised unless it is a bad image
            bad_image = self._as_bad_image(error)
            if bad_image is None:
                raise
            report_bad_image(bad_image)
            if response_started:
                _log.error(
                    "bad_image_after_response_started",
                    reason=bad_image.reason,
                    error=safe_text(bad_image.message),
                )
                raise
            await send_json(send_wrapper, 400, bad_image_body(bad_image))
        finally:
            structlog.contextvars.reset_contextvars(**log_tokens)
            current_request.reset(stats_token)
            self._record(route, method, status, (finished or perf_counter()) - started, stats)

    def _warm_on_startup(self, scope: Scope, receive: Receive) -> Receive:
        """A ``receive`` that warms up when the server announces start-up."""

        async def receive_startup() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup" and self.metrics is None:
                self._warm(scope)
            return message

        return receive_startup

    def _warm(self, scope: Scope) -> None:
        """Register the metrics, set the fleet fingerprint, create per-route series at zero.

        Done once, at start-up (or on the first request of a server without
        lifespan), so that constructing the middleware has no side effects. A
        counter series born at 1 hides its first increment from ``rate()``
        (the first 5xx on an image route, say); born at 0 before any traffic,
        it is scraped at 0 before the traffic it counts.
        """
        registry = self.registry
        self.metrics = metrics = _http_metrics_for(registry)
        observer = get_observer()  # installs the default instrumentation if nobody chose one
        if registry is not REGISTRY and not (
            isinstance(observer, Instrumentation) and observer.metrics.registry is registry
        ):
            install(registry)
        set_hasher_info(metrics_for(registry))
        app = scope.get("app") or self.app
        for template in endpoint_templates(getattr(app, "routes", None) or ()):
            for status_class in STATUS_CLASSES:
                metrics.image_requests.labels(template, status_class)
            metrics.fallback_requests.labels(template)

    def _as_bad_image(self, error: Exception) -> BadImageError | None:
        if isinstance(error, BadImageError):
            return error
        if self.pillow_errors_as_bad_images and pillow_error_reason(error) is not None:
            return bad_image_from_pillow(error, "image")
        return None

    def _request_id(self, scope: Scope) -> str:
        for name, value in scope["headers"]:
            if name == self._request_id_key:
                try:
                    candidate = value.decode("ascii")
                except UnicodeDecodeError:
                    break
                if REQUEST_ID_PATTERN.fullmatch(candidate):
                    return candidate
                break
        return os.urandom(16).hex()

    def _child(self, metric: Any, *labels: str) -> Any:
        child = self._children.get((metric, labels))
        if child is None:
            child = self._children[(metric, labels)] = metric.labels(*labels)
        return child

    def _record(self, route: str, method: str, status: int, seconds: float, stats: RequestStats) -> None:
        assert self.metrics is not None
        status_class = f"{status // 100}xx" if 100 <= status < 600 else "5xx"
        self._child(self.metrics.requests, route, method, status_class).inc()
        self._child(self.metrics.duration, route, method).observe(seconds)
        if stats.images or stats.bad_images:
            self._child(self.metrics.image_requests, route, status_class).inc()
        if stats.exif_fallbacks:
            self._child(self.metrics.fallback_requests, route).inc()
