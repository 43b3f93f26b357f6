"""The pure ASGI layer: :class:`~mmobs.asgi.middleware.MMObsMiddleware` and what it needs.

Route templates (:mod:`~mmobs.asgi.routing`), OpenAI-style error bodies
(:mod:`~mmobs.asgi.http_errors`), the ``/metrics`` endpoint
(:mod:`~mmobs.asgi.exposition`) and the HTTP series
(:mod:`~mmobs.asgi.request_metrics`). Built on the observability layer and the
keys core; it knows nothing of the reference service or of vLLM.
"""
