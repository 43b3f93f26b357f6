"""The ``mmobs_vllm_render_*`` series: each render request, by endpoint, the mode it was answered in, and why.

Declared apart from :mod:`mmobs.observability.metrics`, as the decode-free
hits' series are: they exist only where the plugin runs, on vLLM's
``/metrics``. Every label value comes from the closed sets of
:mod:`mmobs.vllm.render.render_mode`, and every child exists from the start,
so a rate over them is never missing a series.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from mmobs.observability.metrics import MetricSpec, made_once
from mmobs.vllm.render.render_mode import ENDPOINTS, Endpoint, Mode, Reason

#: The (mode, reason) pairs a request can be counted under.
ANSWERS: tuple[tuple[Mode, Reason], ...] = (
    ("keys", "keys_only"),
    ("keys", "text_only"),
    ("full", "switch_off"),
    ("full", "model"),
    ("full", "modality"),
    ("full", "embeddings"),
    ("full", "uuid_only"),
    ("full", "processor_kwargs"),
    ("full", "size_rule"),
    ("keys", "refused"),
    ("full", "refused"),
)

#: Where a keys-only render's image got its size, or its clip its frames' shape (``..._images_total{source}``,
#: ``..._videos_total{source}``).
IMAGE_SOURCES = ("index", "header", "decode")

RENDER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "requests", Counter, "mmobs_vllm_render_requests_total",
        "Render requests (vllm serve --enable-scale-out), by endpoint, the mode they were answered in (keys: "
        "keys, token ids and placeholders without the pixel work; full: vLLM's render) and why.",
        ("endpoint", "mode", "reason"),
    ),
    MetricSpec(
        "images", Counter, "mmobs_vllm_render_images_total",
        "Images of keys-only renders, by where their size came from: index (bytes rendered before), header (a "
        "first-seen JPEG read from its header) or decode (vLLM's loader decoded it).",
        ("source",),
    ),
    MetricSpec(
        "videos", Counter, "mmobs_vllm_render_videos_total",
        "Video clips of keys-only renders, by where their frame count and size came from: index (bytes rendered "
        "before), header (a first-seen MP4 read from its header) or decode (vLLM's loader decoded it).",
        ("source",),
    ),
    MetricSpec(
        "index_entries", Gauge, "mmobs_vllm_render_index_entries",
        "Items keys-only renders remember the size of, by key, to answer them when sent by uuid alone.", (),
        {"multiprocess_mode": "livesum"},
    ),
    MetricSpec(
        "index_bytes", Gauge, "mmobs_vllm_render_index_bytes",
        "Approximate memory of the remembered sizes (bounded by MMOBS_VLLM_RENDER_INDEX_ENTRIES).", (),
        {"multiprocess_mode": "livesum"},
    ),
)  # fmt: skip

#: Every family name above (counters with their ``_total``), for the dashboards' and rules' checks.
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in RENDER_METRICS)


class RenderMetrics:
    """The series of :data:`RENDER_METRICS` in one registry (default: the global one), at zero from the start."""

    requests: Counter
    images: Counter
    videos: Counter
    index_entries: Gauge
    index_bytes: Gauge

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in RENDER_METRICS:
            setattr(self, spec.attribute, spec.build(registry))
        for endpoint in ENDPOINTS:
            for mode, reason in ANSWERS:
                self.requests.labels(endpoint, mode, reason)
        for source in IMAGE_SOURCES:
            self.images.labels(source)
            self.videos.labels(source)

    def answered(self, endpoint: Endpoint, mode: Mode, reason: Reason) -> None:
        self.requests.labels(endpoint, mode, reason).inc()

    def image(self, source: str) -> None:
        self.images.labels(source).inc()

    def video(self, source: str) -> None:
        self.videos.labels(source).inc()

    def index_size(self, entries: int, nbytes: int) -> None:
        self.index_entries.set(entries)
        self.index_bytes.set(nbytes)


@made_once
def render_metrics() -> RenderMetrics:
    """The process's series in prometheus_client's default registry (vLLM's ``/metrics``), made once."""
    return RenderMetrics()
