"""Load, worker kills, bounded series and the remote fetcher's limits (CI-sized)."""

from __future__ import annotations

import asyncio
import http.server
import os
import random
import re
import signal
import socketserver
import string
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from mmobs.errors import BadImageError
from mmobs.fetch import RemoteFetcher
from scripts.loadgen import run_load
from tests import golden
from tests.support import ServiceProcess, data_url, metric_value

FALLBACK = "mmobs_exif_fallback_total"
BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")


def fallback_total(text: str) -> float:
    return metric_value(text, FALLBACK)


def worker_pids(process: ServiceProcess) -> list[int]:
    """The uvicorn worker processes (children of the supervisor, not the resource tracker)."""
    children = psutil.Process(process.process.pid).children()
    return [c.pid for c in children if "multiprocessing.resource_tracker" not in " ".join(c.cmdline())]


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path, "--workers", "2")
    deadline = time.monotonic() + 20
    while len(worker_pids(process)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    yield process
    process.stop()


def test_load_with_exact_accounting_and_flat_memory(two_workers: ServiceProcess):
    """32 concurrent clients, a known share of malformed EXIF: no 5xx, exact counts, flat RSS."""
    warm = asyncio.run(run_load(two_workers.url, requests=300, concurrency=32, fallback_every=4))
    rss_after_warmup = sum(psutil.Process(pid).memory_info().rss for pid in worker_pids(two_workers))
    main = asyncio.run(run_load(two_workers.url, requests=1200, concurrency=32, fallback_every=3))
    rss_at_end = sum(psutil.Process(pid).memory_info().rss for pid in worker_pids(two_workers))

    for result in (warm, main):
        assert result.transport_errors == 0
        assert result.server_errors == 0
        assert result.statuses == {200: result.sent}
        assert result.fallback_answered == result.fallback_sent
    sent_fallbacks = warm.fallback_sent + main.fallback_sent
    assert sent_fallbacks == 75 + 400
    text = two_workers.metrics()
    assert fallback_total(text) == sent_fallbacks
    assert metric_value(text, "mmobs_http_exif_fallback_requests_total") == sent_fallbacks
    assert metric_value(text, "mmobs_http_requests_total", {"route": "/v1/hash", "status_class": "2xx"}) == 1500
    # Flat: well under a megabyte of growth per thousand requests per worker.
    growth = rss_at_end - rss_after_warmup
    assert growth < 8 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB over 1200 requests"


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
                    body = rng.choice([b"{", b"[]", b'{"images": ["data:image/png;base64,@@"]}',
                                       b'{"images": ["http://x/y.png"]}', b'{"images": ["data:,x"]}'])
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


def test_metrics_on_a_separate_port(tmp_path: Path):
    from tests.support import free_port

    port = free_port()
    process = ServiceProcess(tmp_path, "--metrics-port", str(port))
    try:
        assert httpx.get(process.url + "/metrics").status_code == 404
        httpx.post(process.url + "/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]})
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert fallback_total(text) == 1
    finally:
        process.stop()


# -- the remote fetcher ----------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        image = golden.input_bytes("photo.jpg")
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
            self.end_headers()
        elif self.path == "/big":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"\xff" * 300_000)
        elif self.path == "/slow":
            self.send_response(200)
            self.end_headers()
            for _ in range(30):
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                time.sleep(0.1)
        elif self.path == "/missing":
            self.send_response(404)
            self.end_headers()
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(image)))
            self.end_headers()
            self.wfile.write(image)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def image_server() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _fetcher(**options: object) -> RemoteFetcher:
    defaults: dict[str, object] = {"max_bytes": 200_000, "timeout_seconds": 1.0, "allow_private": True}
    return RemoteFetcher(["127.0.0.1"], **{**defaults, **options})  # type: ignore[arg-type]


def test_fetcher_gets_allow_listed_image(image_server: str):
    assert _fetcher().fetch(f"http://{image_server}/photo.jpg") == golden.input_bytes("photo.jpg")


@pytest.mark.parametrize(
    ("path", "options", "reason", "words"),
    [
        ("/photo.jpg", {"allow_private": False}, "unsupported_url", "private address"),
        ("/redirect", {}, "fetch_failed", "redirect"),
        ("/big", {}, "too_large", "larger than"),
        ("/slow", {"timeout_seconds": 0.5}, "fetch_failed", ""),
        ("/missing", {}, "fetch_failed", "404"),
    ],
)
def test_fetcher_limits(image_server: str, path: str, options: dict, reason: str, words: str):
    started = time.monotonic()
    with pytest.raises(BadImageError) as caught:
        _fetcher(**options).fetch(f"http://{image_server}{path}")
    assert caught.value.reason == reason and words in caught.value.message
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "url", ["http://evil.example/x.png", "ftp://127.0.0.1/x.png", "file:///etc/passwd", "http:///nohost"]
)
def test_fetcher_refuses_hosts_and_schemes_off_the_list(url: str):
    with pytest.raises(BadImageError) as caught:
        _fetcher().fetch(url)
    assert caught.value.reason == "unsupported_url"


def test_service_fetches_only_when_allowed(tmp_path: Path, image_server: str):
    url = f"http://{image_server}/photo.jpg"
    default = ServiceProcess(tmp_path)
    try:
        response = httpx.post(default.url + "/v1/hash", json={"images": [url]})
        assert response.status_code == 400 and response.json()["error"]["reason"] == "unsupported_url"
    finally:
        default.stop()
    allowed = ServiceProcess(tmp_path, "--allow-remote-host", "127.0.0.1", "--fetch-allow-private")
    try:
        response = httpx.post(allowed.url + "/v1/hash", json={"images": [url]})
        assert response.status_code == 200, response.text
        assert response.json()["items"][0]["mm_hash"] == golden.case("media-photo.jpg")["expected"]
        redirect = httpx.post(allowed.url + "/v1/hash", json={"images": [f"http://{image_server}/redirect"]})
        assert redirect.status_code == 400 and redirect.json()["error"]["reason"] == "fetch_failed"
    finally:
        allowed.stop()
