"""The engine core's item counts (``mmobs.vllm.engine_items``) on vLLM's own request records, in a registry of their own.

vLLM 0.33.0 is in the test process (the ``vllm`` environment): the items are its
``MultiModalFeatureSpec``, ``MultiModalKwargsItem`` and ``PlaceholderRange``, as its engine core receives
them from either front end. The running engines are ``tests/vllm/test_vllm_rust_front_end.py``'s.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mmobs.vllm.engine_items.item_counter import ItemCounter, identifier_format, preprocess_add_request
from mmobs.vllm.engine_items.item_metrics import EngineItemMetrics

KEY = "9b79dc7cbc4434343db1eae2f488622cb4be8613482f688d8a60a49c2720df1a"
OTHER = "0" * 64


def feature(
    identifier: str, *, nbytes: int | None = 64, modality: str = "image", length: int = 4, mm_hash: str | None = None
) -> Any:
    """An item as the engine receives it: with ``nbytes`` of tensors, or none (the sender's cache held it).

    ``mm_hash`` is the identifier unless given: the Python front end's records without LoRA. The Rust front
    end's for a client uuid have the uuid as identifier and the bytes' digest as ``mm_hash``; the Python
    front end's under LoRA have ``"<lora>:<mm_hash>"`` as identifier.
    """
    inputs = pytest.importorskip("vllm.multimodal.inputs")  # here, not at collection: other environments collect it
    data = None if nbytes is None else inputs.MultiModalKwargsItem.dummy(nbytes)
    return inputs.MultiModalFeatureSpec(
        data=data, modality=modality, identifier=identifier, mm_position=inputs.PlaceholderRange(offset=5, length=length),
        mm_hash=identifier if mm_hash is None else mm_hash,
    )  # fmt: skip


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    assert found is not None, (name, labels)
    return found


def counter(front_end: str = "rust", capacity: int = 8) -> tuple[ItemCounter, CollectorRegistry]:
    registry = CollectorRegistry()
    return ItemCounter(front_end, capacity, EngineItemMetrics(registry)), registry  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("identifier", "front_end", "expected"),
    [(KEY, "rust", "raw_bytes"), (KEY, "python", "content"), ("my-uuid", "rust", "client_uuid"),
     ("my-uuid", "python", "client_uuid"), (KEY.upper(), "python", "client_uuid"), (KEY[:-1], "rust", "client_uuid")],
)  # fmt: skip
def test_an_identifier_is_the_front_ends_key_only_when_shaped_as_a_blake3_hex_digest(
    identifier: str, front_end: str, expected: str
) -> None:
    assert identifier_format(identifier, front_end) == expected  # type: ignore[arg-type]


def test_items_are_counted_by_the_identifier_the_caches_use_not_by_mm_hash() -> None:
    """A client uuid under the Rust front end (identifier the uuid, mm_hash the bytes' digest) counts as
    client_uuid; a LoRA-prefixed identifier counts as the key behind it. Re-sends follow the identifier."""
    items, registry = counter(front_end="rust")
    items.count("r1", [feature("my-uuid", mm_hash=KEY, nbytes=10)])
    items.count("r2", [feature(KEY, nbytes=10)])  # the same bytes without the uuid: another identifier
    items.count("r3", [feature("my-uuid", mm_hash=OTHER, nbytes=10)])  # the uuid again: re-sent, as the caches see it
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="client_uuid") == 2
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="raw_bytes") == 1
    assert value(registry, "mmobs_vllm_engine_mm_resent_items_total", modality="image") == 1
    first, plain, again = items.recent_items()
    assert (first["identifier"], first["mm_hash"], first["resent"]) == ("my-uuid", KEY, False)
    assert (plain["identifier"], plain["mm_hash"], plain["resent"]) == (KEY, None, False)
    assert (again["identifier"], again["mm_hash"], again["resent"]) == ("my-uuid", OTHER, True)
    lora, registry = counter(front_end="python")
    lora.count("r", [feature(f"adapter:{KEY}", mm_hash=KEY), feature("adapter:u-1", mm_hash="u-1")])
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="content") == 1
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="client_uuid") == 1
    assert lora.recent_items()[0]["identifier"] == f"adapter:{KEY}"


def test_each_item_is_counted_once_and_a_resent_one_with_its_tensor_bytes() -> None:
    items, registry = counter()
    items.count("r1", [feature(KEY, nbytes=100), feature("uuid-1", nbytes=10)])
    items.count("r2", [feature(KEY, nbytes=100)])  # sent again, with its tensors
    items.count("r3", [feature(KEY, nbytes=None)])  # seen, but without data: the sender's cache spared it
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="raw_bytes") == 3
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="client_uuid") == 1
    assert value(registry, "mmobs_vllm_engine_mm_resent_items_total", modality="image") == 1
    assert value(registry, "mmobs_vllm_engine_mm_resent_bytes_total", modality="image") == 100
    assert value(registry, "mmobs_vllm_engine_mm_index_entries") == 2
    assert value(registry, "mmobs_vllm_front_end_info", front_end="rust") == 1
    assert value(registry, "mmobs_vllm_front_end_info", front_end="python") == 0
    recent = items.recent_items()
    assert [(i["request_id"], i["resent"], i["with_data"], i["tensor_bytes"]) for i in recent] == [
        ("r1", False, True, 100), ("r1", False, True, 10), ("r2", True, True, 100), ("r3", False, False, 0),
    ]  # fmt: skip
    assert recent[0]["shapes"] == {"dummy": [100]} and (recent[0]["offset"], recent[0]["length"]) == (5, 4)


def test_a_modality_outside_the_closed_set_is_counted_as_other() -> None:
    items, registry = counter("python")
    items.count("r", [feature(KEY, modality="vision_chunk")])
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="other", key_format="content") == 1


def test_the_index_forgets_the_least_recently_seen_first_and_stays_bounded() -> None:
    items, registry = counter(capacity=2)
    for identifier in ("a", "b", "a", "c", "b", "a"):  # "b" forgotten when "c" came; then "a" when "b" did
        items.count("r", [feature(identifier)])
    assert value(registry, "mmobs_vllm_engine_mm_resent_items_total", modality="image") == 1  # the second "a"
    assert value(registry, "mmobs_vllm_engine_mm_index_entries") == 2
    long_uuid = "u" * 10_000
    items.count("r", [feature(long_uuid), feature(long_uuid)])  # remembered by its digest, re-sent once
    assert value(registry, "mmobs_vllm_engine_mm_resent_items_total", modality="image") == 2
    nothing, registry = counter(capacity=0)
    nothing.count("r", [feature(KEY), feature(KEY)])
    assert value(registry, "mmobs_vllm_engine_mm_resent_items_total", modality="image") == 0
    assert value(registry, "mmobs_vllm_engine_mm_index_entries") == 0


def test_the_recent_items_are_bounded_and_long_identifiers_cut() -> None:
    items, _ = counter(capacity=0)
    for number in range(300):
        items.count(f"request-{number}", [feature("x" * 500, nbytes=None)])
    recent = items.recent_items()
    assert len(recent) == 256 and recent[-1]["request_id"] == "request-299"
    assert {len(item["identifier"]) for item in recent} == {128}


def test_the_hook_counts_then_hands_the_request_to_vllm_and_never_raises_into_it() -> None:
    items, registry = counter()
    seen: list[Any] = []

    def original(engine: object, request: Any) -> str:
        seen.append(request)
        return "vLLM's"

    request = types.SimpleNamespace(request_id="r", mm_features=[feature(KEY), object()])  # the second is no item
    wrapped = preprocess_add_request(original, items)
    assert wrapped(None, request) == "vLLM's" and seen == [request]
    assert value(registry, "mmobs_vllm_engine_mm_items_total", modality="image", key_format="raw_bytes") == 1
    request.mm_features = []
    assert wrapped(None, request) == "vLLM's" and len(seen) == 2
