#!/usr/bin/env python3
"""Generate the mmobs Grafana dashboards (stdlib only).

The JSON files under ``dashboards/grafana/`` are the output of this script and
are checked in; ``tests/test_dashboards.py`` fails when they differ from what
this script produces. After editing a panel here, regenerate with::

    python dashboards/generate.py            # rewrite dashboards/grafana/*.json
    python dashboards/generate.py --check    # exit 1 if a file is out of date

Conventions every panel follows (and the tests enforce):

* the datasource is the ``${datasource}`` template variable (no ``__inputs``),
  on the panel and on every target;
* every metric selector carries ``job=~"$job"`` and ``instance=~"$instance"``
  (use :func:`sel` to build selectors, never write one by hand);
* every ``rate``/``increase`` uses ``[$__rate_interval]`` (use :func:`rate`);
* every panel has a ``unit`` and a ``description`` that says what to do when
  the line moves.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "grafana"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39  # Grafana 10.3/10.4; newer Grafana migrates it on load.
#: The metric the job/instance variables read their values from. Its children
#: are created up front, so it exists from the first scrape of any mmobs process.
VARIABLE_METRIC = "mmobs_media_keys_total"
#: Guards a ratio's denominator: the numerators below are always subsets of
#: their denominators, so this only turns 0/0 (no traffic) into 0 instead of NaN.
EPSILON = "1e-12"

# ---------------------------------------------------------------------------
# PromQL helpers


def sel(metric: str, *matchers: str) -> str:
    """A metric selector filtered by the dashboard's job and instance variables."""
    labels = ['job=~"$job"', 'instance=~"$instance"', *matchers]
    return f"{metric}{{{','.join(labels)}}}"


def rate(metric: str, *matchers: str, fn: str = "rate") -> str:
    """``rate`` (or ``increase``) of a selector over ``$__rate_interval``."""
    return f"{fn}({sel(metric, *matchers)}[$__rate_interval])"


def sum_rate(metric: str, *matchers: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({rate(metric, *matchers)})"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\nclamp_min({denominator}, {EPSILON})"


def quantile(q: str, metric: str, by: str) -> str:
    return f"histogram_quantile({q}, {sum_rate(metric + '_bucket', by='le, ' + by)})"


IMAGE_KINDS = 'kind=~"image|media_with_bytes"'
STATUS_5XX = 'status_class="5xx"'

# ---------------------------------------------------------------------------
# Panel builders


def target(expr: str, ref: str = "A", legend: str = "", *, table: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "refId": ref,
    }
    if table:
        t.update({"format": "table", "instant": True, "range": False, "legendFormat": "__auto"})
    else:
        t.update({"instant": False, "range": True, "legendFormat": legend or "__auto"})
    return t


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


GREEN = thresholds((None, "green"))


def timeseries(
    title: str,
    description: str,
    unit: str,
    targets: list[dict[str, Any]],
    *,
    stack: bool = False,
    max_value: float | None = None,
    steps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": "line",
            "fillOpacity": 20 if stack else 5,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stack else "none"},
            "thresholdsStyle": {"mode": "line" if steps else "off"},
        },
        "min": 0,
        "thresholds": steps or GREEN,
        "unit": unit,
    }
    if max_value is not None:
        defaults["max"] = max_value
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {
                "calcs": ["mean", "max", "lastNotNull"],
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def stat(
    title: str,
    description: str,
    unit: str,
    expr: str,
    steps: dict[str, Any],
    *,
    calc: str = "lastNotNull",
    decimals: int | None = None,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "color": {"mode": "thresholds"},
        "mappings": [],
        "thresholds": steps,
        "unit": unit,
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "colorMode": "background",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": [calc], "fields": "", "values": False},
            "textMode": "auto",
        },
        "targets": [target(expr)],
    }


def table(
    title: str,
    description: str,
    unit: str,
    expr: str,
    *,
    rename: dict[str, str],
    order: list[str],
) -> dict[str, Any]:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "thresholds"},
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False},
                "mappings": [],
                "thresholds": GREEN,
                "unit": unit,
            },
            "overrides": [],
        },
        "options": {"cellHeight": "sm", "footer": {"show": False}, "showHeader": True},
        "targets": [target(expr, table=True)],
        "transformations": [
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "indexByName": {name: i for i, name in enumerate(order)},
                    "renameByName": rename,
                },
            }
        ],
    }


def layout(rows: list[list[tuple[dict[str, Any], int, int]]]) -> list[dict[str, Any]]:
    """Place panels: each row is a list of (panel, width, height); assign ids."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in rows:
        x = 0
        height = 0
        for panel, w, h in row:
            panel = {"id": len(panels) + 1, "gridPos": {"h": h, "w": w, "x": x, "y": y}, **panel}
            panels.append(panel)
            x += w
            height = max(height, h)
        if x > 24:
            raise ValueError(f"row at y={y} is {x} wide")
        y += height
    return panels


def variables() -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "datasource": DATASOURCE,
            "definition": query,
            "hide": 0,
            "includeAll": True,
            "label": label,
            "multi": True,
            "name": name,
            "options": [],
            "query": query,
            "refresh": 2,
            "regex": "",
            "skipUrlSync": False,
            "sort": 1,
            "type": "query",
        }

    return [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "skipUrlSync": False,
            "type": "datasource",
        },
        query_var("job", "Job", f"label_values({VARIABLE_METRIC}, job)"),
        query_var("instance", "Instance", f'label_values({VARIABLE_METRIC}{{job=~"$job"}}, instance)'),
    ]


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "annotations": {"list": []},
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": True,
                "keepTime": True,
                "tags": ["mmobs"],
                "targetBlank": False,
                "title": "mmobs dashboards",
                "type": "dashboards",
            }
        ],
        "liveNow": False,
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["mmobs"],
        "templating": {"list": variables()},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# ---------------------------------------------------------------------------
# Dashboard (a): EXIF fallbacks overview

FALLBACK_RATE = sum_rate("mmobs_exif_fallback_total")
IMAGE_KEY_RATE = sum_rate("mmobs_media_keys_total", IMAGE_KINDS)


def exif_fallbacks() -> dict[str, Any]:
    fallback_rate = stat(
        "EXIF fallbacks",
        "Media items per second whose EXIF ImageID read raised and whose cache key fell back to "
        "the pixels or the original bytes. A steady trickle is normal (user images with broken "
        "metadata). If it jumps, check the 'by exception' panel: one exception type growing after "
        "a deploy or a Pillow upgrade points at our code, not at the inputs (runbook "
        "MmobsExifFallbackRatioHigh).",
        "ops",
        FALLBACK_RATE,
        thresholds((None, "green")),
    )
    fallback_share = stat(
        "Fallback share of image keys",
        "Fraction of image keys (kinds image and media_with_bytes) that came from the fallback "
        "instead of the EXIF ImageID. Orange from 1%, red from 5% (the MmobsExifFallbackRatioHigh "
        "threshold). Above that, pick a request_id from the exif_fallback log events and run "
        "`mmobs inspect` on the input to tell bad metadata from a regression.",
        "percentunit",
        ratio(FALLBACK_RATE, IMAGE_KEY_RATE),
        thresholds((None, "green"), (0.01, "orange"), (0.05, "red")),
    )
    request_share = stat(
        "Image requests with a fallback",
        "Fraction of HTTP requests that loaded an image in which at least one EXIF fallback ran. "
        "If it rises while the per-item share stays flat, a few clients send many images with "
        "broken EXIF; find them through the request_id on exif_fallback log events.",
        "percentunit",
        ratio(
            f"({sum_rate('mmobs_http_exif_fallback_requests_total')} or vector(0))",
            sum_rate("mmobs_http_image_requests_total"),
        ),
        thresholds((None, "green"), (0.01, "orange"), (0.05, "red")),
    )
    five_xx = stat(
        "5xx on image requests (max over range)",
        "Server errors (5xx) on requests that carried an image, per second; the largest value in "
        "the selected time range. This must be zero: a bad image has to produce 400, never 500, "
        "or clients retry it forever (vLLM issue #56527). Anything above zero: follow runbook "
        "MmobsImageRequestServerErrors.",
        "reqps",
        f"{sum_rate('mmobs_http_image_requests_total', STATUS_5XX)} or vector(0)",
        thresholds((None, "green"), (1e-9, "red")),
        calc="max",
    )

    by_exception = timeseries(
        "EXIF fallbacks by exception",
        "Fallbacks per second by the exception the ImageID read swallowed. SyntaxError (bad TIFF "
        "header) and struct.error (short IFD) are the known Pillow failures on broken metadata. "
        "A new type, or 'other', appearing after a deploy means a code or dependency change: "
        "compare `mmobs fingerprint` and the pillow version across replicas.",
        "ops",
        [target(sum_rate("mmobs_exif_fallback_total", by="exception"), legend="{{exception}}")],
        stack=True,
    )
    by_kind = timeseries(
        "EXIF fallbacks by media kind",
        "Fallbacks per second by media kind. 'image' falls back to hashing the pixels, "
        "'media_with_bytes' to the original bytes. A rise in media_with_bytes alone usually "
        "comes with cache-key drift: check the drift panels on the cache-keys dashboard.",
        "ops",
        [target(sum_rate("mmobs_exif_fallback_total", by="kind"), legend="{{kind}}")],
        stack=True,
    )
    share_by_kind = timeseries(
        "Fallback share of keys, by kind",
        "Per media kind: fallbacks divided by items keyed. The dashed line is the 5% alert "
        "threshold. A share near 100% means every image falls back, which is a systematic "
        "failure (a Pillow change or an unguarded image mutation), not bad inputs: roll back "
        "the last change to the image path.",
        "percentunit",
        [
            target(
                ratio(
                    sum_rate("mmobs_exif_fallback_total", by="kind"),
                    sum_rate("mmobs_media_keys_total", IMAGE_KINDS, by="kind"),
                ),
                legend="{{kind}}",
            )
        ],
        steps=thresholds((None, "green"), (0.05, "red")),
    )
    request_share_by_route = timeseries(
        "Image requests with a fallback, by route",
        "Per route template: requests in which an EXIF fallback ran, divided by requests that "
        "loaded an image. A single route rising points at one client integration; look up its "
        "requests by route and request_id in the exif_fallback log events.",
        "percentunit",
        [
            target(
                ratio(
                    f"(\n  {sum_rate('mmobs_http_exif_fallback_requests_total', by='route')}\n"
                    f"  or 0 * {sum_rate('mmobs_http_image_requests_total', by='route')}\n)",
                    sum_rate("mmobs_http_image_requests_total", by="route"),
                ),
                legend="{{route}}",
            )
        ],
    )
    transpose = timeseries(
        "EXIF transpose failures by exception",
        "Exceptions swallowed while applying the EXIF orientation: the image was used unrotated. "
        "Keys are unaffected but the model may see a sideways image. If this rises, run "
        "`mmobs inspect` on an input found through the exif_transpose_failed log event and "
        "check whether a Pillow upgrade changed the behaviour.",
        "ops",
        [
            target(
                sum_rate("mmobs_exif_transpose_failures_total", by="exception"),
                legend="{{exception}}",
            )
        ],
        stack=True,
    )
    bad_images = timeseries(
        "Bad images by reason",
        "Inputs the loader refused (answered 400), per second by reason. These are client "
        "errors, not ours; a spike in one reason usually means one client changed how it "
        "encodes images (bad_base64, bad_data_url) or a fetch dependency is down (fetch_failed). "
        "Use the bad_image log events (request_id, route) to find the client.",
        "ops",
        [target(sum_rate("mmobs_bad_images_total", by="reason"), legend="{{reason}}")],
        stack=True,
    )
    image_requests = timeseries(
        "Image requests by status class",
        "Requests that loaded or keyed at least one image, per second by status class. 4xx is "
        "expected for bad inputs (compare with 'Bad images by reason'); 5xx must stay at zero.",
        "reqps",
        [
            target(
                sum_rate("mmobs_http_image_requests_total", by="status_class"),
                legend="{{status_class}}",
            )
        ],
        stack=True,
    )
    five_xx_by_route = timeseries(
        "5xx on image requests, by route (should be zero)",
        "Server errors on image requests per route template; zero when the route served image "
        "requests without error. Any non-zero value means an exception escaped image loading or "
        "hashing and the client will retry: follow runbook MmobsImageRequestServerErrors and "
        "find the traceback by request_id in the logs.",
        "reqps",
        [
            target(
                f"{sum_rate('mmobs_http_image_requests_total', STATUS_5XX, by='route')}\n"
                f"or 0 * {sum_rate('mmobs_http_image_requests_total', by='route')}",
                legend="{{route}}",
            )
        ],
        steps=thresholds((None, "green"), (1e-9, "red")),
    )
    panels = layout(
        [
            [(fallback_rate, 6, 4), (fallback_share, 6, 4), (request_share, 6, 4), (five_xx, 6, 4)],
            [(by_exception, 12, 8), (by_kind, 12, 8)],
            [(share_by_kind, 12, 8), (request_share_by_route, 12, 8)],
            [(transpose, 12, 8), (bad_images, 12, 8)],
            [(image_requests, 12, 8), (five_xx_by_route, 12, 8)],
        ]
    )
    return dashboard(
        "mmobs-exif-fallbacks",
        "mmobs / EXIF fallbacks",
        "How often the tolerant EXIF reads swallow an exception, why, and whether any bad image "
        "still reaches a 5xx.",
        panels,
    )


# ---------------------------------------------------------------------------
# Dashboard (b): cache keys


def cache_keys() -> dict[str, Any]:
    fingerprints = f"count(count by (fingerprint) ({sel('mmobs_hasher_info')}))"
    drift_ratio = ratio(
        sum_rate("mmobs_cache_key_drift_total"), sum_rate("mmobs_cache_key_drift_samples_total")
    )
    distinct = stat(
        "Distinct hasher fingerprints",
        "Number of different hasher fingerprints among the selected replicas. Must be 1: two "
        "fingerprints mean some replicas key the same image differently (different Pillow, "
        "numpy or mmobs), so the shared cache splits. Briefly 2 during a rolling upgrade is "
        "fine; otherwise use the table below to find the odd replicas and redeploy them.",
        "short",
        fingerprints,
        thresholds((None, "green"), (2, "red")),
        decimals=0,
    )
    drift = stat(
        "Cache-key drift ratio",
        "Sampled media items seen again with a different key, as a fraction of the items the "
        "drift tracker sampled. Orange above 0.1%, red above 1% (the MmobsCacheKeyDrift "
        "threshold). Above that, find cache_key_drift log events and compare the inputs with "
        "`mmobs inspect`.",
        "percentunit",
        drift_ratio,
        thresholds((None, "green"), (0.001, "orange"), (0.01, "red")),
    )
    keys = stat(
        "Media keys",
        "Media items keyed per second, all kinds. A drop to zero while requests still arrive "
        "means the hasher is not being called (or its observer is not installed).",
        "ops",
        sum_rate("mmobs_media_keys_total"),
        thresholds((None, "green")),
    )
    hash_p99 = stat(
        "Hash latency p99",
        "99th percentile wall time of one hash_kwargs call across algorithms. If it grows, "
        "check 'Bytes hashed per second': bigger inputs explain it; otherwise the hasher "
        "slowed down (CPU contention, a slower digest) and request latency will follow.",
        "s",
        f"histogram_quantile(0.99, {sum_rate('mmobs_hash_duration_seconds_bucket', by='le')})",
        thresholds((None, "green"), (0.25, "orange"), (1, "red")),
    )

    key_mix = timeseries(
        "Key source mix",
        "Media items keyed per second by kind and key source. For images, image_id means the "
        "EXIF ImageID UUID was used and pixels means it was absent or unreadable. A sudden "
        "swap from image_id to pixels (or original_bytes) with no change in traffic means the "
        "ImageID read started failing: check the EXIF fallbacks dashboard.",
        "ops",
        [
            target(
                sum_rate("mmobs_media_keys_total", by="kind, key_source"),
                legend="{{kind}} / {{key_source}}",
            )
        ],
        stack=True,
    )
    key_share = timeseries(
        "Key source share within each kind",
        "For each media kind, the fraction of items keyed from each source. Shares of one kind "
        "add up to 100%. Watch for a step change right after a deploy: keys from a different "
        "source are different keys, so the cache hit rate drops.",
        "percentunit",
        [
            target(
                f"{sum_rate('mmobs_media_keys_total', by='kind, key_source')}\n"
                f"/ ignoring (key_source) group_left\n"
                f"clamp_min({sum_rate('mmobs_media_keys_total', by='kind')}, {EPSILON})",
                legend="{{kind}} / {{key_source}}",
            )
        ],
        max_value=1,
    )
    drift_rate = timeseries(
        "Cache-key drift by kind",
        "Items per second the drift tracker saw again with a different key. Drift means the "
        "same content is cached twice and the cache stops hitting. If it is non-zero for more "
        "than a few minutes, follow runbook MmobsCacheKeyDrift.",
        "ops",
        [target(sum_rate("mmobs_cache_key_drift_total", by="kind"), legend="{{kind}}")],
        stack=True,
    )
    drift_by_kind = timeseries(
        "Cache-key drift ratio by kind",
        "Drifted items divided by sampled items, per kind. The dashed line is the 1% alert "
        "threshold. media_with_bytes drift usually follows EXIF fallbacks (UUID key in one "
        "code path, byte key in another); video drift points at frame decoding differences.",
        "percentunit",
        [
            target(
                ratio(
                    sum_rate("mmobs_cache_key_drift_total", by="kind"),
                    sum_rate("mmobs_cache_key_drift_samples_total", by="kind"),
                ),
                legend="{{kind}}",
            )
        ],
        steps=thresholds((None, "green"), (0.01, "red")),
    )
    fingerprint_history = timeseries(
        "Distinct fingerprints over time",
        "Number of different hasher fingerprints over time. A step to 2 that lasts longer than "
        "a rollout means a mixed fleet; find the replicas in the tables and redeploy them with "
        "the same image (runbook MmobsHasherFingerprintMismatch).",
        "short",
        [target(fingerprints, legend="fingerprints")],
        steps=thresholds((None, "green"), (2, "red")),
    )
    per_fingerprint = table(
        "Instances per fingerprint",
        "One row per fingerprint and library versions, with the number of replicas reporting it. "
        "More than one row means the fleet disagrees on keys: the row with fewer instances is "
        "usually the odd one out (a stale image or an unpinned Pillow/numpy).",
        "short",
        f"count by (fingerprint, mmobs, pillow, numpy) ({sel('mmobs_hasher_info')})",
        rename={"Value": "instances"},
        order=["fingerprint", "instances", "mmobs", "pillow", "numpy"],
    )
    per_instance = table(
        "Fingerprint by instance",
        "Every replica with its hasher fingerprint and library versions. Run `mmobs fingerprint` "
        "on a replica to see the per-input reference keys behind its fingerprint and diff two "
        "replicas that disagree.",
        "short",
        f"max by (job, instance, fingerprint, mmobs, pillow, numpy) ({sel('mmobs_hasher_info')})",
        rename={"Value": "info"},
        order=["job", "instance", "fingerprint", "mmobs", "pillow", "numpy", "info"],
    )
    hash_latency = timeseries(
        "Hash latency p50 / p95 / p99",
        "Wall time of hash_kwargs by digest algorithm (histogram quantiles). Rising quantiles "
        "with flat bytes hashed per second mean the hasher got slower per byte: check CPU "
        "saturation and whether the algorithm changed (blake3 is the fast default).",
        "s",
        [
            target(quantile(q, "mmobs_hash_duration_seconds", "algorithm"), ref, f"{name} {{{{algorithm}}}}")
            for ref, q, name in (("A", "0.5", "p50"), ("B", "0.95", "p95"), ("C", "0.99", "p99"))
        ],
    )
    hashed_bytes = timeseries(
        "Bytes hashed per second",
        "Bytes fed to the digest per second by algorithm. It should follow the request rate; "
        "growth per request means larger inputs (or fallbacks hashing whole images instead of "
        "a 16-byte UUID), which shows up as hash latency.",
        "Bps",
        [target(sum_rate("mmobs_hashed_bytes_total", by="algorithm"), legend="{{algorithm}}")],
        stack=True,
    )
    request_rate = timeseries(
        "HTTP requests by route and status class",
        "Requests per second through the mmobs middleware, by route template and status class. "
        "A rise in 5xx needs the 5xx panels on the EXIF fallbacks dashboard; a rise in 4xx "
        "usually matches 'Bad images by reason'.",
        "reqps",
        [
            target(
                sum_rate("mmobs_http_requests_total", by="route, status_class"),
                legend="{{route}} {{status_class}}",
            )
        ],
        stack=True,
    )
    request_latency = timeseries(
        "HTTP request latency p50 / p95 / p99 by route",
        "Time to the last response byte per route template. If p99 rises together with hash "
        "latency, the hasher is the bottleneck; if alone, look at image fetching and decoding.",
        "s",
        [
            target(quantile(q, "mmobs_http_request_duration_seconds", "route"), ref, f"{name} {{{{route}}}}")
            for ref, q, name in (("A", "0.5", "p50"), ("B", "0.95", "p95"), ("C", "0.99", "p99"))
        ],
    )
    panels = layout(
        [
            [(distinct, 6, 4), (drift, 6, 4), (keys, 6, 4), (hash_p99, 6, 4)],
            [(key_mix, 12, 8), (key_share, 12, 8)],
            [(drift_rate, 12, 8), (drift_by_kind, 12, 8)],
            [(fingerprint_history, 8, 8), (per_fingerprint, 16, 8)],
            [(per_instance, 24, 8)],
            [(hash_latency, 12, 8), (hashed_bytes, 12, 8)],
            [(request_rate, 12, 8), (request_latency, 12, 8)],
        ]
    )
    return dashboard(
        "mmobs-cache-keys",
        "mmobs / Cache keys",
        "Where media cache keys come from, whether the same content keeps its key, whether the "
        "fleet agrees on keys, and what hashing costs.",
        panels,
    )


# ---------------------------------------------------------------------------

DASHBOARDS = {
    "mmobs-exif-fallbacks.json": exif_fallbacks,
    "mmobs-cache-keys.json": cache_keys,
}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def rendered() -> dict[str, str]:
    """File name -> the exact text the checked-in file must contain."""
    return {name: render(build) for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered().items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print("out of date (run python dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
