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


def per_model(query: QueryStyle, metric: str, *matchers: str, by: tuple[str, ...] = ()) -> str:
    """Per-model rate of an mmobs counter of the API server: its instance's model from vLLM's own series.

    mmobs's drift counters carry no model label (one vLLM server serves one model); joining on the
    scrape target with vLLM's ``model_name`` puts them beside vLLM's panels, filtered alike.
    """
    keep = ", ".join(("job", "instance", *by))
    models = f"group by (job, instance, model_name) ({query.rate(metrics.VLLM_MM_CACHE_QUERIES, MODEL_NAME)})"
    inner = f"sum by ({keep}) ({query.rate(metric, *matchers)})"
    return query.aggregate(
        "sum", f"\n  {inner}\n  * on (job, instance) group_left (model_name)\n  {models}\n", ["model_name", *by]
    )


def per_instance(
    query: QueryStyle, title: str, description: str, unit: str, gauge: str, by: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A gauge of each API server (an index's size), summed per scrape target (and ``by``)."""
    legend = " ".join(f"{{{{{label}}}}}" for label in (*by, "instance"))
    return timeseries(
        title,
        description,
        unit,
        [target(query.aggregate("sum", query.select(gauge), ["instance", *by]), "A", legend)],
    )


def decode_panels(query: QueryStyle) -> list[dict[str, Any]]:
    """What the decode-free hits saved the API server, beside the lookups (docs/vllm.md, "Decode-free cache hits")."""
    by = ("modality",)
    saved = (
        f"{per_model(query, metrics.VLLM_SKIPPED_DECODE_CPU, by=by)}\n-\n"
        f"{per_model(query, metrics.VLLM_LATE_DECODE_CPU, by=by)}"
    )
    return [
        timeseries(
            "API-server CPU saved by decode-free cache hits",
            "CPU cores' worth of image and video decoding the API server did not do, per model and modality: re-sent "
            "images and clips whose key vLLM's processor cache held were keyed from their bytes and not decoded again "
            "(the CPU their first decode took), less the late decodes (an item that left the cache between the "
            "lookup and the processor). "
            "Beside the lookups and hits: it follows the hits of re-sent images. Index size: "
            "mmobs_vllm_decoded_index_entries.",
            "short",
            [
                target(saved, "A", "cores saved {{modality}} {{model_name}}"),
                target(
                    per_model(query, metrics.VLLM_SKIPPED_DECODES, by=by), "B", "{{modality}} skipped/s {{model_name}}"
                ),
                target(per_model(query, metrics.VLLM_LATE_DECODES, by=by), "C", "{{modality}} late/s {{model_name}}"),
            ],
        ),
        per_instance(
            query,
            "Remembered decodes",
            "Decodes each API server remembers by the digest of their bytes, to skip them when the same bytes come "
            "again, by modality (bounded by MMOBS_VLLM_DECODED_INDEX_ENTRIES, 16384 images by default, and "
            "MMOBS_VLLM_DECODED_CLIPS, 4096 clips).",
            "short",
            metrics.VLLM_DECODED_INDEX_ENTRIES,
            by=("modality",),
        ),
        per_instance(
            query,
            "Remembered decodes' memory",
            "What the remembered decodes take in each API server, by modality (bounded by "
            "MMOBS_VLLM_DECODED_INDEX_BYTES and MMOBS_VLLM_DECODED_CLIPS_BYTES, 16 MiB each by default; an image's "
            "record is counted as 832 bytes and its error texts, a clip's as 1,088 and 32 a kept frame).",
            "bytes",
            metrics.VLLM_DECODED_INDEX_BYTES,
            by=("modality",),
        ),
    ]


def drift_panels(query: QueryStyle) -> list[dict[str, Any]]:
    """What drifted between vLLM's API-server (P0) and engine (P1) caches, per model (docs/vllm-cache-drift.md)."""
    return [
        timeseries(
            "vLLM multimodal cache drift by model",
            "Items per second, per model: sent by hash but missing from the engine's cache (engine), lost by the "
            "API server's own sender cache within a request (sender), the same hashes drifting again on either side "
            "(engine re-drift, sender re-drift), "
            "and items taken back out of the sender cache after a refused request (rolled back). Beside the hit "
            "rate: drift means the two caches disagree; runbooks MmobsVllmMmCacheDrift and "
            "MmobsVllmMmCachePoisonedEntry.",
            "ops",
            [
                target(per_model(query, metrics.VLLM_CACHE_DRIFT_ITEMS), "A", "engine {{model_name}}"),
                target(per_model(query, metrics.VLLM_CACHE_SENDER_MISSES), "B", "sender {{model_name}}"),
                target(per_model(query, metrics.VLLM_CACHE_REDRIFTS), "C", "engine re-drift {{model_name}}"),
                target(per_model(query, metrics.VLLM_CACHE_ROLLED_BACK), "D", "rolled back {{model_name}}"),
                target(per_model(query, metrics.VLLM_CACHE_SENDER_REDRIFTS), "E", "sender re-drift {{model_name}}"),
            ],
        ),
        timeseries(
            "Requests failed by cache drift, by outcome",
            "Requests per second that cache drift failed, per model: healed (resubmitted once inside the server "
            "with the items' data, answered 200) or failed (the client got a 503 with Retry-After, or vLLM's own "
            "500 with MMOBS_VLLM_MM_CACHE_HEAL=0).",
            "reqps",
            [
                target(
                    per_model(query, metrics.VLLM_CACHE_DRIFT_REQUESTS, by=("outcome",)),
                    legend="{{outcome}} {{model_name}}",
                )
            ],
            stack=True,
        ),
    ]


def uuid_panels(query: QueryStyle) -> list[dict[str, Any]]:
    """Client media uuids checked against their content (docs/vllm.md, "Client media uuids")."""
    return [
        timeseries(
            "Client media uuids, checked and conflicting",
            "Items per second that came with a client uuid, per model: checked (sent with their data, keyed by "
            "content too), uuid_only (the data left out: nothing to check), and conflicts: a uuid vLLM would key "
            "as an earlier item's, with other content, which vLLM would answer with the earlier item's features "
            "(refused with a 400 by default, or counted with MMOBS_VLLM_UUID_CONFLICTS=count). Any conflict is "
            "an alert (runbook MmobsVllmMmUuidConflict).",
            "ops",
            [
                target(per_model(query, metrics.VLLM_UUID_ITEMS, by=("kind",)), "A", "{{kind}} {{model_name}}"),
                target(
                    per_model(query, metrics.VLLM_UUID_CONFLICTS, by=("action",)),
                    "B",
                    "conflict {{action}} {{model_name}}",
                ),
            ],
        ),
        per_instance(
            query,
            "Remembered uuids",
            "Uuids each API server remembers with the content they first came with (bounded by "
            "MMOBS_VLLM_UUID_INDEX_ENTRIES, 65536 by default, least recently used first out).",
            "short",
            metrics.VLLM_UUID_INDEX_ENTRIES,
        ),
        per_instance(
            query,
            "Remembered uuids' memory",
            "What the remembered uuids take in each API server (bounded by MMOBS_VLLM_UUID_INDEX_BYTES, 32 MiB by "
            "default; an entry is counted as 328 bytes, however long the uuid).",
            "bytes",
            metrics.VLLM_UUID_INDEX_BYTES,
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
    """The row header, vLLM's hit rate beside the drift panels, vLLM's lookups beside the decodes saved, then mmobs's
    three and the client uuids."""
    hit, lookups = vllm_panels(query)
    saved, remembered, memory = decode_panels(query)
    drift, outcomes = drift_panels(query)
    uuids, uuid_entries, uuid_memory = uuid_panels(query)
    fallback, sources, latency = mmobs_panels(query)
    return [
        [(row(TITLE), 24, 1)],
        [(hit, 8, 8), (drift, 8, 8), (outcomes, 8, 8)],
        [(lookups, 8, 8), (saved, 8, 8), (remembered, 4, 8), (memory, 4, 8)],
        [(fallback, 8, 8), (sources, 8, 8), (latency, 8, 8)],
        [(uuids, 12, 8), (uuid_entries, 6, 8), (uuid_memory, 6, 8)],
    ]
