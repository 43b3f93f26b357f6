"""The middleware's request metrics, recorded at the price of one lock a request.

Each request updates eleven prometheus_client values (a counter, four
histograms of two values each, the in-progress gauge up and down); each value
takes its own lock, and through the public methods each update also re-checks
what was settled when the child was made. That was most of what the
middleware cost. So the request path writes plain numbers instead, and
prometheus_client gets them when it needs them:

* **One process** (no ``PROMETHEUS_MULTIPROC_DIR``): each (route, method)
  keeps its counts in a list under one lock. The metrics are registered
  through :class:`RequestRecorder`, a collector that hands the counts to the
  prometheus_client children first whenever the registry is collected (every
  scrape, ``get_sample_value``, a restricted scrape), so what is exposed is
  always exact.
* **Multiprocess**: the values live in files that another worker's scrape
  reads, so they are written at once, through the children's value objects
  (without the public methods' re-checks), exactly as before.

Bulk bucket updates use the histogram children's ``_sum`` and ``_buckets``
(stable in prometheus_client for years); a prometheus_client without them
gets the multiprocess-style writes, which need only the public methods.
"""

from __future__ import annotations

import itertools
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar

from mmobs.observability.metrics import (
    STATUS_CLASSES,
    HttpMetrics,
    bulk_capable,
    fast_inc,
    fast_observe,
    request_exemplar,
)

#: A request counter's exemplar is replaced at most this often per series: a scrape shows one
#: exemplar a series anyway, and replacing it on every request cost more than the counting.
EXEMPLAR_INTERVAL_SECONDS = 1.0
_HISTOGRAMS = ("duration", "time_to_first_byte", "request_size", "response_size")


def _set_exemplar(child: Any, request_id: str, trace_id: str | None, timestamp: float) -> None:
    """Attach ``request_id`` (and the request's trace id, if traced) to a counter child as the exemplar of one increment."""
    labels = request_exemplar(request_id, trace_id)
    value = getattr(child, "_value", None)
    if value is not None and callable(getattr(value, "set_exemplar", None)):
        value.set_exemplar(Exemplar(labels, 1.0, timestamp))
    else:
        child.inc(0, labels)


class RouteSeries:
    """What one (route template, method) records: the interface the middleware calls per request.

    ``finish`` takes the status class as 1..5; ``first_byte`` is ``None`` when
    no body byte was sent; ``request_id`` is ``None`` when no exemplar is wanted.
    """

    def __init__(self, metrics: HttpMetrics, route: str, method: str, exemplars: bool) -> None:
        self.metrics, self.route, self.method, self.exemplars = metrics, route, method, exemplars
        self._requests: dict[int, Any] = {}
        self._images: dict[int, Any] = {}
        self._fallbacks: Any = None
        #: When (``time.monotonic``) each status class's request-counter exemplar may be replaced next.
        self._exemplar_due = [0.0] * 6

    def start(self) -> None:
        raise NotImplementedError

    def finish(
        self,
        status_class: int,
        seconds: float,
        first_byte: float | None,
        request_bytes: int,
        response_bytes: int,
        images: bool,
        fallback: bool,
        request_id: str,
        trace_id: str | None = None,
    ) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Hand pending counts to prometheus_client (nothing to do when written at once)."""

    # -- children, made on first use so that no series appears before it counts -------------

    def _request_child(self, status_class: int) -> Any:
        child = self._requests.get(status_class)
        if child is None:
            label = STATUS_CLASSES[status_class - 1]
            child = self._requests[status_class] = self.metrics.requests.labels(self.route, self.method, label)
        return child

    def _image_child(self, status_class: int) -> Any:
        child = self._images.get(status_class)
        if child is None:
            child = self._images[status_class] = self.metrics.image_requests.labels(
                self.route, STATUS_CLASSES[status_class - 1]
            )
        return child

    def _fallback_child(self) -> Any:
        if self._fallbacks is None:
            self._fallbacks = self.metrics.fallback_requests.labels(self.route)
        return self._fallbacks

    def _exemplar_due_now(self, status_class: int, now: float) -> bool:
        if self.exemplars and now >= self._exemplar_due[status_class]:
            self._exemplar_due[status_class] = now + EXEMPLAR_INTERVAL_SECONDS
            return True
        return False


# Where each count sits in a _DeferredSeries' cells. Status classes run 1..5, so a class's request
# count is at ``_REQUESTS + status_class`` (cells 0..4) and its image-request count at
# ``_IMAGES + status_class`` (cells 5..9). The histograms' buckets and sums follow the last count.
_REQUESTS = -1
_IMAGES = _REQUESTS + len(STATUS_CLASSES)
_FALLBACKS = _IMAGES + len(STATUS_CLASSES) + 1  # the cell after the last image-request count
_STARTED = _FALLBACKS + 1
_FINISHED = _STARTED + 1
_FIRST_HISTOGRAM = _FINISHED + 1


class _DeferredSeries(RouteSeries):
    """Counts in one list under one lock; :meth:`flush` moves the new part into prometheus_client.

    ``cells`` holds the request counts by status class, the image-request counts
    by status class, the requests with a fallback, the requests started (filled
    in by :meth:`flush`) and finished, then for each histogram its bucket counts
    and its sum (at its offset in ``_offsets``); the names above say where.

    A start takes no lock: it advances an ``itertools.count`` (one C call,
    atomic), which :meth:`flush` reads by advancing it once more itself.
    """

    def __init__(self, metrics: HttpMetrics, route: str, method: str, exemplars: bool) -> None:
        super().__init__(metrics, route, method, exemplars)
        self._histograms = [getattr(metrics, name).labels(route, method) for name in _HISTOGRAMS]
        self._in_progress = metrics.in_progress.labels(route, method)
        self._bounds = [tuple(h._upper_bounds) for h in self._histograms]
        offsets, at = [], _FIRST_HISTOGRAM
        for bounds in self._bounds:
            offsets.append(at)
            at += len(bounds) + 1  # the buckets, then the sum
        self._offsets = offsets
        self._lock = threading.Lock()
        self._starts = itertools.count()
        self._flushes = 0  # the values :meth:`flush` took from ``_starts`` itself
        self._cells: list[float] = [0] * at
        self._flushed: list[float] = [0] * at
        #: Exemplars waiting for the flush: status class (0 for the fallback counter) -> (request id, trace id, time).
        self._exemplars: dict[int, tuple[str, str | None, float]] = {}

    def start(self) -> None:
        next(self._starts)

    def finish(
        self,
        status_class: int,
        seconds: float,
        first_byte: float | None,
        request_bytes: int,
        response_bytes: int,
        images: bool,
        fallback: bool,
        request_id: str,
        trace_id: str | None = None,
    ) -> None:
        (d_bounds, t_bounds, q_bounds, r_bounds), (d, t, q, r) = self._bounds, self._offsets
        now = time.monotonic() if self.exemplars else 0.0
        with self._lock:
            cells = self._cells
            cells[_REQUESTS + status_class] += 1
            cells[_FINISHED] += 1
            cells[d + bisect_left(d_bounds, seconds)] += 1
            cells[d + len(d_bounds)] += seconds
            if first_byte is not None:
                cells[t + bisect_left(t_bounds, first_byte)] += 1
                cells[t + len(t_bounds)] += first_byte
            cells[q + bisect_left(q_bounds, request_bytes)] += 1
            cells[q + len(q_bounds)] += request_bytes
            cells[r + bisect_left(r_bounds, response_bytes)] += 1
            cells[r + len(r_bounds)] += response_bytes
            if images:
                cells[_IMAGES + status_class] += 1
            if fallback:
                cells[_FALLBACKS] += 1
            if self._exemplar_due_now(status_class, now):
                self._exemplars[status_class] = (request_id, trace_id, time.time())
            if fallback and self.exemplars:
                self._exemplars[0] = (request_id, trace_id, time.time())

    def flush(self) -> None:
        """Apply what was counted since the last flush (the caller serialises flushes)."""
        with self._lock:
            cells = self._cells[:]
            exemplars, self._exemplars = self._exemplars, {}
        # Read after the finishes: every request counted finished has been counted started.
        self._flushes += 1
        cells[_STARTED] = next(self._starts) - (self._flushes - 1)
        flushed = self._flushed

        def new(cell: int) -> float:
            return cells[cell] - flushed[cell]

        for status_class in range(1, len(STATUS_CLASSES) + 1):
            if delta := new(_REQUESTS + status_class):
                self._request_child(status_class).inc(delta)
            if delta := new(_IMAGES + status_class):
                self._image_child(status_class).inc(delta)
        if delta := new(_FALLBACKS):
            self._fallback_child().inc(delta)
        self._in_progress.set(cells[_STARTED] - cells[_FINISHED])
        for histogram, bounds, at in zip(self._histograms, self._bounds, self._offsets, strict=True):
            for index, bucket in enumerate(histogram._buckets):
                if delta := new(at + index):
                    bucket.inc(delta)
            if delta := new(at + len(bounds)):
                histogram._sum.inc(delta)
        for status_class, (request_id, trace_id, timestamp) in exemplars.items():
            child = self._fallback_child() if status_class == 0 else self._request_child(status_class)
            _set_exemplar(child, request_id, trace_id, timestamp)
        self._flushed = cells


class _ImmediateSeries(RouteSeries):
    """Every update written at once (multiprocess mode: another worker's scrape reads the files)."""

    def __init__(self, metrics: HttpMetrics, route: str, method: str, exemplars: bool) -> None:
        super().__init__(metrics, route, method, exemplars)
        self._observe = [fast_observe(getattr(metrics, name).labels(route, method)) for name in _HISTOGRAMS]
        self._add_in_progress = fast_inc(metrics.in_progress.labels(route, method))
        self._request_adders: dict[int, Callable[[float], None]] = {}

    def start(self) -> None:
        self._add_in_progress(1)

    def finish(
        self,
        status_class: int,
        seconds: float,
        first_byte: float | None,
        request_bytes: int,
        response_bytes: int,
        images: bool,
        fallback: bool,
        request_id: str,
        trace_id: str | None = None,
    ) -> None:
        self._add_in_progress(-1)
        add = self._request_adders.get(status_class)
        if add is None:
            add = self._request_adders[status_class] = fast_inc(self._request_child(status_class))
        add(1)
        if self._exemplar_due_now(status_class, time.monotonic()):
            _set_exemplar(self._request_child(status_class), request_id, trace_id, time.time())
        observe_duration, observe_first_byte, observe_request, observe_response = self._observe
        observe_duration(seconds)
        if first_byte is not None:
            observe_first_byte(first_byte)
        observe_request(request_bytes)
        observe_response(response_bytes)
        if images:
            self._image_child(status_class).inc()
        if fallback:
            self._fallback_child().inc()
            if self.exemplars:
                _set_exemplar(self._fallback_child(), request_id, trace_id, time.time())


class RequestRecorder(Collector):
    """The request metrics of one registry, registered as one collector that flushes before it is read.

    :param immediate: write every update at once (multiprocess mode) instead of on collection.
    :param exemplars: keep the request id of a recent request as each counter's exemplar.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        buckets: Sequence[float] | None = None,
        *,
        immediate: bool = False,
        exemplars: bool = True,
    ) -> None:
        self.metrics = HttpMetrics(registry, buckets, register=False)
        # (A probe child would be a series at zero in multiprocess files: probe only in one process.)
        self.immediate = immediate or not bulk_capable(self._probe())
        self.exemplars = exemplars
        self._series: dict[tuple[str, str], RouteSeries] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def _probe(self) -> Any:
        probe = self.metrics.duration.labels("", "")
        self.metrics.duration.remove("", "")
        return probe

    def series(self, route: str, method: str) -> RouteSeries:
        """The series of one (route template, method); made once (routes and methods are closed sets)."""
        series = self._series.get((route, method))
        if series is None:
            with self._lock:
                series = self._series.get((route, method))
                if series is None:
                    kind = _ImmediateSeries if self.immediate else _DeferredSeries
                    series = self._series[(route, method)] = kind(self.metrics, route, method, self.exemplars)
        return series

    def flush(self) -> None:
        with self._lock:
            for series in self._series.values():
                series.flush()

    def describe(self) -> Iterator[Any]:
        for metric in self.metrics.all():
            yield from metric.describe()

    def collect(self) -> Iterator[Any]:
        self.flush()
        for metric in self.metrics.all():
            yield from metric.collect()
