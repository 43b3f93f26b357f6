#!/usr/bin/env python
"""What counting a request's multimodal items costs vLLM's engine core, beside what the engine does with them anyway.

The plugin counts every item of every request where the engine core first sees it
(``EngineCore.preprocess_add_request``: :mod:`mmobs.vllm.engine_items`): its identifier's format, and
whether the engine had seen it (a bounded index). This run times that count on vLLM's own records
(vLLM 0.33.0 in this process: the ``vllm`` tox environment), for requests of 1, 4 and 16 images of the
tiny Qwen2-VL's size with their tensors (a 1064x1176 float32 ``pixel_values``, the Rust front end's
shape for a 64x48 JPEG), the index full (65,536 identifiers, so every new one evicts), half the items
re-sent. Beside it, in the same run and the same rounds: one copy of the same items' tensors
(``torch.clone``), the least the engine does with data it receives (its receiver cache stores it, the
model runner moves it). Reported: the median per request over rounds, and count/copy.

    .tox/vllm/bin/python benchmarks/bench_vllm_engine_items.py            # about 20 seconds
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from prometheus_client import CollectorRegistry
from vllm.multimodal.inputs import (
    MultiModalBatchedField,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    PlaceholderRange,
)

from mmobs.vllm.engine_items.item_counter import DEFAULT_INDEX_ENTRIES, ItemCounter
from mmobs.vllm.engine_items.item_metrics import EngineItemMetrics

ROUNDS = 15
REQUESTS_PER_ROUND = 200


def item(number: int) -> MultiModalFeatureSpec:
    field = MultiModalBatchedField()
    data = MultiModalKwargsItem(
        {
            "pixel_values": MultiModalFieldElem(data=torch.zeros(1064, 1176), field=field),
            "image_grid_thw": MultiModalFieldElem(data=torch.tensor([1, 28, 38]), field=field),
        }
    )
    identifier = f"{number:064x}"
    return MultiModalFeatureSpec(
        data=data, modality="image", identifier=identifier, mm_position=PlaceholderRange(offset=5, length=266),
        mm_hash=identifier,
    )  # fmt: skip


def full_counter() -> ItemCounter:
    counter = ItemCounter("rust", DEFAULT_INDEX_ENTRIES, EngineItemMetrics(CollectorRegistry()))
    for number in range(DEFAULT_INDEX_ENTRIES):
        counter.index.put(f"{10**9 + number:064x}", None)
    return counter


def _copy(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [tensor.clone() for tensor in tensors]


def per_request(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    for _ in range(REQUESTS_PER_ROUND):
        action()
    return (time.perf_counter() - started) / REQUESTS_PER_ROUND


def main() -> None:
    counter = full_counter()
    print(f"{'images':>6}  {'count (us)':>10}  {'copy (us)':>10}  {'count/copy':>10}")
    for images in (1, 4, 16):
        # Half of each request's items are re-sent (seen in every round), half are new to the index.
        resent = [item(number) for number in range(images // 2 or 1)]
        counts, copies = [], []
        for round_number in range(ROUNDS):
            fresh = [item(1_000_000 * (round_number + 1) + n) for n in range(images - len(resent))]
            features = resent + fresh
            tensors = [feature.data["pixel_values"].data for feature in features]
            counts.append(per_request(functools.partial(counter.count, "request", features)))
            copies.append(per_request(functools.partial(_copy, tensors)))
        count, copy = statistics.median(counts), statistics.median(copies)
        print(f"{images:>6}  {count * 1e6:>10.1f}  {copy * 1e6:>10.1f}  {count / copy:>10.4f}")


if __name__ == "__main__":
    main()
