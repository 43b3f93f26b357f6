"""``mmobs serve`` started with options of its own: the metrics endpoint's token and OpenMetrics, a chosen vLLM
release's keys, two workers whose counts sum exactly."""

from __future__ import annotations

from pathlib import Path

import httpx

from mmobs import key_for_bytes
from mmobs.observability.fingerprint import compute_fingerprint
from tests.support import ServiceProcess, data_url, golden, metric_value

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
FALLBACK = "mmobs_exif_fallback_total"


# -- metrics endpoint options -------------------------------------------------------------------


def test_metrics_token_and_openmetrics(tmp_path: Path):
    process = ServiceProcess(tmp_path, "--metrics-token", "s3cret")
    try:
        assert httpx.get(process.url + "/metrics").status_code == 401
        assert httpx.get(process.url + "/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        response = httpx.get(
            process.url + "/metrics",
            headers={"Authorization": "Bearer s3cret", "Accept": "application/openmetrics-text; version=1.0.0"},
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/openmetrics-text")
        assert response.text.endswith("# EOF\n")
        assert "mmobs_hasher_info" in response.text
    finally:
        process.stop()


# -- keys for a chosen vLLM release ----------------------------------------------------------------


def test_serve_keys_as_the_vllm_release_it_is_told(tmp_path: Path):
    """``--vllm-version 0.30.0``: that release's key format on both routes, the fallback counted as ever.

    ``key_for_bytes(vllm_version=...)`` is held to each release's own hasher in tests/keys/test_releases.py.
    """
    photo = golden.input_bytes("palette.png")
    process = ServiceProcess(tmp_path, "--vllm-version", "0.30.0")
    try:
        for route in ("/v1/hash", "/v1/keys"):
            response = httpx.post(process.url + route, json={"images": [data_url(BAD_HEADER_JPEG), data_url(photo)]})
            assert response.status_code == 200, response.text
            keys = [item["mm_hash"] for item in response.json()["items"]]
            assert keys == [key_for_bytes(data, vllm_version="0.30.0") for data in (BAD_HEADER_JPEG, photo)], route
            assert keys[1] != key_for_bytes(photo), "0.30's format differs from the newest's"
        metrics = process.metrics()
        assert metric_value(metrics, FALLBACK, {"kind": "media_with_bytes", "exception": "SyntaxError"}) == 1
        # The fleet fingerprint is 0.30's, and says so: a router keying for a 0.30 fleet shows as one.
        fingerprint = compute_fingerprint("0.30.0")
        (info,) = [line for line in metrics.splitlines() if line.startswith("mmobs_hasher_info{")]
        assert f'fingerprint="{fingerprint.digest}"' in info and 'key_format="0.30"' in info, info
        assert fingerprint.digest != compute_fingerprint().digest
        assert httpx.get(process.url + "/healthz").json()["fingerprint"] == fingerprint.digest
    finally:
        process.stop()


def test_the_hash_api_keys_as_the_front_end_asked_for_and_names_it(tmp_path: Path):
    """``front_end: "rust"``: the key vLLM's Rust front end gives (the bytes' digest), on both routes and in every
    request shape; an option that front end's key cannot honour is a 400 naming it."""
    photo = golden.input_bytes("palette.png")
    images = [data_url(BAD_HEADER_JPEG), data_url(photo)]
    rust = [key_for_bytes(data, front_end="rust") for data in (BAD_HEADER_JPEG, photo)]
    process = ServiceProcess(tmp_path)
    try:
        for route in ("/v1/hash", "/v1/keys"):
            answer = httpx.post(process.url + route, json={"images": images, "front_end": "rust"}).json()
            assert (answer["front_end"], [item["mm_hash"] for item in answer["items"]]) == ("rust", rust), route
            answer = httpx.post(process.url + route, json={"images": images}).json()
            assert answer["front_end"] == "python" and answer["items"][1]["mm_hash"] == key_for_bytes(photo), route
        raw = httpx.post(
            process.url + "/v1/keys?front_end=rust", content=photo, headers={"content-type": "image/png"}
        ).json()
        assert raw["items"][0]["mm_hash"] == rust[1]
        for options, param in (({"front_end": "rust", "model_id": "m"}, "front_end"), ({"front_end": "go"}, "front_end"),
                               ({"front_end": "rust", "algorithm": "sha256"}, "algorithm")):  # fmt: skip
            refused = httpx.post(process.url + "/v1/keys", json={"images": images, **options})
            assert refused.status_code == 400, options
            assert (refused.json()["error"]["code"], refused.json()["error"]["param"]) == ("invalid_option", param)
    finally:
        process.stop()


# -- two workers, exact sums ------------------------------------------------------------------------


def _started_workers(process: ServiceProcess) -> set[int]:
    events = process.log_events()
    return {e["process"] for e in events if e.get("event") == "Application startup complete."}


def test_two_workers_sum_fallbacks_exactly(tmp_path: Path):
    process = ServiceProcess(tmp_path, "--workers", "2")
    try:
        # /healthz answers as soon as one worker is up; on a loaded machine the other can be seconds behind.
        process.wait_until(lambda: len(_started_workers(process)) == 2, what="both workers started")
        sent = 40
        with httpx.Client(base_url=process.url, timeout=30) as http:
            for _ in range(sent):
                # A new connection per request spreads them over both workers.
                response = httpx.post(process.url + "/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]})
                assert response.status_code == 200
                assert response.json()["items"][0]["exif_fallback"] is True
            for _ in range(5):
                text = http.get("/metrics").text
                assert metric_value(text, FALLBACK, {"kind": "media_with_bytes", "exception": "SyntaxError"}) == sent
                assert metric_value(text, "mmobs_http_exif_fallback_requests_total", {"route": "/v1/hash"}) == sent
            info = [line for line in text.splitlines() if line.startswith("mmobs_hasher_info{")]
            assert len(info) == 1, info
        events = [e for e in process.log_events() if e.get("event") == "exif_fallback"]
        assert len(events) == sent
        assert len({e["request_id"] for e in events}) == sent
        assert len({e["process"] for e in events}) == 2, "both workers should have served requests"
        (announced,) = [e for e in process.log_events() if e.get("event") == "multiprocess_metrics"]
        metrics_dir = Path(announced["directory"])
        assert metrics_dir.is_dir() and any(metrics_dir.glob("*.db"))
    finally:
        process.stop()
    assert not metrics_dir.exists(), "the multiprocess directory must be removed at exit"
