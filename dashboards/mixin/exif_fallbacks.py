"""Dashboard "mmobs / EXIF fallbacks": how often the tolerant EXIF reads swallow an exception, and why.

Top line: four numbers an on-call engineer reads first (fallback rate and
shares, 5xx on image requests); then the breakdowns that tell bad inputs from
a regression.
"""

from __future__ import annotations

from typing import Any

from . import metrics
from .config import MixinConfig
from .dashboard import dashboard, standard_variables
from .panels import layout, stat, target, thresholds, timeseries
from .promql import QueryStyle

UID = "mmobs-exif-fallbacks"
SHARE_STEPS = thresholds((None, "green"), (0.01, "orange"), (0.05, "red"))
MUST_BE_ZERO = thresholds((None, "green"), (1e-9, "red"))


def overview(query: QueryStyle) -> list[dict[str, Any]]:
    """The top line of four stats."""
    fallback_rate = query.sum_rate(metrics.EXIF_FALLBACKS)
    image_key_rate = query.sum_rate(metrics.MEDIA_KEYS, metrics.IMAGE_KINDS)
    return [
        stat(
            "EXIF fallbacks",
            "Media items per second whose EXIF ImageID read raised and whose cache key fell back to the pixels "
            "or the original bytes. A steady trickle is normal (user images with broken metadata). If it jumps, "
            "check the 'by exception' panel: one exception type growing after a deploy or a Pillow upgrade points "
            "at our code, not at the inputs (runbook MmobsExifFallbackRatioHigh).",
            "ops",
            fallback_rate,
            thresholds((None, "green")),
        ),
        stat(
            "Fallback share of image keys",
            "Fraction of image keys (kinds image and media_with_bytes) that came from the fallback instead of the "
            "EXIF ImageID. Orange from 1%, red from 5% (the MmobsExifFallbackRatioHigh threshold). Above that, "
            "pick a request_id from the exif_fallback log events and run `mmobs inspect` on the input to tell bad "
            "metadata from a regression.",
            "percentunit",
            query.ratio(fallback_rate, image_key_rate),
            SHARE_STEPS,
        ),
        stat(
            "Image requests with a fallback",
            "Fraction of HTTP requests that loaded an image in which at least one EXIF fallback ran. If it rises "
            "while the per-item share stays flat, a few clients send many images with broken EXIF; find them "
            "through the request_id on exif_fallback log events.",
            "percentunit",
            query.ratio(
                f"({query.sum_rate(metrics.HTTP_FALLBACK_REQUESTS)} or vector(0))",
                query.sum_rate(metrics.HTTP_IMAGE_REQUESTS),
            ),
            SHARE_STEPS,
        ),
        stat(
            "5xx on image requests (max over range)",
            "Server errors (5xx) on requests that carried an image, per second; the largest value in the selected "
            "time range. This must be zero: a bad image has to produce 400, never 500, or clients retry it forever "
            "(vLLM issue #56527). Anything above zero: follow runbook MmobsImageRequestServerErrors.",
            "reqps",
            f"{query.sum_rate(metrics.HTTP_IMAGE_REQUESTS, metrics.STATUS_5XX)} or vector(0)",
            MUST_BE_ZERO,
            calc="max",
        ),
    ]


def causes(query: QueryStyle) -> list[dict[str, Any]]:
    """Why the fallbacks happen: by exception, by kind, share per kind, per route."""
    by_kind_ratio = query.ratio(
        query.sum_rate(metrics.EXIF_FALLBACKS, by=["kind"]),
        query.sum_rate(metrics.MEDIA_KEYS, metrics.IMAGE_KINDS, by=["kind"]),
    )
    fallback_requests_by_route = (
        f"(\n  {query.sum_rate(metrics.HTTP_FALLBACK_REQUESTS, by=['route'])}\n"
        f"  or 0 * {query.sum_rate(metrics.HTTP_IMAGE_REQUESTS, by=['route'])}\n)"
    )
    return [
        timeseries(
            "EXIF fallbacks by exception",
            "Fallbacks per second by the exception the ImageID read swallowed. SyntaxError (bad TIFF header) and "
            "struct.error (short IFD) are the known Pillow failures on broken metadata. A new type, or 'other', "
            "appearing after a deploy means a code or dependency change: compare `mmobs fingerprint` and the "
            "pillow version across replicas. The points on the lines are exemplars: each names one request that "
            "fell back (request_id) and, where it was traced, its trace (trace_id), which the data source's "
            "exemplar link opens in the tracing back end.",
            "ops",
            [target(query.sum_rate(metrics.EXIF_FALLBACKS, by=["exception"]), legend="{{exception}}", exemplar=True)],
            stack=True,
        ),
        timeseries(
            "EXIF fallbacks by media kind",
            "Fallbacks per second by media kind. 'image' falls back to hashing the pixels, 'media_with_bytes' to "
            "the original bytes. A rise in media_with_bytes alone usually comes with cache-key drift: check the "
            "drift panels on the cache-keys dashboard.",
            "ops",
            [target(query.sum_rate(metrics.EXIF_FALLBACKS, by=["kind"]), legend="{{kind}}")],
            stack=True,
        ),
        timeseries(
            "Fallback share of keys, by kind",
            "Per media kind: fallbacks divided by items keyed. The dashed line is the 5% alert threshold. A share "
            "near 100% means every image falls back, which is a systematic failure (a Pillow change or an "
            "unguarded image mutation), not bad inputs: roll back the last change to the image path.",
            "percentunit",
            [target(by_kind_ratio, legend="{{kind}}")],
            steps=thresholds((None, "green"), (0.05, "red")),
        ),
        timeseries(
            "Image requests with a fallback, by route",
            "Per route template: requests in which an EXIF fallback ran, divided by requests that loaded an image. "
            "A single route rising points at one client integration; look up its requests by route and "
            "request_id in the exif_fallback log events.",
            "percentunit",
            [
                target(
                    query.ratio(fallback_requests_by_route, query.sum_rate(metrics.HTTP_IMAGE_REQUESTS, by=["route"])),
                    legend="{{route}}",
                )
            ],
        ),
    ]


def inputs_and_errors(query: QueryStyle) -> list[dict[str, Any]]:
    """What else goes wrong on the image path: transpose failures, refused inputs, 5xx."""
    five_xx_by_route = (
        f"{query.sum_rate(metrics.HTTP_IMAGE_REQUESTS, metrics.STATUS_5XX, by=['route'])}\n"
        f"or 0 * {query.sum_rate(metrics.HTTP_IMAGE_REQUESTS, by=['route'])}"
    )
    return [
        timeseries(
            "EXIF transpose failures by exception",
            "Exceptions swallowed while applying the EXIF orientation: the image was used unrotated. Keys are "
            "unaffected but the model may see a sideways image. If this rises, run `mmobs inspect` on an input "
            "found through the exif_transpose_failed log event and check whether a Pillow upgrade changed the "
            "behaviour.",
            "ops",
            [target(query.sum_rate(metrics.TRANSPOSE_FAILURES, by=["exception"]), legend="{{exception}}")],
            stack=True,
        ),
        timeseries(
            "Pillow 'Corrupt EXIF data' warnings",
            "Per second, the times Pillow warned about a corrupt EXIF block while it parsed one (a UserWarning "
            "that raises nothing). It signals the same broken metadata as the fallbacks, caught earlier: a rise "
            "here without a rise in fallbacks means the damage is in tags the key never reads.",
            "ops",
            [target(query.sum_rate(metrics.EXIF_CORRUPT_WARNINGS), legend="warnings")],
        ),
        timeseries(
            "Bad images by reason",
            "Inputs the loader refused (answered 400), per second by reason. These are client errors, not ours; a "
            "spike in one reason usually means one client changed how it encodes images (bad_base64, "
            "bad_data_url) or a fetch dependency is down (fetch_failed). Use the bad_image log events "
            "(request_id, route) to find the client.",
            "ops",
            [target(query.sum_rate(metrics.BAD_IMAGES, by=["reason"]), legend="{{reason}}")],
            stack=True,
        ),
        timeseries(
            "Image requests by status class",
            "Requests that loaded or keyed at least one image, per second by status class. 4xx is expected for "
            "bad inputs (compare with 'Bad images by reason'); 5xx must stay at zero.",
            "reqps",
            [
                target(
                    query.sum_rate(metrics.HTTP_IMAGE_REQUESTS, by=["status_class"]),
                    legend="{{status_class}}",
                )
            ],
            stack=True,
        ),
        timeseries(
            "5xx on image requests, by route (should be zero)",
            "Server errors on image requests per route template; zero when the route served image requests "
            "without error. Any non-zero value means an exception escaped image loading or hashing and the client "
            "will retry: follow runbook MmobsImageRequestServerErrors and find the traceback by request_id in the "
            "logs.",
            "reqps",
            [target(five_xx_by_route, legend="{{route}}")],
            steps=MUST_BE_ZERO,
        ),
    ]


def build(config: MixinConfig) -> dict[str, Any]:
    query = QueryStyle.for_dashboards(config)
    top = overview(query)
    by_exception, by_kind, share_by_kind, by_route = causes(query)
    transpose, corrupt_warnings, bad_images, image_requests, five_xx = inputs_and_errors(query)
    panels = layout(
        [
            [(panel, 6, 4) for panel in top],
            [(by_exception, 12, 8), (by_kind, 12, 8)],
            [(share_by_kind, 12, 8), (by_route, 12, 8)],
            [(transpose, 12, 8), (corrupt_warnings, 12, 8)],
            [(bad_images, 12, 8), (image_requests, 12, 8)],
            [(five_xx, 24, 8)],
        ]
    )
    return dashboard(
        UID,
        "mmobs / EXIF fallbacks",
        "How often the tolerant EXIF reads swallow an exception, why, and whether any bad image still reaches a 5xx.",
        panels,
        standard_variables(config),
    )
