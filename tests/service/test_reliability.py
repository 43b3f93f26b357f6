"""Load, worker kills and bounded series (CI-sized); the fetcher's limits are in tests/service/test_fetch.py."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import string
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from scripts.loadgen import run_load
from tests.support import ServiceProcess, data_url, golden, metric_value

FALLBACK = "mmobs_exif_fallback_total"
BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")


def fallback_total(text: str) -> float:
    return metric_value(text, FALLBACK)


def worker_pids(process: ServiceProcess) -> list[int]:
    """The uvicorn worker processes (children of the supervisor, not the resource tracker)."""
    pids = []
    for child in psutil.Process(process.process.pid).children():
        try:
            if "multiprocessing.resource_tracker" not in " ".join(child.cmdline()):
                pids.append(child.pid)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue  # a worker that just exited (killed by the test, or replaced): not serving
    return pids


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path, "--workers", "2")
    deadline = time.monotonic() + 20
    while len(worker_pids(process)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    yield process
    process.stop()


def tree_rss(process: ServiceProcess) -> int:
    """Resident memory of every worker and its decode workers."""
    total = 0
    for pid in worker_pids(process):
        for proc in [psutil.Process(pid), *psutil.Process(pid).children()]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # a decode worker being replaced
                pass
    return total


def _connection_lines(process: ServiceProcess) -> list[str]:
    """The server's lines about shed connections and replaced workers (uvicorn kills one that misses a health check)."""
    words = ("connections_shed", "died", "not responding", "Terminated", "timeout")
    return [line[:300] for line in process.logs().splitlines() if any(word in line for word in words)][-20:]


def test_load_with_exact_accounting_and_flat_memory(two_workers: ServiceProcess):
    """32 concurrent clients, a known share of malformed EXIF: no 5xx, exact counts, flat RSS.

    Every 10th request of the main load carries the regression JPEG and then a non-image: it is
    refused (400), and its fallback, which happened, is counted (the README's rule).
    """
    workers = set(worker_pids(two_workers))
    warm = asyncio.run(run_load(two_workers.url, requests=300, concurrency=32, fallback_every=4))
    rss_after_warmup = tree_rss(two_workers)
    bad_before = metric_value(two_workers.metrics(), "mmobs_bad_images_total")
    main = asyncio.run(run_load(two_workers.url, requests=1200, concurrency=32, fallback_every=3, refused_every=10))
    rss_at_end = tree_rss(two_workers)

    for result in (warm, main):
        # A transport error names itself, and whatever the server said of its connections and workers then.
        assert result.transport_errors == 0, (result.transport_error_details, _connection_lines(two_workers))
        assert result.server_errors == 0
        expected = {200: result.sent - result.refused_sent, 400: result.refused_sent}
        assert result.statuses == (expected if result.refused_sent else {200: result.sent})
        assert result.refused_answered == result.refused_sent
        assert result.fallback_answered == result.fallback_sent - result.refused_sent
    sent_fallbacks = warm.fallback_sent + main.fallback_sent
    assert (main.refused_sent, sent_fallbacks) == (120, 75 + 400 + 120 - 40)  # 40 indices are both
    text = two_workers.metrics()
    assert fallback_total(text) == sent_fallbacks
    assert metric_value(text, "mmobs_http_exif_fallback_requests_total") == sent_fallbacks
    assert metric_value(text, "mmobs_bad_images_total") - bad_before == main.refused_sent
    assert metric_value(text, "mmobs_http_requests_total", {"route": "/v1/hash", "status_class": "2xx"}) == 1500 - 120
    assert set(worker_pids(two_workers)) == workers, _connection_lines(two_workers)  # no worker restarted
    # Flat: well under a megabyte of growth per thousand requests per process (2 workers, 4 decode workers).
    growth = rss_at_end - rss_after_warmup
    assert growth < 12 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB over 1200 requests"


def test_killed_worker_loses_no_recorded_count(two_workers: ServiceProcess):
    answered_before = 0
    for _ in range(30):
        response = httpx.post(two_workers.url + "/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]})
        assert response.status_code == 200
        answered_before += 1
    assert fallback_total(two_workers.metrics()) == answered_before

    async def load_and_kill() -> object:
        task = asyncio.create_task(run_load(two_workers.url, requests=400, concurrency=16, fallback_every=1))
        await asyncio.sleep(0.5)
        victim = worker_pids(two_workers)[0]
        os.kill(victim, signal.SIGKILL)
        return await task, victim

    result, victim = asyncio.run(load_and_kill())
    assert result.server_errors == 0
    # Requests in flight on the killed worker may fail; nothing else may.
    assert result.transport_errors <= 16
    after = fallback_total(two_workers.metrics())
    # Every answered fallback was counted, and none twice (in-flight ones may or may not be).
    assert answered_before + result.fallback_answered <= after <= answered_before + result.sent
    # The service keeps answering, and uvicorn replaced the dead worker.
    for _ in range(10):
        assert httpx.post(two_workers.url + "/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]}).status_code == 200
    assert fallback_total(two_workers.metrics()) == after + 10
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (victim in worker_pids(two_workers) or len(worker_pids(two_workers)) < 2):
        time.sleep(0.2)
    assert victim not in worker_pids(two_workers) and len(worker_pids(two_workers)) == 2


def _series(text: str) -> set[str]:
    return {line.split(" ")[0] for line in text.splitlines() if line.startswith("mmobs_")}


def test_adversarial_flood_leaves_series_bounded(tmp_path: Path):
    process = ServiceProcess(tmp_path)
    try:
        rng = random.Random(7)
        with httpx.Client(base_url=process.url, timeout=30) as client:

            def flood(n: int) -> None:
                for i in range(n):
                    path = "/" + "".join(rng.choices(string.ascii_letters + "/%._-", k=rng.randint(1, 60)))
                    method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "PROPFIND", "BREW"])
                    headers = {
                        "x-request-id": "".join(rng.choices(string.printable.strip(), k=rng.randint(1, 300))),
                        f"x-junk-{i}": "y" * rng.randint(0, 100),
                    }
                    response = client.request(method, path, headers=headers)
                    assert response.status_code < 500
                    # Every kind of refusal the hash route can give, too.
                    body = rng.choice(
                        [
                            b"{",
                            b"[]",
                            b'{"images": ["data:image/png;base64,@@"]}',
                            b'{"images": ["http://x/y.png"]}',
                            b'{"images": ["data:,x"]}',
                        ]
                    )
                    assert client.post("/v1/hash", content=body, headers=headers).status_code < 500

            flood(150)
            process.metrics()  # the first scrape creates the /metrics route's own series
            before = _series(process.metrics())
            flood(600)
            after = _series(process.metrics())
        assert after == before, sorted(after - before)[:10]
        # Request series come from closed sets: the route table, the methods mmobs names, "other".
        routes = {label for line in after for label in re.findall(r'route="([^"]*)"', line)}
        methods = {label for line in after for label in re.findall(r'method="([^"]*)"', line)}
        assert routes <= {"<unmatched>", "/v1/hash", "/v1/keys", "/healthz"}, routes
        assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}, methods
        assert len(after) < 1000  # about 70 series a (route, method): four histograms, the counters, a gauge
    finally:
        process.stop()


def test_request_ids_are_validated_before_logs_and_headers(tmp_path: Path):
    process = ServiceProcess(tmp_path)
    try:
        evil = "abc\u2028def" + "x" * 10
        response = httpx.post(
            process.url + "/v1/hash",
            json={"images": [data_url(BAD_HEADER_JPEG)]},
            headers={"x-request-id": evil.encode("utf-8")},  # type: ignore[dict-item]
        )
        assert response.status_code == 200
        echoed = response.headers["x-request-id"]
        assert echoed != evil and len(echoed) == 32 and all(c in string.hexdigits for c in echoed)
        events = [e for e in process.log_events() if e.get("event") == "exif_fallback"]
        assert [e["request_id"] for e in events] == [echoed]
        assert all("\u2028" not in line for line in process.logs().splitlines())
    finally:
        process.stop()


def test_metrics_on_a_separate_port_honour_the_token(tmp_path: Path):
    """``--metrics-token`` used to be ignored on ``--metrics-port``, which then served everything unauthenticated."""
    from tests.support import free_port

    port = free_port()
    process = ServiceProcess(tmp_path, "--metrics-port", str(port), "--metrics-token", "s3cret")
    try:
        assert httpx.get(process.url + "/metrics").status_code == 404
        httpx.post(process.url + "/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]})
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        refused = httpx.get(metrics_url)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(metrics_url, headers={"Authorization": "Bearer nope"}).status_code == 401
        text = httpx.get(metrics_url, headers={"Authorization": "Bearer s3cret"}).text
        assert fallback_total(text) == 1
        assert metric_value(text, "mmobs_metrics_unauthorized_total", {"credentials": "missing"}) == 1
        assert metric_value(text, "mmobs_metrics_unauthorized_total", {"credentials": "wrong"}) == 1
        accept = "application/openmetrics-text; version=1.0.0"
        openmetrics = httpx.get(metrics_url, headers={"Authorization": "Bearer s3cret", "Accept": accept})
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.endswith("# EOF\n")
    finally:
        process.stop()
