"""``vllm serve --middleware mmobs.vllm.Middleware``: request ids and request metrics in vLLM.

vLLM registers a ``--middleware`` class with ``app.add_middleware(cls)`` and
no arguments, so this preset fixes the options that differ inside vLLM:

* vLLM serves ``/metrics`` itself (prometheus_client's default registry, or a
  ``MultiProcessCollector`` under ``PROMETHEUS_MULTIPROC_DIR``, which
  ``--api-server-count`` above 1 sets). mmobs's series are registered in that
  same default registry, so they appear on vLLM's endpoint; the preset serves
  no endpoint of its own and never shadows vLLM's.
* One request id for everyone: vLLM names a request after its
  ``X-Request-Id`` header when there is one (``chatcmpl-<id>``), so the preset
  makes sure the request reaching vLLM carries exactly the id mmobs logs and
  echoes, generating one when the client sent none (or an unsafe one).

With the plugin carrying the context into vLLM's executor threads, every
``exif_fallback`` event then names the request it belongs to.

* Exemplars, where asked for: vLLM's ``/metrics`` speaks the classic text
  format only, which has no exemplars. With ``MMOBS_VLLM_OPENMETRICS=1`` the
  preset answers a scrape that asks for OpenMetrics (Prometheus's do) itself,
  from the same registry, so that the exemplars of mmobs's counters (the
  request id, and the trace id where the request was traced) reach
  Prometheus. Off by default: an OpenMetrics scrape differs from the text one
  (a ``_created`` sample is a timestamp Prometheus does not store as a series),
  and vLLM's endpoint stays vLLM's unless asked.
* One trace per request, where vLLM traces (``--otlp-traces-endpoint``): vLLM
  starts no HTTP span of its own, so the preset starts it (the child of the
  client's ``traceparent``, if any) and hands vLLM a ``traceparent`` naming
  it. vLLM's ``llm_request`` span and mmobs's spans for the multimodal front
  end then share the request's trace (:mod:`mmobs.vllm.front_end.stages`).

Without the plugin in the API server (``MMOBS_VLLM_PLUGIN=0``, or a vLLM it
declined), the preset still counts HTTP requests but exports none of the
hasher's series, and says so once in vLLM's log: ``mmobs_media_keys_total``
is then absent, which is what ``MmobsMetricsAbsent`` watches, rather than a
row of zeros that reads as "no EXIF fallbacks".
"""

from __future__ import annotations

import inspect
import logging
import os

from starlette.types import ASGIApp, Receive, Scope, Send

from mmobs.asgi.exposition import scrape_registry
from mmobs.asgi.middleware import MMObsMiddleware

#: ``1``: answer a scrape of ``/metrics`` that asks for OpenMetrics with it (exemplars included).
OPENMETRICS_ENV = "MMOBS_VLLM_OPENMETRICS"

#: vLLM's scrape, health and status endpoints: not traffic. (The paths vLLM's
#: own request instrumentation leaves out, too.)
VLLM_PROBE_PATHS: tuple[str, ...] = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


class Middleware(MMObsMiddleware):
    """:class:`~mmobs.asgi.middleware.MMObsMiddleware` preset for ``vllm serve --middleware``."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, metrics_path=None, skip_paths=VLLM_PROBE_PATHS, server_spans=True)
        self._openmetrics = os.environ.get(OPENMETRICS_ENV) == "1"

    def _observes_hashing(self) -> bool:
        from mmobs.vllm.plugin import registered
        from mmobs.vllm.startup_log import say
        from mmobs.vllm.switches import PLUGIN_ENV

        if registered():
            return True
        say(
            logging.WARNING,
            "mmobs: the vLLM plugin is not active in this API server (%s=0, or it declined: see its line above); "
            "only HTTP requests are counted, and the hasher's series (mmobs_media_keys_total...) are not exported, "
            "so MmobsMetricsAbsent fires for this server",
            PLUGIN_ENV,
        )
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._openmetrics and scope["type"] == "http" and _asks_for_openmetrics(scope):
            await _send_openmetrics(send)
            return
        if scope["type"] == "http":
            request_id = self._request_id(scope)
            key = self._request_id_key
            scope["headers"] = [(name, value) for name, value in scope["headers"] if name != key]
            scope["headers"].append((key, request_id.encode("ascii")))
        await super().__call__(scope, receive, send)


def _asks_for_openmetrics(scope: Scope) -> bool:
    """A ``GET /metrics`` whose ``Accept`` names OpenMetrics (as Prometheus's scrapes do)."""
    if scope["path"] != "/metrics" or scope["method"] != "GET":
        return False
    return any(name == b"accept" and b"application/openmetrics-text" in value for name, value in scope["headers"])


async def _send_openmetrics(send: Send) -> None:
    """vLLM's registry (every API server's, in multiprocess mode) in OpenMetrics, metric names as vLLM has them.

    prometheus_client from 0.22 on writes ``vllm:x`` as ``vllm_x`` in OpenMetrics unless told to
    keep names that are valid as they are (colons are): asked so, every series keeps vLLM's name.
    """
    from prometheus_client.openmetrics import exposition

    registry = scrape_registry()
    if "escaping" in inspect.signature(exposition.generate_latest).parameters:
        body: bytes = exposition.generate_latest(registry, escaping=exposition.ALLOWUTF8)  # type: ignore[no-untyped-call]
    else:
        body = exposition.generate_latest(registry)  # type: ignore[no-untyped-call]
    headers = [(b"content-type", exposition.CONTENT_TYPE_LATEST.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
