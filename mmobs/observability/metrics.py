"""Every Prometheus metric mmobs exports, declared once.

Each metric is a :class:`MetricSpec` in :data:`HASHER_METRICS` or
:data:`HTTP_METRICS`; the metric classes are built from those declarations,
and :data:`METRIC_NAMES` (which the dashboards, rules and docs are checked
against by the tests) is derived from them, so a metric cannot exist in one
place and not the other.

All label values come from closed sets (:data:`EXCEPTION_LABELS`,
:data:`~mmobs.events.MEDIA_KINDS`, :data:`~mmobs.errors.BAD_IMAGE_REASONS`...)
and every child is created up front, so series exist at zero from the first
scrape (``rate()`` and ``absent()`` behave) and no input can add a series.
Children are cached in dicts so the hot path is a dict lookup and an ``inc``.
"""

from __future__ import annotations

import functools
import math
import os
import struct
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from mmobs.errors import BAD_IMAGE_REASONS
from mmobs.events import KEY_PATHS
from mmobs.keys.hashing import ALGORITHMS

#: Exception classes Pillow's EXIF code is known to raise, with their label; anything else is ``other``.
_KNOWN_EXCEPTIONS: tuple[type[BaseException], ...] = (
    SyntaxError,
    struct.error,
    UnicodeDecodeError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    EOFError,
    OSError,
    OverflowError,
    RecursionError,
    MemoryError,
    ZeroDivisionError,
    AttributeError,
)
_LABEL_OF_TYPE: dict[type[BaseException], str] = {
    error_type: "struct.error" if error_type is struct.error else error_type.__name__
    for error_type in _KNOWN_EXCEPTIONS
}
EXCEPTION_LABELS: tuple[str, ...] = (*_LABEL_OF_TYPE.values(), "other")

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
#: Request latency buckets, in seconds (``MMObsMiddleware(buckets=...)`` replaces them).
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Body size buckets, in bytes: 64 B to 64 MiB by factors of 4 (an image request is KiB to tens of MiB).
SIZE_BUCKETS = tuple(float(64 * 4**i) for i in range(11))


@dataclass(frozen=True)
class MetricSpec:
    """One metric: the attribute that holds it, its type, exposed name, help, labels, options."""

    attribute: str
    type: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    documentation: str
    labels: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, registry: CollectorRegistry | None, **overrides: Any) -> Any:
        return self.type(self.name, self.documentation, self.labels, registry=registry, **{**self.options, **overrides})


HASHER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "exif_fallbacks", Counter, "mmobs_exif_fallback_total",
        "Exceptions swallowed by the tolerant EXIF ImageID read; the key fell back.", ("kind", "exception"),
    ),
    MetricSpec(
        "transpose_failures", Counter, "mmobs_exif_transpose_failures_total",
        "Exceptions swallowed while applying the EXIF orientation.", ("exception",),
    ),
    MetricSpec(
        "media_keys", Counter, "mmobs_media_keys_total",
        "Media items keyed, by where the key came from.", ("kind", "key_source"),
    ),
    MetricSpec(
        "hash_duration", Histogram, "mmobs_hash_duration_seconds",
        "Wall time of each hash_kwargs call.", ("algorithm",), {"buckets": HASH_BUCKETS},
    ),
    MetricSpec("hashed_bytes", Counter, "mmobs_hashed_bytes_total", "Bytes fed to the digest.", ("algorithm",)),
    MetricSpec(
        "bad_images", Counter, "mmobs_bad_images_total", "Inputs the image loader refused, by reason.", ("reason",),
    ),
    MetricSpec(
        "drift", Counter, "mmobs_cache_key_drift_total",
        "The same content seen with a different key than before.", ("kind",),
    ),
    MetricSpec(
        "drift_samples", Counter, "mmobs_cache_key_drift_samples_total",
        "Media items the drift tracker sampled (the denominator of the drift ratio).", ("kind",),
    ),
    MetricSpec(
        "exif_corrupt_warnings", Counter, "mmobs_exif_corrupt_warnings_total",
        "Pillow's 'Corrupt EXIF data' warnings (broken metadata that did not raise), counted "
        "where Python warnings are captured (mmobs serve, configure_logging).", (),
    ),
    MetricSpec(
        "hasher_info", Gauge, "mmobs_hasher_info",
        "Always 1. The fingerprint label digests the keys of built-in reference "
        "inputs: replicas that would key an image differently disagree on it. key_format "
        "names the vLLM key format the process keys in (the first release of it, e.g. 0.33).",
        ("fingerprint", "key_format", "mmobs", "pillow", "numpy"), {"multiprocess_mode": "max"},
    ),
    MetricSpec(
        "key_paths", Counter, "mmobs_key_paths_total",
        "Images keyed from their bytes (key_for_bytes, POST /v1/keys), by path: header (no pixel decoded), "
        "header_decoded (the header could not decide; decoded), decode (the caller asked for a decode).",
        ("key_path",),
    ),
)  # fmt: skip

HTTP_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "requests", Counter, "mmobs_http_requests_total",
        "HTTP requests, by route template, method and status class.", ("route", "method", "status_class"),
    ),
    MetricSpec(
        "duration", Histogram, "mmobs_http_request_duration_seconds",
        "Time to the last response body chunk, by route template and method.", ("route", "method"),
        {"buckets": REQUEST_BUCKETS},
    ),
    MetricSpec(
        "time_to_first_byte", Histogram, "mmobs_http_time_to_first_byte_seconds",
        "Time to the first response body byte (a streamed response's first chunk), by route template and method.",
        ("route", "method"), {"buckets": REQUEST_BUCKETS},
    ),
    MetricSpec(
        "in_progress", Gauge, "mmobs_http_requests_in_progress",
        "HTTP requests being served right now, by route template and method.", ("route", "method"),
        {"multiprocess_mode": "livesum"},
    ),
    MetricSpec(
        "request_size", Histogram, "mmobs_http_request_size_bytes",
        "Request body size (its Content-Length, else the bytes the app read), by route template and method.",
        ("route", "method"), {"buckets": SIZE_BUCKETS},
    ),
    MetricSpec(
        "response_size", Histogram, "mmobs_http_response_size_bytes",
        "Response body bytes sent, by route template and method.", ("route", "method"), {"buckets": SIZE_BUCKETS},
    ),
    MetricSpec(
        "image_requests", Counter, "mmobs_http_image_requests_total",
        "HTTP requests that loaded or keyed at least one image, by status class.", ("route", "status_class"),
    ),
    MetricSpec(
        "fallback_requests", Counter, "mmobs_http_exif_fallback_requests_total",
        "HTTP requests in which at least one EXIF fallback ran.", ("route",),
    ),
)  # fmt: skip

#: Every exported metric family name (counters with their ``_total``).
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in (*HASHER_METRICS, *HTTP_METRICS))


#: OpenMetrics allows 128 characters of exemplar labels, names included.
_EXEMPLAR_ID_CHARS = 128 - len("request_id")
#: What a request id keeps beside a trace id (``trace_id`` and 32 hex digits).
_EXEMPLAR_ID_CHARS_TRACED = _EXEMPLAR_ID_CHARS - len("trace_id") - 32


def request_exemplar(request_id: str, trace_id: str | None = None) -> dict[str, str]:
    """The exemplar labels naming a request and, where it is traced, its trace (cut to what OpenMetrics allows).

    ``trace_id`` is the label Grafana's Prometheus data source follows to a
    tracing back end (its "exemplar trace id destinations").
    """
    if trace_id is None:
        return {"request_id": request_id[:_EXEMPLAR_ID_CHARS]}
    return {"request_id": request_id[:_EXEMPLAR_ID_CHARS_TRACED], "trace_id": trace_id}


def fast_inc(child: Any) -> Callable[[float], None]:
    """``child.inc`` without the per-call checks (mode, sign, labels: settled when the child was made).

    The child's own value object is updated, so multiprocess mode stays
    exact; a prometheus_client without that attribute gets the public method.
    For children on hot paths (a request, a key): about half the cost.
    """
    value = getattr(child, "_value", None)
    return value.inc if value is not None and callable(getattr(value, "inc", None)) else child.inc  # type: ignore[no-any-return]


def bulk_capable(child: Any) -> bool:
    """Whether a histogram child exposes the value objects (``_upper_bounds``, ``_buckets``, ``_sum``) directly."""
    bounds, buckets, total = (getattr(child, name, None) for name in ("_upper_bounds", "_buckets", "_sum"))
    return bool(
        bounds and buckets and total is not None and len(bounds) == len(buckets) and bounds[-1] == math.inf
        and all(callable(getattr(value, "inc", None)) for value in (*buckets, total))
    )  # fmt: skip


def fast_observe(child: Any) -> Callable[[float], None]:
    """``child.observe`` for a histogram child, its bucket found by bisection instead of a Python loop.

    The same sum and bucket value objects are updated (``tests/asgi/test_request_metrics.py``
    holds the result equal to ``observe``).
    """
    if not bulk_capable(child):
        return child.observe  # type: ignore[no-any-return]
    bounds = child._upper_bounds
    bucket_incs = [bucket.inc for bucket in child._buckets]
    sum_inc = child._sum.inc

    def observe(amount: float) -> None:
        sum_inc(amount)
        bucket_incs[bisect_left(bounds, amount)](1)

    return observe


_T = TypeVar("_T")


def made_once(factory: Callable[[], _T]) -> Callable[[], _T]:
    """``factory`` called once, on first use, under a lock; the same object on every later call.

    For a process's one set of series in the default registry: made twice, the
    second would raise prometheus_client's "Duplicated timeseries" (``functools.cache``
    may call its function twice when two threads race). Made on first use, a
    process that never needs them (vLLM's engine, a plugin that declined) never
    registers them.
    """
    made: list[_T] = []
    lock = threading.Lock()

    @functools.wraps(factory)
    def once() -> _T:
        if not made:
            with lock:
                if not made:
                    made.append(factory())
        return made[0]

    return once


def multiprocess_dir() -> str | None:
    """The ``PROMETHEUS_MULTIPROC_DIR`` in force, if any: then every value lives in shared files."""
    # The lower-case spelling is prometheus_client's older name for the same setting.
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")  # noqa: SIM112


def exception_label(error_type: type[BaseException]) -> str:
    """The closed-set label for an exception class (its nearest known base)."""
    key: type = error_type  # mypy reads a BaseException class as unhashable (its __hash__ is an instance method)
    return _label_of_class(key)


@lru_cache(maxsize=512)
def _label_of_class(error_type: type) -> str:
    for base in error_type.__mro__:
        label = _LABEL_OF_TYPE.get(base)
        if label is not None:
            return label
    return "other"


class HasherMetrics:
    """The hashing and loading metrics (:data:`HASHER_METRICS`), in one registry.

    ``registry=None`` means prometheus_client's global ``REGISTRY``. Under
    ``PROMETHEUS_MULTIPROC_DIR`` the values live in the shared directory and
    are read back by :func:`mmobs.asgi.exposition.collect`.
    """

    exif_fallbacks: Counter
    transpose_failures: Counter
    media_keys: Counter
    hash_duration: Histogram
    hashed_bytes: Counter
    bad_images: Counter
    drift: Counter
    drift_samples: Counter
    exif_corrupt_warnings: Counter
    hasher_info: Gauge
    key_paths: Counter

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in HASHER_METRICS:
            setattr(self, spec.attribute, spec.build(registry))
        self.fallback_child = {
            (kind, label): self.exif_fallbacks.labels(kind, label)
            for kind in FALLBACK_KINDS
            for label in EXCEPTION_LABELS
        }
        self.transpose_child = {label: self.transpose_failures.labels(label) for label in EXCEPTION_LABELS}
        # What every key updates, bound once as the one handle of each series (see fast_inc / fast_observe).
        self.count_media_key = {pair: fast_inc(self.media_keys.labels(*pair)) for pair in MEDIA_KEY_SOURCES}
        self.observe_duration = {a: fast_observe(self.hash_duration.labels(a)) for a in ALGORITHMS}
        self.count_bytes = {a: fast_inc(self.hashed_bytes.labels(a)) for a in ALGORITHMS}
        self.bad_image_child = {r: self.bad_images.labels(r) for r in BAD_IMAGE_REASONS}
        self.drift_child = {k: self.drift.labels(k) for k in DRIFT_KINDS}
        self.drift_sample_child = {k: self.drift_samples.labels(k) for k in DRIFT_KINDS}
        self.key_path_child = {p: self.key_paths.labels(p) for p in KEY_PATHS}


class HttpMetrics:
    """Request metrics (:data:`HTTP_METRICS`) recorded by :class:`mmobs.asgi.middleware.MMObsMiddleware`.

    ``buckets`` replaces :data:`REQUEST_BUCKETS` for the two latency histograms.
    ``register=False`` builds them outside any registry, for
    :class:`mmobs.asgi.request_metrics.RequestRecorder` to register as one collector.
    """

    requests: Counter
    duration: Histogram
    time_to_first_byte: Histogram
    in_progress: Gauge
    request_size: Histogram
    response_size: Histogram
    image_requests: Counter
    fallback_requests: Counter

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        buckets: Sequence[float] | None = None,
        *,
        register: bool = True,
    ) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        self.buckets = tuple(float(b) for b in (REQUEST_BUCKETS if buckets is None else buckets))
        for spec in HTTP_METRICS:
            overrides = {"buckets": self.buckets} if spec.options.get("buckets") is REQUEST_BUCKETS else {}
            setattr(self, spec.attribute, spec.build(registry if register else None, **overrides))

    def all(self) -> list[Any]:
        """The metrics, in declaration order (``register=False``: for a collector that exposes them)."""
        return [getattr(self, spec.attribute) for spec in HTTP_METRICS]
