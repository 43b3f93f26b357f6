"""``MMOBS_METRICS_PORT``'s parts without a vLLM: processes answering on Unix sockets, and their series summed.

The port itself, served from every process of a running ``vllm serve``, is
``tests/vllm/test_vllm_rust_front_end.py``'s.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mmobs.vllm.metrics_port.merge import MergedCollector, merged, own_series
from mmobs.vllm.metrics_port.peers import ask_peers, serve_peer
from tests.support.vllm_server import parse_samples, series


def process_registry(fallbacks: float, entries: float, seconds: float) -> CollectorRegistry:
    """One process's registry: mmobs's series, and one of vLLM's that the port must not serve."""
    registry = CollectorRegistry()
    Counter("mmobs_exif_fallback_total", "fallbacks", ["kind"], registry=registry).labels("image").inc(fallbacks)
    Gauge("mmobs_vllm_engine_mm_index_entries", "entries", registry=registry).set(entries)
    Gauge("mmobs_hasher_info", "info", ["fingerprint"], registry=registry).labels("abc").set(1)
    Histogram("mmobs_hash_duration_seconds", "hash", buckets=(0.1, 1.0), registry=registry).observe(seconds)
    Counter("vllm:prompt_tokens", "vLLM's own", registry=registry).inc(7)
    return registry


FAMILIES = frozenset(
    {
        "mmobs_exif_fallback_total",
        "mmobs_vllm_engine_mm_index_entries",
        "mmobs_hasher_info",
        "mmobs_hash_duration_seconds",
    }
)


def test_a_process_adds_the_families_it_is_asked_for_and_only_mmobs_series() -> None:
    registry = process_registry(1, 2, 0.5)
    text = own_series(registry, FAMILIES | {"vllm:prompt_tokens_total"}).decode()
    assert "mmobs_exif_fallback_total" in text and "vllm:prompt_tokens" not in text
    only = parse_samples(own_series(registry, {"mmobs_vllm_engine_mm_index_entries"}).decode())
    assert only == {series("mmobs_vllm_engine_mm_index_entries"): 2}
    assert own_series(registry, frozenset()) == b""


def test_counters_histograms_and_gauges_sum_across_processes_and_info_keeps_one() -> None:
    texts = [own_series(process_registry(1, 2, 0.05), FAMILIES), own_series(process_registry(3, 5, 0.5), FAMILIES)]
    registry = CollectorRegistry()
    registry.register(MergedCollector(lambda: texts))
    found = parse_samples(generate_latest(registry).decode())
    assert found[series("mmobs_exif_fallback_total", kind="image")] == 4
    assert found[series("mmobs_vllm_engine_mm_index_entries")] == 7
    assert found[series("mmobs_hasher_info", fingerprint="abc")] == 1
    assert found[series("mmobs_hash_duration_seconds_bucket", le="0.1")] == 1
    assert found[series("mmobs_hash_duration_seconds_bucket", le="1.0")] == 2
    assert found[series("mmobs_hash_duration_seconds_count")] == 2
    assert not [name for name, _ in found if name.endswith("_created")]
    assert [family.name for family in merged([b"vllm:x_total 1\n"])] == []


def test_the_owner_asks_every_live_peer_and_forgets_an_ended_one(tmp_path: Path) -> None:
    serve_peer(tmp_path, {"metrics": lambda: b"answer", "items": lambda: b"[]"})
    ended = tmp_path / "999999.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(ended))  # bound, never listening: what a process that ended leaves behind
    assert ask_peers(tmp_path, "metrics") == {os.getpid(): b"answer"}
    assert ask_peers(tmp_path, "unknown") == {os.getpid(): b""}
    assert not ended.exists()
