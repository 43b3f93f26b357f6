"""The "vLLM multimodal cache" row: vLLM's own cache hit rate beside what mmobs sees.

When mmobs keys the media inside vLLM (or in a router in front of it), a falling
multimodal cache hit rate has three usual mmobs-side causes: EXIF fallbacks
(keys from pixels instead of the ImageID), a shift in key sources, or slow
hashing. This row puts them on one screen, vLLM's panels filtered by the
``model_name`` variable.

vLLM (0.32 and 0.33) exports ``vllm:mm_cache_queries`` and ``vllm:mm_cache_hits``
(Counters, so ``_total`` on the wire) labelled ``model_name`` and ``engine``
(``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``), and a Prometheus
scraping the server stores them under those names, colon kept.
"""

from __future__ import annotations

from typing import Any

from . import metrics
from .config import MixinConfig
from .dashboard import label_values, query_variable
from .panels import GridLine, row, target, thresholds, timeseries
from .promql import QueryStyle

TITLE = "vLLM multimodal cache"
MODEL_NAME = 'model_name=~"$model_name"'


def model_name_variable(config: MixinConfig) -> dict[str, Any]:
    """The served models whose vLLM cache series the selected jobs and instances export."""
    query = QueryStyle.for_dashboards(config)
    return query_variable(
        "model_name", "Model", label_values(metrics.VLLM_MM_CACHE_QUERIES, query.matchers, "model_name")
    )


def per_model_rate(query: QueryStyle, name: str) -> str:
    """Per-model rate of a vLLM counter, summed over its engines."""
    return query.aggregate("sum", query.rate(name, MODEL_NAME), ["model_name"])


def hit_rate(query: QueryStyle) -> str:
    """Hits / queries per model; no data (not 0%) while a model has no multimodal queries."""
    hits = per_model_rate(query, metrics.VLLM_MM_CACHE_HITS)
    queries = per_model_rate(query, metrics.VLLM_MM_CACHE_QUERIES)
    return f"{hits}\n/\n({queries} > 0)"


def vllm_panels(query: QueryStyle) -> list[dict[str, Any]]:
    return [
        timeseries(
            "vLLM multimodal cache hit rate by model",
            "vLLM's multimodal processor cache: items found in the cache divided by items looked up, per served "
            "model (vllm:mm_cache_hits / vllm:mm_cache_queries). The cache is keyed by the media hash, so a drop "
            "with steady traffic and repeated inputs means keys changed: compare with the EXIF fallback share and "
            "key sources beside it, and with the drift panels above.",
            "percentunit",
            [target(hit_rate(query), legend="{{model_name}}")],
            max_value=1,
        ),
        timeseries(
            "vLLM multimodal items looked up and found",
            "Multimodal items per second that vLLM looked up in its cache and found there, per model. Low lookups "
            "make the hit rate noisy; a fall in both means less multimodal traffic, not worse keys.",
            "ops",
            [
                target(per_model_rate(query, metrics.VLLM_MM_CACHE_QUERIES), "A", "looked up {{model_name}}"),
                target(per_model_rate(query, metrics.VLLM_MM_CACHE_HITS), "B", "found {{model_name}}"),
            ],
        ),
    ]


def mmobs_panels(query: QueryStyle) -> list[dict[str, Any]]:
    fallback_share = query.ratio(
        query.sum_rate(metrics.EXIF_FALLBACKS), query.sum_rate(metrics.MEDIA_KEYS, metrics.IMAGE_KINDS)
    )
    return [
        timeseries(
            "EXIF fallback share of image keys",
            "Fraction of image keys that fell back from the EXIF ImageID to the pixels or original bytes. A "
            "fallback key differs from the ImageID key of the same image, so a rise here lowers vLLM's cache hit "
            "rate; the dashed line is the 5% alert threshold (runbook MmobsExifFallbackRatioHigh).",
            "percentunit",
            [target(fallback_share, legend="fallback share")],
            steps=thresholds((None, "green"), (0.05, "red")),
        ),
        timeseries(
            "Image key sources",
            "Images keyed per second by where the key came from. image_id keys are stable per image; pixels and "
            "original_bytes keys change when the image is re-encoded. A swap towards them explains a hit-rate "
            "drop without any change in vLLM.",
            "ops",
            [
                target(
                    query.sum_rate(metrics.MEDIA_KEYS, metrics.IMAGE_KINDS, by=["key_source"]),
                    legend="{{key_source}}",
                )
            ],
            stack=True,
        ),
        timeseries(
            "Hash latency p99 by algorithm",
            "99th percentile time to compute one cache key. vLLM hashes every item before the cache lookup, so "
            "this adds to time to first token on every multimodal request, hit or miss.",
            "s",
            [target(query.quantile("0.99", metrics.HASH_DURATION, by=["algorithm"]), legend="p99 {{algorithm}}")],
        ),
    ]


def lines(query: QueryStyle) -> list[GridLine]:
    """The row header, vLLM's two panels, then mmobs's three."""
    hit, lookups = vllm_panels(query)
    fallback, sources, latency = mmobs_panels(query)
    return [
        [(row(TITLE), 24, 1)],
        [(hit, 12, 8), (lookups, 12, 8)],
        [(fallback, 8, 8), (sources, 8, 8), (latency, 8, 8)],
    ]
