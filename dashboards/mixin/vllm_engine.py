"""The "Multimodal items at the engine" row: what each request's items arrive as in vLLM's engine core.

Both of vLLM's front ends hand their requests to the same Python engine core, where the plugin
counts each item (docs/vllm.md, "The Rust front end"). Its series live in the engine core, so they
come from ``MMOBS_METRICS_PORT`` (the PodMonitor's ``mmobs-metrics`` port), not vLLM's ``/metrics``.
Which front end serves each instance, by how the items' identifiers were made (``content``: vLLM's
Python keys; ``raw_bytes``: the Rust front end's; ``client_uuid``), and what re-sent items cost:
their tensors sent to the engine again, which the Python front end's sender cache spares it.
"""

from __future__ import annotations

from typing import Any

from . import metrics
from .panels import GridLine, row, target, timeseries
from .promql import QueryStyle

TITLE = "Multimodal items at the engine"


def panels(query: QueryStyle) -> list[dict[str, Any]]:
    return [
        timeseries(
            "Items at the engine, by identifier format",
            "Multimodal items per second the engine core received, by how their identifier was made: content "
            "(vLLM's Python front end's keys), raw_bytes (the Rust front end's: blake3 of the file's bytes) or "
            "client_uuid. One image is keyed two ways in a fleet that runs both front ends: a router's keys match "
            "one of them only. Served on MMOBS_METRICS_PORT.",
            "ops",
            [target(query.sum_rate(metrics.VLLM_ENGINE_ITEMS, by=["key_format"]), legend="{{key_format}}")],
            stack=True,
        ),
        timeseries(
            "Re-sent items",
            "Items per second that reached the engine core with their processed tensors although it had seen their "
            "identifier before. The Rust front end has no sender-side processor cache: every re-sent image is "
            "processed and sent again; the Python front end's cache spares the engine those.",
            "ops",
            [target(query.sum_rate(metrics.VLLM_ENGINE_RESENT_ITEMS, by=["modality"]), legend="{{modality}}")],
            stack=True,
        ),
        timeseries(
            "Tensor bytes of re-sent items",
            "Bytes per second of the processed tensors the re-sent items carried to the engine core again.",
            "Bps",
            [target(query.sum_rate(metrics.VLLM_ENGINE_RESENT_BYTES, by=["modality"]), legend="{{modality}}")],
            stack=True,
        ),
        timeseries(
            "Identifiers the engine remembers",
            "Identifiers in each engine core's index of the items it has seen (bounded by "
            "MMOBS_VLLM_ENGINE_INDEX_ENTRIES, 65,536 by default): a re-sent item older than its memory counts as new.",
            "short",
            [
                target(
                    query.aggregate("sum", query.select(metrics.VLLM_ENGINE_INDEX_ENTRIES), ["instance"]),
                    legend="{{instance}}",
                )
            ],
        ),
        timeseries(
            "Instances by front end",
            "The vLLM instances each front end serves (mmobs_vllm_front_end_info, set by the engine core).",
            "short",
            [
                target(
                    query.aggregate("sum", f"{query.select(metrics.VLLM_FRONT_END_INFO)} == 1", ["front_end"]),
                    legend="{{front_end}}",
                )
            ],
            stack=True,
        ),
    ]


def lines(query: QueryStyle) -> list[GridLine]:
    items, resent, resent_bytes, index, front_ends = panels(query)
    return [
        [(row(TITLE), 24, 1)],
        [(items, 8, 8), (resent, 4, 8), (resent_bytes, 4, 8), (index, 4, 8), (front_ends, 4, 8)],
    ]
