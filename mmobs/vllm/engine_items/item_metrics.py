"""The ``mmobs_vllm_engine_*`` and ``mmobs_vllm_front_end_info`` series, counted in vLLM's engine core.

Declared apart from :mod:`mmobs.observability.metrics` for the reason
:mod:`mmobs.vllm.cache_drift.cache_metrics` is: they exist only where the plugin runs. They live in
the engine core, a process whose registry vLLM's ``/metrics`` does not read: ``MMOBS_METRICS_PORT``
serves them (:mod:`mmobs.vllm.metrics_port`). Labels from closed sets (:data:`MODALITIES`,
:data:`KEY_FORMATS`, :data:`~mmobs.vllm.front_ends.FRONT_ENDS`), every child made up front.
"""

from __future__ import annotations

from typing import Literal, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from mmobs.observability.metrics import MetricSpec, made_once
from mmobs.vllm.front_ends import FRONT_ENDS

#: vLLM's modalities; any other (a plugin model's own) is counted as ``other``.
MODALITIES: tuple[str, ...] = ("image", "video", "audio", "other")
#: How an item's identifier was made: ``content`` (vLLM's Python keys: the content, the model and the
#: request's hash factors), ``raw_bytes`` (the Rust front end's: blake3 of the file's bytes) or
#: ``client_uuid`` (the client's own uuid, taken as it came).
KeyFormatLabel = Literal["content", "raw_bytes", "client_uuid"]
KEY_FORMATS: tuple[str, ...] = get_args(KeyFormatLabel)

ENGINE_ITEM_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "front_end_info", Gauge, "mmobs_vllm_front_end_info",
        "Always 1, for the front end that serves this vLLM: python (the API server) or rust (vllm-rs, "
        "VLLM_USE_RUST_FRONTEND=1).", ("front_end",), {"multiprocess_mode": "max"},
    ),
    MetricSpec(
        "items", Counter, "mmobs_vllm_engine_mm_items_total",
        "Multimodal items the engine core received, by modality and by how their identifier was made: content "
        "(vLLM's Python keys), raw_bytes (the Rust front end's) or client_uuid.", ("modality", "key_format"),
    ),
    MetricSpec(
        "resent_items", Counter, "mmobs_vllm_engine_mm_resent_items_total",
        "Items that arrived with their processed data although the engine core had seen their identifier "
        "before (the front end sent the tensors again).", ("modality",),
    ),
    MetricSpec(
        "resent_bytes", Counter, "mmobs_vllm_engine_mm_resent_bytes_total",
        "Tensor bytes the re-sent items carried.", ("modality",),
    ),
    MetricSpec(
        "index_entries", Gauge, "mmobs_vllm_engine_mm_index_entries",
        "Identifiers the engine core remembers to tell a re-sent item (bounded by "
        "MMOBS_VLLM_ENGINE_INDEX_ENTRIES).", (), {"multiprocess_mode": "livesum"},
    ),
)  # fmt: skip

#: Every family name above (counters with their ``_total``), for the dashboards' and rules' checks.
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in ENGINE_ITEM_METRICS)


class EngineItemMetrics:
    """The series of :data:`ENGINE_ITEM_METRICS` in one registry (default: the global one), every child at zero."""

    front_end_info: Gauge
    items: Counter
    resent_items: Counter
    resent_bytes: Counter
    index_entries: Gauge

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in ENGINE_ITEM_METRICS:
            setattr(self, spec.attribute, spec.build(registry))
        for front_end in FRONT_ENDS:
            self.front_end_info.labels(front_end)
        self.item = {
            (modality, key_format): self.items.labels(modality, key_format)
            for modality in MODALITIES
            for key_format in KEY_FORMATS
        }
        self.resent = {modality: self.resent_items.labels(modality) for modality in MODALITIES}
        self.resent_size = {modality: self.resent_bytes.labels(modality) for modality in MODALITIES}

    def serving(self, front_end: str) -> None:
        """Say which front end serves: its info series 1, the other's 0."""
        for name in FRONT_ENDS:
            self.front_end_info.labels(name).set(1 if name == front_end else 0)


@made_once
def engine_item_metrics() -> EngineItemMetrics:
    """The engine core's series in prometheus_client's default registry, made once."""
    return EngineItemMetrics()
