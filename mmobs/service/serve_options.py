"""What ``mmobs serve`` was asked for, and what it becomes: the service's settings and uvicorn's options.

The command line parses; this module decides what the parsed values mean for
the server, so the CLI holds no knowledge of uvicorn or of the service's
limits, and :mod:`mmobs.service.serve` only runs what it is given. Like
:mod:`mmobs.service.config`, it loads neither Starlette nor uvicorn: ``mmobs
--help`` reads it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmobs.asgi.bearer import TOKEN_ENV
from mmobs.observability.logs import LogFormat
from mmobs.service.config import ServiceConfig

#: Seconds uvicorn waits for open requests on shutdown before closing their connections.
_GRACEFUL_SHUTDOWN_SECONDS = 10
#: The largest request head h11 buffers before it refuses the request.
_MAX_INCOMPLETE_EVENT_BYTES = 64 * 1024


@dataclass(frozen=True)
class ServeOptions:
    """The options of ``mmobs serve``, one field per option, named as the parser names them.

    They are the values as given: the connection cap may still be lowered to
    what the open-files limit allows, and ``--no-metrics`` or ``--metrics-port``
    take the metrics off the service's own port (:meth:`service_config`).
    """

    host: str
    port: int
    #: Server processes; above 1 the metrics are summed over all of them.
    workers: int
    log_format: LogFormat
    log_level: str
    request_log: bool
    #: Let uvicorn log every request too.
    access_log: bool
    max_body_bytes: int
    max_images: int
    max_pixels: int
    max_image_bytes: int
    image_formats: tuple[str, ...] | None
    vllm_version: str
    metrics_path: str
    no_metrics: bool
    #: The metrics on a listener of their own (:mod:`mmobs.asgi.metrics_server`) instead of ``metrics_path``.
    metrics_port: int | None
    metrics_token: str | None
    #: Hosts remote image URLs may come from.
    allow_remote_host: Sequence[str]
    fetch_allow_private: bool
    #: Export spans to this OTLP/HTTP traces endpoint.
    otlp_endpoint: str | None
    #: Open connections per server process, as asked (before the open-files limit has its say).
    limit_concurrency: int
    header_timeout: float
    body_timeout: float
    decode_workers: int
    max_request_cpu_seconds: float
    max_decode_memory_mib: int
    decode_queue: int
    decode_queue_timeout: float

    def service_config(self, max_connections: int) -> ServiceConfig:
        """The settings every server process runs with, given the connection cap the process can hold.

        The metrics token falls back to ``MMOBS_METRICS_TOKEN`` so that it need
        not appear on a command line (and in ``ps``).
        """
        return ServiceConfig(
            max_body_bytes=self.max_body_bytes,
            max_images=self.max_images,
            max_pixels=self.max_pixels,
            max_image_bytes=self.max_image_bytes,
            image_formats=self.image_formats,
            vllm_version=self.vllm_version,
            fetch_allow_private=self.fetch_allow_private,
            metrics_path=None if self.no_metrics or self.metrics_port else self.metrics_path,
            metrics_token=self.metrics_token or os.environ.get(TOKEN_ENV) or None,
            allowed_hosts=tuple(self.allow_remote_host),
            log_format=self.log_format,
            log_level=self.log_level,
            decode_workers=self.decode_workers,
            max_request_cpu_seconds=self.max_request_cpu_seconds,
            max_decode_memory_bytes=self.max_decode_memory_mib * 1024 * 1024,
            decode_queue=self.decode_queue,
            decode_queue_timeout_seconds=self.decode_queue_timeout,
            # Room for two of the largest bodies at once, whatever the default budget.
            max_buffered_body_bytes=max(ServiceConfig.max_buffered_body_bytes, 2 * self.max_body_bytes),
            header_timeout_seconds=self.header_timeout,
            body_timeout_seconds=self.body_timeout,
            max_connections=max_connections,
            request_log=self.request_log,
            otlp_endpoint=self.otlp_endpoint,
        )

    def uvicorn_options(self) -> dict[str, Any]:
        """``uvicorn.run``'s keyword arguments, but the application and the worker count."""
        from mmobs.service.http_guard import GuardedH11Protocol  # imports uvicorn: only where it serves

        return {
            "host": self.host,
            "port": self.port,
            "access_log": self.access_log,
            "log_level": self.log_level,
            "timeout_graceful_shutdown": _GRACEFUL_SHUTDOWN_SECONDS,
            # No text handlers of uvicorn's own: its records reach configure_logging's handler.
            "log_config": None,
            # Header and body deadlines and a connection cap that evicts idle connections
            # (mmobs.service.http_guard) instead of uvicorn's limit_concurrency, whose 503s idle sockets trigger.
            # The class itself: uvicorn 0.30 (the declared floor) takes a string only if it names one of its own protocols.
            "http": GuardedH11Protocol,
            "ws": "none",
            "limit_concurrency": None,
            "h11_max_incomplete_event_size": _MAX_INCOMPLETE_EVENT_BYTES,
        }
