"""Dashboard "mmobs / Cache keys": where keys come from, whether they stay stable, what hashing costs.

Sections, top to bottom, one function each: the overview stats, key sources,
drift, the fleet's hasher fingerprints, hashing cost, HTTP, the vLLM
multimodal cache row (:mod:`.vllm_cache`) and the multimodal front end row
(:mod:`.vllm_front_end`).

To add a panel to a section, append it to the list that section's function
returns; :func:`two_per_line` lays any number out. New HTTP metrics (requests
in progress, time to first byte) go in :func:`http_panels`.
"""

from __future__ import annotations

from typing import Any

from . import metrics, vllm_cache, vllm_engine, vllm_front_end, vllm_render
from .config import MixinConfig
from .dashboard import dashboard, standard_variables
from .panels import GridLine, layout, quantile_targets, stat, table, target, thresholds, timeseries
from .promql import QueryStyle, clamp

UID = "mmobs-cache-keys"
FINGERPRINT_STEPS = thresholds((None, "green"), (2, "red"))


def distinct_fingerprints(query: QueryStyle) -> str:
    return f"count(count by (fingerprint) ({query.select(metrics.HASHER_INFO)}))"


def overview(query: QueryStyle) -> list[dict[str, Any]]:
    """Four stats: fleet agreement, drift, key rate, hash latency."""
    return [
        stat(
            "Distinct hasher fingerprints",
            "Number of different hasher fingerprints among the selected replicas. Must be 1: two fingerprints "
            "mean some replicas key the same image differently (different Pillow, numpy or mmobs), so the shared "
            "cache splits. Briefly 2 during a rolling upgrade is fine; otherwise use the table below to find the "
            "odd replicas and redeploy them.",
            "short",
            distinct_fingerprints(query),
            FINGERPRINT_STEPS,
            decimals=0,
        ),
        stat(
            "Cache-key drift ratio",
            "Sampled media items seen again with a different key, as a fraction of the items the drift tracker "
            "sampled. Orange above 0.1%, red above 1% (the MmobsCacheKeyDrift threshold). Above that, find "
            "cache_key_drift log events and compare the inputs with `mmobs inspect`.",
            "percentunit",
            query.ratio(query.sum_rate(metrics.DRIFT), query.sum_rate(metrics.DRIFT_SAMPLES)),
            thresholds((None, "green"), (0.001, "orange"), (0.01, "red")),
        ),
        stat(
            "Media keys",
            "Media items keyed per second, all kinds. A drop to zero while requests still arrive means the hasher "
            "is not being called (or its observer is not installed).",
            "ops",
            query.sum_rate(metrics.MEDIA_KEYS),
            thresholds((None, "green")),
        ),
        stat(
            "Hash latency p99",
            "99th percentile wall time of one hash_kwargs call across algorithms. If it grows, check 'Bytes hashed "
            "per second': bigger inputs explain it; otherwise the hasher slowed down (CPU contention, a slower "
            "digest) and request latency will follow.",
            "s",
            query.quantile("0.99", metrics.HASH_DURATION),
            thresholds((None, "green"), (0.25, "orange"), (1, "red")),
        ),
    ]


def key_source_mix(query: QueryStyle) -> dict[str, Any]:
    return timeseries(
        "Key source mix",
        "Media items keyed per second by kind and key source. For images, image_id means the EXIF ImageID UUID "
        "was used and pixels means it was absent or unreadable. A sudden swap from image_id to pixels (or "
        "original_bytes) with no change in traffic means the ImageID read started failing: check the EXIF "
        "fallbacks dashboard.",
        "ops",
        [target(query.sum_rate(metrics.MEDIA_KEYS, by=["kind", "key_source"]), legend="{{kind}} / {{key_source}}")],
        stack=True,
    )


def key_sources(query: QueryStyle) -> list[dict[str, Any]]:
    share = (
        f"{query.sum_rate(metrics.MEDIA_KEYS, by=['kind', 'key_source'])}\n"
        f"/ ignoring (key_source) group_left\n"
        f"{clamp(query.sum_rate(metrics.MEDIA_KEYS, by=['kind']))}"
    )
    return [
        key_source_mix(query),
        timeseries(
            "Key source share within each kind",
            "For each media kind, the fraction of items keyed from each source. Shares of one kind add up to 100%. "
            "Watch for a step change right after a deploy: keys from a different source are different keys, so "
            "the cache hit rate drops.",
            "percentunit",
            [target(share, legend="{{kind}} / {{key_source}}")],
            max_value=1,
        ),
        timeseries(
            "Images keyed by path",
            "Images keyed per second by how the key was computed: decode (the full loader), header (the no-decode "
            "path of /v1/keys and key_for_bytes) or header_decoded (the no-decode path had to decode, for a format "
            "or a PNG whose mode only decoding reveals). A growing header_decoded share means unusual inputs, for "
            "example crafted PNGs, and costs decode time on the key-only path.",
            "ops",
            [target(query.sum_rate(metrics.KEY_PATHS, by=["key_path"]), legend="{{key_path}}")],
            stack=True,
        ),
    ]


def drift(query: QueryStyle) -> list[dict[str, Any]]:
    by_kind = query.ratio(
        query.sum_rate(metrics.DRIFT, by=["kind"]), query.sum_rate(metrics.DRIFT_SAMPLES, by=["kind"])
    )
    return [
        timeseries(
            "Cache-key drift by kind",
            "Items per second the drift tracker saw again with a different key. Drift means the same content is "
            "cached twice and the cache stops hitting. If it is non-zero for more than a few minutes, follow "
            "runbook MmobsCacheKeyDrift.",
            "ops",
            [target(query.sum_rate(metrics.DRIFT, by=["kind"]), legend="{{kind}}")],
            stack=True,
        ),
        timeseries(
            "Cache-key drift ratio by kind",
            "Drifted items divided by sampled items, per kind. The dashed line is the 1% alert threshold. "
            "media_with_bytes drift usually follows EXIF fallbacks (UUID key in one code path, byte key in "
            "another); video drift points at frame decoding differences.",
            "percentunit",
            [target(by_kind, legend="{{kind}}")],
            steps=thresholds((None, "green"), (0.01, "red")),
        ),
    ]


def fleet(query: QueryStyle) -> list[dict[str, Any]]:
    """Do all replicas key alike? Fingerprints over time, per fingerprint, per instance."""
    info = query.select(metrics.HASHER_INFO)
    return [
        timeseries(
            "Distinct fingerprints over time",
            "Number of different hasher fingerprints over time. A step to 2 that lasts longer than a rollout "
            "means a mixed fleet; find the replicas in the tables and redeploy them with the same image (runbook "
            "MmobsHasherFingerprintMismatch).",
            "short",
            [target(distinct_fingerprints(query), legend="fingerprints")],
            steps=FINGERPRINT_STEPS,
        ),
        table(
            "Instances per fingerprint",
            "One row per fingerprint, key format and library versions, with the number of replicas reporting it. "
            "More than one row means the fleet disagrees on keys: the row with fewer instances is usually the odd "
            "one out (a stale image, an unpinned Pillow/numpy, or a vLLM release keying in another format: "
            "key_format names the first vLLM release of the format).",
            "short",
            f"count by (fingerprint, key_format, mmobs, pillow, numpy) ({info})",
            rename={"Value": "instances"},
            order=["fingerprint", "instances", "key_format", "mmobs", "pillow", "numpy"],
        ),
        table(
            "Fingerprint by instance",
            "Every replica with its hasher fingerprint and library versions. Run `mmobs fingerprint` on a replica "
            "to see the per-input reference keys behind its fingerprint and diff two replicas that disagree.",
            "short",
            f"max by (job, instance, fingerprint, key_format, mmobs, pillow, numpy) ({info})",
            rename={"Value": "info"},
            order=["job", "instance", "fingerprint", "key_format", "mmobs", "pillow", "numpy", "info"],
        ),
    ]


def hash_latency(query: QueryStyle) -> dict[str, Any]:
    return timeseries(
        "Hash latency p50 / p95 / p99",
        "Wall time of hash_kwargs by digest algorithm (histogram quantiles). Rising quantiles with flat bytes "
        "hashed per second mean the hasher got slower per byte: check CPU saturation and whether the algorithm "
        "changed (blake3 is the fast default).",
        "s",
        quantile_targets(lambda q: query.quantile(q, metrics.HASH_DURATION, by=["algorithm"]), "algorithm"),
    )


def hashing(query: QueryStyle) -> list[dict[str, Any]]:
    return [
        hash_latency(query),
        timeseries(
            "Bytes hashed per second",
            "Bytes fed to the digest per second by algorithm. It should follow the request rate; growth per "
            "request means larger inputs (or fallbacks hashing whole images instead of a 16-byte UUID), which "
            "shows up as hash latency.",
            "Bps",
            [target(query.sum_rate(metrics.HASHED_BYTES, by=["algorithm"]), legend="{{algorithm}}")],
            stack=True,
        ),
    ]


def http_panels(query: QueryStyle) -> list[dict[str, Any]]:
    """Request rate, concurrency, latency and sizes through MMObsMiddleware, by route.

    A panel for a new per-route metric is one more entry here.
    """
    return [
        timeseries(
            "HTTP requests by route and status class",
            "Requests per second through the mmobs middleware, by route template and status class. A rise in 5xx "
            "needs the 5xx panels on the EXIF fallbacks dashboard; a rise in 4xx usually matches 'Bad images by "
            "reason'.",
            "reqps",
            [
                target(
                    query.sum_rate(metrics.HTTP_REQUESTS, by=["route", "status_class"]),
                    legend="{{route}} {{status_class}}",
                )
            ],
            stack=True,
        ),
        timeseries(
            "HTTP request latency p50 / p95 / p99 by route",
            "Time to the last response byte per route template. If p99 rises together with hash latency, the "
            "hasher is the bottleneck; if alone, look at image fetching and decoding.",
            "s",
            quantile_targets(lambda q: query.quantile(q, metrics.HTTP_REQUEST_DURATION, by=["route"]), "route"),
        ),
        timeseries(
            "HTTP requests in progress by route",
            "Requests being served right now, per route template (summed over workers). A route whose count "
            "climbs while its request rate does not is stuck or queued: compare with time to first byte, and "
            "with hash latency for the image routes.",
            "short",
            [target(query.aggregate("sum", query.select(metrics.HTTP_IN_PROGRESS), by=["route"]), legend="{{route}}")],
        ),
        timeseries(
            "HTTP time to first byte p50 / p95 / p99 by route",
            "Time until the response's first byte per route template. For a streamed response it shows the wait "
            "that 'request latency' (time to the last byte) hides; for the image routes it tracks decoding and "
            "hashing, which happen before the answer starts.",
            "s",
            quantile_targets(lambda q: query.quantile(q, metrics.HTTP_TTFB, by=["route"]), "route"),
        ),
        timeseries(
            "HTTP request and response size p95 by route",
            "The 95th percentile size of request bodies (images in) and response bodies per route template. "
            "Requests growing without a change in clients means bigger images (see 'Bytes hashed per second'); "
            "request bodies near the service's --max-body-bytes will start to fail with 413.",
            "bytes",
            [
                target(query.quantile("0.95", metrics.HTTP_REQUEST_SIZE, by=["route"]), "A", "request {{route}}"),
                target(query.quantile("0.95", metrics.HTTP_RESPONSE_SIZE, by=["route"]), "B", "response {{route}}"),
            ],
        ),
    ]


def two_per_line(panels: list[dict[str, Any]], height: int = 8) -> list[GridLine]:
    """Half-width panels, two per grid line (the last one alone if the count is odd)."""
    return [[(panel, 12, height) for panel in panels[start : start + 2]] for start in range(0, len(panels), 2)]


def build(config: MixinConfig) -> dict[str, Any]:
    query = QueryStyle.for_dashboards(config)
    history, per_fingerprint, per_instance = fleet(query)
    lines: list[GridLine] = [
        [(panel, 6, 4) for panel in overview(query)],
        *two_per_line(key_sources(query)),
        *two_per_line(drift(query)),
        [(history, 8, 8), (per_fingerprint, 16, 8)],
        [(per_instance, 24, 8)],
        *two_per_line(hashing(query)),
        *two_per_line(http_panels(query)),
        *vllm_cache.lines(query),
        *vllm_front_end.lines(query),
        *vllm_engine.lines(query),
        *vllm_render.lines(query),
    ]
    return dashboard(
        UID,
        "mmobs / Cache keys",
        "Where media cache keys come from, whether the same content keeps its key, whether the fleet agrees on "
        "keys, what hashing costs, and how vLLM's multimodal cache hits alongside.",
        layout(lines),
        [*standard_variables(config), vllm_cache.model_name_variable(config)],
    )
