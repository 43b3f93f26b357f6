"""What the middleware ties to each request: its id, its context under concurrency, and the EXIF fallbacks it caused."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from mmobs.observability.context import current_request
from tests.support import golden, value
from tests.support.middleware_app import (
    HEX32,
    REQUESTS,
    counted_label_sets,
    events,
    make_app,
)

# -- Request ids ---------------------------------------------------------------


def test_valid_request_id_is_echoed_and_bound(client: TestClient) -> None:
    response = client.get("/items/7", headers={"X-Request-ID": "abc-123"})

    assert response.status_code == 200
    assert response.headers["x-request-id"] == "abc-123"
    assert response.json() == {
        "item_id": "7",
        "log_request_id": "abc-123",
        "log_route": "/items/{item_id}",
        "stats_request_id": "abc-123",
        "stats_route": "/items/{item_id}",
    }


def test_request_id_of_128_allowed_characters_is_kept(client: TestClient) -> None:
    candidate = ("Az09._:-" * 16)[:128]
    assert len(candidate) == 128
    assert client.get("/items/1", headers={"X-Request-ID": candidate}).headers["x-request-id"] == candidate


@pytest.mark.parametrize(
    "bad_id",
    [
        "a" * 129,
        "abc 123",
        "abc\t123",
        "abc-123\n",
        "abc\r\n123",
        "abc\x0b123",
        "abc\x00",
        "abc/123",
        "",
        "caf\xc3\xa9".encode("latin-1"),  # UTF-8 bytes of "café"
        b"\xff\xfe",
    ],
    ids=["too-long", "space", "tab", "trailing-newline", "crlf", "vtab", "nul", "slash", "empty", "utf8", "binary"],
)
def test_invalid_request_id_is_replaced(client: TestClient, bad_id: str | bytes) -> None:
    response = client.get("/items/1", headers={"X-Request-ID": bad_id})

    assert response.status_code == 200
    echoed = response.headers["x-request-id"]
    assert HEX32.fullmatch(echoed), echoed
    assert response.json()["log_request_id"] == echoed
    assert response.json()["stats_request_id"] == echoed


def test_missing_request_id_is_generated_fresh_per_request(client: TestClient) -> None:
    first = client.get("/items/1")
    second = client.get("/items/1")

    ids = [first.headers["x-request-id"], second.headers["x-request-id"]]
    assert all(HEX32.fullmatch(i) for i in ids)
    assert ids[0] != ids[1]
    assert first.json()["log_request_id"] == ids[0]
    assert second.json()["log_request_id"] == ids[1]
    assert len(first.headers.get_list("x-request-id")) == 1


def test_custom_request_id_header(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, request_id_header="X-Correlation-ID")
    client = TestClient(app)

    given = client.get("/items/1", headers={"X-Correlation-ID": "corr-9", "X-Request-ID": "ignored-1"})
    made = client.get("/items/1", headers={"X-Request-ID": "ignored-2"})

    assert given.headers["x-correlation-id"] == "corr-9"
    assert "x-request-id" not in given.headers
    assert given.json()["log_request_id"] == "corr-9"
    assert HEX32.fullmatch(made.headers["x-correlation-id"])
    assert made.json()["log_request_id"] == made.headers["x-correlation-id"]


# -- Context isolation under concurrency ---------------------------------------


def test_concurrent_requests_see_their_own_context(registry: CollectorRegistry, style: str) -> None:
    app, _ = make_app(registry, style)

    async def main() -> None:
        structlog.contextvars.clear_contextvars()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            # One request in this very task first: nothing may stay bound here.
            solo = await client.get("/ctx", headers={"X-Request-ID": "solo"})
            assert solo.json()["log_request_id"] == "solo"
            assert structlog.contextvars.get_contextvars() == {}
            assert current_request.get() is None

            ids = [f"req-{i:02d}" for i in range(20)]
            responses = await asyncio.gather(*(client.get("/ctx", headers={"X-Request-ID": i}) for i in ids))
        for request_id, response in zip(ids, responses):
            assert response.status_code == 200
            assert response.headers["x-request-id"] == request_id
            assert response.json() == {
                "log_request_id": request_id,
                "log_route": "/ctx",
                "stats_request_id": request_id,
                "stats_route": "/ctx",
            }
        assert structlog.contextvars.get_contextvars() == {}
        assert current_request.get() is None

    asyncio.run(main())
    assert value(registry, REQUESTS, route="/ctx", method="GET", status_class="2xx") == 21.0


# -- EXIF fallback: request context and per-request counters -------------------


@pytest.mark.parametrize("route", ["/hash-route", "/hash-sync"])
def test_exif_fallback_carries_request_context(
    registry: CollectorRegistry, client: TestClient, context_logs: list[dict[str, Any]], route: str
) -> None:
    response = client.get(route, headers={"X-Request-ID": "exif-1"})

    assert response.status_code == 200
    assert response.json()["key"] == golden.case("media-bad-exif-header.jpg")["expected"]
    (event,) = events(context_logs, "exif_fallback")
    assert event["request_id"] == "exif-1"
    assert event["route"] == route
    assert event["exception"] == "SyntaxError"
    assert event["key_source"] == "original_bytes"
    assert value(registry, "mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError") == 1.0
    assert value(registry, "mmobs_http_exif_fallback_requests_total", route=route) == 1.0
    assert value(registry, "mmobs_http_image_requests_total", route=route, status_class="2xx") == 1.0


def test_request_without_images_moves_no_image_counter(registry: CollectorRegistry, client: TestClient) -> None:
    client.get("/hash-route")
    assert client.get("/no-images").status_code == 200

    assert value(registry, "mmobs_http_exif_fallback_requests_total", route="/no-images") == 0.0
    assert value(registry, "mmobs_http_image_requests_total", route="/no-images", status_class="2xx") == 0.0
    assert value(registry, "mmobs_http_exif_fallback_requests_total", route="/hash-route") == 1.0
    assert value(registry, "mmobs_http_image_requests_total", route="/hash-route", status_class="2xx") == 1.0
    assert {dict(labels)["route"] for labels in counted_label_sets(registry, "mmobs_http_image_requests_total")} == {
        "/hash-route"
    }


def test_good_image_counts_an_image_request_but_no_fallback(
    registry: CollectorRegistry, client: TestClient, context_logs: list[dict[str, Any]]
) -> None:
    assert client.get("/hash-good").status_code == 200

    assert events(context_logs, "exif_fallback") == []
    assert value(registry, "mmobs_http_image_requests_total", route="/hash-good", status_class="2xx") == 1.0
    assert value(registry, "mmobs_http_exif_fallback_requests_total", route="/hash-good") == 0.0
    assert counted_label_sets(registry, "mmobs_http_exif_fallback_requests_total") == set()


def test_known_routes_have_image_series_at_zero_from_the_first_request(
    registry: CollectorRegistry, client: TestClient
) -> None:
    """So rate() sees a route's first fallback or first 5xx (a series born at 1 hides it)."""
    assert client.get("/items/1").status_code == 200
    for status_class in ("1xx", "2xx", "3xx", "4xx", "5xx"):
        assert (
            registry.get_sample_value(
                "mmobs_http_image_requests_total", {"route": "/hash-route", "status_class": status_class}
            )
            == 0.0
        )
    assert registry.get_sample_value("mmobs_http_exif_fallback_requests_total", {"route": "/hash-route"}) == 0.0
    # Routes inside mounts too, under the same template the request labels use.
    for template in ("/api/users/{user_id}", "/api/v2/things/{thing_id:int}"):
        assert registry.get_sample_value("mmobs_http_exif_fallback_requests_total", {"route": template}) == 0.0
