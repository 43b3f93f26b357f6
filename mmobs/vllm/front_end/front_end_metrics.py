"""The ``mmobs_vllm_mm_*_seconds`` histograms: what each stage of vLLM's multimodal front end costs.

Declared apart from :mod:`mmobs.observability.metrics` for the reason
:mod:`mmobs.vllm.cache_drift.cache_metrics` is: they exist only where the plugin runs, on
vLLM's ``/metrics``. The stage names follow vLLM's own proposals for the same
measurements (``mm_media_download``, ``mm_decode``, ``mm_preprocessing_total``;
vLLM issue #47860); the key stage is mmobs's ``mmobs_hash_duration_seconds``.
Every label value is from a closed set below but ``model_name``, which is
vLLM's served model name (one per server, as on vLLM's own series).

Children are made on first use and kept, each with its bucket lookup bound
(:func:`~mmobs.observability.metrics.fast_observe`): an observation is a dict
lookup, a bisection and two increments (0.7 us; ``benchmarks/run.py --sections
vllm-front-end``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from mmobs.observability.metrics import MetricSpec, fast_observe, made_once

#: The media kinds vLLM fetches and processes; ``mixed``: one processor call over several kinds.
Modality = Literal["image", "audio", "video", "mixed", "other"]
#: Where fetched media came from: an ``http(s)`` URL or a ``file`` URL (``--allowed-local-media-path``).
Scheme = Literal["http", "file"]
FetchOutcome = Literal["ok", "failed"]
Base64Outcome = Literal["ok", "refused"]
#: ``decoded`` by vLLM's loader; ``skipped``: a decode-free processor-cache hit; ``refused``: a 400.
DecodeOutcome = Literal["decoded", "skipped", "refused"]
#: The formats sniffed from the bytes (lower case); ``other`` for anything else, empty bytes included. A video's
#: container: ``mp4`` (ISO BMFF: MP4, MOV), ``webm`` (Matroska: WebM, MKV), ``avi``.
Format = Literal["jpeg", "png", "webp", "gif", "tiff", "bmp", "mp4", "webm", "avi", "other"]
#: A decoded clip's frames: ``read`` (those its decoder passed through, up to the last it kept) and ``kept``.
FrameCount = Literal["read", "kept"]
#: Multimodal items in a request, in ranges: the front end's cost grows with them.
ItemCount = Literal["0", "1", "2-3", "4-7", "8+"]

MODALITIES: tuple[str, ...] = get_args(Modality)
DECODE_OUTCOMES: tuple[str, ...] = get_args(DecodeOutcome)
FORMATS: tuple[str, ...] = get_args(Format)
ITEM_COUNTS: tuple[str, ...] = get_args(ItemCount)
FRAME_COUNTS: tuple[str, ...] = get_args(FrameCount)

#: A download: 1 ms (a loopback file) to 60 s (past vLLM's default fetch timeout, 5 s for images).
DOWNLOAD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Downloaded bytes: 1 KiB to 64 MiB by factors of 4.
DOWNLOAD_SIZE_BUCKETS = tuple(float(1024 * 4**i) for i in range(9))
#: A data URL's base64: 10 us (a thumbnail) to 1 s (tens of MB).
BASE64_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
#: A decode: 25 us (a skipped one: a lookup) to 10 s (a huge image on a busy core).
DECODE_BUCKETS = (2.5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: A clip's frames: 1 to 16,384 (9 minutes at 30 fps), by factors of 2.
FRAME_BUCKETS = tuple(float(2**i) for i in range(15))
#: The HF processor on a request's misses, and the whole front end: 1 ms to 60 s.
REQUEST_STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

FRONT_END_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "download", Histogram, "mmobs_vllm_mm_media_download_seconds",
        "Time the API server spent fetching one media item from an http(s) URL (the download, retries included) "
        "or reading it from a file URL, by modality, scheme and outcome (ok, failed).",
        ("modality", "scheme", "outcome"), {"buckets": DOWNLOAD_BUCKETS},
    ),
    MetricSpec(
        "download_size", Histogram, "mmobs_vllm_mm_media_download_bytes",
        "Bytes of each media item fetched from an http(s) or file URL, by modality and scheme.",
        ("modality", "scheme"), {"buckets": DOWNLOAD_SIZE_BUCKETS},
    ),
    MetricSpec(
        "base64", Histogram, "mmobs_vllm_mm_base64_decode_seconds",
        "Time the API server spent reading one image's data URL (parsing it, decoding its base64), by modality "
        "and outcome (ok, refused: not a base64 data URL).",
        ("modality", "outcome"), {"buckets": BASE64_BUCKETS},
    ),
    MetricSpec(
        "decode", Histogram, "mmobs_vllm_mm_decode_seconds",
        "Time vLLM's image or video loader spent on one item's bytes, by modality, format (sniffed from the "
        "bytes) and outcome: decoded, skipped (a decode-free processor-cache hit) or refused (a 400).",
        ("modality", "format", "outcome"), {"buckets": DECODE_BUCKETS},
    ),
    MetricSpec(
        "video_frames", Histogram, "mmobs_vllm_mm_video_frames",
        "Frames of one decoded video clip, by count: read (the frames its decoder passed through, up to the last "
        "one it kept: what the decode cost follows) and kept (what the model sees).",
        ("count",), {"buckets": FRAME_BUCKETS},
    ),
    MetricSpec(
        "processor", Histogram, "mmobs_vllm_mm_processor_seconds",
        "Time the HF processor took on a request's multimodal items that the processor cache did not hold (its "
        "misses), once per request with misses, by modality (mixed: several in one call).",
        ("modality",), {"buckets": REQUEST_STAGE_BUCKETS},
    ),
    MetricSpec(
        "processor_items", Histogram, "mmobs_vllm_mm_processor_items",
        "Multimodal items the HF processor processed in one call (a request's misses), by modality.",
        ("modality",), {"buckets": (1, 2, 4, 8, 16, 32)},
    ),
    MetricSpec(
        "front_end", Histogram, "mmobs_vllm_mm_preprocessing_total_seconds",
        "Time from a request's arrival at vLLM's renderer (the arrival time vLLM's time to first token counts "
        "from) to its hand-off to the engine core, by served model and multimodal items in the request.",
        ("model_name", "items"), {"buckets": REQUEST_STAGE_BUCKETS},
    ),
)  # fmt: skip

#: Every family name above, for the dashboards' and rules' checks.
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in FRONT_END_METRICS)

_MODEL_NAME_CHARS = 128
_Observers = dict[tuple[str, ...], Callable[[float], None]]


def item_count_label(items: int) -> str:
    """The :data:`ITEM_COUNTS` range ``items`` falls in."""
    if items < 2:
        return "0" if items <= 0 else "1"
    return "2-3" if items < 4 else ("4-7" if items < 8 else "8+")


class FrontEndMetrics:
    """The histograms of :data:`FRONT_END_METRICS` in one registry (default: the global one).

    Each ``observe_*`` method takes label values from the closed sets above;
    the children they need are made once and their observe functions kept.
    """

    download: Histogram
    download_size: Histogram
    base64: Histogram
    decode: Histogram
    video_frames: Histogram
    processor: Histogram
    processor_items: Histogram
    front_end: Histogram

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = REGISTRY if registry is None else registry
        for spec in FRONT_END_METRICS:
            setattr(self, spec.attribute, spec.build(registry))
        #: Per histogram, its children's observe functions by label values (made on first use).
        self._bound: dict[str, _Observers] = {spec.attribute: {} for spec in FRONT_END_METRICS}

    def _bind(self, attribute: str, labels: tuple[str, ...]) -> Callable[[float], None]:
        """The observe function of a child not seen before (a race makes it twice: ``labels()`` returns one child)."""
        observe = self._bound[attribute][labels] = fast_observe(getattr(self, attribute).labels(*labels))
        return observe

    def observe_download(self, modality: str, scheme: str, outcome: str, seconds: float, nbytes: int | None) -> None:
        labels = (modality, scheme, outcome)
        (self._bound["download"].get(labels) or self._bind("download", labels))(seconds)
        if nbytes is not None:
            size_labels = (modality, scheme)
            (self._bound["download_size"].get(size_labels) or self._bind("download_size", size_labels))(nbytes)

    def observe_base64(self, modality: str, outcome: str, seconds: float) -> None:
        labels = (modality, outcome)
        (self._bound["base64"].get(labels) or self._bind("base64", labels))(seconds)

    def observe_decode(self, modality: str, format: str, outcome: str, seconds: float) -> None:
        labels = (modality, format, outcome)
        (self._bound["decode"].get(labels) or self._bind("decode", labels))(seconds)

    def observe_video_frames(self, read: int, kept: int) -> None:
        for count, frames in (("read", read), ("kept", kept)):
            labels = (count,)
            (self._bound["video_frames"].get(labels) or self._bind("video_frames", labels))(frames)

    def observe_processor(self, modality: str, items: int, seconds: float) -> None:
        labels = (modality,)
        (self._bound["processor"].get(labels) or self._bind("processor", labels))(seconds)
        (self._bound["processor_items"].get(labels) or self._bind("processor_items", labels))(items)

    def declare_model(self, model_name: str) -> None:
        """Make a served model's front-end series, at zero: they exist (for ``rate()``) before its first request."""
        for items in ITEM_COUNTS:
            labels = (model_name[:_MODEL_NAME_CHARS], items)
            if labels not in self._bound["front_end"]:
                self._bind("front_end", labels)

    def observe_front_end(self, model_name: str, items: int, seconds: float) -> None:
        labels = (model_name[:_MODEL_NAME_CHARS], item_count_label(items))
        (self._bound["front_end"].get(labels) or self._bind("front_end", labels))(seconds)


@made_once
def front_end_metrics() -> FrontEndMetrics:
    """The process's histograms in prometheus_client's default registry (vLLM's ``/metrics``), made once."""
    return FrontEndMetrics()
