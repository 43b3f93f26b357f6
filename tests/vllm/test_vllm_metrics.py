"""The vLLM metric names and labels the dashboards and the test exporter use are vLLM's own.

Reads ``vllm/v1/metrics/loggers.py`` of the installed vLLM (``.ci/install-vllm``
installs 0.33.0 without CUDA) without importing it, and compares. Skips with a
reason where vLLM is not installed; the reader itself is tested on a snippet
either way.
"""

from __future__ import annotations

import pytest

from dashboards.mixin import metrics
from tests.support.vllm_metrics import VLLM_0_33, MetricDefinition, read_definitions, vllm_source, vllm_version

SNIPPET = """
class PrometheusStatLogger:
    def __init__(self, vllm_config, engine_indexes=None):
        labelnames = ["model_name", "engine"]
        buckets = [0, 1]
        self.counter_mm_cache_queries = self._counter_cls(
            name="vllm:mm_cache_queries",
            documentation=("Multi-modal cache queries, " "in items."),
            labelnames=labelnames,
        )
        labelnames = ["model_name", "engine", "extra"]
        self.gauge = self._gauge_cls(name="vllm:mm_cache_hits", documentation="Hits.", labelnames=labelnames)
"""


def test_reader_resolves_names_labels_and_kinds_from_source() -> None:
    found = read_definitions(SNIPPET, ("vllm:mm_cache_queries", "vllm:mm_cache_hits"))
    assert found["vllm:mm_cache_queries"] == MetricDefinition(
        "vllm:mm_cache_queries", "counter", "Multi-modal cache queries, in items.", ("model_name", "engine")
    )
    # The label list in force at the call, not the first one of that name.
    assert found["vllm:mm_cache_hits"].labelnames == ("model_name", "engine", "extra")
    assert found["vllm:mm_cache_hits"].exported_name == "vllm:mm_cache_hits"
    assert found["vllm:mm_cache_queries"].exported_name == "vllm:mm_cache_queries_total"
    with pytest.raises(ValueError, match="no longer defines"):
        read_definitions(SNIPPET.replace("vllm:mm_cache_hits", "vllm:renamed"), ("vllm:mm_cache_hits",))


def test_installed_vllm_defines_what_the_dashboards_read() -> None:
    source = vllm_source()
    if source is None:
        pytest.skip("vLLM is not installed (.ci/install-vllm installs 0.33.0 without CUDA)")
    found = read_definitions(source.read_text(encoding="utf-8"))
    assert found == VLLM_0_33, f"vLLM {vllm_version()} changed its multimodal cache metrics or its time to first token"
    exported = {definition.exported_name for definition in found.values()}
    assert exported == metrics.VLLM_METRICS
    assert {definition.labelnames for definition in found.values()} == {metrics.VLLM_LABELS}
    assert found["vllm:mm_cache_queries"].exported_name == metrics.VLLM_MM_CACHE_QUERIES
    assert found["vllm:mm_cache_hits"].exported_name == metrics.VLLM_MM_CACHE_HITS
