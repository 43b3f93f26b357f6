"""The metrics on a listener of their own: ``mmobs serve --metrics-port``, and vLLM's ``MMOBS_METRICS_PORT``.

prometheus_client's ``start_http_server`` has no authentication, so a
``--metrics-token`` given together with ``--metrics-port`` was silently
ignored. This server answers ``GET``/``HEAD`` on any path with the
exposition (content negotiated, multiprocess-aware, like ``/metrics`` in the
service) and, when a token is set, requires ``Authorization: Bearer <token>``
(:mod:`mmobs.asgi.bearer`: compared in constant time, refusals counted). Connections idle for 10
seconds are closed and at most 32 are served at once, so the port cannot be held open by idle sockets.
The vLLM plugin's port (:mod:`mmobs.vllm.metrics_port`) gives it an exposition of its own (several
processes' series, summed) and, when switched on, a JSON page, ``/debug/mm-items``; a ``/debug/`` path
that is not served answers 404, never the exposition.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from mmobs.asgi.bearer import CHALLENGE, UNAUTHORIZED_BODY, BearerToken
from mmobs.asgi.exposition import render as _render
from mmobs.asgi.http_errors import error_body

_MAX_CONNECTIONS = 32
_IDLE_SECONDS = 10
#: Paths of debug pages: answered by a page or 404, never with the exposition.
DEBUG_PREFIX = "/debug/"


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    timeout = _IDLE_SECONDS
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        token = self.server.token
        if token is not None and not token.admits(self.headers.get("authorization", "")):
            self._json(401, UNAUTHORIZED_BODY, {"WWW-Authenticate": CHALLENGE})
            return
        path = self.path.partition("?")[0]
        page = self.server.pages.get(path)
        if page is not None:
            self._send(200, json.dumps(page()).encode(), "application/json")
            return
        if path.startswith(DEBUG_PREFIX):
            self._json(404, error_body(f"{path} is not served here", code="not_found"), {})
            return
        body, content_type = self.server.render(self.headers.get("accept"))
        self._send(200, body, content_type)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        self._json(405, error_body("the metrics endpoint answers GET and HEAD only", code="method_not_allowed"),
                   {"Allow": "GET, HEAD"})  # fmt: skip

    do_PUT = do_DELETE = do_PATCH = do_POST

    def _json(self, status: int, document: dict[str, Any], headers: dict[str, str]) -> None:
        self._send(status, json.dumps(document).encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


#: The exposition body and its content type for a request's ``Accept`` header.
Renderer = Callable[[str | None], tuple[bytes, str]]


class MetricsServer(ThreadingHTTPServer):
    """A threaded HTTP server for the metrics, bounded in connections.

    ``render`` makes the exposition (default: this process's, multiprocess-aware); ``pages`` are JSON
    documents served at their exact paths (the vLLM metrics port's ``/debug/mm-items``); ``registry`` counts
    the token's refusals (default: the global one).
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        token: str | None,
        render: Renderer | None = None,
        pages: Mapping[str, Callable[[], Any]] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.token = None if token is None else BearerToken(token, REGISTRY if registry is None else registry)
        self.render: Renderer = functools.partial(_render, None) if render is None else render
        self.pages = dict(pages or {})
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def start_metrics_server(port: int, host: str, token: str | None, **options: Any) -> MetricsServer:
    """Serve the metrics on ``host:port`` from a daemon thread (``options``: :class:`MetricsServer`'s)."""
    server = MetricsServer((host, port), token, **options)
    threading.Thread(target=server.serve_forever, name="mmobs-metrics", daemon=True).start()
    return server
