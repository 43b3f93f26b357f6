"""MMObsMiddleware: mount mmobs on any ASGI app.

A pure ASGI middleware (a class whose ``__call__`` wraps ``send``), in the
shape of Starlette's own ``GZipMiddleware``. It never uses
``BaseHTTPMiddleware``, which breaks contextvars, streaming and background
tasks. Per-request state lives in locals, never on ``self``.

For each HTTP request it:

* takes a request id from ``X-Request-ID`` when it is safe (bounded length,
  ``[A-Za-z0-9._:-]``) or makes one, and echoes it in every response, an
  unhandled 500 included;
* opens the request's :class:`~mmobs.observability.context.RequestStats` in a context
  variable (hashing events count into it) and binds ``request_id`` and the
  route template into structlog's contextvars, so every event logged during
  the request carries them;
* turns a :class:`~mmobs.errors.BadImageError` escaping the app before the
  response started into a 400 with an OpenAI-style JSON error, and any other
  exception into a JSON 500 (then re-raises it for the server to log);
* counts the request by route, method and status class, times it to the first
  and to the last body chunk, measures both bodies, tracks requests in
  progress, and counts requests that loaded images or hit an EXIF fallback;
* optionally logs one canonical line per request (``access_log=True``);
* serves ``/metrics`` (configurable, or off).

It costs a few microseconds a request (``docs/performance.md``): the route
template and the series of each (route, method) are cached, the metrics are
counted under one lock (:mod:`mmobs.asgi.request_metrics`), the response header is
appended to the raw header list, and structlog's context variables are set
directly.

``lifespan`` and ``websocket`` scopes pass through untouched.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import weakref
from collections.abc import Callable, Collection, Sequence
from random import getrandbits
from time import perf_counter
from typing import Any

import structlog
from prometheus_client import REGISTRY, CollectorRegistry
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mmobs.asgi.channels import CountingReceive, ResponseWatch
from mmobs.asgi.exposition import MetricsEndpoint
from mmobs.asgi.http_errors import bad_image_body, error_body, send_json
from mmobs.asgi.request_metrics import RequestRecorder, RouteSeries
from mmobs.asgi.routing import RouteResolver, endpoint_templates
from mmobs.errors import BadImageError
from mmobs.events import get_observer
from mmobs.keys.refusals import bad_image_from_pillow, pillow_error_reason, report_bad_image
from mmobs.observability.context import RequestStats, current_request
from mmobs.observability.instrument import Instrumentation, install, metrics_for, set_hasher_info
from mmobs.observability.log_fields import safe_text
from mmobs.observability.logs import REQUEST_ATTRIBUTE, mmobs_logger
from mmobs.observability.metrics import STATUS_CLASSES, multiprocess_dir
from mmobs.observability.tracing import current_trace_id, start_server_span, tracing_on

#: What a client-supplied request id may look like; anything else is replaced.
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
#: Skipped from the request metrics by default, with the metrics path: probes are not traffic.
HEALTH_PATH = "/healthz"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: (method, path) pairs whose route template and series are remembered: like the route cache, bounded.
_TARGETS = 1024
_log = mmobs_logger()


@functools.cache
def _log_context_vars() -> tuple[contextvars.ContextVar[Any], contextvars.ContextVar[Any]]:
    """structlog's own context variables for ``request_id`` and ``route``.

    Setting them directly is what ``bind_contextvars`` does, without building
    its token dicts per request (a fifth of the middleware's cost): any chain
    with ``merge_contextvars`` (structlog's default one included, as in vLLM)
    sees the request as before.
    """
    tokens = structlog.contextvars.bind_contextvars(request_id=None, route=None)
    structlog.contextvars.reset_contextvars(**tokens)
    return tokens["request_id"].var, tokens["route"].var


_recorders: weakref.WeakKeyDictionary[CollectorRegistry, RequestRecorder] = weakref.WeakKeyDictionary()


def _recorder_for(registry: CollectorRegistry, buckets: Sequence[float] | None, exemplars: bool) -> RequestRecorder:
    """One set of request metrics per registry, shared by every middleware on it."""
    recorder = _recorders.get(registry)
    if recorder is None:
        immediate = multiprocess_dir() is not None  # other workers' scrapes read the files at any time
        recorder = _recorders[registry] = RequestRecorder(
            registry, buckets, immediate=immediate, exemplars=exemplars and not immediate
        )
    elif buckets is not None and tuple(float(b) for b in buckets) != recorder.metrics.buckets:
        raise ValueError(
            f"the request metrics of this registry already use the buckets {recorder.metrics.buckets}; "
            "every MMObsMiddleware on one registry must use the same buckets"
        )
    return recorder


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
    :param skip_paths: exact paths left out of the request metrics (they still
        get a request id); by default ``metrics_path`` and ``/healthz``, so
        scrapes and probes are not counted as traffic. ``()`` counts everything.
    :param buckets: the latency histograms' buckets, in seconds (by default
        :data:`~mmobs.observability.metrics.REQUEST_BUCKETS`, which stop at 10 s; a streamed
        chat response may need more).
    :param exemplars: attach the request id as an exemplar to the request and
        fallback counters (exposed in OpenMetrics scrapes; prometheus_client
        keeps none in multiprocess mode, so they are off there). A request
        counter's exemplar is replaced at most once a second
        (:data:`~mmobs.asgi.request_metrics.EXEMPLAR_INTERVAL_SECONDS`); a fallback
        counter's every time.
    :param access_log: log one canonical ``http_request`` line per request
        (skipped paths at debug level).
    :param server_spans: where OpenTelemetry has a tracer provider and no span is
        active yet, start each counted request's HTTP server span, so that
        mmobs's spans and events, and the app's, share one trace (see
        :func:`~mmobs.observability.tracing.start_server_span`). Off by default:
        an app traced by an ASGI instrumentation has its span already, and
        mmobs's go under it either way. (Traced requests' exemplars carry the
        trace id whether or not mmobs started the span.)
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
        skip_paths: Collection[str] | None = None,
        buckets: Sequence[float] | None = None,
        exemplars: bool = True,
        access_log: bool = False,
        server_spans: bool = False,
    ) -> None:
        self.app = app
        self.registry = REGISTRY if registry is None else registry
        self.metrics_path = metrics_path
        self.metrics_endpoint = MetricsEndpoint(self.registry, metrics_token) if metrics_path else None
        self.request_id_header = request_id_header.lower()
        self._request_id_key = self.request_id_header.encode("latin-1")
        self.pillow_errors_as_bad_images = pillow_errors_as_bad_images
        self.resolve_route = route_resolver or RouteResolver(app=app)
        if skip_paths is None:
            skip_paths = (HEALTH_PATH,) if metrics_path is None else (metrics_path, HEALTH_PATH)
        elif isinstance(skip_paths, str):
            raise TypeError("skip_paths is a collection of paths, not one string")
        self.skip_paths = frozenset(skip_paths)
        self.buckets = None if buckets is None else tuple(buckets)
        self.exemplars = exemplars
        self.access_log = access_log
        self.server_spans = server_spans
        self._targets: dict[tuple[str, str], tuple[str, RouteSeries | None, MetricsEndpoint | None]] = {}
        self._cache_targets = route_resolver is None
        self.recorder: RequestRecorder | None = None
        self._id_var, self._route_var = _log_context_vars()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self.recorder is None:
                receive = self._warm_on_startup(scope, receive)
            await self.app(scope, receive, send)
            return

        started = perf_counter()
        if self.recorder is None:
            self._warm(scope)
        request_id, declared_size = self._read_headers(scope)
        target = self._targets.get((scope["method"], scope["path"])) or self._target(scope)
        route, series, endpoint = target
        stats = RequestStats(request_id, route)
        response = ResponseWatch(send, (self._request_id_key, request_id.encode("latin-1")))
        body = CountingReceive(receive) if declared_size < 0 else None  # chunked, or HTTP/2 without a length

        error: BaseException | None = None
        server_span, trace_id = None, None
        if series is not None and tracing_on():
            server_span = start_server_span(scope, route, request_id) if self.server_spans else None
            if server_span is not None:
                scope, trace_id = server_span.scope, server_span.trace_id
            else:
                trace_id = current_trace_id()
        token = current_request.set(stats)
        id_token = self._id_var.set(request_id)
        route_token = self._route_var.set(route)
        if series is not None:
            series.start()
        try:
            await (endpoint or self.app)(scope, receive if body is None else body.receive, response.send)
        except Exception as raised:
            error = raised
            bad_image = self._as_bad_image(raised)
            if bad_image is not None:
                report_bad_image(bad_image)
                stats.bad_image_reason = bad_image.reason
            if bad_image is not None and not response.status:
                error = None
                await send_json(response.send, 400, bad_image_body(bad_image))
            else:
                if bad_image is not None:
                    _log.error(
                        "bad_image_after_response_started",
                        reason=bad_image.reason,
                        error=safe_text(bad_image.message),
                    )
                # The server logs the traceback after the context is gone: let it find the request.
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(raised, REQUEST_ATTRIBUTE, (request_id, route))
                if not response.status:
                    with contextlib.suppress(Exception):  # the client may be gone; the original error matters
                        await send_json(response.send, 500, _INTERNAL_ERROR)
                raise
        finally:
            self._route_var.reset(route_token)
            self._id_var.reset(id_token)
            current_request.reset(token)
            status = response.status or 500
            seconds = (response.finished or perf_counter()) - started
            first_byte = response.first_byte - started if response.first_byte else None
            size = declared_size if body is None else body.received
            if series is not None:
                series.finish(
                    status // 100 if 100 <= status < 600 else 5, seconds, first_byte, size, response.sent,
                    bool(stats.images or stats.bad_images), bool(stats.exif_fallbacks), request_id, trace_id,
                )  # fmt: skip
            if self.access_log:
                _log_request(scope, stats, status, seconds, first_byte, size, response.sent, error, series is None)
            if server_span is not None:
                server_span.end(status)

    def _warm_on_startup(self, scope: Scope, receive: Receive) -> Receive:
        """A ``receive`` that warms up when the server announces start-up."""

        async def receive_startup() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup" and self.recorder is None:
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
        recorder = _recorder_for(registry, self.buckets, self.exemplars)
        if self._observes_hashing():
            observer = get_observer()  # installs the default instrumentation if nobody chose one
            if registry is not REGISTRY and not (
                isinstance(observer, Instrumentation) and observer.metrics.registry is registry
            ):
                install(registry)
            set_hasher_info(metrics_for(registry))
        app = scope.get("app") or self.app
        for template in endpoint_templates(getattr(app, "routes", None) or ()):
            for status_class in STATUS_CLASSES:
                recorder.metrics.image_requests.labels(template, status_class)
            recorder.metrics.fallback_requests.labels(template)
        self.recorder = recorder

    def _observes_hashing(self) -> bool:
        """Whether this process's hashing reports to mmobs, so that the hasher's series are exported.

        Always, for an app that keys images through mmobs; a host whose hasher mmobs only observes
        through a plugin (vLLM) answers whether the plugin is active.
        """
        return True

    def _target(self, scope: Scope) -> tuple[str, RouteSeries | None, MetricsEndpoint | None]:
        """Where a request goes: its route template, its series (``None``: not counted), the metrics endpoint.

        Cached by method and path (at most :data:`_TARGETS` of them, the
        oldest dropped first) unless a custom ``route_resolver`` may look at
        more of the scope than that.
        """
        path, raw_method = scope["path"], scope["method"]
        endpoint = self.metrics_endpoint if path == self.metrics_path else None
        route = path if endpoint is not None else self.resolve_route(scope)
        method = raw_method if raw_method in _METHODS else "other"
        series = None if path in self.skip_paths else self._series_for(route, method)
        target = (route, series, endpoint)
        if self._cache_targets:
            targets = self._targets
            while len(targets) >= _TARGETS:
                del targets[next(iter(targets))]
            targets[(raw_method, path)] = target
        return target

    def _series_for(self, route: str, method: str) -> RouteSeries:
        assert self.recorder is not None
        return self.recorder.series(route, method)

    def _as_bad_image(self, error: Exception) -> BadImageError | None:
        if isinstance(error, BadImageError):
            return error
        if self.pillow_errors_as_bad_images and pillow_error_reason(error) is not None:
            return bad_image_from_pillow(error, "image")
        return None

    def _request_id(self, scope: Scope) -> str:
        """The request id this request gets (the client's when it is safe, else a fresh one)."""
        return self._read_headers(scope)[0]

    def _read_headers(self, scope: Scope) -> tuple[str, int]:
        """The request id (the client's when it is safe, else a fresh one) and the body size if known.

        The size is the Content-Length; 0 for an HTTP/1 request with neither
        it nor Transfer-Encoding (which has no body); -1 otherwise (chunked,
        HTTP/2): then the bytes the app reads are counted.
        """
        request_id: str | None = None
        seen = False
        size = -1
        chunked = False
        key = self._request_id_key
        for name, value in scope["headers"]:
            if name == key:
                if not seen:
                    seen = True
                    with contextlib.suppress(UnicodeDecodeError):
                        candidate = value.decode("ascii")
                        if REQUEST_ID_PATTERN.fullmatch(candidate):
                            request_id = candidate
            elif name == b"content-length":
                if value.isdigit():
                    size = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        if size < 0 and not chunked and scope.get("http_version", "1.1") in ("1.1", "1.0"):
            size = 0
        return request_id or _new_request_id(), size


def _new_request_id() -> str:
    """32 hex digits, random: unique, never secret (a client may send its own).

    From ``random``'s generator (seeded by the OS, and again in a forked
    worker): a third of the cost of ``os.urandom`` here, which makes a system
    call per request, and a seventh of ``uuid.uuid4().hex``.
    """
    return format(getrandbits(128), "032x")


_INTERNAL_ERROR = error_body(
    "internal error; the request id names it in the server log", code="internal_error", type="server_error"
)


def _log_request(
    scope: Scope,
    stats: RequestStats,
    status: int,
    seconds: float,
    first_byte: float | None,
    request_bytes: int,
    response_bytes: int,
    error: BaseException | None,
    skipped: bool,
) -> None:
    """The canonical line: everything about one request in one event."""
    client = scope.get("client")
    fields: dict[str, Any] = {
        "request_id": stats.request_id,
        "route": stats.route,
        "method": safe_text(scope["method"], 16),
        "path": safe_text(scope["path"]),
        "status": status,
        "duration_s": round(seconds, 6),
        "ttfb_s": None if first_byte is None else round(first_byte, 6),
        "request_bytes": request_bytes,
        "response_bytes": response_bytes,
        "images": stats.images,
        "exif_fallbacks": stats.exif_fallbacks,
        "bad_images": stats.bad_images,
        "bad_image_reason": stats.bad_image_reason,
        "client": client[0] if client else None,
    }
    if error is not None:
        fields["exception"] = type(error).__name__
    if skipped:
        _log.debug("http_request", **fields)
    elif status >= 500:
        _log.error("http_request", **fields)
    else:
        _log.info("http_request", **fields)
