"""The "Multimodal front end" row: where vLLM's API server spends a multimodal request's time before the engine.

One line per stage, in the order a request goes through them (docs/vllm.md,
"The multimodal front end"): downloads, data URLs' base64, image decodes, keys,
the HF processor on the cache's misses, and the whole front end, which is a
part of vLLM's own time to first token (both count from the arrival vLLM's
renderer records). The share panel divides the two per served model, as the
alert ``MmobsVllmMmFrontEndDominatesTtft`` does.
"""

from __future__ import annotations

from typing import Any

from . import metrics
from .config import AlertThresholds
from .panels import GridLine, row, target, thresholds, timeseries
from .promql import QueryStyle
from .vllm_cache import MODEL_NAME

TITLE = "Multimodal front end"
#: The share panel's red step: the alert's default bound (the steps do not follow a config's thresholds).
SHARE_STEP = AlertThresholds().vllm_front_end_ttft_share

#: Each stage's histogram and its legend, in a request's order.
STAGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (metrics.VLLM_MEDIA_DOWNLOAD, "download", ()),
    (metrics.VLLM_BASE64_DECODE, "base64", ()),
    (metrics.VLLM_DECODE, "image decode", ('modality="image"', 'outcome="decoded"')),
    (metrics.VLLM_DECODE, "video decode", ('modality="video"', 'outcome="decoded"')),
    (metrics.HASH_DURATION, "key", ()),
    (metrics.VLLM_PROCESSOR, "processor (misses, per request)", ()),
    (metrics.VLLM_FRONT_END, "front end (per request)", (MODEL_NAME,)),
)


def front_end_share(query: QueryStyle, *matchers: str) -> str:
    """The front end's seconds over vLLM's time-to-first-token seconds, per served model (and the kept labels).

    No data, not 0, while a model has no time to first token (no request got its first token).
    """
    front_end = query.aggregate("sum", query.rate(f"{metrics.VLLM_FRONT_END}_sum", *matchers), ["model_name"])
    ttft = query.aggregate("sum", query.rate(f"{metrics.VLLM_TTFT}_sum", *matchers), ["model_name"])
    return f"{front_end}\n/\n({ttft} > 0)"


def stage_quantile(query: QueryStyle, q: str, metric: str, matchers: tuple[str, ...]) -> str:
    bucket = query.aggregate("sum", query.rate(f"{metric}_bucket", *matchers), ["le"])
    return f"histogram_quantile({q}, {bucket})"


def stage_latency(query: QueryStyle, q: str, percentile: str) -> dict[str, Any]:
    return timeseries(
        f"Front-end stage latency {percentile}",
        f"The {percentile} of each stage of vLLM's multimodal front end, per item (download, base64, image or video "
        "decode, key) or per request (the HF processor on the items the processor cache did not hold; the whole front "
        "end, from vLLM's arrival time to the hand-off to the engine). Decodes are the ones vLLM's loader did "
        "(skipped decode-free hits are not). A stage that rises alone names the cause: slow media hosts "
        "(download), huge data URLs (base64), big or hostile images or long clips (decode), cache misses "
        "(processor).",
        "s",
        [
            target(stage_quantile(query, q, metric, matchers), chr(ord("A") + index), legend)
            for index, (metric, legend, matchers) in enumerate(STAGES)
        ],
    )


def panels(query: QueryStyle) -> list[dict[str, Any]]:
    return [
        stage_latency(query, "0.5", "p50"),
        stage_latency(query, "0.95", "p95"),
        timeseries(
            "Front end's share of vLLM's time to first token",
            "Seconds spent in the multimodal front end per second of vLLM's time to first token, per served model "
            "(mmobs_vllm_mm_preprocessing_total_seconds over vllm:time_to_first_token_seconds; both count from the "
            "arrival vLLM's renderer records). Above the dashed line the front end is most of TTFT: read the "
            "stage panels beside it (runbook MmobsVllmMmFrontEndDominatesTtft).",
            "percentunit",
            [target(front_end_share(query, MODEL_NAME), legend="{{model_name}}")],
            steps=thresholds((None, "green"), (SHARE_STEP, "red")),
        ),
        timeseries(
            "Media fetched per second",
            "Bytes per second the API server downloaded from http(s) URLs or read from file URLs, by scheme. Data "
            "URLs arrive inside the request body (mmobs_http_request_size_bytes).",
            "Bps",
            [target(query.sum_rate(f"{metrics.VLLM_MEDIA_DOWNLOAD_SIZE}_sum", by=["scheme"]), legend="{{scheme}}")],
            stack=True,
        ),
        timeseries(
            "Images loaded per second, by outcome",
            "Images per second through vLLM's loader: decoded, skipped (decode-free processor-cache hits: keyed "
            "from their bytes, never decoded again) and refused (a 400, reason in mmobs_bad_images_total).",
            "ops",
            [
                target(
                    query.sum_rate(f"{metrics.VLLM_DECODE}_count", 'modality="image"', by=["outcome"]),
                    legend="{{outcome}}",
                )
            ],
            stack=True,
        ),
        timeseries(
            "Video clips loaded per second, and their frames",
            "Video clips per second through vLLM's loader, by outcome: decoded, skipped (decode-free hits: re-sent "
            "clips keyed from their bytes) and refused (a 400; refused before the decode for a budget: by budget, "
            "mmobs_vllm_video_refusals_total). Beside them, the frames decoded clips read and kept per second: "
            "OpenCV reads every frame up to the last one kept, so read far above kept is a long clip sampled "
            "sparsely (its cost follows read).",
            "ops",
            [
                target(
                    query.sum_rate(f"{metrics.VLLM_DECODE}_count", 'modality="video"', by=["outcome"]),
                    "A",
                    "clips {{outcome}}",
                ),
                target(query.sum_rate(metrics.VLLM_VIDEO_REFUSALS, by=["budget"]), "B", "refused over {{budget}}"),
                target(query.sum_rate(f"{metrics.VLLM_VIDEO_FRAMES}_sum", by=["count"]), "C", "frames {{count}}"),
            ],
        ),
        timeseries(
            "HF processor time per processed item",
            "Seconds of the HF processor per multimodal item it processed (the processor cache's misses): its cost "
            "per image, which a larger processor cache saves on every re-sent image "
            "(mmobs_vllm_mm_processor_seconds over mmobs_vllm_mm_processor_items).",
            "s",
            [
                target(
                    f"{query.sum_rate(f'{metrics.VLLM_PROCESSOR}_sum', by=['modality'])}\n/\n"
                    f"({query.sum_rate(f'{metrics.VLLM_PROCESSOR_ITEMS}_sum', by=['modality'])} > 0)",
                    legend="{{modality}}",
                )
            ],
        ),
        timeseries(
            "Multimodal requests handed to the engine, by items",
            "Requests per second whose front end ended at the engine, by the multimodal items they carried (0: text "
            "only). The front end's cost grows with the items; compare with the share panel.",
            "reqps",
            [
                target(
                    query.sum_rate(f"{metrics.VLLM_FRONT_END}_count", MODEL_NAME, by=["items"]),
                    legend="{{items}} items",
                )
            ],
            stack=True,
        ),
    ]


def lines(query: QueryStyle) -> list[GridLine]:
    """The row header, the two latency panels beside the share, then throughput."""
    p50, p95, share, fetched, loaded, videos, per_item, requests = panels(query)
    return [
        [(row(TITLE), 24, 1)],
        [(p50, 8, 8), (p95, 8, 8), (share, 8, 8)],
        [(fetched, 8, 8), (loaded, 8, 8), (videos, 8, 8)],
        [(per_item, 12, 8), (requests, 12, 8)],
    ]
