"""Client media uuids checked against their content inside the real vLLM 0.33 (``mmobs.vllm.uuid_checks.uuid_check``).

The plugin is registered in this process for the module: vLLM's own
``ProcessorInputs.get_mm_hashes`` (wrapped), fed by vLLM's own parser and
loader, computes every key. A uuid vLLM keys as an earlier item's, with other
content, is a conflict; everything else (the same bytes again, other hash
factors, items without a uuid, items sent by uuid alone) is not, and vLLM's
keys never change. ``tests/vllm/test_vllm_server.py`` shows the same through a
running server's OpenAI route.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from mmobs.vllm.uuid_checks.uuid_check import ENTRY_BYTES, UuidChecker, UuidConflictError, UuidIndex
from mmobs.vllm.uuid_checks.uuid_metrics import UuidCheckMetrics
from tests.support import require_vllm, vllm_plugin_registered
from tests.support.images import jpeg_bytes, png_bytes

MODEL = "tiny-model"


@pytest.fixture(scope="module")
def vllm() -> Iterator[types.SimpleNamespace]:
    require_vllm()
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.parse import MultiModalDataParser, parse_mm_uuids
    from vllm.multimodal.processing.inputs import ProcessorInputs

    with vllm_plugin_registered():
        assert hasattr(ProcessorInputs.get_mm_hashes, "__wrapped__"), "the plugin did not wrap get_mm_hashes"
        yield types.SimpleNamespace(
            inputs=ProcessorInputs, parser=MultiModalDataParser(), uuids=parse_mm_uuids, loader=ImageMediaIO
        )


@pytest.fixture
def checker(vllm: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> UuidChecker:
    """A fresh checker of our own (its own registry) in place of the process's, inside the plugin's wrapper."""
    from vllm.multimodal.processing.inputs import ProcessorInputs

    fresh = UuidChecker(UuidIndex(), refuse=True, metrics=UuidCheckMetrics(CollectorRegistry()))
    wrapper = ProcessorInputs.get_mm_hashes
    assert isinstance(wrapper.checker, UuidChecker)
    cell = next(c for c in wrapper.__closure__ if c.cell_contents is wrapper.checker)
    monkeypatch.setattr(cell, "cell_contents", fresh)
    return fresh


def keys(vllm: types.SimpleNamespace, images: list[Any], uuids: list[str | None], **kwargs: Any) -> list[str]:
    items = vllm.parser.parse_mm_data({"image": images})
    inputs = vllm.inputs(prompt=[1], mm_data_items=items, mm_uuid_items=vllm.uuids({"image": uuids}), **kwargs)
    return inputs.get_mm_hashes(MODEL, "blake3")["image"]


def unchecked_keys(vllm: types.SimpleNamespace, images: list[Any], uuids: list[str | None], **kwargs: Any) -> list[str]:
    """What vLLM alone computes: its own function, from under the plugin's wrapper."""
    items = vllm.parser.parse_mm_data({"image": images})
    inputs = vllm.inputs(prompt=[1], mm_data_items=items, mm_uuid_items=vllm.uuids({"image": uuids}), **kwargs)
    return vllm.inputs.get_mm_hashes.__wrapped__(inputs, MODEL, "blake3")["image"]


def load(vllm: types.SimpleNamespace, data: bytes) -> Any:
    return vllm.loader().load_bytes(data)


def value(checker: UuidChecker, name: str, **labels: str) -> float:
    return checker.metrics.registry.get_sample_value(name, labels) or 0.0


def test_the_same_uuid_with_other_content_is_refused_and_keys_never_change(
    vllm: types.SimpleNamespace, checker: UuidChecker
) -> None:
    small, large = load(vllm, png_bytes(size=(16, 16), seed=1)), load(vllm, jpeg_bytes(size=(224, 224), seed=2))
    assert keys(vllm, [large], ["shared-uuid"]) == unchecked_keys(vllm, [large], ["shared-uuid"]) == ["shared-uuid"]
    with capture_logs() as logs, pytest.raises(UuidConflictError) as refused:
        keys(vllm, [small], ["shared-uuid"])
    assert isinstance(refused.value, ValueError)  # what vLLM answers with a 400
    message = str(refused.value)
    assert message.startswith("mm_uuid_conflict: the image uuid 'shared-uuid' was sent before with other content")
    assert "Give each distinct image a uuid of its own, or send it without one." in message
    (event,) = [e for e in logs if e["event"] == "mm_uuid_conflict"]
    assert (event["uuid"], event["modality"], event["action"]) == ("shared-uuid", "image", "refused")
    content = unchecked_keys(vllm, [large, small], [None, None])
    assert (event["previous_content_key"], event["content_key"]) == (content[0][:16], content[1][:16])
    assert value(checker, "mmobs_vllm_mm_uuid_conflicts_total", action="refused") == 1
    assert value(checker, "mmobs_vllm_mm_uuid_items_total", kind="checked") == 2
    # The first content stays remembered: the large one again is no conflict; the small one again is.
    assert keys(vllm, [large], ["shared-uuid"]) == ["shared-uuid"]
    with pytest.raises(UuidConflictError):
        keys(vllm, [small], ["shared-uuid"])


def test_count_only_answers_as_vllm_does(vllm: types.SimpleNamespace, checker: UuidChecker) -> None:
    checker.refuse = False
    first, other = load(vllm, png_bytes(seed=3)), load(vllm, png_bytes(seed=4))
    assert keys(vllm, [first], ["u-count"]) == ["u-count"]
    with capture_logs() as logs:
        assert keys(vllm, [other], ["u-count"]) == unchecked_keys(vllm, [other], ["u-count"]) == ["u-count"]
    assert [e["action"] for e in logs if e["event"] == "mm_uuid_conflict"] == ["counted"]
    assert value(checker, "mmobs_vllm_mm_uuid_conflicts_total", action="counted") == 1
    assert value(checker, "mmobs_vllm_mm_uuid_conflicts_total", action="refused") == 0


def test_no_false_alarm(vllm: types.SimpleNamespace, checker: UuidChecker) -> None:
    """The same bytes again (loaded anew), the same uuid under other hash factors, items without a uuid."""
    data = jpeg_bytes(seed=5)
    for _ in range(3):
        assert keys(vllm, [load(vllm, data)], ["u-same"]) == ["u-same"]
    factors = {"hf_processor_mm_kwargs": {"images_kwargs": {"max_pixels": 1000}}}
    scoped = keys(vllm, [load(vllm, png_bytes(seed=6))], ["u-same"], **factors)
    assert scoped == unchecked_keys(vllm, [load(vllm, png_bytes(seed=6))], ["u-same"], **factors)
    assert scoped != ["u-same"]  # vLLM scopes the uuid's key by the factors: another key, no conflict
    plain = [load(vllm, png_bytes(seed=7)), load(vllm, png_bytes(seed=8))]
    assert keys(vllm, plain, [None, None]) == unchecked_keys(vllm, plain, [None, None])
    assert value(checker, "mmobs_vllm_mm_uuid_conflicts_total", action="refused") == 0
    assert value(checker, "mmobs_vllm_mm_uuid_items_total", kind="checked") == 4


def test_an_item_sent_by_uuid_alone_is_counted_and_not_checked(
    vllm: types.SimpleNamespace, checker: UuidChecker
) -> None:
    image = load(vllm, png_bytes(seed=9))
    assert keys(vllm, [None], ["u-ref"]) == ["u-ref"]  # before the data was seen
    assert keys(vllm, [image, None], ["u-ref", "u-ref"]) == ["u-ref", "u-ref"]  # with it, and a reference to it
    assert value(checker, "mmobs_vllm_mm_uuid_items_total", kind="uuid_only") == 2
    assert value(checker, "mmobs_vllm_mm_uuid_items_total", kind="checked") == 1


def test_the_index_is_bounded_and_sized() -> None:
    index = UuidIndex(max_entries=3, max_bytes=10 * ENTRY_BYTES)
    for n in range(5):
        assert index.remember(f"uuid-{n}" * 1000, f"content-{n}") is None  # long uuids cost no more
    assert len(index) == 3 and index.nbytes == 3 * ENTRY_BYTES
    assert index.remember("uuid-0" * 1000, "other") is None  # forgotten: remembered afresh
    assert index.remember("uuid-4" * 1000, "other") == "content-4"
    assert UuidIndex(max_entries=100, max_bytes=2 * ENTRY_BYTES).capacity == 2
    assert UuidIndex(max_entries=0).remember("a", "b") is None and len(UuidIndex(max_entries=0)) == 0


def test_a_check_that_cannot_run_leaves_vllms_answer_alone(caplog: pytest.LogCaptureFixture) -> None:
    """The second keying pass raising (a foreign item type, say) is one warning, never the request's failure."""
    import dataclasses

    from mmobs.vllm.uuid_checks.uuid_check import get_mm_hashes

    @dataclasses.dataclass
    class Inputs:
        mm_data_items: dict[str, Any]
        mm_uuid_items: dict[str, list[str | None]] | None

    class Items:
        def get_all_items_for_hash(self) -> list[object]:
            return [object()]

    def original(inputs: Inputs, model_id: str, algorithm: str) -> dict[str, list[str]]:
        if inputs.mm_uuid_items and inputs.mm_uuid_items["image"][0] is None:
            raise TypeError("cannot key this item")
        return {"image": ["u-1"]}

    checker = UuidChecker(UuidIndex(), metrics=UuidCheckMetrics(CollectorRegistry()))
    wrapped = get_mm_hashes(original, checker)
    inputs = Inputs({"image": Items()}, {"image": ["u-1"]})
    with caplog.at_level("WARNING", logger="vllm.mmobs"):
        assert wrapped(inputs, MODEL, "blake3") == {"image": ["u-1"]}
        assert wrapped(inputs, MODEL, "blake3") == {"image": ["u-1"]}
    said = [r.getMessage() for r in caplog.records if "could not be checked" in r.getMessage()]
    assert said == ["mmobs: a client media uuid could not be checked (TypeError: cannot key this item)"]


def test_an_entry_costs_what_the_index_counts_for_it() -> None:
    """``ENTRY_BYTES`` is measured, not guessed: tracemalloc over 20,000 entries with long uuids and keys."""
    import tracemalloc

    index = UuidIndex(max_entries=20_000, max_bytes=10**9)
    pairs = [(f"client-uuid-{n}" * 30, f"{n:064x}") for n in range(20_000)]
    tracemalloc.start()
    try:
        for vllm_key, content_key in pairs:
            index.remember(vllm_key, content_key)
        per_entry = tracemalloc.get_traced_memory()[0] / len(pairs)
    finally:
        tracemalloc.stop()
    assert ENTRY_BYTES * 0.8 <= per_entry <= ENTRY_BYTES, per_entry
    assert index.nbytes == len(pairs) * ENTRY_BYTES


def test_every_conflicting_item_of_a_request_is_counted_before_it_is_refused(
    vllm: types.SimpleNamespace, checker: UuidChecker
) -> None:
    a, b, c, d = (load(vllm, png_bytes(seed=seed)) for seed in (11, 12, 13, 14))
    assert keys(vllm, [a, b], ["u-pair-1", "u-pair-2"]) == ["u-pair-1", "u-pair-2"]
    with capture_logs() as logs, pytest.raises(UuidConflictError, match="'u-pair-1'"):
        keys(vllm, [c, d], ["u-pair-1", "u-pair-2"])
    assert [e["uuid"] for e in logs if e["event"] == "mm_uuid_conflict"] == ["u-pair-1", "u-pair-2"]
    assert value(checker, "mmobs_vllm_mm_uuid_conflicts_total", action="refused") == 2
