"""The vLLM plugin's alerts: its caches drifting, client uuids reused, the front end's share, refused clips.

Built with :mod:`.alerts`'s parts and listed among its alerts (:func:`.alerts.build`), apart so that each
page has one reader: the plugin's operator here, every mmobs deployment's there.
"""

from __future__ import annotations

from . import metrics
from .alerts import SYMPTOM_STATES, Alert, GrafanaChoices, above, gated
from .config import MixinConfig
from .promql import QueryStyle
from .vllm_front_end import front_end_share


def vllm_alerts(config: MixinConfig, query: QueryStyle) -> list[Alert]:
    """The plugin's alerts, in the order the rule files list them."""
    on = f"on ({', '.join(query.keep)})"
    drift_requests = query.sum_rate(metrics.VLLM_CACHE_DRIFT_REQUESTS)
    # Where either cache drifts: the engine's misses (by engine) and the API server's own sender-cache misses.
    redrifts = f"(\n  {query.sum_rate(metrics.VLLM_CACHE_REDRIFTS)}\n  +\n  {query.sum_rate(metrics.VLLM_CACHE_SENDER_REDRIFTS)}\n)"
    on_model = f"on ({', '.join(query.grouping(['model_name']))})"
    ttft_requests = query.sum_rate(f"{metrics.VLLM_TTFT}_count", by=["model_name"])
    drifted_items = f"(\n  {query.sum_rate(metrics.VLLM_CACHE_DRIFT_ITEMS)}\n  +\n  {query.sum_rate(metrics.VLLM_CACHE_SENDER_MISSES)}\n)"
    bounds = config.thresholds
    number, percent = bounds.number, bounds.percent
    redrift, front_end = bounds.vllm_poisoned_entry_share, bounds.vllm_front_end_ttft_share
    return [
        Alert(
            "MmobsVllmMmCacheDrift",
            above(drift_requests, "0"),
            "15m",
            "warning",
            "The API-server and engine multimodal caches of vLLM keep disagreeing.",
            "For 15 minutes requests to job {{ $labels.job }} have been failed by drift between vLLM's API-server "
            "(P0) and engine (P1) multimodal processor caches ({{ $value | humanize }} requests/s, healed ones "
            "included). Healed requests cost a second render; failed ones were answered 503 (or 500 with "
            "MMOBS_VLLM_MM_CACHE_HEAL=0). Usually the processor cache is small for the items of one request or "
            "of the requests in flight (--mm-processor-cache-gb).",
            "any drift-failed request in every 5m window for 15m. One drift is\n"
            "expected and self-healing (vLLM drops the hash, mmobs resubmits); drift that\n"
            "never stops means the two caches evict differently all the time, and every\n"
            "drift costs a render (healed) or a client retry (failed).",
            GrafanaChoices(
                "OK",
                "Error",
                SYMPTOM_STATES.format(what="vLLM's cache drift"),
                ("mmobs-cache-keys", "Requests failed by cache drift, by outcome"),
            ),
        ),
        Alert(
            "MmobsVllmMmCachePoisonedEntry",
            gated(above(query.ratio(redrifts, drifted_items), number(redrift)), on, redrifts, "0.01"),
            "10m",
            "warning",
            "The same vLLM multimodal cache entries drift again and again.",
            f"For 10 minutes more than {percent(redrift)} of the items that drifted in job "
            "{{ $labels.job }} had drifted before "
            "(now {{ $value | humanizePercentage }}; mmobs remembers the last 1024 drifted hashes). The same entries "
            "keep going missing, from the engine's cache or from the API server's own sender cache, while the API "
            "server believes them cached: a poisoned entry, or a working set the cache cannot hold. Find the hashes "
            "in the mm_cache_drift log events.",
            f"re-drifts > {percent(redrift)} of drifted items for 10m, above 0.01/s (3 per 5m),\n"
            "engine and sender side together (a small cache drifts on the sender side).\n"
            "Drift is spread over many hashes when caches merely evict differently; when\n"
            "most drifted hashes drifted before, the same few entries fail again and\n"
            "again. The floor keeps a single repeat on a quiet server from firing.",
            GrafanaChoices(
                "OK",
                "Error",
                SYMPTOM_STATES.format(what="re-drifts"),
                ("mmobs-cache-keys", "vLLM multimodal cache drift by model"),
            ),
        ),
        Alert(
            "MmobsVllmMmUuidConflict",
            above(query.sum_rate(metrics.VLLM_UUID_CONFLICTS), "0"),
            None,
            "warning",
            "A client media uuid was reused for other content in vLLM.",
            "In the last 5 minutes job {{ $labels.job }} received a multimodal item whose client uuid vLLM would "
            "key as an earlier item's, with other content: vLLM would answer it with the earlier item's "
            "features. mmobs refused it with a 400 (the Python front end), keyed it by its content (the Rust front "
            "end), or only counted it (MMOBS_VLLM_UUID_CONFLICTS=count). Find the clients by request_id in the "
            "mm_uuid_conflict log events.",
            "any conflict in the last 5m, at once (no hold). A uuid is the client's\n"
            "promise that it names one image; breaking it once is already one\n"
            "tenant's image answered for another's request, or a router deriving\n"
            "uuids from URLs whose content changed.",
            GrafanaChoices(
                "OK",
                "Error",
                SYMPTOM_STATES.format(what="uuid conflicts"),
                ("mmobs-cache-keys", "Client media uuids, checked and conflicting"),
            ),
        ),
        Alert(
            "MmobsVllmMmFrontEndDominatesTtft",
            gated(above(front_end_share(query), number(front_end)), on_model, ttft_requests, "0.05"),
            "15m",
            "warning",
            f"The multimodal front end is more than {percent(front_end)} of vLLM's time to first token.",
            "For 15 minutes the multimodal front end of model {{ $labels.model_name }} in job {{ $labels.job }} "
            "(fetching, decoding, keying and processing media before the engine sees a request) took "
            "{{ $value | humanizePercentage }} of vLLM's time to first token. The API server, not the GPU, is "
            "what clients wait for: the dashboard's Multimodal front end row names the stage.",
            f"front end > {percent(front_end)} of vLLM's time to first token for 15m, per model, only\n"
            "while > 0.05 requests/s got their first token. Both count from the\n"
            "arrival vLLM's renderer records, so the share is at most 1. Most of TTFT\n"
            "in the API server for a quarter of an hour is a host that is slow to\n"
            "fetch from, images that cost far more to decode than to infer, or a\n"
            "processor cache too small to hit; a short burst of cold images is not.",
            GrafanaChoices(
                "OK",
                "Error",
                SYMPTOM_STATES.format(what="the front end's share"),
                ("mmobs-cache-keys", "Front end's share of vLLM's time to first token"),
            ),
        ),
        Alert(
            "MmobsVllmMmVideoRefused",
            above(query.sum_rate(metrics.VLLM_VIDEO_REFUSALS), "0"),
            "15m",
            "warning",
            "Video clips keep being refused before their decode in vLLM.",
            "For 15 minutes job {{ $labels.job }} has refused video clips before decoding them "
            "({{ $value | humanize }} clips/s), each with a 400: clips over a decode budget "
            "(MMOBS_VLLM_VIDEO_MAX_FRAMES_READ, MMOBS_VLLM_VIDEO_MAX_DECODED_BYTES, VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES) "
            "or too long for the model's context. A client retrying a refused clip, or budgets below the clips clients "
            "send. Find the clients by request_id in the mm_video_refused log events.",
            "any refused clip in every 5m window for 15m. One refusal is a budget doing\n"
            "its job (a 400 in milliseconds where the decode would take seconds of CPU\n"
            "and gigabytes); refusals that never stop are a client retrying the same\n"
            "clip, or a budget set below the clips the clients mean to send.",
            GrafanaChoices(
                "OK",
                "Error",
                SYMPTOM_STATES.format(what="refused clips"),
                ("mmobs-cache-keys", "Video clips loaded per second, and their frames"),
            ),
        ),
    ]
