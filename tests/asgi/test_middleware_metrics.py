"""The middleware's /metrics and its options: skip_paths, buckets, exemplars, gzip and the access log."""

from __future__ import annotations

import asyncio
import gzip
import re
from typing import Any

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.testclient import TestClient

import mmobs
from mmobs.asgi.routing import UNMATCHED_ROUTE
from tests.support import value
from tests.support.asgi_apps import call_http, http_scope
from tests.support.middleware_app import (
    DURATION_COUNT,
    DURATION_SUM,
    HEX32,
    INTERNAL_ERROR_BODY,
    REQUESTS,
    REUSED_RESPONSE,
    AppState,
    label_sets,
    make_app,
    plain_app,
)

# -- /metrics ------------------------------------------------------------------


def test_metrics_text_format(registry: CollectorRegistry, client: TestClient) -> None:
    client.get("/items/1")
    response = client.get("/metrics", headers={"Accept-Encoding": "identity"})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "content-encoding" not in response.headers
    assert 'mmobs_http_requests_total{method="GET",route="/items/{item_id}",status_class="2xx"} 1.0' in response.text
    assert "# EOF" not in response.text
    assert int(response.headers["content-length"]) == len(response.content)
    assert HEX32.fullmatch(response.headers["x-request-id"])
    # Scrapes are not traffic (skip_paths defaults to the metrics path and /healthz).
    assert label_sets(registry, REQUESTS) == {
        (("method", "GET"), ("route", "/items/{item_id}"), ("status_class", "2xx"))
    }


def test_metrics_openmetrics(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


def test_metrics_custom_path(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, metrics_path="/custom-metrics")
    client = TestClient(app)

    assert client.get("/metrics").status_code == 404
    custom = client.get("/custom-metrics")
    assert custom.status_code == 200
    assert "mmobs_http_requests_total" in custom.text
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="4xx") == 1.0


def test_metrics_off_passes_through(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, metrics_path=None)
    response = TestClient(app).get("/metrics")

    assert response.status_code == 404
    assert response.text == "Not Found"
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="4xx") == 1.0


def test_metrics_token(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, metrics_token="s3cret", skip_paths=())
    client = TestClient(app)

    missing = client.get("/metrics")
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    basic = client.get("/metrics", headers={"Authorization": "Basic s3cret"})
    right = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})

    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="metrics"'
    assert missing.json()["error"]["code"] == "unauthorized"
    assert missing.json()["error"]["type"] == "authentication_error"
    assert "mmobs_" not in missing.text
    assert wrong.status_code == 401
    assert basic.status_code == 401
    assert right.status_code == 200
    assert "mmobs_http_requests_total" in right.text
    assert value(registry, REQUESTS, route="/metrics", method="GET", status_class="4xx") == 3.0
    assert missing.text == wrong.text == basic.text  # nothing tells a close guess from none
    # Refusals counted by what they carried: no bearer token (missing, Basic) or another one.
    assert value(registry, "mmobs_metrics_unauthorized_total", credentials="missing") == 2.0
    assert value(registry, "mmobs_metrics_unauthorized_total", credentials="wrong") == 1.0
    assert 'mmobs_metrics_unauthorized_total{credentials="missing"} 2.0' in right.text


def test_metrics_empty_token_is_refused(registry: CollectorRegistry) -> None:
    with pytest.raises(ValueError):
        mmobs.MMObsMiddleware(plain_app, registry=registry, metrics_token="")


def test_metrics_post_is_405(client: TestClient) -> None:
    response = client.post("/metrics")

    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_metrics_head(client: TestClient) -> None:
    response = client.head("/metrics")

    assert response.status_code == 200
    assert response.content == b""
    assert response.headers["content-type"].startswith("text/plain")


def test_metrics_head_sends_no_body_over_asgi(registry: CollectorRegistry) -> None:
    """httpx drops a HEAD body on its own, so look at the ASGI messages."""
    conversation = call_http(
        mmobs.MMObsMiddleware(plain_app, registry=registry, skip_paths=()), http_scope("/metrics", method="HEAD")
    )

    assert conversation.error is None
    assert conversation.status == 200
    assert conversation.body == b""
    (length,) = conversation.header(b"content-length")
    assert int(length) > 0  # the length a GET would have had
    assert value(registry, REQUESTS, route="/metrics", method="HEAD", status_class="2xx") == 1.0


# -- Options: skip_paths, buckets, exemplars, gzip, access log -----------------


IN_PROGRESS = "mmobs_http_requests_in_progress"
TTFB_COUNT = "mmobs_http_time_to_first_byte_seconds_count"
TTFB_SUM = "mmobs_http_time_to_first_byte_seconds_sum"
OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}


def routes_counted(registry: CollectorRegistry) -> set[str]:
    return {dict(labels)["route"] for labels in label_sets(registry, REQUESTS)}


def test_skip_paths_default_leaves_scrapes_and_probes_uncounted(
    registry: CollectorRegistry, client: TestClient
) -> None:
    health = client.get("/healthz", headers={"X-Request-ID": "probe-1"})
    scrape = client.get("/metrics")
    assert client.get("/items/1").status_code == 200

    assert (health.status_code, health.headers["x-request-id"]) == (200, "probe-1")
    assert scrape.status_code == 200 and HEX32.fullmatch(scrape.headers["x-request-id"])
    assert routes_counted(registry) == {"/items/{item_id}"}
    for name in (DURATION_COUNT, TTFB_COUNT, "mmobs_http_request_size_bytes_count", IN_PROGRESS):
        assert {dict(labels)["route"] for labels in label_sets(registry, name)} == {"/items/{item_id}"}, name


def test_skip_paths_are_exact_paths_and_empty_counts_everything(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, skip_paths=["/items/1"])
    client = TestClient(app)
    client.get("/items/1")
    client.get("/items/2")
    client.get("/healthz")
    client.get("/metrics")

    assert value(registry, REQUESTS, route="/items/{item_id}", method="GET", status_class="2xx") == 1.0
    assert value(registry, REQUESTS, route="/healthz", method="GET", status_class="2xx") == 1.0
    assert value(registry, REQUESTS, route="/metrics", method="GET", status_class="2xx") == 1.0


def test_skip_paths_must_not_be_one_string(registry: CollectorRegistry) -> None:
    with pytest.raises(TypeError, match="collection of paths"):
        mmobs.MMObsMiddleware(plain_app, registry=registry, skip_paths="/healthz")


def test_buckets_replace_the_latency_buckets(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, buckets=[0.5, 30, 120])
    TestClient(app).get("/items/1")

    for name in ("mmobs_http_request_duration_seconds_bucket", "mmobs_http_time_to_first_byte_seconds_bucket"):
        bounds = {dict(labels)["le"] for labels in label_sets(registry, name)}
        assert bounds == {"0.5", "30.0", "120.0", "+Inf"}, name
    sizes = {dict(labels)["le"] for labels in label_sets(registry, "mmobs_http_request_size_bytes_bucket")}
    assert "30.0" not in sizes and "1024.0" in sizes  # the size histograms keep their own buckets
    assert (
        value(registry, "mmobs_http_request_duration_seconds_bucket", route="/items/{item_id}", method="GET", le="0.5")
        == 1.0
    )


def test_two_middlewares_on_one_registry_must_agree_on_buckets(registry: CollectorRegistry) -> None:
    TestClient(mmobs.MMObsMiddleware(plain_app, registry=registry, buckets=[1, 2])).get("/")
    other = mmobs.MMObsMiddleware(plain_app, registry=registry, buckets=[1, 3])
    with pytest.raises(ValueError, match="same buckets"):
        TestClient(other).get("/")


def test_in_progress_gauge_counts_requests_being_served(registry: CollectorRegistry) -> None:
    app, state = make_app(registry)

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            waiting = [asyncio.create_task(client.get("/wait")) for _ in range(3)]
            while state.entered < 3:
                await asyncio.sleep(0.001)
            assert value(registry, IN_PROGRESS, route="/wait", method="GET") == 3.0
            state.release.set()
            assert [r.status_code for r in await asyncio.gather(*waiting)] == [200, 200, 200]
            assert value(registry, IN_PROGRESS, route="/wait", method="GET") == 0.0
            await client.get("/items/1")

    asyncio.run(main())
    assert value(registry, IN_PROGRESS, route="/items/{item_id}", method="GET") == 0.0
    assert value(registry, REQUESTS, route="/wait", method="GET", status_class="2xx") == 3.0


def test_request_and_response_sizes(registry: CollectorRegistry, client: TestClient) -> None:
    sized = client.post("/echo", content=b"a" * 1000)
    chunked = client.post("/echo", content=iter([b"b" * 300, b"c" * 300]))  # no Content-Length: counted as read
    client.get("/items/1")

    assert (len(sized.content), len(chunked.content)) == (500, 300)
    labels = {"route": "/echo", "method": "POST"}
    assert value(registry, "mmobs_http_request_size_bytes_sum", **labels) == 1600.0
    assert value(registry, "mmobs_http_request_size_bytes_count", **labels) == 2.0
    assert value(registry, "mmobs_http_request_size_bytes_bucket", le="1024.0", **labels) == 2.0
    assert value(registry, "mmobs_http_request_size_bytes_bucket", le="256.0", **labels) == 0.0
    assert value(registry, "mmobs_http_response_size_bytes_sum", **labels) == 800.0
    get = {"route": "/items/{item_id}", "method": "GET"}
    assert value(registry, "mmobs_http_request_size_bytes_sum", **get) == 0.0
    assert value(registry, "mmobs_http_request_size_bytes_bucket", le="64.0", **get) == 1.0
    assert value(registry, "mmobs_http_response_size_bytes_sum", **get) == len(client.get("/items/1").content)


def test_time_to_first_byte_is_its_own_histogram(registry: CollectorRegistry, client: TestClient) -> None:
    assert client.get("/stream").text == "chunk0;chunk1;chunk2;"
    assert client.get("/slow-first").text == "late;then quick"

    stream, slow = {"route": "/stream", "method": "GET"}, {"route": "/slow-first", "method": "GET"}
    # /stream: the first chunk at once, then two 50 ms sleeps before the end. Only the sleeps'
    # lower bound is asserted, so a loaded machine that slows every step cannot fail it.
    assert value(registry, DURATION_SUM, **stream) - value(registry, TTFB_SUM, **stream) >= 0.1
    # /slow-first: headers at once (StreamingResponse), the first body byte after 120 ms.
    assert 0.12 <= value(registry, TTFB_SUM, **slow) <= value(registry, DURATION_SUM, **slow)
    assert value(registry, TTFB_COUNT, **stream) == value(registry, TTFB_COUNT, **slow) == 1.0


def _exemplar(text: str, sample: str) -> str | None:
    """The request id of the exemplar on the exposition line starting with ``sample``, if any."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            match = re.search(r' # \{request_id="([^"]*)"\} 1\.0 \d+(\.\d+)?$', line)
            return match.group(1) if match else None
    raise AssertionError(f"no line {sample} in:\n{text}")


def test_exemplars_carry_the_request_id_in_openmetrics_scrapes(
    registry: CollectorRegistry, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mmobs.asgi.request_metrics.EXEMPLAR_INTERVAL_SECONDS", 3600.0)
    client.get("/items/1", headers={"X-Request-ID": "ex-1"})
    client.get("/items/2", headers={"X-Request-ID": "ex-2"})  # within the interval: the exemplar stays
    client.get("/no/such/path", headers={"X-Request-ID": "ex-404"})
    client.get("/hash-route", headers={"X-Request-ID": "exif-ex"})

    text = client.get("/metrics", headers=OPENMETRICS).text
    ok = 'mmobs_http_requests_total{method="GET",route="/items/{item_id}",status_class="2xx"}'
    assert _exemplar(text, ok) == "ex-1"
    assert (
        _exemplar(text, f'mmobs_http_requests_total{{method="GET",route="{UNMATCHED_ROUTE}",status_class="4xx"}}')
        == "ex-404"
    )
    assert _exemplar(text, 'mmobs_exif_fallback_total{exception="SyntaxError",kind="media_with_bytes"}') == "exif-ex"
    assert _exemplar(text, 'mmobs_http_exif_fallback_requests_total{route="/hash-route"}') == "exif-ex"
    plain = client.get("/metrics").text
    assert " # {" not in plain  # the text format has no exemplars


def test_exemplar_of_a_long_request_id_fits_openmetrics(registry: CollectorRegistry, client: TestClient) -> None:
    long_id = ("Az09._:-" * 16)[:128]
    client.get("/items/1", headers={"X-Request-ID": long_id})
    text = client.get("/metrics", headers=OPENMETRICS).text
    sample = 'mmobs_http_requests_total{method="GET",route="/items/{item_id}",status_class="2xx"}'
    assert _exemplar(text, sample) == long_id[:118]


def test_exemplars_off(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, exemplars=False)
    client = TestClient(app)
    client.get("/items/1", headers={"X-Request-ID": "ex-off"})
    assert "ex-off" not in client.get("/metrics", headers=OPENMETRICS).text


def test_metrics_are_gzipped_when_the_scraper_accepts_it(registry: CollectorRegistry) -> None:
    app = mmobs.MMObsMiddleware(plain_app, registry=registry)
    TestClient(app).get("/")
    gzipped = call_http(app, http_scope("/metrics", headers=[(b"accept-encoding", b"gzip, deflate")]))
    plain = call_http(app, http_scope("/metrics", headers=[(b"accept-encoding", b"gzip;q=0, identity")]))
    none = call_http(app, http_scope("/metrics"))

    assert gzipped.header(b"content-encoding") == [b"gzip"]
    assert gzipped.header(b"vary") == [b"accept-encoding"]
    assert int(gzipped.header(b"content-length")[0]) == len(gzipped.body)
    text = gzip.decompress(gzipped.body).decode()
    assert 'mmobs_http_requests_total{method="GET",route="<unmatched>",status_class="2xx"} 1.0' in text
    for answer in (plain, none):
        assert answer.header(b"content-encoding") == []
        assert b"mmobs_http_requests_total" in answer.body
    assert len(gzipped.body) < len(plain.body) / 3


def test_unhandled_error_in_a_starlette_route_is_a_json_500_with_the_request_id(
    registry: CollectorRegistry, app_state: tuple[Starlette, AppState]
) -> None:
    """Starlette's ServerErrorMiddleware sits outside user middleware: its 500 would lack the header."""
    with TestClient(app_state[0], raise_server_exceptions=False) as test_client:
        response = test_client.get("/boom", headers={"X-Request-ID": "boom-1"})

    assert response.status_code == 500
    assert response.headers["x-request-id"] == "boom-1"
    assert response.json() == INTERNAL_ERROR_BODY


def test_response_objects_are_not_modified(client: TestClient) -> None:
    first, second = client.get("/reused"), client.get("/reused")

    assert first.headers.get_list("x-request-id") != second.headers.get_list("x-request-id")
    assert len(second.headers.get_list("x-request-id")) == 1
    assert b"x-request-id" not in dict(REUSED_RESPONSE.raw_headers)


def test_a_request_id_set_by_the_app_is_kept(client: TestClient) -> None:
    response = client.get("/own-id", headers={"X-Request-ID": "from-client"})
    assert response.headers.get_list("x-request-id") == ["set-by-the-app"]


def _access_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == "http_request"]


def test_access_log_is_off_by_default(client: TestClient) -> None:
    with structlog.testing.capture_logs() as logs:
        client.get("/items/1")
    assert _access_lines(logs) == []


def test_access_log_writes_one_canonical_line_per_request(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, access_log=True)
    with TestClient(app, raise_server_exceptions=False) as client, structlog.testing.capture_logs() as logs:
        item = client.get("/items/7?x=1", headers={"X-Request-ID": "line-1"})
        client.get("/hash-route", headers={"X-Request-ID": "line-2"})
        client.get("/bad-load", headers={"X-Request-ID": "line-3"})
        client.post("/echo", content=b"z" * 10, headers={"X-Request-ID": "line-4"})
        client.get("/boom", headers={"X-Request-ID": "line-5"})
        client.get("/healthz", headers={"X-Request-ID": "line-6"})

    lines = _access_lines(logs)
    assert [line["request_id"] for line in lines] == [f"line-{n}" for n in range(1, 7)]
    for line in lines:
        assert line["duration_s"] >= line["ttfb_s"] > 0, line
    first = {k: v for k, v in lines[0].items() if k not in ("duration_s", "ttfb_s")}
    assert first == {
        "event": "http_request", "log_level": "info", "request_id": "line-1", "route": "/items/{item_id}",
        "method": "GET", "path": "/items/7", "status": 200, "request_bytes": 0,
        "response_bytes": len(item.content), "images": 0, "exif_fallbacks": 0, "bad_images": 0,
        "bad_image_reason": None, "client": "testclient",
    }  # fmt: skip
    assert (lines[1]["images"], lines[1]["exif_fallbacks"], lines[1]["status"]) == (1, 1, 200)
    assert (lines[2]["status"], lines[2]["bad_images"], lines[2]["bad_image_reason"]) == (400, 1, "unidentified")
    assert (lines[3]["request_bytes"], lines[3]["response_bytes"]) == (10, 5)
    assert (lines[4]["status"], lines[4]["log_level"], lines[4]["exception"]) == (500, "error", "RuntimeError")
    assert (lines[5]["route"], lines[5]["log_level"]) == ("/healthz", "debug")  # a skipped path: debug
