"""A real Prometheus scraping a real ``mmobs serve`` and a real ``vllm serve``: every query and rule has data.

Prometheus (Debian's package) runs on a loopback port with a one-second scrape
and evaluation interval and a temporary data directory, loading the rule files
from ``dashboards/prometheus/`` as they ship. It scrapes two jobs: ``mmobs``
(``mmobs serve``) and ``mmobs-vllm`` (the session's ``vllm serve`` with mmobs's
plugin and preset, ``tests/support/vllm_server.py``: vLLM's own multimodal cache
counters and mmobs's series from the same process). Skips without the
binaries, and fails instead under ``MMOBS_REQUIRE_PROMETHEUS=1`` (as in CI).
Where the vLLM server environment is absent the vLLM job is left out, its
tests skip with the reason, and the dashboards' vLLM row is not checked
(``MMOBS_REQUIRE_VLLM_SERVER=1``, as in CI, makes that a failure).
"""

from __future__ import annotations

import base64
import importlib.util
import secrets
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.mixin import MixinConfig, vllm_cache
from dashboards.mixin.promql import QueryStyle
from tests.support import ManagedProcess, ServiceProcess, data_url, free_port, golden, images, require_binary
from tests.support.media_server import serving
from tests.support.otlp_receiver import OTLP_TEST_ENV, OtlpReceiver, otlp_proto_available
from tests.support.videos import Clip, clip_bytes
from tests.support.vllm_metrics import read_definitions
from tests.support.vllm_requests import chat, client_for
from tests.support.vllm_server import VllmServer, delta, require_vllm_server
from tests.vllm.test_vllm_front_end_server import fresh_jpeg, published, send

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "prometheus"

VLLM_JOB = "mmobs-vllm"
FALLBACK_IMAGES = 6
GOOD_IMAGES = 9
BAD_IMAGES = 4
#: Chat completions sent to the vLLM server: the malformed-EXIF JPEG, then one photo again and again (cache hits).
#: In all, fewer first tokens than MmobsVllmMmFrontEndDominatesTtft's floor (0.05 a second over 5 minutes: 15).
VLLM_FALLBACKS = 4
VLLM_REPEATS = 4
#: Chat completions with a new image by URL: one http(s), one file.
VLLM_BY_URL = 2
#: One clip sent twice: decoded, then a decode-free hit (the video panels).
VLLM_CLIP_SENDS = 2


def _queries_module() -> Any:
    spec = importlib.util.spec_from_file_location("mmobs_dashboard_queries", ROOT / "dashboards" / "queries.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(name: str, targets: str | Sequence[str], token: str | None = None, scrape_name: str = "") -> str:
    """A scrape config of ``targets`` as job ``name``; with ``token``, one of its own (``scrape_name``: a second
    endpoint of the same pods, as a PodMonitor's, whose ``authorization`` differs) that still labels them ``name``."""
    listed = ", ".join(f"'{address}'" for address in ([targets] if isinstance(targets, str) else targets))
    if token is None:
        return f"  - job_name: {name}\n    static_configs:\n      - targets: [{listed}]\n"
    return (
        f"  - job_name: {scrape_name}\n    authorization:\n      credentials: '{token}'\n"
        f"    static_configs:\n      - targets: [{listed}]\n"
        f"    relabel_configs:\n      - target_label: job\n        replacement: {name}\n"
    )


def scrape_jobs(name: str, targets: Sequence[str | VllmServer]) -> str:
    """Job ``name`` over ``targets``: addresses, and vLLM servers' metrics ports, each scraped with its token."""
    plain = [target for target in targets if isinstance(target, str)]
    text = _job(name, plain) if plain else ""
    servers = [target for target in targets if not isinstance(target, str)]
    for number, server in enumerate(servers):
        address, token = f"127.0.0.1:{server.extra_env['MMOBS_METRICS_PORT']}", server.extra_env["MMOBS_METRICS_TOKEN"]
        text += _job(name, address, token, f"{name}-port-{number}")
    return text


class PrometheusProcess(ManagedProcess):
    def __init__(
        self,
        tmp_path: Path,
        target: str | Sequence[str | VllmServer],
        vllm_target: str | Sequence[str | VllmServer] | None,
    ) -> None:
        """Scrape ``target`` as job ``mmobs`` and ``vllm_target`` as the bundle's vLLM job, every second (each one
        address or several: a job's replicas, or a pod's two endpoints; a :class:`VllmServer` stands for its
        ``MMOBS_METRICS_PORT``, scraped with its token)."""
        binary = require_binary("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "prometheus.yml"
        text = (
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES / 'recording-rules.yml'}\n  - {RULES / 'alerts.yml'}\n"
            f"scrape_configs:\n{scrape_jobs('mmobs', [target] if isinstance(target, str) else target)}"
        )
        if vllm_target is not None:
            text += scrape_jobs(VLLM_JOB, [vllm_target] if isinstance(vllm_target, str) else vllm_target)
        config.write_text(text)
        command = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
            # The exemplars of mmobs's counters (request_id and, where traced, trace_id).
            "--enable-feature=exemplar-storage",
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

    def exemplars(self, expr: str) -> list[dict[str, str]]:
        """The label sets of the exemplars Prometheus stored for ``expr`` in the last hour."""
        now = time.time()
        params = {"query": expr, "start": str(now - 3600), "end": str(now + 60)}
        payload = httpx.get(self.url + "/api/v1/query_exemplars", params=params, timeout=10).json()
        assert payload["status"] == "success", (expr, payload)
        return [exemplar["labels"] for series in payload["data"] for exemplar in series["exemplars"]]


@dataclass
class Stack:
    service: ServiceProcess
    prometheus: PrometheusProcess
    vllm: VllmServer | None
    #: The (request id, trace id) of each traced fallback request sent to the service.
    traced_fallbacks: dict[str, str]
    #: vLLM's own cache counters on its /metrics, before and after this module's traffic.
    vllm_before: dict[Any, float]
    vllm_after: dict[Any, float]

    def require_vllm(self) -> VllmServer:
        if self.vllm is None:
            require_vllm_server()  # skips with the reason, or fails under MMOBS_REQUIRE_VLLM_SERVER=1
        assert self.vllm is not None
        return self.vllm


@pytest.fixture(scope="module")
def vllm(request: pytest.FixtureRequest) -> VllmServer | None:
    """The session's vLLM server, or None where its environment is absent (CI fails instead)."""
    try:
        return request.getfixturevalue("vllm_server")
    except pytest.skip.Exception:
        return None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, vllm: VllmServer | None) -> Iterator[Stack]:
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    otlp = OtlpReceiver() if otlp_proto_available() else None
    tracing = ["--otlp-endpoint", otlp.endpoint] if otlp is not None else []
    service = ServiceProcess(tmp, *tracing, env=OTLP_TEST_ENV)
    # vLLM's pod as the bundle's PodMonitor scrapes it: its /metrics, and MMOBS_METRICS_PORT (the engine's series).
    vllm_target = None if vllm is None else [f"127.0.0.1:{vllm.port}", vllm]
    prometheus = PrometheusProcess(tmp, f"127.0.0.1:{service.port}", vllm_target)
    try:
        # Samples from before the traffic, so every rate() has a baseline.
        prometheus.wait_until(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 3, 30, "scraping")
        bad_jpeg = golden.input_bytes("bad-exif-header.jpg")
        good = [golden.input_bytes(name) for name in ("photo.jpg", "rgb.png", "palette.png")]
        traced_fallbacks: dict[str, str] = {}
        with httpx.Client(base_url=service.url, timeout=30) as client:
            for index in range(FALLBACK_IMAGES):
                request_id, trace_id = f"fallback-{index}", secrets.token_hex(16)
                traced_fallbacks[request_id] = trace_id
                headers = {"X-Request-ID": request_id, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
                response = client.post("/v1/hash", json={"images": [data_url(bad_jpeg)]}, headers=headers)
                assert response.json()["items"][0]["exif_fallback"]
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
        vllm_before = vllm_after = {}
        if vllm is not None:
            vllm_before = vllm.samples("vllm:mm_cache")
            fallbacks_before = prometheus.scalar(f'sum(mmobs_exif_fallback_total{{job="{VLLM_JOB}"}}) or vector(0)')
            for data in [bad_jpeg] * VLLM_FALLBACKS + [good[0]] * VLLM_REPEATS:
                assert chat(vllm, data)[0] == 200
            # Images by URL too (the front-end row's downloads), each new to the server (its processor runs).
            with serving(vllm.media_dir) as media:
                assert send(vllm, [f"{media}/{published(vllm, fresh_jpeg(), '.jpg')}"])[0] == 200
            assert send(vllm, [(vllm.media_dir / published(vllm, fresh_jpeg(), ".jpg")).as_uri()])[0] == 200
            # A clip, decoded then re-sent (the video panels: decodes, frames read and kept, a decode-free hit).
            clip = clip_bytes(Clip(frames=8, fps=4.0, seed=secrets.randbits(32)), vllm.venv / "bin" / "python")
            for _ in range(VLLM_CLIP_SENDS):
                assert video_chat(vllm, clip) == 200
            vllm_after = vllm.samples("vllm:mm_cache")
            prometheus.wait_until(
                lambda: (
                    prometheus.scalar(f'sum(mmobs_exif_fallback_total{{job="{VLLM_JOB}"}}) or vector(0)')
                    == fallbacks_before + VLLM_FALLBACKS
                ),
                30,
                "seeing the vLLM server's traffic",
            )
        prometheus.wait_until(
            lambda: (
                prometheus.scalar('sum(mmobs_exif_fallback_total{job="mmobs"})') == FALLBACK_IMAGES
                and prometheus.scalar('sum(mmobs_bad_images_total{job="mmobs"})') == BAD_IMAGES
            ),
            30,
            "seeing the traffic",
        )
        time.sleep(3)  # a few more scrapes and rule evaluations after the traffic
        yield Stack(service, prometheus, vllm, traced_fallbacks, vllm_before, vllm_after)
    finally:
        prometheus.stop()
        service.stop()
        if otlp is not None:
            otlp.stop()


def video_chat(server: VllmServer, clip: bytes) -> int:
    """The status of one chat completion carrying ``clip`` as an MP4 data URL."""
    url = f"data:video/mp4;base64,{base64.b64encode(clip).decode()}"
    content = [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": "What happens?"}]
    try:
        client_for(server).chat.completions.create(
            model=server.model, max_tokens=4, messages=[{"role": "user", "content": content}]
        )
    except openai.APIStatusError as error:
        return error.status_code
    return 200


def test_prometheus_stores_the_fallback_exemplars_with_their_trace_ids(stack):
    """The exemplars Prometheus scraped name a request that fell back and the trace the service gave it."""
    if not otlp_proto_available():
        pytest.skip("the service exports traces only with the otel extra (pip install -e '.[test]')")
    stored = stack.prometheus.exemplars('mmobs_exif_fallback_total{job="mmobs"}')
    assert stored, "no exemplar stored"
    assert all(stack.traced_fallbacks[labels["request_id"]] == labels["trace_id"] for labels in stored), stored
    vllm = stack.vllm
    if vllm is not None and vllm.otlp is not None:
        from_vllm = stack.prometheus.exemplars(f'mmobs_exif_fallback_total{{job="{VLLM_JOB}"}}')
        assert from_vllm, "no exemplar stored from the vLLM server"
        for labels in from_vllm:  # each a trace the vLLM server exported, holding the request's fallback
            spans = vllm.otlp.wait_for(
                lambda spans: any(s.name == "mmobs.image.key" for s in spans), labels["trace_id"]
            )
            servers = [span for span in spans if span.scope == "mmobs" and span.kind == 2]  # the preset's HTTP span
            assert [span.attributes["mmobs.request_id"] for span in servers] == [labels["request_id"]]


def test_exposition_passes_promtool_check_metrics(stack):
    result = subprocess.run(
        [require_binary("promtool"), "check", "metrics"], input=stack.service.metrics(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _reads_the_vllm_server(expr: str) -> bool:
    """Whether a query reads series only a vLLM API server exports: vLLM's own, or the plugin's."""
    return "vllm:" in expr or "mmobs_vllm_" in expr


def _queries_without_data(stack: Stack, of_the_vllm_server: bool) -> tuple[int, list[str]]:
    queries = _queries_module()
    chosen = [
        (source, expr) for source, expr in queries.all_queries() if _reads_the_vllm_server(expr) == of_the_vllm_server
    ]
    empty = [f"{source}: {expr}" for source, expr in chosen if not stack.prometheus.query(queries.substitute(expr))]
    return len(chosen), empty


def test_every_dashboard_query_and_recording_rule_of_mmobs_serve_returns_data(stack):
    checked, empty = _queries_without_data(stack, of_the_vllm_server=False)
    assert checked >= 30
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_every_dashboard_query_of_the_vllm_server_returns_data(stack):
    """vLLM's own series and the plugin's (it skips, or fails in CI, where the vLLM server environment is absent)."""
    stack.require_vllm()
    checked, empty = _queries_without_data(stack, of_the_vllm_server=True)
    assert checked >= 20
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_recording_rules_were_evaluated_by_prometheus(stack):
    prometheus = stack.prometheus
    queries = _queries_module()
    rules = httpx.get(prometheus.url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    recorded = [rule for group in rules for rule in group["rules"] if rule["type"] == "recording"]
    assert len(recorded) == len(queries.recording_rule_queries())
    assert all(rule["health"] == "ok" for group in rules for rule in group["rules"]), rules
    for rule in recorded:
        assert prometheus.query(rule["name"]), f"recording rule {rule['name']} stored no series"


def test_fallback_count_and_ratio_agree_with_what_was_sent(stack):
    prometheus = stack.prometheus
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
    """Real traffic: a third of the images are malformed, nothing else is wrong.

    On the tiny model the front end is a third to a half of vLLM's time to first token, a share
    MmobsVllmMmFrontEndDominatesTtft is right to count; below its floor of first tokens it stays quiet (its
    logic: the promtool tests of dashboards/prometheus/tests/alerts.test.yml).
    """
    if stack.vllm is not None:
        first_tokens = f'sum(rate(vllm:time_to_first_token_seconds_count{{job="{VLLM_JOB}"}}[5m]))'
        assert stack.prometheus.scalar(first_tokens) < 0.05
    alerts = httpx.get(stack.prometheus.url + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    names = {alert["labels"]["alertname"] for alert in alerts}
    assert names <= {"MmobsExifFallbackRatioHigh"}, alerts


def test_vllm_series_are_named_labelled_and_typed_as_vllm_defines_them(stack):
    """The real server exports what its own ``PrometheusStatLogger`` declares (read from the server's vLLM
    source), and Prometheus stores it under that name, colon kept: the name the dashboards read."""
    vllm = stack.require_vllm()
    source = Path(vllm.command[0]).parents[1] / "lib"
    (loggers,) = source.glob("python3*/site-packages/vllm/v1/metrics/loggers.py")
    found = read_definitions(loggers.read_text(encoding="utf-8"))
    families = {family.name: family for family in text_string_to_metric_families(vllm.metrics_text())}
    for definition in found.values():
        family = families[definition.name]
        assert (family.type, family.documentation) == (definition.kind, definition.documentation)
        # A histogram's series are its _count and _sum (and _bucket, with le): its _count stands for them.
        wire = definition.exported_name + ("_count" if definition.kind == "histogram" else "")
        samples = [sample for sample in family.samples if sample.name == wire]
        assert samples and all(set(sample.labels) == set(definition.labelnames) for sample in samples), samples
        stored = stack.prometheus.query(f'{{__name__="{wire}",job="{VLLM_JOB}"}}')
        assert len(stored) == len(samples), (definition, stored)
        for sample in stored:
            assert set(sample["metric"]) == {"__name__", "job", "instance", *definition.labelnames}, sample
            assert sample["metric"]["model_name"] == vllm.model
    # The other spelling, which a stand-in exporter once produced, is never stored.
    assert stack.prometheus.query('{__name__=~"vllm_mm_cache.*"}') == []


def model_variable_selector() -> str:
    """The series selector inside the dashboard's model_name variable query."""
    query = vllm_cache.model_name_variable(MixinConfig())["query"]
    return query.removeprefix("label_values(").removesuffix(", model_name)")


def test_vllm_row_hit_rate_and_model_variable_see_vllm(stack):
    """The row's hit rate, as the dashboard runs it for the model, is what vLLM's own counters say."""
    vllm = stack.require_vllm()
    queries = _queries_module()
    query = QueryStyle.for_dashboards(MixinConfig())
    moved = delta(stack.vllm_before, stack.vllm_after)
    hits = sum(value for (name, _), value in moved.items() if name == "vllm:mm_cache_hits_total")
    lookups = sum(value for (name, _), value in moved.items() if name == "vllm:mm_cache_queries_total")
    assert lookups == VLLM_FALLBACKS + VLLM_REPEATS + VLLM_BY_URL + VLLM_CLIP_SENDS, moved
    assert hits >= VLLM_FALLBACKS + VLLM_REPEATS - 2, moved
    (sample,) = stack.prometheus.query(
        queries.substitute(vllm_cache.hit_rate(query), job=VLLM_JOB, model_name=vllm.model)
    )
    assert sample["metric"] == {"model_name": vllm.model}
    assert 0 < float(sample["value"][1]) <= 1
    models = httpx.get(
        stack.prometheus.url + "/api/v1/label/model_name/values",
        params={"match[]": queries.substitute(model_variable_selector())},
        timeout=10,
    ).json()["data"]
    assert models == [vllm.model]
    # mmobs keys the same server's media: the row's mmobs panels have data for the vLLM job too.
    assert stack.prometheus.scalar(f'sum(rate(mmobs_media_keys_total{{job="{VLLM_JOB}"}}[1m]))') > 0
