"""``mmobs serve --otlp-endpoint``: each request's trace, received over OTLP/HTTP on loopback and decoded.

The service runs as users run it, exporting to :class:`~tests.support.otlp_receiver.OtlpReceiver`
as it would to a collector. The spans' ids, parents, names, attributes and events are asserted
exactly, and the exemplars of the fallback counters carry the request's trace id.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import ServiceProcess, data_url, golden
from tests.support.media_server import serving
from tests.support.otlp_receiver import OTLP_TEST_ENV, OtlpReceiver, ReceivedSpan, require_otlp_proto

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO_JPEG = golden.input_bytes("photo.jpg")
OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}
SERVER, INTERNAL = 2, 1  # OTLP's span kinds
UNSET, ERROR = 0, 2  # OTLP's status codes
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    require_otlp_proto()
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("media")
    (directory / "photo.jpg").write_bytes(PHOTO_JPEG)
    with serving(directory) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def service(receiver: OtlpReceiver, media: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    process = ServiceProcess(
        tmp_path_factory.mktemp("traced"),
        "--otlp-endpoint", receiver.endpoint,
        "--allow-remote-host", "127.0.0.1", "--fetch-allow-private",
        env=OTLP_TEST_ENV,
    )  # fmt: skip
    yield process
    process.stop()


def traceparent() -> tuple[str, str, str]:
    """A client's ``traceparent`` header, and the trace id and span id it names."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    names = [span.name for span in spans]
    assert len(names) == len(set(names)), names
    return {span.name: span for span in spans}


def has(*names: str):
    return lambda spans: set(names) <= {span.name for span in spans}


def exemplar(metrics: str, sample: str) -> dict[str, str]:
    """The exemplar labels on the OpenMetrics line of ``sample``."""
    for line in metrics.splitlines():
        if line.startswith(sample + " "):
            found = re.search(r" # \{([^}]*)\} ", line)
            assert found, line
            return dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
    raise AssertionError(f"no {sample} in the scrape")


def test_the_malformed_exif_jpeg_is_one_trace_with_its_load_key_and_fallback_event(
    service: ServiceProcess, receiver: OtlpReceiver
) -> None:
    header, trace_id, client_span = traceparent()
    response = httpx.post(
        service.url + "/v1/hash",
        json={"images": [data_url(BAD_HEADER_JPEG)]},
        headers={"traceparent": header, "X-Request-ID": "traced-exif"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["items"][0]["mm_hash"] == golden.case("media-bad-exif-header.jpg")["expected"]

    spans = receiver.wait_for(has("POST /v1/hash", "mmobs.image", "mmobs.image.load", "mmobs.image.key"), trace_id)
    named = by_name(spans)
    assert set(named) == {"POST /v1/hash", "mmobs.image", "mmobs.media.base64", "mmobs.image.load", "mmobs.image.key"}
    server, image, load, key = (
        named[n] for n in ("POST /v1/hash", "mmobs.image", "mmobs.image.load", "mmobs.image.key")
    )
    assert all(span.scope == "mmobs" and span.resource["service.name"] == "mmobs" for span in spans)

    assert (server.parent_span_id, server.kind, server.status_code) == (client_span, SERVER, UNSET)
    assert server.attributes == {
        "http.request.method": "POST",
        "http.route": "/v1/hash",
        "url.path": "/v1/hash",
        "mmobs.request_id": "traced-exif",
        "http.response.status_code": 200,
    }
    assert (image.parent_span_id, image.kind, image.status_code) == (server.span_id, INTERNAL, UNSET)
    assert image.attributes == {
        "mmobs.image.index": 0,
        "mmobs.media.bytes": len(BAD_HEADER_JPEG),
        "mmobs.outcome": "keyed",
        "mmobs.key_source": "original_bytes",
    }
    fallback = image.event("exif_fallback")
    assert (fallback["exception"], fallback["kind"], fallback["key_source"]) == (
        "SyntaxError", "media_with_bytes", "original_bytes",
    )  # fmt: skip
    assert fallback["format"] == "JPEG" and fallback["error"]
    base64 = named["mmobs.media.base64"]
    assert base64.attributes == {"mmobs.modality": "image", "mmobs.media.bytes": len(BAD_HEADER_JPEG)}
    assert (base64.parent_span_id, load.parent_span_id, key.parent_span_id) == (image.span_id,) * 3
    assert base64.end_ns <= load.start_ns
    assert key.attributes == {"mmobs.key_source": "original_bytes"}
    assert image.start_ns <= load.start_ns <= load.end_ns <= key.start_ns <= key.end_ns <= image.end_ns
    assert server.start_ns <= image.start_ns and image.end_ns <= server.end_ns

    (logged,) = [
        e for e in service.log_events() if e.get("event") == "exif_fallback" and e.get("request_id") == "traced-exif"
    ]
    assert logged["trace_id"] == trace_id  # the log line leads to the trace

    metrics = service.metrics(**OPENMETRICS)
    labels = {"trace_id": trace_id, "request_id": "traced-exif"}
    assert exemplar(metrics, 'mmobs_exif_fallback_total{exception="SyntaxError",kind="media_with_bytes"}') == labels
    assert exemplar(metrics, 'mmobs_http_exif_fallback_requests_total{route="/v1/hash"}') == labels


def test_a_request_without_traceparent_gets_a_trace_of_its_own(service: ServiceProcess, receiver: OtlpReceiver) -> None:
    response = httpx.post(
        service.url + "/v1/hash", json={"images": [data_url(PHOTO_JPEG)]}, headers={"X-Request-ID": "traced-root"}
    )
    assert response.status_code == 200, response.text
    (server,) = receiver.wait_for_span(lambda span: span.attributes.get("mmobs.request_id") == "traced-root")
    spans = receiver.wait_for(has("mmobs.image.load", "mmobs.image.key"), server.trace_id)
    named = by_name(spans)
    assert server.parent_span_id == "" and named["mmobs.image"].parent_span_id == server.span_id
    assert (named["mmobs.image"].attributes["mmobs.outcome"], named["mmobs.image"].events) == ("keyed", [])


def test_a_remote_image_has_its_download_span(service: ServiceProcess, receiver: OtlpReceiver, media: str) -> None:
    header, trace_id, _ = traceparent()
    response = httpx.post(
        service.url + "/v1/hash", json={"images": [media + "/photo.jpg"]}, headers={"traceparent": header}
    )
    assert response.status_code == 200, response.text
    named = by_name(receiver.wait_for(has("mmobs.media.download", "mmobs.image.key"), trace_id))
    download = named["mmobs.media.download"]
    assert download.parent_span_id == named["mmobs.image"].span_id
    assert download.attributes == {
        "mmobs.modality": "image",
        "url.scheme": "http",
        "mmobs.media.bytes": len(PHOTO_JPEG),
    }
    assert download.end_ns <= named["mmobs.image.load"].start_ns


def test_a_refused_image_is_an_error_span_with_its_bad_image_event(
    service: ServiceProcess, receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = traceparent()
    response = httpx.post(
        service.url + "/v1/hash",
        json={"images": [data_url(b"\xff\xd8\xff\xe0 these bytes are no JPEG")]},
        headers={"traceparent": header},
    )
    assert response.status_code == 400, response.text
    reason = response.json()["error"]["reason"]
    named = by_name(receiver.wait_for(has("POST /v1/hash", "mmobs.image", "mmobs.image.load"), trace_id))
    server, image, load = named["POST /v1/hash"], named["mmobs.image"], named["mmobs.image.load"]
    assert "mmobs.image.key" not in named
    assert (server.status_code, server.attributes["http.response.status_code"]) == (UNSET, 400)  # a client's fault
    assert (image.status_code, image.attributes["error.type"], image.attributes["mmobs.outcome"]) == (
        ERROR, reason, "bad_image",
    )  # fmt: skip
    assert (load.status_code, load.attributes["error.type"]) == (ERROR, reason)
    assert image.event("bad_image")["reason"] == reason


def test_health_probes_and_scrapes_are_not_traced(service: ServiceProcess, receiver: OtlpReceiver) -> None:
    header, trace_id, _ = traceparent()
    assert httpx.get(service.url + "/healthz", headers={"traceparent": header}).status_code == 200
    assert httpx.get(service.url + "/metrics", headers={"traceparent": header}).status_code == 200
    marker_header, marker_trace, _ = traceparent()
    httpx.post(
        service.url + "/v1/hash", json={"images": [data_url(PHOTO_JPEG)]}, headers={"traceparent": marker_header}
    )
    receiver.wait_for(has("POST /v1/hash"), marker_trace)  # exported after the probes had their chance
    assert receiver.trace(trace_id) == []


def test_otlp_endpoint_option_is_checked_before_serving() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "serve", "--otlp-endpoint", "localhost:4318"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert bad.returncode == 2 and "an OTLP/HTTP traces endpoint is an http(s) URL" in bad.stderr, bad.stderr
    blocked = "import sys; sys.modules['opentelemetry'] = None; from mmobs.cli import main; sys.exit(main())"
    missing = subprocess.run(
        [sys.executable, "-c", blocked, "serve", "--otlp-endpoint", "http://127.0.0.1:4318/v1/traces"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ},
    )  # fmt: skip
    assert missing.returncode == 2, missing.stderr
    assert "needs opentelemetry-api, opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http" in missing.stderr
    assert "pip install 'mmobs[otel]'" in missing.stderr
