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

Without the plugin in the API server (``MMOBS_VLLM_PLUGIN=0``, or a vLLM it
declined), the preset still counts HTTP requests but exports none of the
hasher's series, and says so once in vLLM's log: ``mmobs_media_keys_total``
is then absent, which is what ``MmobsMetricsAbsent`` watches, rather than a
row of zeros that reads as "no EXIF fallbacks".
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from mmobs.asgi.middleware import MMObsMiddleware

__all__ = ["VLLM_PROBE_PATHS", "Middleware"]

#: vLLM's scrape, health and status endpoints: not traffic. (The paths vLLM's
#: own request instrumentation leaves out, too.)
VLLM_PROBE_PATHS: tuple[str, ...] = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


class Middleware(MMObsMiddleware):
    """:class:`~mmobs.asgi.middleware.MMObsMiddleware` preset for ``vllm serve --middleware``."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, metrics_path=None, skip_paths=VLLM_PROBE_PATHS)

    def _observes_hashing(self) -> bool:
        from mmobs.vllm.plugin import PLUGIN_ENV, registered
        from mmobs.vllm.startup_log import say

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
        if scope["type"] == "http":
            request_id = self._request_id(scope)
            key = self._request_id_key
            scope["headers"] = [(name, value) for name, value in scope["headers"] if name != key]
            scope["headers"].append((key, request_id.encode("ascii")))
        await super().__call__(scope, receive, send)
