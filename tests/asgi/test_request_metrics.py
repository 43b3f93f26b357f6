"""The middleware's request metrics: deferred and immediate recording agree, multiprocess stays exact.

The one-process recorder keeps plain counts and hands them to prometheus_client
when the registry is collected; the multiprocess one writes every update at
once. Both must expose exactly what ``Counter.inc`` / ``Histogram.observe`` /
``Gauge.inc`` would have.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.registry import RestrictedRegistry

from mmobs.asgi.request_metrics import RequestRecorder
from mmobs.observability.metrics import REQUEST_BUCKETS, SIZE_BUCKETS, fast_observe

ROOT = Path(__file__).resolve().parents[2]

#: (status class, seconds, first byte, request bytes, response bytes, images, fallback): edges included.
REQUESTS = [
    (2, 0.0004, 0.0003, 0, 15, False, False),
    (2, 0.001, 0.001, 64, 64, True, False),  # exactly on bucket bounds
    (4, 0.25, None, 1024, 0, True, False),  # no body byte sent
    (5, 12.0, 11.0, 70_000_000, 1, True, True),  # above the last finite bounds
    (2, 0.0, 0.0, 1, 100_000, False, True),
]


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample but the ``_created`` timestamps (which differ between two recorders)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def record(recorder: RequestRecorder) -> None:
    series = recorder.series("/v1/hash", "POST")
    for status_class, seconds, first_byte, request_bytes, response_bytes, images, fallback in REQUESTS:
        series.start()
        series.finish(status_class, seconds, first_byte, request_bytes, response_bytes, images, fallback, "rid")
    series.start()  # one still in flight


def test_deferred_and_immediate_recorders_expose_the_same_samples() -> None:
    deferred_registry, immediate_registry = CollectorRegistry(), CollectorRegistry()
    deferred = RequestRecorder(deferred_registry)
    immediate = RequestRecorder(immediate_registry, immediate=True)
    assert (deferred.immediate, immediate.immediate) == (False, True)
    record(deferred)
    record(immediate)

    exposed = samples(deferred_registry)
    assert exposed == samples(immediate_registry)
    labels = (("method", "POST"), ("route", "/v1/hash"))
    assert exposed[("mmobs_http_requests_in_progress", labels)] == 1.0
    assert exposed[("mmobs_http_requests_total", (*labels, ("status_class", "2xx")))] == 3.0
    assert exposed[("mmobs_http_request_duration_seconds_count", labels)] == 5.0
    assert exposed[("mmobs_http_time_to_first_byte_seconds_count", labels)] == 4.0
    assert exposed[("mmobs_http_request_size_bytes_sum", labels)] == 70_001_089.0
    assert exposed[("mmobs_http_image_requests_total", (("route", "/v1/hash"), ("status_class", "5xx")))] == 1.0
    assert exposed[("mmobs_http_exif_fallback_requests_total", (("route", "/v1/hash"),))] == 2.0


def test_deferred_counts_are_flushed_once_per_collection() -> None:
    registry = CollectorRegistry()
    recorder = RequestRecorder(registry)
    series = recorder.series("/ping", "GET")
    for expected in (1.0, 2.0, 3.0):
        series.start()
        series.finish(2, 0.001, 0.001, 0, 4, False, False, "rid")
        for _ in range(2):  # reading twice must not count twice
            total = registry.get_sample_value(
                "mmobs_http_requests_total", {"route": "/ping", "method": "GET", "status_class": "2xx"}
            )
            assert total == expected


def test_a_restricted_scrape_flushes_too() -> None:
    """prometheus_client's own server answers ``?name[]=...`` from the named collectors only."""
    registry = CollectorRegistry()
    recorder = RequestRecorder(registry)
    series = recorder.series("/ping", "GET")
    series.start()
    series.finish(2, 0.001, 0.001, 0, 4, False, False, "rid")
    restricted = RestrictedRegistry(["mmobs_http_requests_total"], registry)
    values = [s.value for f in restricted.collect() for s in f.samples if s.name == "mmobs_http_requests_total"]
    assert values == [1.0]


@pytest.mark.parametrize("buckets", [REQUEST_BUCKETS, SIZE_BUCKETS])
def test_bisected_observe_equals_observe(buckets: tuple[float, ...]) -> None:
    registry = CollectorRegistry()
    reference = Histogram("reference_seconds", "", buckets=buckets, registry=registry)
    fast = Histogram("fast_seconds", "", buckets=buckets, registry=registry)
    observe = fast_observe(fast)
    assert observe != fast.observe  # the fast path is in use
    amounts = [0.0, *buckets, *(b * 1.0001 for b in buckets), *(b * 0.9999 for b in buckets), 1e12, math.inf]
    for amount in amounts:
        reference.observe(amount)
        observe(amount)
    got = {
        s.name.replace("fast", "x"): (s.labels, s.value) for s in fast.collect()[0].samples if "created" not in s.name
    }
    want = {
        s.name.replace("reference", "x"): (s.labels, s.value)
        for s in reference.collect()[0].samples
        if "created" not in s.name
    }
    assert got == want


_MULTIPROCESS = textwrap.dedent(
    """
    import os, sys
    from prometheus_client import CollectorRegistry
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient
    from mmobs.asgi.middleware import MMObsMiddleware
    from mmobs.asgi.exposition import scrape_registry

    async def ping(request):
        return PlainTextResponse("pong")

    app = MMObsMiddleware(Starlette(routes=[Route("/ping", ping)]), registry=CollectorRegistry())
    client = TestClient(app)
    for _ in range(int(sys.argv[1])):
        assert client.get("/ping").status_code == 200
    if sys.argv[2] == "die-in-flight":
        app.recorder.series("/ping", "GET").start()  # a request in flight when the worker dies
        os._exit(0)
    registry = scrape_registry()
    labels = {"route": "/ping", "method": "GET"}
    from prometheus_client.openmetrics.exposition import generate_latest
    assert b" # {" not in generate_latest(registry)  # no exemplars in multiprocess mode
    print(registry.get_sample_value("mmobs_http_requests_total", {**labels, "status_class": "2xx"}),
          registry.get_sample_value("mmobs_http_requests_in_progress", labels),
          registry.get_sample_value("mmobs_http_request_duration_seconds_count", labels))
    """
)


def test_multiprocess_counts_are_exact_and_a_dead_workers_requests_are_not_in_progress(tmp_path: Path) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def worker(requests: int, mode: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", _MULTIPROCESS, str(requests), mode],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    worker(3, "die-in-flight")
    assert list(tmp_path.glob("gauge_livesum_*.db")), "the dead worker left its in-progress gauge behind"
    # 3 + 2 requests from two processes, summed exactly; the dead one's in-flight request is gone.
    assert worker(2, "scrape") == "5.0 0.0 5.0"
