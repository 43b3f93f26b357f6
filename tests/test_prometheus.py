"""A real Prometheus scraping a real ``mmobs serve`` and vLLM's cache metrics: every query and rule has data.

Prometheus (Debian's package) runs on a loopback port with a one-second scrape
and evaluation interval and a temporary data directory, loading the rule files
from ``dashboards/prometheus/`` as they ship. It scrapes two jobs: ``mmobs``
(``mmobs serve``) and ``mmobs-vllm`` (:mod:`tests.vllm_metrics`: vLLM 0.33's
multimodal cache counters, built from vLLM's own definitions, with mmobs keying
the media in the same process, as when mmobs runs inside vLLM). Skips without
the binaries, and fails instead under ``MMOBS_REQUIRE_PROMETHEUS=1`` (as in CI).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.mixin import MixinConfig, vllm_cache
from dashboards.mixin.promql import QueryStyle
from tests import golden, images
from tests.support import ManagedProcess, ServiceProcess, data_url, free_port, require_binary
from tests.vllm_metrics import definitions

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "dashboards" / "prometheus"

VLLM_JOB = "mmobs-vllm"
#: vllm:mm_cache_hits_total as Prometheus 3 stores it, or vllm_mm_cache_hits_total as 2.x does.
HITS_STORED = "vllm[:_]mm_cache_hits_total"
MODEL_NAME = "mmobs-test/vision-model"
ENGINES = 2
FALLBACK_IMAGES = 6
GOOD_IMAGES = 9
BAD_IMAGES = 4


def _queries_module() -> Any:
    spec = importlib.util.spec_from_file_location("mmobs_dashboard_queries", ROOT / "dashboards" / "queries.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class VllmExporterProcess(ManagedProcess):
    """``python -m tests.vllm_metrics``: vLLM's multimodal cache counters plus mmobs, on a loopback port."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        command = [
            sys.executable, "-m", "tests.vllm_metrics", "--port", str(self.port),
            "--model-name", MODEL_NAME, "--engines", str(ENGINES),
        ]  # fmt: skip
        super().__init__(
            "vLLM exporter",
            command,
            tmp_path / "vllm-exporter.log",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
        self.wait_until(lambda: httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=1).status_code == 200)


class PrometheusProcess(ManagedProcess):
    def __init__(self, tmp_path: Path, target: str, vllm_target: str) -> None:
        binary = require_binary("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES / 'recording-rules.yml'}\n  - {RULES / 'alerts.yml'}\n"
            "scrape_configs:\n  - job_name: mmobs\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
            f"  - job_name: {VLLM_JOB}\n    static_configs:\n"
            f"      - targets: ['{vllm_target}']\n"
        )
        command = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
        ]
        super().__init__("prometheus", command, tmp_path / "prometheus.log")
        self.wait_until(lambda: httpx.get(self.url + "/-/ready", timeout=1).status_code == 200)

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        payload = response.json()
        assert payload["status"] == "success", (expr, payload)
        return payload["data"]["result"]

    def scalar(self, expr: str) -> float:
        (sample,) = self.query(expr)
        return float(sample["value"][1])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, PrometheusProcess]]:
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    service = ServiceProcess(tmp)
    exporter = VllmExporterProcess(tmp)
    prometheus = PrometheusProcess(tmp, f"127.0.0.1:{service.port}", f"127.0.0.1:{exporter.port}")
    try:
        # Samples from before the traffic, so every rate() has a baseline.
        prometheus.wait_until(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 3, 30, "scraping")
        bad_jpeg = golden.input_bytes("bad-exif-header.jpg")
        good = [golden.input_bytes(name) for name in ("photo.jpg", "rgb.png", "palette.png")]
        with httpx.Client(base_url=service.url, timeout=30) as client:
            for _ in range(FALLBACK_IMAGES):
                assert client.post("/v1/hash", json={"images": [data_url(bad_jpeg)]}).json()["items"][0][
                    "exif_fallback"
                ]
            for i in range(GOOD_IMAGES):
                item = client.post("/v1/hash", json={"images": [data_url(good[i % 3])]}).json()["items"][0]
                assert item["exif_fallback"] is False
            for reason_input in (
                "data:image/png;base64,",
                data_url(b"text"),
                data_url(images.jpeg_bytes()[:400]),
                "https://x/y",
            ):
                assert client.post("/v1/hash", json={"images": [reason_input]}).status_code == 400
        prometheus.wait_until(
            lambda: (
                prometheus.scalar('sum(mmobs_exif_fallback_total{job="mmobs"})') == FALLBACK_IMAGES
                and prometheus.scalar('sum(mmobs_bad_images_total{job="mmobs"})') == BAD_IMAGES
            ),
            30,
            "seeing the traffic",
        )
        prometheus.wait_until(
            lambda: prometheus.scalar(f'sum(rate({{__name__=~"{HITS_STORED}",job="{VLLM_JOB}"}}[1m]))') > 0,
            30,
            "seeing vLLM cache hits",
        )
        time.sleep(3)  # a few more scrapes and rule evaluations after the traffic
        yield service, prometheus
    finally:
        prometheus.stop()
        exporter.stop()
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
    assert (
        prometheus.scalar('sum(mmobs_exif_fallback_total{job="mmobs",kind="media_with_bytes",exception="SyntaxError"})')
        == FALLBACK_IMAGES
    )
    expected_ratio = FALLBACK_IMAGES / (FALLBACK_IMAGES + GOOD_IMAGES)
    ratio = prometheus.scalar('job:mmobs_exif_fallback_per_media_keys:ratio_rate5m{job="mmobs"}')
    assert ratio == pytest.approx(expected_ratio, rel=1e-6)
    request_ratio = prometheus.scalar(
        'job:mmobs_http_exif_fallback_requests_per_http_image_requests:ratio_rate5m{job="mmobs"}'
    )
    # Per request: the fallback requests over every request that loaded an image (bad ones included).
    assert request_ratio == pytest.approx(FALLBACK_IMAGES / (FALLBACK_IMAGES + GOOD_IMAGES + BAD_IMAGES), rel=1e-6)
    assert prometheus.scalar('sum(mmobs_http_image_requests_total{job="mmobs",status_class="5xx"}) or vector(0)') == 0
    assert prometheus.scalar('job:mmobs_hasher_info:count_distinct_fingerprint{job="mmobs"}') == 1


def test_alerts_quiet_except_the_fallback_ratio(stack):
    """Real traffic: a third of the images are malformed, nothing else is wrong."""
    _, prometheus = stack
    alerts = httpx.get(prometheus.url + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    names = {alert["labels"]["alertname"] for alert in alerts}
    assert names <= {"MmobsExifFallbackRatioHigh"}, alerts


def test_vllm_series_are_named_labelled_and_typed_as_vllm_defines_them(stack):
    """The target exports what vLLM's PrometheusStatLogger declares (read from vLLM's source), and Prometheus
    stores it under the name the dashboards read.

    prometheus_client writes the colon of ``vllm:`` as ``_`` in OpenMetrics sample names (its HELP/TYPE keep
    the colon; prometheus/client_python#1177), and Prometheus 2.x asks for OpenMetrics, so what it stores is
    ``vllm_mm_cache_..._total``; Prometheus 3 keeps the colon. A real vLLM behind the same client and
    Prometheus gives the same, which is why the dashboards read both spellings.
    """
    _, prometheus = stack
    found, origin = definitions()
    exporter_url = next(
        target["scrapeUrl"]
        for target in httpx.get(prometheus.url + "/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        if target["labels"]["job"] == VLLM_JOB
    )
    families = {family.name: family for family in text_string_to_metric_families(httpx.get(exporter_url).text)}
    for definition in found.values():
        family = families[definition.name]
        assert (family.type, family.documentation) == (definition.kind, definition.documentation), origin
        samples = [sample for sample in family.samples if sample.name == definition.exported_name]
        assert len(samples) == ENGINES, (origin, family.samples)
        assert all(set(sample.labels) == set(definition.labelnames) for sample in samples), samples
        spellings = {definition.exported_name, definition.exported_name.replace(":", "_")}
        stored = prometheus.query(f'{{__name__=~"{"|".join(spellings)}",job="{VLLM_JOB}"}}')
        assert len(stored) == ENGINES, (definition, stored)
        for sample in stored:
            assert sample["metric"]["__name__"] in spellings, sample
            assert set(sample["metric"]) == {"__name__", "job", "instance", *definition.labelnames}, sample
            assert sample["metric"]["model_name"] == MODEL_NAME
        assert {sample["metric"]["engine"] for sample in stored} == {str(engine) for engine in range(ENGINES)}


def model_variable_selector() -> str:
    """The series selector inside the dashboard's model_name variable query."""
    query = vllm_cache.model_name_variable(MixinConfig())["query"]
    return query.removeprefix("label_values(").removesuffix(", model_name)")


def test_vllm_row_hit_rate_and_model_variable_see_vllm(stack):
    """The row's hit-rate query, as the dashboard runs it for the model, agrees with what the exporter counts."""
    _, prometheus = stack
    queries = _queries_module()
    query = QueryStyle.for_dashboards(MixinConfig())
    hit_rate = prometheus.query(queries.substitute(vllm_cache.hit_rate(query), job=VLLM_JOB, model_name=MODEL_NAME))
    (sample,) = hit_rate
    assert sample["metric"] == {"model_name": MODEL_NAME}
    # The exporter cycles through three images: after the first three lookups every one is a hit.
    assert 0.9 <= float(sample["value"][1]) <= 1.0
    models = httpx.get(
        prometheus.url + "/api/v1/label/model_name/values",
        params={"match[]": queries.substitute(model_variable_selector())},
        timeout=10,
    ).json()["data"]
    assert models == [MODEL_NAME]
    # mmobs keys the same target's media: the row's mmobs panels have data for the vLLM job too.
    assert prometheus.scalar(f'sum(rate(mmobs_media_keys_total{{job="{VLLM_JOB}"}}[1m]))') > 0
