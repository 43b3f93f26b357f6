"""The ``mmobs_vllm_*decode*`` series: the decodes the API server skipped on processor-cache hits, and their cost.

Declared apart from :mod:`mmobs.observability.metrics` for the reason
:mod:`mmobs.vllm.cache_drift.cache_metrics` is: they exist only where the plugin runs, on
vLLM's ``/metrics``. One label, ``modality`` (``image`` or ``video``: each has
its own index). The index gauges are per process and summed over the live
API servers when ``--api-server-count`` above 1 shares a
``PROMETHEUS_MULTIPROC_DIR`` (each server has its own index and cache).
"""

from __future__ import annotations

from typing import Literal, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from mmobs.observability.metrics import MetricSpec, made_once

#: What was not decoded: an image, or a video clip (its frames).
SkipModality = Literal["image", "video"]
SKIP_MODALITIES: tuple[str, ...] = get_args(SkipModality)

DECODE_SKIP_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "skipped_decodes", Counter, "mmobs_vllm_skipped_decodes_total",
        "Images and video clips the API server did not decode again, by modality: bytes it had decoded before, "
        "whose key its multimodal processor cache held (a decode-free cache hit).", ("modality",),
    ),
    MetricSpec(
        "skipped_decode_cpu", Counter, "mmobs_vllm_skipped_decode_cpu_seconds_total",
        "CPU seconds the skipped decodes took when the same bytes were decoded before: the API server CPU "
        "not spent again (less mmobs_vllm_late_decode_cpu_seconds_total), by modality.", ("modality",),
    ),
    MetricSpec(
        "late_decodes", Counter, "mmobs_vllm_late_decodes_total",
        "Skipped decodes done after all, by modality, because something read the pixels: the item left the "
        "processor cache between the loader's lookup and the processor's.", ("modality",),
    ),
    MetricSpec(
        "late_decode_cpu", Counter, "mmobs_vllm_late_decode_cpu_seconds_total",
        "CPU seconds the late decodes took, by modality.", ("modality",),
    ),
    MetricSpec(
        "index_entries", Gauge, "mmobs_vllm_decoded_index_entries",
        "Decodes the API server remembers (by the digest of their bytes) to skip them next time, by modality.",
        ("modality",),
        {"multiprocess_mode": "livesum"},
    ),
    MetricSpec(
        "index_bytes", Gauge, "mmobs_vllm_decoded_index_bytes",
        "Approximate memory of the remembered decodes, by modality (bounded by MMOBS_VLLM_DECODED_INDEX_BYTES and "
        "MMOBS_VLLM_DECODED_CLIPS_BYTES).", ("modality",),
        {"multiprocess_mode": "livesum"},
    ),
)  # fmt: skip

#: Every family name above (counters with their ``_total``), for the dashboards' and rules' checks.
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in DECODE_SKIP_METRICS)


class DecodeSkipMetrics:
    """The series of :data:`DECODE_SKIP_METRICS` in one registry (default: the global one), at zero from the start."""

    skipped_decodes: Counter
    skipped_decode_cpu: Counter
    late_decodes: Counter
    late_decode_cpu: Counter
    index_entries: Gauge
    index_bytes: Gauge

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in DECODE_SKIP_METRICS:
            family = spec.build(registry)
            setattr(self, spec.attribute, family)
            if spec.type is Counter:
                for modality in SKIP_MODALITIES:
                    family.labels(modality)

    def skipped(self, cpu_seconds: float, modality: SkipModality = "image") -> None:
        self.skipped_decodes.labels(modality).inc()
        self.skipped_decode_cpu.labels(modality).inc(cpu_seconds)

    def late(self, cpu_seconds: float, modality: SkipModality = "image") -> None:
        self.late_decodes.labels(modality).inc()
        self.late_decode_cpu.labels(modality).inc(cpu_seconds)

    def index_size(self, entries: int, nbytes: int, modality: SkipModality = "image") -> None:
        self.index_entries.labels(modality).set(entries)
        self.index_bytes.labels(modality).set(nbytes)


@made_once
def decode_skip_metrics() -> DecodeSkipMetrics:
    """The process's series in prometheus_client's default registry (vLLM's ``/metrics``), made once."""
    return DecodeSkipMetrics()
