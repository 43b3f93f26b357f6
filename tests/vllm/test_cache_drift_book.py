"""The drift bookkeeping of the vLLM plugin (``mmobs.vllm.cache_drift.drift``), without vLLM: what each side's drift counts.

The real server shows the same counts against its own log (``tests/vllm/test_vllm_cache_drift.py``);
here each case is exact and small: a fresh registry, structlog's ``capture_logs``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from mmobs.vllm.cache_drift.cache_metrics import CacheDriftMetrics
from mmobs.vllm.cache_drift.drift import DriftBook


def _book() -> tuple[DriftBook, CollectorRegistry]:
    registry = CollectorRegistry()
    return DriftBook(CacheDriftMetrics(registry)), registry


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


class TestReDrifts:
    def test_a_hash_the_sender_loses_twice_is_a_sender_redrift(self) -> None:
        """The API server's own cache losing the same entry again counts as a re-drift on its side."""
        book, registry = _book()
        with capture_logs() as logs:
            book.sender_missed("r1", "a" * 64, "image")
            book.sender_missed("r2", "a" * 64, "image")
            book.sender_missed("r3", "b" * 64, "image")
        assert _value(registry, "mmobs_vllm_mm_cache_sender_misses_total") == 3
        assert _value(registry, "mmobs_vllm_mm_cache_sender_redrifts_total") == 1
        assert _value(registry, "mmobs_vllm_mm_cache_redrifts_total", engine="0") == 0
        assert [(log["where"], log["redrift"]) for log in logs] == [
            ("sender", False),
            ("sender", True),
            ("sender", False),
        ]

    def test_either_side_repeating_the_other_is_a_redrift_where_it_happens(self) -> None:
        """A hash the engine missed, then the sender lost (and back): each repeat counted on the side it happened."""
        book, registry = _book()
        book.engine_missed("r1", ["c" * 64], 0)
        book.sender_missed("r2", "c" * 64, None)
        book.engine_missed("r3", ["d" * 64], 0)
        book.sender_missed("r4", "e" * 64, None)
        book.engine_missed("r5", ["e" * 64], 0)
        assert _value(registry, "mmobs_vllm_mm_cache_drift_items_total", engine="0") == 3
        assert _value(registry, "mmobs_vllm_mm_cache_redrifts_total", engine="0") == 1
        assert _value(registry, "mmobs_vllm_mm_cache_sender_misses_total") == 2
        assert _value(registry, "mmobs_vllm_mm_cache_sender_redrifts_total") == 1

    def test_every_series_exists_at_zero_before_any_drift(self) -> None:
        """The alert divides sums over both sides: a side that never drifted must still be a series."""
        _, registry = _book()
        for name in ("mmobs_vllm_mm_cache_sender_misses_total", "mmobs_vllm_mm_cache_sender_redrifts_total"):
            assert registry.get_sample_value(name, {}) == 0.0
        assert registry.get_sample_value("mmobs_vllm_mm_cache_redrifts_total", {"engine": "0"}) == 0.0


class TestModality:
    def test_a_sender_miss_names_the_modality_the_item_was_cached_with(self) -> None:
        """vLLM's sender cache is told only the hash; the modality comes from when the item went in."""
        book, _ = _book()
        book.note_modality("f" * 64, "video")
        with capture_logs() as logs:
            book.sender_missed("r1", "f" * 64, None)
            book.sender_missed("r2", "0" * 64, None)
        assert [(e["mm_hash"], e["modality"]) for e in logs] == [("f" * 16, "video"), ("0" * 16, "unknown")]

    def test_the_sender_cache_hook_reads_the_modality_from_the_prompt_updates(self) -> None:
        from types import SimpleNamespace

        from mmobs.vllm.cache_drift.cache_hooks import _item_modality

        assert _item_modality((object(), [SimpleNamespace(modality="image")])) == "image"
        assert _item_modality((object(), [])) is None
        assert _item_modality(None) is None
        assert _item_modality((object(), [object()])) is None
