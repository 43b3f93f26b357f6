"""The reference service: ``POST /v1/hash`` keys images exactly as vLLM would.

A Starlette app behind :class:`~mmobs.asgi.middleware.MMObsMiddleware`. It accepts
a JSON body (``images`` or OpenAI chat ``messages``), a multipart upload, or a
raw ``image/*`` body, and answers every malformed input with a 4xx JSON error
(OpenAI style) that names what to fix. ``{"images": [url]}`` yields exactly
``hash_kwargs(algorithm, image=media)``; optional ``model_id`` and
``mm_processor_kwargs`` are added to the key only when given.

``POST /v1/keys`` takes the same requests and answers the same keys without
decoding pixels where the header decides (:mod:`mmobs.keys.from_bytes`): the call a
cache-aware router makes per image. Its ``verify`` option (``header``, the
default, or ``decode``) is :func:`mmobs.keys.from_bytes.key_image`'s. Opening a header
can cost as much as decoding (Pillow parses metadata there), so it runs in a
decode worker too, under the same budgets.

What one request may cost is bounded (``docs/reliability.md``, "Bounded
resources"): its body (size, JSON values, option sizes; bodies buffered at
once per process), and its decoding and keying, which run in decode worker
processes (:mod:`mmobs.service.decode_pool`) under a per-request CPU budget and a
per-image memory budget. An input over a budget is the client's ``400
too_costly``; the service's own shortage (every worker busy, the waiting line
full, memory) is a ``503`` with ``Retry-After``. Large JSON bodies are parsed
in a decode worker too, so the event loop (``/healthz``, ``/metrics``) never
waits for them.

The library (:class:`~mmobs.keys.loader.ImageMediaIO`) refuses costly inputs it
can recognise from their structure; the service adds the process isolation
that bounds the rest. Run it with ``mmobs serve`` (:mod:`mmobs.service.serve`).

This module assembles the application; the work is in modules of their own:
:mod:`~mmobs.service.hash_service` (the endpoints),
:mod:`~mmobs.service.request_reader` (a request's options and images, by
Content-Type), :mod:`~mmobs.service.request_body` (its body, bounded),
:mod:`~mmobs.service.request_image` (an image's bytes, from a data: URL or
fetched), :mod:`~mmobs.service.decode_outcome` (a decode worker's answer and
the CPU budget) and :mod:`~mmobs.service.error_responses` (every error's
answer).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from PIL import _imaging
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from mmobs.asgi.middleware import MMObsMiddleware
from mmobs.observability.fingerprint import key_with_release
from mmobs.observability.logs import configure_logging
from mmobs.service.config import ServiceConfig
from mmobs.service.error_responses import http_exception_handler, server_error_handler
from mmobs.service.hash_service import HashService
from mmobs.service.tracing_setup import start_otlp_tracing


def create_app(config: ServiceConfig | None = None) -> Starlette:
    """The reference service (config from ``MMOBS_SERVICE_CONFIG`` when not given)."""
    config = config or ServiceConfig.from_env()
    # The process keys in this release's format (the newest by default): its fingerprint says so.
    key_with_release(config.vllm_version)
    if "PILLOW_BLOCKS_MAX" not in os.environ and config.decode_workers == 0:
        # Decoding in this process: reuse freed pixel blocks instead of faulting fresh
        # memory in for every image, 1.1-1.3x the images/s (docs/performance.md), at
        # most 8 blocks (<= 128 MiB) held.
        _imaging.set_blocks_max(8)
    if config.log_format:
        configure_logging(config.log_format, config.log_level)  # type: ignore[arg-type]
    service = HashService(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # In each server process, after uvicorn forked it: the export thread does not survive a fork.
        tracer_provider = start_otlp_tracing(config.otlp_endpoint) if config.otlp_endpoint else None
        await service.start()
        try:
            yield
        finally:
            await service.close()
            if tracer_provider is not None:
                tracer_provider.shutdown()  # exports the spans still batched

    app = Starlette(
        routes=[
            Route("/v1/hash", service.hash, methods=["POST"]),
            Route("/v1/keys", service.keys, methods=["POST"]),
            Route("/healthz", service.healthz, methods=["GET"]),
        ],
        middleware=[
            Middleware(
                MMObsMiddleware,
                metrics_path=config.metrics_path,
                metrics_token=config.metrics_token,
                pillow_errors_as_bad_images=config.pillow_errors_as_bad_images,
                access_log=config.request_log,
                server_spans=config.otlp_endpoint is not None,
            )
        ],
        exception_handlers={HTTPException: http_exception_handler, 500: server_error_handler},
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.service = service
    return app
