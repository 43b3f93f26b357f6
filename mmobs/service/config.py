"""The reference service's settings, in one place: its constructor, the CLI's defaults, the workers.

Kept free of Starlette and uvicorn so that ``mmobs`` subcommands other than
``serve`` (and ``--help``) can read the defaults without loading a web stack.
With several workers, ``mmobs serve`` passes the settings to each worker
process through the :data:`CONFIG_ENV` environment variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from mmobs.keys.data_url import DEFAULT_MAX_BYTES
from mmobs.keys.formats import DEFAULT_FORMATS
from mmobs.keys.loader import DEFAULT_MAX_PIXELS

CONFIG_ENV = "MMOBS_SERVICE_CONFIG"


@dataclass(frozen=True)
class ServiceConfig:
    """Limits and switches of the reference service."""

    max_body_bytes: int = 64 * 1024 * 1024
    max_images: int = 64
    max_image_bytes: int = DEFAULT_MAX_BYTES
    max_pixels: int = DEFAULT_MAX_PIXELS
    #: Pillow formats the loader opens; ``None`` opens every format Pillow reads.
    image_formats: tuple[str, ...] | None = DEFAULT_FORMATS
    #: The vLLM release whose keys the service computes (:mod:`mmobs.releases`); ``None``: the newest.
    vllm_version: str | None = None
    metrics_path: str | None = "/metrics"
    metrics_token: str | None = None
    #: Hosts remote ``http(s)`` image URLs may come from; empty refuses them all.
    allowed_hosts: tuple[str, ...] = ()
    fetch_timeout_seconds: float = 5.0
    #: Only for tests on loopback: let the fetcher reach private addresses.
    fetch_allow_private: bool = False
    pillow_errors_as_bad_images: bool = True
    #: When set, ``create_app`` configures structlog ("json" or "console").
    log_format: str | None = None
    log_level: str = "info"
    #: One canonical ``http_request`` log line per request (``MMObsMiddleware(access_log=...)``).
    request_log: bool = True
    #: Export spans to this OTLP/HTTP traces endpoint (:mod:`mmobs.service.tracing_setup`); ``None``: no tracing of its own.
    otlp_endpoint: str | None = None
    #: Decode worker processes per server process (0: decode in the server, without limits).
    decode_workers: int = 2
    #: CPU time all of one request's decoding and keying may use, summed over its images.
    max_request_cpu_seconds: float = 2.0
    #: How much decoding one image may grow a decode worker's address space.
    max_decode_memory_bytes: int = 512 * 1024 * 1024
    #: Requests that may wait for a decode worker, and how long.
    decode_queue: int = 64
    decode_queue_timeout_seconds: float = 10.0
    #: Request bodies buffered at once by one server process (beyond: 503, retry later).
    max_buffered_body_bytes: int = 256 * 1024 * 1024
    #: Connection guard (:mod:`mmobs.service.http_guard`): time to send a request's headers, its body,
    #: and the open connections per server process.
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 60.0
    max_connections: int = 1024

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_env(cls) -> ServiceConfig:
        raw = os.environ.get(CONFIG_ENV)
        if not raw:
            return cls()
        values = json.loads(raw)
        values["allowed_hosts"] = tuple(values.get("allowed_hosts", ()))
        if values.get("image_formats") is not None:
            values["image_formats"] = tuple(values["image_formats"])
        return cls(**values)
