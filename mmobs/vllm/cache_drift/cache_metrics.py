"""The ``mmobs_vllm_mm_cache_*`` series: vLLM's multimodal processor cache drift, counted in the API server.

Declared here, apart from :mod:`mmobs.observability.metrics`, because they exist
only where the vLLM plugin runs (the API server, whose ``/metrics`` vLLM
serves from prometheus_client's default registry, or from the shared
``PROMETHEUS_MULTIPROC_DIR`` with ``--api-server-count`` above 1).

Labels come from closed sets: ``engine`` is the engine index vLLM puts on its
outputs (bounded by the data-parallel size; anything past :data:`MAX_ENGINES`
is ``other``), ``outcome`` is one of :data:`OUTCOMES`. Every child that can
be known up front is created at start-up, so the series exist at zero.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from mmobs.observability.metrics import MetricSpec, made_once

#: What became of a request that drift failed: resubmitted and answered, or answered with an error.
OUTCOMES: tuple[str, ...] = ("healed", "failed")
#: Engine indexes get their own label value up to this many; more (a huge data-parallel deployment) share ``other``.
MAX_ENGINES = 64

CACHE_DRIFT_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "drift_items", Counter, "mmobs_vllm_mm_cache_drift_items_total",
        "Multimodal items the engine (P1) did not hold although the API server (P0) sent them by hash "
        "(vLLM's mm_cache_miss_hashes, which P0 then invalidates), by engine index.", ("engine",),
    ),
    MetricSpec(
        "sender_misses", Counter, "mmobs_vllm_mm_cache_sender_misses_total",
        "Multimodal items the API server's own sender cache lost between its lookup and its update within one "
        "request (where vLLM asserts 'Expected a cached item').", (),
    ),
    MetricSpec(
        "redrifts", Counter, "mmobs_vllm_mm_cache_redrifts_total",
        "Drifted items whose hash had drifted before, among the recently drifted hashes mmobs remembers: "
        "the same entry drifting again and again (a poisoned entry).", ("engine",),
    ),
    MetricSpec(
        "sender_redrifts", Counter, "mmobs_vllm_mm_cache_sender_redrifts_total",
        "Sender-cache misses (mmobs_vllm_mm_cache_sender_misses_total) whose hash had drifted before, on either "
        "side, among the recently drifted hashes mmobs remembers: the API server's side of a poisoned entry.", (),
    ),
    MetricSpec(
        "drift_requests", Counter, "mmobs_vllm_mm_cache_drift_requests_total",
        "Requests failed by cache drift, by outcome: healed (resubmitted once with the items' data, answered) "
        "or failed (the client got an error: a 503 with Retry-After, or vLLM's own error with healing off).",
        ("outcome",),
    ),
    MetricSpec(
        "rolled_back_items", Counter, "mmobs_vllm_mm_cache_rolled_back_items_total",
        "Items a request put into the API server's sender cache and that were taken out again because the "
        "request was refused before the engine took them (else the next request would send them by hash "
        "to an engine that never got them).", (),
    ),
)  # fmt: skip

#: Every family name above (counters with their ``_total``), for the dashboards' and rules' checks.
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in CACHE_DRIFT_METRICS)


def engine_label(index: object) -> str:
    """The closed-set label of an engine index (``0``..``63``, else ``other``)."""
    return str(index) if isinstance(index, int) and 0 <= index < MAX_ENGINES else "other"


class CacheDriftMetrics:
    """The cache drift counters (:data:`CACHE_DRIFT_METRICS`), in one registry (default: the global one)."""

    drift_items: Counter
    sender_misses: Counter
    redrifts: Counter
    sender_redrifts: Counter
    drift_requests: Counter
    rolled_back_items: Counter

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in CACHE_DRIFT_METRICS:
            setattr(self, spec.attribute, spec.build(registry))
        self._engine_children: dict[str, tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        self.engine("0")  # the one engine every deployment has: its series exist at zero
        self.outcome = {outcome: self.drift_requests.labels(outcome) for outcome in OUTCOMES}
        self.sender_misses.inc(0)
        self.sender_redrifts.inc(0)
        self.rolled_back_items.inc(0)

    def engine(self, label: str) -> tuple[Any, Any]:
        """(drift_items, redrifts) children of one engine label, made on first use (at most 65 labels)."""
        children = self._engine_children.get(label)
        if children is None:
            with self._lock:
                children = self._engine_children.setdefault(
                    label, (self.drift_items.labels(label), self.redrifts.labels(label))
                )
        return children


@made_once
def cache_drift_metrics() -> CacheDriftMetrics:
    """The process's counters in prometheus_client's default registry (vLLM's ``/metrics``), made once."""
    return CacheDriftMetrics()
