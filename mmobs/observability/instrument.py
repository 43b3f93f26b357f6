"""The observability layer: turns hashing events into metrics, logs and drift checks.

:class:`Instrumentation` is a :class:`~mmobs.events.HashObserver`. Importing
``mmobs`` installs nothing: it registers :func:`default_instrumentation` as the
seam's default factory, and the first event installs one observer bound to
prometheus_client's global registry and to ``structlog.get_logger("mmobs")``,
so a library user gets counters and log events with no set-up.
:func:`install` replaces it (another registry, no drift tracking, a log rate
limit); ``mmobs.set_observer(None)`` turns reporting off.

Every swallowed exception moves its counter. The log event for it can be rate
limited per content digest (``log_interval_seconds``, off by default); the
counter never is.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import PIL
from blake3 import blake3
from prometheus_client import REGISTRY, CollectorRegistry

from mmobs._version import __version__
from mmobs.errors import BadImageError
from mmobs.events import (
    ExifCorruptWarning,
    ExifFallback,
    Hashed,
    HashObserver,
    KeyPathChosen,
    MediaKeyed,
    MediaKind,
    TransposeFailure,
    set_observer,
)
from mmobs.keys.guard import sniff_format
from mmobs.observability.context import current_request
from mmobs.observability.drift import DriftTracker
from mmobs.observability.fingerprint import process_fingerprint
from mmobs.observability.log_fields import safe_text
from mmobs.observability.logs import mmobs_logger
from mmobs.observability.metrics import HasherMetrics, exception_label, multiprocess_dir, request_exemplar
from mmobs.observability.tracing import add_span_event, current_trace_id

_DIGEST_HEX_CHARS = 16
_DEFAULT: Any = object()
_metrics_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, HasherMetrics] = weakref.WeakKeyDictionary()


def metrics_for(registry: CollectorRegistry | None = None) -> HasherMetrics:
    """The hashing metrics registered in ``registry`` (the global one by default).

    A metric can be registered only once per registry, so every
    :class:`Instrumentation` on the same registry shares one set.
    """
    key = REGISTRY if registry is None else registry
    metrics = _metrics_by_registry.get(key)
    if metrics is None:
        metrics = _metrics_by_registry[key] = HasherMetrics(key)
    return metrics


def set_hasher_info(metrics: HasherMetrics) -> str:
    """Set ``mmobs_hasher_info`` to 1 with this process's fingerprint and key format; return the fingerprint."""
    fingerprint = process_fingerprint()
    metrics.hasher_info.labels(
        fingerprint.digest, fingerprint.key_format, __version__, PIL.__version__, np.__version__
    ).set(1)
    return fingerprint.digest


def content_digest(data: bytes | memoryview) -> str:
    """A short blake3 digest of encoded bytes, to find the same file across logs."""
    return blake3(data).hexdigest()[:_DIGEST_HEX_CHARS]


def _image_fields(image: Any, original_bytes: bytes | memoryview | None = None) -> dict[str, Any]:
    """The image's format, mode and size; the format read from the original bytes where the image lost it.

    A loader that converts the image (vLLM's, to RGB) returns an image without a format, but the
    event is about the file the client sent.
    """
    try:
        fields = {"format": image.format, "mode": image.mode, "size": list(image.size)}
    except Exception:  # noqa: BLE001 - a broken image object must not break logging
        fields = {"format": None, "mode": None, "size": None}
    if fields["format"] is None and original_bytes is not None:
        fields["format"] = sniff_format(original_bytes)
    return fields


class _LogLimiter:
    """At most one event per key per interval, remembering a bounded number of keys."""

    def __init__(self, interval_seconds: float, capacity: int = 4096) -> None:
        self.interval = interval_seconds
        self.capacity = capacity
        self._last: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                return False
            self._last[key] = now
            self._last.move_to_end(key)
            if len(self._last) > self.capacity:
                self._last.popitem(last=False)
        return True


class Instrumentation(HashObserver):
    """Counts, logs and drift-checks everything the hashing core reports.

    :param registry: where the metrics live (prometheus_client's global one by default).
    :param logger: a structlog logger (by default ``structlog.get_logger("mmobs")``, see
        :func:`mmobs.observability.logs.mmobs_logger`). Every event it logs is also an
        event on the active span, where one records.
    :param drift: the drift tracker; ``None`` turns drift detection off.
    :param log_interval_seconds: log each content's fallback at most once per interval
        (the counter still counts every one); ``None`` logs every one.
    :param hasher_info: set ``mmobs_hasher_info`` with this process's fingerprint on the
        first hash (off for instrumentations that only count).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        logger: Any = None,
        drift: DriftTracker | None = _DEFAULT,
        log_interval_seconds: float | None = None,
        hasher_info: bool = True,
    ) -> None:
        self.metrics = metrics_for(registry)
        self.log = mmobs_logger(logger)
        self.drift: DriftTracker | None = DriftTracker() if drift is _DEFAULT else drift
        self._limiter = _LogLimiter(log_interval_seconds) if log_interval_seconds else None
        self._hasher_info_pending = hasher_info
        self._pillow = PIL.__version__
        self._multiprocess = multiprocess_dir() is not None

    # -- hooks ----------------------------------------------------------------

    def exif_fallback(self, event: ExifFallback) -> None:
        label = exception_label(type(event.error))
        stats = current_request.get()
        if stats is not None:
            stats.exif_fallbacks += 1
            # The request's id, and its trace's, as the exemplar (OpenMetrics scrapes; none in multiprocess mode).
            exemplar = None if self._multiprocess else request_exemplar(stats.request_id, current_trace_id())
            self.metrics.fallback_child[(event.kind, label)].inc(1, exemplar)
        else:
            self.metrics.fallback_child[(event.kind, label)].inc()
        digest = content_digest(event.original_bytes) if event.original_bytes is not None else None
        fields = {
            "kind": event.kind,
            "exception": label,
            "error": safe_text(event.error),
            "key_source": event.key_source,
            "content_digest": digest,
            "pillow": self._pillow,
            **_image_fields(event.image, event.original_bytes),
        }
        if self._limiter is not None and not self._limiter.allow(digest or label):
            add_span_event("exif_fallback", fields)  # the log is rate limited; the trace never is
            return
        self.log.warning("exif_fallback", **fields)

    def exif_transpose_failed(self, event: TransposeFailure) -> None:
        label = exception_label(type(event.error))
        self.metrics.transpose_child[label].inc()
        fields = {"exception": label, "error": safe_text(event.error), "pillow": self._pillow}
        fields.update(_image_fields(event.image))
        if self._limiter is not None and not self._limiter.allow("transpose:" + label):
            add_span_event("exif_transpose_failed", fields)
            return
        self.log.warning("exif_transpose_failed", **fields)

    def wants_item_digest(self, kind: MediaKind, media: Any) -> bool:
        return self.drift is not None and self.drift.samples(media)

    def media_keyed(self, event: MediaKeyed) -> None:
        self.metrics.count_media_key[(event.kind, event.key_source)](1)
        stats = current_request.get()
        if stats is not None:
            stats.images += 1
        if event.item_digest is None or self.drift is None:
            return
        media = event.media
        self.metrics.drift_sample_child[event.kind].inc()
        drift = self.drift.observe(event.kind, media, event.item_digest, event.key_source)
        if drift is None:
            return
        self.metrics.drift_child[drift.kind].inc()
        self.log.error(
            "cache_key_drift",
            kind=drift.kind,
            content_digest=content_digest(media.original_bytes),
            previous_key_source=drift.previous_source,
            key_source=drift.key_source,
            previous_item_key=drift.previous_key[:_DIGEST_HEX_CHARS],
            item_key=drift.key[:_DIGEST_HEX_CHARS],
            pillow=self._pillow,
        )

    def hashed(self, event: Hashed) -> None:
        self.metrics.observe_duration[event.algorithm](event.seconds)
        self.metrics.count_bytes[event.algorithm](event.nbytes)
        if self._hasher_info_pending:
            self._hasher_info_pending = False
            set_hasher_info(self.metrics)

    def bad_image(self, error: BadImageError) -> None:
        self.metrics.bad_image_child[error.reason].inc()
        stats = current_request.get()
        if stats is not None:
            stats.bad_images += 1
            stats.bad_image_reason = error.reason
        self.log.info("bad_image", reason=error.reason, error=safe_text(error.message))

    def exif_corrupt_warning(self, event: ExifCorruptWarning) -> None:
        # The warning itself is logged where it was captured; this only counts it.
        self.metrics.exif_corrupt_warnings.inc()

    def key_path(self, event: KeyPathChosen) -> None:
        self.metrics.key_path_child[event.key_path].inc()


_default: Instrumentation | None = None


def default_instrumentation() -> Instrumentation:
    """The instrumentation that importing ``mmobs`` installs (created once)."""
    global _default
    if _default is None:
        _default = Instrumentation()
    return _default


def install(
    registry: CollectorRegistry | None = None,
    *,
    logger: Any = None,
    drift: DriftTracker | None = _DEFAULT,
    log_interval_seconds: float | None = None,
    hasher_info: bool = True,
) -> Instrumentation:
    """Create an :class:`Instrumentation` (same options) and make it the process-wide observer."""
    instrumentation = Instrumentation(
        registry, logger=logger, drift=drift, log_interval_seconds=log_interval_seconds, hasher_info=hasher_info
    )
    set_observer(instrumentation)
    return instrumentation
