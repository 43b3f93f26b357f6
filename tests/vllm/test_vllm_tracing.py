"""mmobs in the request's trace inside a running ``vllm serve --otlp-traces-endpoint``.

The shared server (``conftest.py``'s ``vllm_server``) exports its traces over OTLP/HTTP to a
receiver on loopback (:mod:`tests.support.otlp_receiver`), which decodes them with
``opentelemetry-proto``, as a collector would. The client is the ``openai`` client, with a W3C
``traceparent`` of its own or none. Each test asserts the one trace its request made: vLLM's
``llm_request`` span and mmobs's (instrumentation scope ``mmobs``), their parents, names,
attributes and events, and the trace id in the fallback counter's exemplar on vLLM's ``/metrics``.
"""

from __future__ import annotations

import base64
import re
import secrets
from typing import Any

import httpx
import openai
import pytest

from tests.support import golden
from tests.support.media_server import serving
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.vllm_server import VllmServer
from tests.vllm.test_vllm_front_end_server import fresh_jpeg, published
from tests.vllm.test_vllm_uuid_server import send

pytestmark = pytest.mark.vllm_server

BAD_EXIF_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO = golden.input_bytes("photo.jpg")
ROUTE = "/v1/chat/completions"
SERVER_SPAN = f"POST {ROUTE}"
SERVER, INTERNAL = 2, 1  # OTLP's span kinds
UNSET, ERROR = 0, 2  # OTLP's status codes
OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}


@pytest.fixture(scope="module")
def otlp(vllm_server: VllmServer) -> OtlpReceiver:
    receiver: OtlpReceiver | None = vllm_server.otlp
    if receiver is None:
        pytest.skip(
            "the shared vLLM server exports no traces without opentelemetry-proto here (pip install -e '.[test]')"
        )
    return receiver


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def chat(server: VllmServer, url: str, headers: dict[str, str], uuid: str | None = None) -> tuple[int, str]:
    """One chat completion with one image URL (and its client ``uuid``); (status, x-request-id)."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    if uuid is not None:
        part["uuid"] = uuid
    messages: Any = [{"role": "user", "content": [part, {"type": "text", "text": "?"}]}]
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=server.model, max_tokens=2, messages=messages, extra_headers=headers
        )
    except openai.APIStatusError as error:
        return error.status_code, error.response.headers.get("x-request-id", "")
    return raw.http_response.status_code, raw.headers.get("x-request-id", "")


def data_url(data: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")


def has(*names: str):
    return lambda spans: set(names) <= {span.name for span in spans}


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (found,) = [span for span in spans if span.name == name]
    return found


def decode_counts(server: VllmServer) -> dict[str, float]:
    """The JPEG loads vLLM's API server counted so far, by outcome (decoded, skipped)."""
    samples = server.samples("mmobs_vllm_mm_decode_seconds_count")
    return {
        outcome: samples.get(
            ("mmobs_vllm_mm_decode_seconds_count", (("format", "jpeg"), ("modality", "image"), ("outcome", outcome))),
            0.0,
        )
        for outcome in ("decoded", "skipped")
    }


def test_a_bad_exif_jpeg_is_one_trace_with_vllms_span_and_mmobss(vllm_server: VllmServer, otlp: OtlpReceiver) -> None:
    header, trace_id, client_span = traceparent()
    before = decode_counts(vllm_server)
    status, request_id = chat(vllm_server, data_url(BAD_EXIF_JPEG), {"traceparent": header})
    assert status == 200
    # Decoded, or a decode-free hit where an earlier test's request left the image in the processor cache:
    # the load span says what the decode histogram counted for this request, exactly once.
    moved = {outcome: count - before[outcome] for outcome, count in decode_counts(vllm_server).items()}
    (outcome,) = [outcome for outcome, delta in moved.items() if delta == 1]
    assert sum(moved.values()) == 1, moved

    wanted = (SERVER_SPAN, "llm_request", "mmobs.media.base64", "mmobs.image.load", "mmobs.image.key")
    # (No processor span is required: where an earlier request left the image in the processor cache there is none.)
    spans = otlp.wait_for(has(*wanted, "mmobs.front_end"), trace_id)
    server, llm, base64_span, load, key = (one(spans, name) for name in wanted)
    front_end = one(spans, "mmobs.front_end")
    assert {span.scope for span in spans if span is not llm} == {"mmobs"} and llm.scope != "mmobs"

    # One trace: the client's span, the HTTP server span mmobs started, and everything else under it.
    assert (server.parent_span_id, server.kind) == (client_span, SERVER)
    assert server.attributes == {
        "http.request.method": "POST",
        "http.route": ROUTE,
        "url.path": ROUTE,
        "mmobs.request_id": request_id,
        "http.response.status_code": 200,
    }
    assert all(span.parent_span_id == server.span_id for span in (llm, base64_span, load, key, front_end))
    assert all(span.status_code == UNSET and span.kind == INTERNAL for span in (base64_span, load, key))

    assert base64_span.attributes == {
        "mmobs.modality": "image",
        "mmobs.outcome": "ok",
        "mmobs.media.bytes": len(BAD_EXIF_JPEG),
    }
    assert load.attributes == {
        "mmobs.image.format": "jpeg",
        "mmobs.media.bytes": len(BAD_EXIF_JPEG),
        "mmobs.outcome": outcome,
    }
    assert base64_span.end_ns <= load.start_ns <= load.end_ns <= key.start_ns
    assert key.attributes["mmobs.key_source"] == "original_bytes" and key.attributes["mmobs.hash.bytes"] > len(
        BAD_EXIF_JPEG
    )
    fallback = key.event("exif_fallback")
    assert (fallback["exception"], fallback["kind"], fallback["key_source"]) == (
        "SyntaxError", "media_with_bytes", "original_bytes",
    )  # fmt: skip
    assert fallback["error"] and fallback["format"] == "JPEG"
    assert front_end.attributes == {"mmobs.items": 1}
    assert front_end.start_ns <= load.start_ns and key.end_ns <= front_end.end_ns

    # The log line names it too.
    (logged,) = [
        line for line in vllm_server.log_lines() if " exif_fallback " in line and f"request_id={request_id}" in line
    ]
    assert f"trace_id={trace_id}" in logged, logged

    # The fallback counter's exemplar names this request and this trace (MMOBS_VLLM_OPENMETRICS=1).
    scrape = httpx.get(vllm_server.url + "/metrics", headers=OPENMETRICS, timeout=10)
    assert scrape.headers["content-type"].startswith("application/openmetrics-text")
    metrics = scrape.text
    line = next(
        line
        for line in metrics.splitlines()
        if line.startswith('mmobs_exif_fallback_total{exception="SyntaxError",kind="media_with_bytes"}')
    )
    exemplar = dict(re.findall(r'(\w+)="([^"]*)"', line.partition(" # ")[2]))
    assert exemplar == {"request_id": request_id, "trace_id": trace_id}, line


def test_a_request_without_traceparent_still_shares_one_trace_with_vllm(
    vllm_server: VllmServer, otlp: OtlpReceiver
) -> None:
    status, request_id = chat(vllm_server, data_url(PHOTO), {"X-Request-ID": "untraced-client"})
    assert (status, request_id) == (200, "untraced-client")
    (server,) = otlp.wait_for_span(lambda span: span.attributes.get("mmobs.request_id") == "untraced-client")
    spans = otlp.wait_for(has("llm_request", "mmobs.image.load", "mmobs.image.key"), server.trace_id)
    assert server.parent_span_id == "" and one(spans, "llm_request").parent_span_id == server.span_id
    key = one(spans, "mmobs.image.key")
    assert key.events == [] and key.attributes["mmobs.key_source"] in ("pixels", "image_id", "original_bytes")


def test_a_refused_image_is_an_error_span_with_its_bad_image_event(vllm_server: VllmServer, otlp: OtlpReceiver) -> None:
    header, trace_id, _ = traceparent()
    status, _ = chat(vllm_server, data_url(b"\xff\xd8\xff\xe0 these bytes are no JPEG"), {"traceparent": header})
    assert status == 400
    spans = otlp.wait_for(has(SERVER_SPAN, "mmobs.image.load"), trace_id)
    server, load = one(spans, SERVER_SPAN), one(spans, "mmobs.image.load")
    assert (server.status_code, server.attributes["http.response.status_code"]) == (UNSET, 400)
    assert (load.status_code, load.attributes["mmobs.outcome"]) == (ERROR, "refused")
    reason = load.event("bad_image")["reason"]
    assert load.attributes["error.type"] == reason
    assert not [span for span in spans if span.name == "mmobs.image.key"]


def test_a_resent_image_is_a_skipped_load_and_needs_no_processor(vllm_server: VllmServer, otlp: OtlpReceiver) -> None:
    image = data_url(fresh_jpeg())
    outcomes = []
    for _ in range(2):
        header, trace_id, _ = traceparent()
        assert chat(vllm_server, image, {"traceparent": header})[0] == 200
        spans = otlp.wait_for(has("llm_request", "mmobs.image.load", "mmobs.image.key"), trace_id)
        outcomes.append(
            (
                one(spans, "mmobs.image.load").attributes["mmobs.outcome"],
                "mmobs.hf_processor" in {span.name for span in spans},
            )
        )
    # The first is decoded and processed; the second a decode-free hit the processor cache answers.
    assert outcomes == [("decoded", True), ("skipped", False)]


def test_a_uuid_conflict_is_an_error_span_with_its_event(vllm_server: VllmServer, otlp: OtlpReceiver) -> None:
    uuid = f"tracing-{secrets.token_hex(4)}"
    assert send(vllm_server, [(data_url(fresh_jpeg()), uuid)])[0] == 200
    header, trace_id, _ = traceparent()
    status, _ = chat(vllm_server, data_url(fresh_jpeg()), {"traceparent": header}, uuid=uuid)
    assert status == 400
    check = one(otlp.wait_for(has(SERVER_SPAN, "mmobs.uuid_check"), trace_id), "mmobs.uuid_check")
    assert (check.status_code, check.attributes["error.type"]) == (ERROR, "UuidConflictError")
    assert (check.attributes["mmobs.items"], check.attributes["mmobs.conflicts"]) == (1, 1)
    conflict = check.event("mm_uuid_conflict")
    assert (conflict["uuid"], conflict["action"], conflict["modality"]) == (uuid, "refused", "image")


def test_a_scrape_that_does_not_ask_for_openmetrics_is_vllms_own(vllm_server: VllmServer) -> None:
    """Only an OpenMetrics scrape is the preset's: vLLM's text exposition (with its _created series) stays vLLM's."""
    scrape = httpx.get(vllm_server.url + "/metrics", timeout=10)
    assert scrape.headers["content-type"].startswith("text/plain")
    assert " # {" not in scrape.text and "vllm:request_success_created" in scrape.text
    openmetrics = httpx.get(vllm_server.url + "/metrics", headers=OPENMETRICS, timeout=10).text
    assert openmetrics.endswith("# EOF\n") and "vllm:request_success_total" in openmetrics


@pytest.mark.parametrize("scheme", ["http", "file"])
def test_an_image_by_url_has_its_download_span_before_its_load(
    vllm_server: VllmServer, otlp: OtlpReceiver, scheme: str
) -> None:
    data = fresh_jpeg()
    name = published(vllm_server, data, ".jpg")
    header, trace_id, _ = traceparent()
    if scheme == "http":
        with serving(vllm_server.media_dir) as media:
            status, _ = chat(vllm_server, f"{media}/{name}", {"traceparent": header})
    else:
        status, _ = chat(vllm_server, (vllm_server.media_dir / name).as_uri(), {"traceparent": header})
    assert status == 200
    spans = otlp.wait_for(has(SERVER_SPAN, "mmobs.media.download", "mmobs.image.load"), trace_id)
    server, download, load = (one(spans, n) for n in (SERVER_SPAN, "mmobs.media.download", "mmobs.image.load"))
    assert download.parent_span_id == server.span_id and download.status_code == UNSET
    assert download.attributes == {
        "mmobs.modality": "image",
        "url.scheme": scheme,
        "mmobs.outcome": "ok",
        "mmobs.media.bytes": len(data),
    }
    assert download.end_ns <= load.start_ns and load.attributes["mmobs.media.bytes"] == len(data)
    assert "mmobs.media.base64" not in {span.name for span in spans}
