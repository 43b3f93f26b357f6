"""Client uuids checked in the engine core (``mmobs.vllm.engine_items.uuid_rekey``), on vLLM 0.33's own records.

The items are vLLM's ``MultiModalFeatureSpec`` as the Rust front end hands them to the engine core: a
client's uuid as ``identifier``, the digest of the file's bytes as ``mm_hash``. The wrapper is the
plugin's own around a stand-in for ``EngineCore.preprocess_add_request``; what a running engine core
keys the items by, with and without mmobs, is ``tests/vllm/test_vllm_rust_front_end.py``'s.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from mmobs.vllm.engine_items.item_counter import ItemCounter, preprocess_add_request
from mmobs.vllm.engine_items.item_metrics import EngineItemMetrics
from mmobs.vllm.engine_items.uuid_rekey import EngineUuidCheck, client_uuid
from mmobs.vllm.uuid_checks.uuid_check import UuidIndex
from mmobs.vllm.uuid_checks.uuid_metrics import UuidCheckMetrics
from tests.vllm.test_vllm_engine_items import KEY, OTHER, feature

THIRD = "1" * 64


def check(rekey: bool = True, capacity: int = 16) -> EngineUuidCheck:
    return EngineUuidCheck(UuidIndex(capacity), rekey=rekey, metrics=UuidCheckMetrics(CollectorRegistry()))


def value(uuid_check: EngineUuidCheck, name: str, **labels: str) -> float:
    return uuid_check.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("identifier", "mm_hash", "expected"),
    [("u-1", KEY, "u-1"), (KEY, KEY, None), (f"lora-a:{KEY}", KEY, None), ("u-1", None, None), ("u-1", "u-1", None)],
)
def test_a_client_uuid_is_an_identifier_not_made_from_the_items_mm_hash(
    identifier: str, mm_hash: str | None, expected: str | None
) -> None:
    item = feature(identifier, mm_hash=mm_hash or identifier)
    if mm_hash is None:
        item.mm_hash = None
    assert client_uuid(item) == expected


def test_the_same_uuid_with_other_content_is_keyed_by_that_content_counted_and_logged() -> None:
    uuid_check = check()
    first, same, other = feature("u-1", mm_hash=KEY), feature("u-1", mm_hash=KEY), feature("u-1", mm_hash=OTHER)
    with capture_logs() as logs:
        uuid_check.check("r1", [first])
        uuid_check.check("r2", [same])
        uuid_check.check("r3", [other])
    assert (first.identifier, same.identifier, other.identifier) == ("u-1", "u-1", OTHER)
    assert value(uuid_check, "mmobs_vllm_mm_uuid_items_total", kind="checked") == 3
    assert value(uuid_check, "mmobs_vllm_mm_uuid_conflicts_total", action="rekeyed") == 1
    assert value(uuid_check, "mmobs_vllm_mm_uuid_conflicts_total", action="counted") == 0
    assert value(uuid_check, "mmobs_vllm_mm_uuid_index_entries") == 1
    (event,) = [entry for entry in logs if entry["event"] == "mm_uuid_conflict"]
    assert event == {
        "event": "mm_uuid_conflict", "log_level": "warning", "request_id": "r3", "modality": "image", "uuid": "u-1",
        "previous_content_key": KEY[:16], "content_key": OTHER[:16], "action": "rekeyed",
    }  # fmt: skip


def test_the_first_content_stays_the_uuids_and_every_conflict_is_counted() -> None:
    uuid_check = check()
    items = [feature("u-1", mm_hash=content) for content in (KEY, OTHER, KEY, THIRD, OTHER)]
    uuid_check.check("r", items)  # one request, one uuid, three contents
    assert [item.identifier for item in items] == ["u-1", OTHER, "u-1", THIRD, OTHER]
    assert value(uuid_check, "mmobs_vllm_mm_uuid_conflicts_total", action="rekeyed") == 3


def test_counting_only_leaves_vllms_identifier() -> None:
    uuid_check = check(rekey=False)
    first, other = feature("u-1", mm_hash=KEY), feature("u-1", mm_hash=OTHER)
    with capture_logs() as logs:
        uuid_check.check("r", [first, other])
    assert other.identifier == "u-1"
    assert value(uuid_check, "mmobs_vllm_mm_uuid_conflicts_total", action="counted") == 1
    assert [entry["action"] for entry in logs if entry["event"] == "mm_uuid_conflict"] == ["counted"]


def test_items_keyed_by_their_content_are_not_checked() -> None:
    uuid_check = check()
    items = [feature(KEY), feature(f"lora-a:{OTHER}", mm_hash=OTHER), feature(KEY, mm_hash=KEY)]
    uuid_check.check("r", items)
    assert [item.identifier for item in items] == [KEY, f"lora-a:{OTHER}", KEY]
    assert value(uuid_check, "mmobs_vllm_mm_uuid_items_total", kind="checked") == 0
    assert value(uuid_check, "mmobs_vllm_mm_uuid_index_entries") == 0


def test_a_forgotten_uuid_is_no_conflict_and_the_index_stays_bounded() -> None:
    uuid_check = check(capacity=2)
    for uuid in ("u-1", "u-2", "u-3"):  # u-1 forgotten when u-3 came
        uuid_check.check("r", [feature(uuid, mm_hash=KEY)])
    again = feature("u-1", mm_hash=OTHER)
    uuid_check.check("r", [again])
    assert again.identifier == "u-1"
    assert value(uuid_check, "mmobs_vllm_mm_uuid_conflicts_total", action="rekeyed") == 0
    assert value(uuid_check, "mmobs_vllm_mm_uuid_index_entries") == 2


def test_the_engine_counts_a_rekeyed_item_by_the_identifier_it_was_given_and_vllm_receives_it() -> None:
    registry = CollectorRegistry()
    counter = ItemCounter("rust", 8, EngineItemMetrics(registry))
    uuid_check = check()
    received: list[list[str]] = []

    def original(engine: object, request: Any) -> None:
        received.append([item.identifier for item in request.mm_features])

    wrapped = preprocess_add_request(original, counter, uuid_check)
    wrapped(None, types.SimpleNamespace(request_id="r1", mm_features=[feature("u-1", mm_hash=KEY)]))
    wrapped(None, types.SimpleNamespace(request_id="r2", mm_features=[feature("u-1", mm_hash=OTHER)]))
    assert received == [["u-1"], [OTHER]]
    items = "mmobs_vllm_engine_mm_items_total"
    assert registry.get_sample_value(items, {"modality": "image", "key_format": "client_uuid"}) == 1
    assert registry.get_sample_value(items, {"modality": "image", "key_format": "raw_bytes"}) == 1
    assert [(item["identifier"], item["mm_hash"]) for item in counter.recent_items()] == [("u-1", KEY), (OTHER, None)]
