"""The ``mmobs_vllm_mm_uuid_*`` series: client media uuids checked against their content.

Declared apart from :mod:`mmobs.observability.metrics` for the reason
:mod:`mmobs.vllm.cache_drift.cache_metrics` is: they exist only where the plugin runs. The Python
API server checks uuids (its series on vLLM's ``/metrics``); under the Rust front end the engine core
does (:mod:`mmobs.vllm.engine_items.uuid_rekey`, its series on ``MMOBS_METRICS_PORT``): one server
has one of the two, so no series is scraped twice. Labels from closed sets (:data:`UUID_ITEM_KINDS`,
:data:`CONFLICT_ACTIONS`). The index gauges are per process and summed over the
live API servers under ``--api-server-count`` above 1 (each has its own index).
"""

from __future__ import annotations

from typing import Literal, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from mmobs.observability.metrics import MetricSpec, made_once

#: ``checked``: a uuid sent with its data, keyed by content too; ``uuid_only``: the data left out (nothing to check).
UuidItemKind = Literal["checked", "uuid_only"]
#: What became of a conflict: ``refused`` (the API server's 400, the default), ``rekeyed`` (the engine core's
#: default, under the Rust front end: the item keyed by its content) or ``counted`` (answered as vLLM answers it).
ConflictAction = Literal["refused", "rekeyed", "counted"]
UUID_ITEM_KINDS: tuple[str, ...] = get_args(UuidItemKind)
CONFLICT_ACTIONS: tuple[str, ...] = get_args(ConflictAction)

UUID_CHECK_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "items", Counter, "mmobs_vllm_mm_uuid_items_total",
        "Multimodal items that arrived with a client uuid, by kind: checked (with their data, keyed by content "
        "too) or uuid_only (the data left out: nothing to check).", ("kind",),
    ),
    MetricSpec(
        "conflicts", Counter, "mmobs_vllm_mm_uuid_conflicts_total",
        "Items whose uuid (as vLLM keys it: with the model and the request's hash factors) was seen before with "
        "other content, by action: refused (a 400), rekeyed (the engine core keyed the item by its content: the Rust "
        "front end) or counted (MMOBS_VLLM_UUID_CONFLICTS=count).", ("action",),
    ),
    MetricSpec(
        "index_entries", Gauge, "mmobs_vllm_mm_uuid_index_entries",
        "Uuids the API server (or, under the Rust front end, the engine core) remembers with the content key they "
        "were first sent with.", (),
        {"multiprocess_mode": "livesum"},
    ),
    MetricSpec(
        "index_bytes", Gauge, "mmobs_vllm_mm_uuid_index_bytes",
        "Approximate memory of the remembered uuids (bounded by MMOBS_VLLM_UUID_INDEX_BYTES).", (),
        {"multiprocess_mode": "livesum"},
    ),
)  # fmt: skip

#: Every family name above (counters with their ``_total``), for the dashboards' and rules' checks.
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in UUID_CHECK_METRICS)


class UuidCheckMetrics:
    """The series of :data:`UUID_CHECK_METRICS` in one registry (default: the global one), every child at zero."""

    items: Counter
    conflicts: Counter
    index_entries: Gauge
    index_bytes: Gauge

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in UUID_CHECK_METRICS:
            setattr(self, spec.attribute, spec.build(registry))
        self.item = {kind: self.items.labels(kind) for kind in UUID_ITEM_KINDS}
        self.conflict = {action: self.conflicts.labels(action) for action in CONFLICT_ACTIONS}

    def index_size(self, entries: int, nbytes: int) -> None:
        self.index_entries.set(entries)
        self.index_bytes.set(nbytes)


@made_once
def uuid_check_metrics() -> UuidCheckMetrics:
    """The process's series in prometheus_client's default registry (vLLM's ``/metrics``), made once."""
    return UuidCheckMetrics()
