"""The "Render for routers" row: vLLM's render endpoints, and how many answer keys-only.

A cache-aware router asks a render server (``vllm serve --enable-scale-out``) for each request's token ids
and multimodal keys; with ``MMOBS_VLLM_RENDER=keys`` the plugin answers those without the pixel work
(docs/routers.md). The row shows the render requests by the mode they were answered in and why a request
got vLLM's full render, where keys-only images got their size and clips their frames' count and size (a
first-seen PNG or WebM is decoded; a re-sent image or clip costs its digest), and the sizes remembered for items
sent by uuid alone.
"""

from __future__ import annotations

from typing import Any

from . import metrics
from .panels import GridLine, row, target, timeseries
from .promql import QueryStyle

TITLE = "Render for routers"


def panels(query: QueryStyle) -> list[dict[str, Any]]:
    keys_only = query.sum_rate(metrics.VLLM_RENDER_REQUESTS, 'mode="keys"', 'reason="keys_only"')
    return [
        timeseries(
            "Render requests, by mode and reason",
            "Render requests per second (/v1/chat/completions/render, /v1/completions/render, /v1/responses/render) "
            "by the mode they were answered in: keys (keys, token ids and placeholders, no pixel work) or full "
            "(vLLM's render), and why: switch_off (MMOBS_VLLM_RENDER unset), model, modality, embeddings, uuid_only, "
            "processor_kwargs, size_rule, refused (an error answer).",
            "reqps",
            [target(query.sum_rate(metrics.VLLM_RENDER_REQUESTS, by=["mode", "reason"]), legend="{{mode}} {{reason}}")],
            stack=True,
        ),
        timeseries(
            "Keys-only share of multimodal renders",
            "Of the render requests with images or videos, the share answered keys-only. A drop means requests the keys-only "
            "path declines (see the reasons beside it) and that cost a full render each.",
            "percentunit",
            [
                target(
                    query.ratio(
                        keys_only,
                        query.sum_rate(metrics.VLLM_RENDER_REQUESTS, 'reason!~"text_only|switch_off"'),
                    ),
                    legend="keys-only",
                )
            ],
        ),
        timeseries(
            "Keys-only images and clips, by where their size came from",
            "Images and video clips per second of keys-only renders: index (bytes rendered before: they cost their "
            "digest), header (a first-seen JPEG or MP4, sized from its header) or decode (decoded by vLLM's loader: "
            "PNGs, WebMs, and files the header cannot vouch for).",
            "ops",
            [
                target(query.sum_rate(metrics.VLLM_RENDER_IMAGES, by=["source"]), "A", "image {{source}}"),
                target(query.sum_rate(metrics.VLLM_RENDER_VIDEOS, by=["source"]), "B", "video {{source}}"),
            ],
            stack=True,
        ),
        timeseries(
            "Sizes remembered for uuid-only items",
            "Items whose size keys-only renders remember, to answer an item sent by uuid alone (bounded by "
            "MMOBS_VLLM_RENDER_INDEX_ENTRIES, 65,536 by default; about 200 bytes each, "
            "mmobs_vllm_render_index_bytes).",
            "short",
            [
                target(
                    query.aggregate("sum", query.select(metrics.VLLM_RENDER_INDEX_ENTRIES), ["instance"]),
                    "A",
                    "entries {{instance}}",
                ),
                target(
                    query.aggregate("sum", query.select(metrics.VLLM_RENDER_INDEX_BYTES), ["instance"]),
                    "B",
                    "bytes {{instance}}",
                ),
            ],
        ),
    ]


def lines(query: QueryStyle) -> list[GridLine]:
    requests, share, images, index = panels(query)
    return [
        [(row(TITLE), 24, 1)],
        [(requests, 8, 8), (share, 5, 8), (images, 6, 8), (index, 5, 8)],
    ]
