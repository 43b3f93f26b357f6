"""Serve the metrics: content negotiation, gzip, multiprocess mode, an optional token.

Under ``PROMETHEUS_MULTIPROC_DIR`` every scrape builds a fresh registry with a
``MultiProcessCollector``, which sums the value files of every worker, so a
scrape of any worker returns the totals of all of them. Live gauges (requests
in progress) of a worker that died are dropped first: prometheus_client only
forgets them when told the process is dead, and a crashed worker tells nobody.
"""

from __future__ import annotations

import glob
import gzip
import os
import re

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from mmobs.asgi.bearer import CHALLENGE, UNAUTHORIZED_BODY, BearerToken
from mmobs.asgi.http_errors import error_body, send_json
from mmobs.observability.metrics import multiprocess_dir

_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db$")


def scrape_registry(registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """The registry to expose: a fresh multiprocess one, or ``registry``/the global one."""
    path = multiprocess_dir()
    if path:
        _forget_dead_processes(path)
        fresh = CollectorRegistry()
        MultiProcessCollector(fresh, path=path)
        return fresh
    return REGISTRY if registry is None else registry


def _forget_dead_processes(path: str) -> None:
    """Remove the live-gauge files of processes that no longer exist."""
    pids = {
        int(m.group(1)) for f in glob.glob(os.path.join(path, "gauge_live*.db")) if (m := _LIVE_GAUGE_FILE.search(f))
    }
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            mark_process_dead(pid, path)
        except OSError:
            pass  # alive, owned by someone else


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` value accepts gzip (``q=0`` refuses it)."""
    for part in accept_encoding.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() in ("gzip", "x-gzip"):
            name, _, quality = params.strip().partition("=")
            if name.strip().lower() != "q":
                return True
            try:
                return float(quality) > 0
            except ValueError:
                return False
    return False


def render(registry: CollectorRegistry | None, accept: str | None) -> tuple[bytes, str]:
    """The exposition body and its content type, negotiated from ``Accept``."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(scrape_registry(registry)), content_type


class MetricsEndpoint:
    """An ASGI app answering ``GET``/``HEAD`` with the metrics.

    With ``token`` set, requests must carry ``Authorization: Bearer <token>`` (:mod:`mmobs.asgi.bearer`:
    refusals counted in ``registry``).
    """

    def __init__(self, registry: CollectorRegistry | None = None, token: str | None = None) -> None:
        self.registry = registry
        self._token = None if token is None else BearerToken(token, REGISTRY if registry is None else registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        if scope["method"] not in ("GET", "HEAD"):
            await send_json(
                send,
                405,
                error_body("the metrics endpoint answers GET and HEAD only", code="method_not_allowed"),
                [(b"allow", b"GET, HEAD")],
            )
            return
        if self._token is not None and not self._token.admits(headers.get("authorization", "")):
            await send_json(send, 401, UNAUTHORIZED_BODY, [(b"www-authenticate", CHALLENGE.encode())])
            return
        body, content_type = render(self.registry, headers.get("accept"))
        response_headers = [(b"content-type", content_type.encode()), (b"vary", b"accept-encoding")]
        if accepts_gzip(headers.get("accept-encoding", "")):
            body = gzip.compress(body, compresslevel=6)  # level 9 costs twice the time for ~2 % less
            response_headers.append((b"content-encoding", b"gzip"))
        response_headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
