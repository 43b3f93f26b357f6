"""How the middleware answers errors: a bad image is a 400 with the OpenAI error shape, before or after the response started, Pillow's own errors too; other errors are left to the app."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog
from PIL import UnidentifiedImageError
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.testclient import TestClient

import mmobs
from mmobs.asgi.routing import UNMATCHED_ROUTE
from mmobs.observability.logs import REQUEST_ATTRIBUTE
from tests.support import value
from tests.support.asgi_apps import call_http, http_scope
from tests.support.middleware_app import (
    BAD_IMAGE_BODY,
    HEX32,
    INTERNAL_ERROR_BODY,
    REQUESTS,
    AppState,
    events,
    label_sets,
    make_app,
    plain_app,
)

# -- Bad images -> 400, other errors left alone --------------------------------


def test_bad_image_becomes_400_with_openai_error(registry: CollectorRegistry, client: TestClient) -> None:
    response = client.get("/bad", headers={"X-Request-ID": "bad-1"})

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == BAD_IMAGE_BODY
    assert response.headers["x-request-id"] == "bad-1"
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 1.0
    assert value(registry, REQUESTS, route="/bad", method="GET", status_class="4xx") == 1.0
    assert value(registry, REQUESTS, route="/bad", method="GET", status_class="5xx") == 0.0
    assert value(registry, "mmobs_http_image_requests_total", route="/bad", status_class="4xx") == 1.0


def test_bad_image_reported_by_loader_is_counted_once(registry: CollectorRegistry, client: TestClient) -> None:
    response = client.get("/bad-load")

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["reason"], error["param"]) == ("bad_image", "unidentified", None)
    # The loader reported it; the middleware must not report it a second time.
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 1.0
    assert value(registry, REQUESTS, route="/bad-load", method="GET", status_class="4xx") == 1.0


def test_bad_image_log_event_carries_request_context(
    registry: CollectorRegistry, client: TestClient, context_logs: list[dict[str, Any]]
) -> None:
    client.get("/bad", headers={"X-Request-ID": "ctx-bad"})

    (event,) = events(context_logs, "bad_image")
    assert event["reason"] == "unidentified"
    assert event["request_id"] == "ctx-bad"
    assert event["route"] == "/bad"


def test_runtime_error_is_reraised(registry: CollectorRegistry, app_state: tuple[Starlette, AppState]) -> None:
    with TestClient(app_state[0], raise_server_exceptions=True) as test_client:
        with pytest.raises(RuntimeError, match=r"^boom$"):
            test_client.get("/boom")

    assert value(registry, REQUESTS, route="/boom", method="GET", status_class="5xx") == 1.0
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 0.0


def test_runtime_error_is_a_500(registry: CollectorRegistry, app_state: tuple[Starlette, AppState]) -> None:
    with TestClient(app_state[0], raise_server_exceptions=False) as test_client:
        response = test_client.get("/boom")

    assert response.status_code == 500
    assert value(registry, REQUESTS, route="/boom", method="GET", status_class="5xx") == 1.0
    assert value(registry, REQUESTS, route="/boom", method="GET", status_class="4xx") == 0.0
    bad_image_series = label_sets(registry, "mmobs_bad_images_total")
    assert len(bad_image_series) == len(mmobs.BAD_IMAGE_REASONS)  # created up front, at zero
    assert sum(value(registry, "mmobs_bad_images_total", **dict(labels)) for labels in bad_image_series) == 0.0


def test_plain_asgi_app(registry: CollectorRegistry) -> None:
    client = TestClient(mmobs.MMObsMiddleware(plain_app, registry=registry), raise_server_exceptions=False)

    ok = client.get("/anything/123")
    bad = client.get("/bad")
    boom = client.get("/boom")

    assert (ok.status_code, ok.text) == (200, "plain")
    assert HEX32.fullmatch(ok.headers["x-request-id"])
    assert (bad.status_code, bad.json()) == (400, BAD_IMAGE_BODY)
    assert boom.status_code == 500
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="2xx") == 1.0
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="4xx") == 1.0
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="5xx") == 1.0
    assert {dict(labels)["route"] for labels in label_sets(registry, REQUESTS)} == {UNMATCHED_ROUTE}
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 1.0


def test_plain_asgi_app_reraises_runtime_error_after_answering_500(registry: CollectorRegistry) -> None:
    conversation = call_http(
        mmobs.MMObsMiddleware(plain_app, registry=registry), http_scope("/boom", headers=[(b"x-request-id", b"b-1")])
    )

    assert isinstance(conversation.error, RuntimeError)
    assert getattr(conversation.error, REQUEST_ATTRIBUTE) == ("b-1", UNMATCHED_ROUTE)
    assert conversation.status == 500
    assert conversation.header(b"x-request-id") == [b"b-1"]
    assert conversation.header(b"content-type") == [b"application/json"]
    assert json.loads(conversation.body) == INTERNAL_ERROR_BODY
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="5xx") == 1.0


def test_response_start_without_headers_key(registry: CollectorRegistry) -> None:
    """ASGI makes ``headers`` optional in ``http.response.start``; uvicorn accepts it."""
    conversation = call_http(mmobs.MMObsMiddleware(plain_app, registry=registry), http_scope("/no-headers"))

    assert conversation.error is None, repr(conversation.error)
    assert conversation.status == 200
    assert conversation.body == b"bare"
    (request_id,) = conversation.header(b"x-request-id")
    assert HEX32.fullmatch(request_id.decode())
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="2xx") == 1.0


# -- A bad image after the response started ------------------------------------


def test_bad_image_after_response_started_starlette(
    registry: CollectorRegistry, app_state: tuple[Starlette, AppState]
) -> None:
    with structlog.testing.capture_logs() as logs:
        conversation = call_http(app_state[0], http_scope("/late-bad", headers=[(b"x-request-id", b"late-1")]))

    assert isinstance(conversation.error, mmobs.BadImageError)
    assert conversation.error.reason == "corrupt"
    assert len(conversation.starts) == 1
    assert conversation.status == 200
    assert conversation.header(b"x-request-id") == [b"late-1"]
    assert conversation.bodies[0]["body"] == b"first;"
    assert b'"bad_image"' not in conversation.body
    (event,) = events(logs, "bad_image_after_response_started")
    assert event["log_level"] == "error"
    assert event["reason"] == "corrupt"
    assert value(registry, "mmobs_bad_images_total", reason="corrupt") == 1.0


def test_bad_image_after_response_started_plain(registry: CollectorRegistry) -> None:
    app = mmobs.MMObsMiddleware(plain_app, registry=registry)
    with structlog.testing.capture_logs() as logs:
        conversation = call_http(app, http_scope("/late-bad"))

    assert isinstance(conversation.error, mmobs.BadImageError)
    assert [m["type"] for m in conversation.sent] == ["http.response.start", "http.response.body"]
    assert conversation.body == b"first;"
    assert len(events(logs, "bad_image_after_response_started")) == 1
    assert value(registry, "mmobs_bad_images_total", reason="corrupt") == 1.0


def test_bad_image_after_response_started_test_client(
    registry: CollectorRegistry, app_state: tuple[Starlette, AppState]
) -> None:
    with pytest.raises(Exception) as raised:
        TestClient(app_state[0]).get("/late-bad")
    error = raised.value
    # Starlette's TestClient before 1.10 raises it from StreamingResponse's task group, the group's one exception.
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    assert isinstance(error, mmobs.BadImageError)

    response = TestClient(app_state[0], raise_server_exceptions=False).get("/late-bad")
    # The status already sent stands (no 400 after the start); that TestClient also drops the partial body.
    assert response.status_code == 200
    assert response.content in (b"first;", b"")


# -- Pillow's own errors -------------------------------------------------------


def test_pillow_errors_as_bad_images(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry, pillow_errors_as_bad_images=True)
    response = TestClient(app).get("/pillow")

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["reason"], error["type"]) == ("bad_image", "unidentified", "invalid_request_error")
    assert error["message"].startswith("the bytes are not a recognised image format (UnidentifiedImageError: ")
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 1.0
    assert value(registry, REQUESTS, route="/pillow", method="GET", status_class="4xx") == 1.0


def test_pillow_errors_are_500_by_default(registry: CollectorRegistry) -> None:
    app, _ = make_app(registry)
    with pytest.raises(UnidentifiedImageError):
        TestClient(app).get("/pillow")
    response = TestClient(app, raise_server_exceptions=False).get("/pillow")

    assert response.status_code == 500
    assert value(registry, REQUESTS, route="/pillow", method="GET", status_class="5xx") == 2.0
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 0.0
