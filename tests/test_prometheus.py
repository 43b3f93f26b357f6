"""A real Prometheus scraping a real ``mmobs serve``: every dashboard query and rule has data.

Prometheus (Debian's package) runs on a loopback port with a one-second scrape
and evaluation interval and a temporary data directory, loading the rule files
from ``dashboards/prometheus/`` as they ship. Skips without the binaries, and
fails instead under ``MMOBS_REQUIRE_PROMETHEUS=1`` (as in CI).
"""

from __future__ import annotations

import importlib.util
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import golden, images
from tests.support import ServiceProcess, data_url, free_port, require_binary

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "dashboards" / "prometheus"

FALLBACK_IMAGES = 6
GOOD_IMAGES = 9
BAD_IMAGES = 4


def _queries_module() -> Any:
    spec = importlib.util.spec_from_file_location("mmobs_dashboard_queries", ROOT / "dashboards" / "queries.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PrometheusProcess:
    def __init__(self, tmp_path: Path, target: str) -> None:
        binary = require_binary("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES / 'recording-rules.yml'}\n  - {RULES / 'alerts.yml'}\n"
            "scrape_configs:\n  - job_name: mmobs\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log_path = tmp_path / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait(lambda: httpx.get(self.url + "/-/ready", timeout=1).status_code == 200, 30, "ready")

    def _wait(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log_path.read_text(errors='replace')}")
            try:
                if condition():
                    return
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                pass
            time.sleep(0.25)
        raise AssertionError(f"prometheus not {what} within {timeout}s:\n{self.log_path.read_text(errors='replace')[-3000:]}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        payload = response.json()
        assert payload["status"] == "success", (expr, payload)
        return payload["data"]["result"]

    def scalar(self, expr: str) -> float:
        (sample,) = self.query(expr)
        return float(sample["value"][1])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, PrometheusProcess]]:
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    service = ServiceProcess(tmp)
    prometheus = PrometheusProcess(tmp, f"127.0.0.1:{service.port}")
    try:
        # Samples from before the traffic, so every rate() has a baseline.
        prometheus._wait(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 3, 30, "scraping")
        bad_jpeg = golden.input_bytes("bad-exif-header.jpg")
        good = [golden.input_bytes(name) for name in ("photo.jpg", "rgb.png", "palette.png")]
        with httpx.Client(base_url=service.url, timeout=30) as client:
            for _ in range(FALLBACK_IMAGES):
                assert client.post("/v1/hash", json={"images": [data_url(bad_jpeg)]}).json()["items"][0]["exif_fallback"]
            for i in range(GOOD_IMAGES):
                item = client.post("/v1/hash", json={"images": [data_url(good[i % 3])]}).json()["items"][0]
                assert item["exif_fallback"] is False
            for reason_input in ("data:image/png;base64,", data_url(b"text"), data_url(images.jpeg_bytes()[:400]), "https://x/y"):
                assert client.post("/v1/hash", json={"images": [reason_input]}).status_code == 400
        prometheus._wait(
            lambda: prometheus.scalar('sum(mmobs_exif_fallback_total{job="mmobs"})') == FALLBACK_IMAGES
            and prometheus.scalar('sum(mmobs_bad_images_total{job="mmobs"})') == BAD_IMAGES,
            30,
            "seeing the traffic",
        )
        time.sleep(3)  # a few more scrapes and rule evaluations after the traffic
        yield service, prometheus
    finally:
        prometheus.stop()
        service.stop()


def test_exposition_passes_promtool_check_metrics(stack):
    service, _ = stack
    result = subprocess.run(
        [require_binary("promtool"), "check", "metrics"], input=service.metrics(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_query_and_recording_rule_returns_data(stack):
    _, prometheus = stack
    queries = _queries_module()
    empty = []
    checked = 0
    for source, expr in queries.all_queries():
        if not prometheus.query(queries.substitute(expr)):
            empty.append(f"{source}: {expr}")
        checked += 1
    assert checked >= 30
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_recording_rules_were_evaluated_by_prometheus(stack):
    _, prometheus = stack
    queries = _queries_module()
    rules = httpx.get(prometheus.url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    recorded = [rule for group in rules for rule in group["rules"] if rule["type"] == "recording"]
    assert len(recorded) == len(queries.recording_rule_queries())
    assert all(rule["health"] == "ok" for group in rules for rule in group["rules"]), rules
    for rule in recorded:
        assert prometheus.query(rule["name"]), f"recording rule {rule['name']} stored no series"


def test_fallback_count_and_ratio_agree_with_what_was_sent(stack):
    _, prometheus = stack
    assert prometheus.scalar('sum(mmobs_exif_fallback_total{job="mmobs",kind="media_with_bytes",exception="SyntaxError"})') == FALLBACK_IMAGES
    expected_ratio = FALLBACK_IMAGES / (FALLBACK_IMAGES + GOOD_IMAGES)
    ratio = prometheus.scalar('job:mmobs_exif_fallback_ratio:rate5m{job="mmobs"}')
    assert ratio == pytest.approx(expected_ratio, rel=1e-6)
    request_ratio = prometheus.scalar('job:mmobs_http_exif_fallback_requests_ratio:rate5m{job="mmobs"}')
    # Per request: the fallback requests over every request that loaded an image (bad ones included).
    assert request_ratio == pytest.approx(FALLBACK_IMAGES / (FALLBACK_IMAGES + GOOD_IMAGES + BAD_IMAGES), rel=1e-6)
    assert prometheus.scalar('sum(mmobs_http_image_requests_total{job="mmobs",status_class="5xx"}) or vector(0)') == 0
    assert prometheus.scalar('job:mmobs_hasher_fingerprints:count{job="mmobs"}') == 1


def test_alerts_quiet_except_the_fallback_ratio(stack):
    """Real traffic: a third of the images are malformed, nothing else is wrong."""
    _, prometheus = stack
    alerts = httpx.get(prometheus.url + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    names = {alert["labels"]["alertname"] for alert in alerts}
    assert names <= {"MmobsExifFallbackRatioHigh"}, alerts
