"""Every Prometheus metric mmobs exports, defined once.

Dashboards, recording rules and alerts under ``dashboards/`` are checked
against :data:`METRIC_NAMES` by the tests, so a rename here that is not made
there fails the build.

All label values come from closed sets (:data:`EXCEPTION_LABELS`,
:data:`~mmobs.events.MEDIA_KINDS`, :data:`~mmobs.errors.BAD_IMAGE_REASONS`...)
and every child is created up front, so series exist at zero from the first
scrape (``rate()`` and ``absent()`` behave) and no input can add a series.
Children are cached in dicts so the hot path is a dict lookup and an ``inc``.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from .errors import BAD_IMAGE_REASONS
from .hashing import ALGORITHMS

#: Exception classes Pillow's EXIF code is known to raise; anything else is ``other``.
EXCEPTION_LABELS: tuple[str, ...] = (
    "SyntaxError",
    "struct.error",
    "UnicodeDecodeError",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "EOFError",
    "OSError",
    "OverflowError",
    "RecursionError",
    "MemoryError",
    "ZeroDivisionError",
    "AttributeError",
    "other",
)
_LABEL_OF_TYPE: dict[type[BaseException], str] = {
    SyntaxError: "SyntaxError",
    struct.error: "struct.error",
    UnicodeDecodeError: "UnicodeDecodeError",
    ValueError: "ValueError",
    TypeError: "TypeError",
    KeyError: "KeyError",
    IndexError: "IndexError",
    EOFError: "EOFError",
    OSError: "OSError",
    OverflowError: "OverflowError",
    RecursionError: "RecursionError",
    MemoryError: "MemoryError",
    ZeroDivisionError: "ZeroDivisionError",
    AttributeError: "AttributeError",
}

#: (kind, key_source) pairs the hasher can produce.
MEDIA_KEY_SOURCES: tuple[tuple[str, str], ...] = (
    ("image", "image_id"),
    ("image", "pixels"),
    ("media_with_bytes", "image_id"),
    ("media_with_bytes", "original_bytes"),
    ("video", "frames"),
    ("video", "original_bytes"),
)
FALLBACK_KINDS: tuple[str, ...] = ("image", "media_with_bytes")
DRIFT_KINDS: tuple[str, ...] = ("media_with_bytes", "video")
STATUS_CLASSES: tuple[str, ...] = ("1xx", "2xx", "3xx", "4xx", "5xx")

#: Hash latency buckets: 10 us (a short string) to 2.5 s (a 12 MP image on a slow core).
HASH_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Request latency buckets, in seconds.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@lru_cache(maxsize=512)
def exception_label(error_type: type[BaseException]) -> str:
    """The closed-set label for an exception class (its nearest known base)."""
    for base in error_type.__mro__:
        label = _LABEL_OF_TYPE.get(base)
        if label is not None:
            return label
    return "other"


class HasherMetrics:
    """The hashing and loading metrics, in one registry.

    ``registry=None`` means prometheus_client's global ``REGISTRY``. Under
    ``PROMETHEUS_MULTIPROC_DIR`` the values live in the shared directory and
    are read back by :func:`mmobs.exposition.collect`.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self.exif_fallbacks = Counter(
            "mmobs_exif_fallback_total",
            "Exceptions swallowed by the tolerant EXIF ImageID read; the key fell back.",
            ["kind", "exception"],
            registry=registry,
        )
        self.transpose_failures = Counter(
            "mmobs_exif_transpose_failures_total",
            "Exceptions swallowed while applying the EXIF orientation.",
            ["exception"],
            registry=registry,
        )
        self.media_keys = Counter(
            "mmobs_media_keys_total",
            "Media items keyed, by where the key came from.",
            ["kind", "key_source"],
            registry=registry,
        )
        self.hash_duration = Histogram(
            "mmobs_hash_duration_seconds",
            "Wall time of each hash_kwargs call.",
            ["algorithm"],
            buckets=HASH_BUCKETS,
            registry=registry,
        )
        self.hashed_bytes = Counter(
            "mmobs_hashed_bytes_total",
            "Bytes fed to the digest.",
            ["algorithm"],
            registry=registry,
        )
        self.bad_images = Counter(
            "mmobs_bad_images_total",
            "Inputs the image loader refused, by reason.",
            ["reason"],
            registry=registry,
        )
        self.drift = Counter(
            "mmobs_cache_key_drift_total",
            "The same content seen with a different key than before.",
            ["kind"],
            registry=registry,
        )
        self.drift_samples = Counter(
            "mmobs_cache_key_drift_samples_total",
            "Media items the drift tracker sampled (the denominator of the drift ratio).",
            ["kind"],
            registry=registry,
        )
        self.hasher_info = Gauge(
            "mmobs_hasher_info",
            "Always 1. The fingerprint label digests the keys of built-in reference "
            "inputs: replicas that would key an image differently disagree on it.",
            ["fingerprint", "mmobs", "pillow", "numpy"],
            multiprocess_mode="max",
            registry=registry,
        )

        self.fallback_child = {
            (kind, label): self.exif_fallbacks.labels(kind, label)
            for kind in FALLBACK_KINDS
            for label in EXCEPTION_LABELS
        }
        self.transpose_child = {
            label: self.transpose_failures.labels(label) for label in EXCEPTION_LABELS
        }
        self.media_key_child = {pair: self.media_keys.labels(*pair) for pair in MEDIA_KEY_SOURCES}
        self.duration_child = {a: self.hash_duration.labels(a) for a in ALGORITHMS}
        self.bytes_child = {a: self.hashed_bytes.labels(a) for a in ALGORITHMS}
        self.bad_image_child = {r: self.bad_images.labels(r) for r in BAD_IMAGE_REASONS}
        self.drift_child = {k: self.drift.labels(k) for k in DRIFT_KINDS}
        self.drift_sample_child = {k: self.drift_samples.labels(k) for k in DRIFT_KINDS}


class HttpMetrics:
    """Request metrics recorded by :class:`mmobs.middleware.MMObsMiddleware`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self.requests = Counter(
            "mmobs_http_requests_total",
            "HTTP requests, by route template, method and status class.",
            ["route", "method", "status_class"],
            registry=registry,
        )
        self.duration = Histogram(
            "mmobs_http_request_duration_seconds",
            "Time to the last response body chunk, by route template and method.",
            ["route", "method"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.image_requests = Counter(
            "mmobs_http_image_requests_total",
            "HTTP requests that loaded or keyed at least one image, by status class.",
            ["route", "status_class"],
            registry=registry,
        )
        self.fallback_requests = Counter(
            "mmobs_http_exif_fallback_requests_total",
            "HTTP requests in which at least one EXIF fallback ran.",
            ["route"],
            registry=registry,
        )


#: Every exported metric family name (counters with their ``_total``).
METRIC_NAMES: frozenset[str] = frozenset(
    {
        "mmobs_exif_fallback_total",
        "mmobs_exif_transpose_failures_total",
        "mmobs_media_keys_total",
        "mmobs_hash_duration_seconds",
        "mmobs_hashed_bytes_total",
        "mmobs_bad_images_total",
        "mmobs_cache_key_drift_total",
        "mmobs_cache_key_drift_samples_total",
        "mmobs_hasher_info",
        "mmobs_http_requests_total",
        "mmobs_http_request_duration_seconds",
        "mmobs_http_image_requests_total",
        "mmobs_http_exif_fallback_requests_total",
    }
)
