"""What the middleware counts under which route: route templates, plain ASGI apps, streaming, background tasks, lifespan, websockets and FastAPI."""

from __future__ import annotations

import random
import time
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.testclient import TestClient

import mmobs
from mmobs.asgi.routing import UNMATCHED_ROUTE, RouteResolver
from tests.support import value
from tests.support.asgi_apps import call_http, http_scope
from tests.support.middleware_app import (
    BAD_IMAGE_BODY,
    DURATION_COUNT,
    DURATION_SUM,
    HEX32,
    REQUESTS,
    AppState,
    _context,
    build_routes,
    label_sets,
    make_app,
)

# -- Route template labels -----------------------------------------------------


def test_path_parameters_share_one_series(registry: CollectorRegistry, client: TestClient) -> None:
    assert client.get("/items/1").status_code == 200
    assert client.get("/items/2").status_code == 200

    assert value(registry, REQUESTS, route="/items/{item_id}", method="GET", status_class="2xx") == 2.0
    assert label_sets(registry, REQUESTS) == {
        (("method", "GET"), ("route", "/items/{item_id}"), ("status_class", "2xx"))
    }
    assert value(registry, DURATION_COUNT, route="/items/{item_id}", method="GET") == 2.0


def test_unknown_path_is_unmatched(registry: CollectorRegistry, client: TestClient) -> None:
    response = client.get("/no/such/path")

    assert response.status_code == 404
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="4xx") == 1.0
    assert label_sets(registry, REQUESTS) == {(("method", "GET"), ("route", UNMATCHED_ROUTE), ("status_class", "4xx"))}


def test_method_not_allowed_keeps_the_template(registry: CollectorRegistry, client: TestClient) -> None:
    assert client.post("/items/5").status_code == 405
    assert value(registry, REQUESTS, route="/items/{item_id}", method="POST", status_class="4xx") == 1.0


def test_mounted_routes_give_joined_templates(registry: CollectorRegistry, client: TestClient) -> None:
    user = client.get("/api/users/42")
    thing = client.get("/api/v2/things/9")

    assert user.json()["log_route"] == "/api/users/{user_id}"
    assert thing.json()["log_route"] == "/api/v2/things/{thing_id:int}"
    assert value(registry, REQUESTS, route="/api/users/{user_id}", method="GET", status_class="2xx") == 1.0
    assert value(registry, REQUESTS, route="/api/v2/things/{thing_id:int}", method="GET", status_class="2xx") == 1.0


def test_outer_wrapped_starlette_app_gets_route_templates(registry: CollectorRegistry) -> None:
    app = mmobs.MMObsMiddleware(Starlette(routes=build_routes(AppState())), registry=registry)

    assert TestClient(app).get("/items/1").status_code == 200
    assert value(registry, REQUESTS, route="/items/{item_id}", method="GET", status_class="2xx") == 1.0


def test_label_sets_stay_bounded_under_random_paths(registry: CollectorRegistry) -> None:
    resolver = RouteResolver(capacity=64)
    app, _ = make_app(registry, route_resolver=resolver)
    client = TestClient(app)
    rng = random.Random(56527)

    for n in range(500):
        token = f"{rng.getrandbits(64):016x}"
        path = f"/items/{token}" if n % 2 else f"/{token}/{rng.getrandbits(16)}"
        client.get(path)

    assert label_sets(registry, REQUESTS) == {
        (("method", "GET"), ("route", "/items/{item_id}"), ("status_class", "2xx")),
        (("method", "GET"), ("route", UNMATCHED_ROUTE), ("status_class", "4xx")),
    }
    assert value(registry, REQUESTS, route="/items/{item_id}", method="GET", status_class="2xx") == 250.0
    assert value(registry, REQUESTS, route=UNMATCHED_ROUTE, method="GET", status_class="4xx") == 250.0
    assert len(label_sets(registry, DURATION_COUNT)) == 2
    assert len(resolver._cache) <= 64


# -- Streaming, background tasks, lifespan, websockets -------------------------


def test_streaming_chunks_arrive_in_order(registry: CollectorRegistry, app_state: tuple[Starlette, AppState]) -> None:
    conversation = call_http(app_state[0], http_scope("/stream", headers=[(b"x-request-id", b"stream-1")]))

    assert conversation.error is None
    assert len(conversation.starts) == 1
    assert conversation.status == 200
    assert conversation.header(b"x-request-id") == [b"stream-1"]
    chunks = [m.get("body", b"") for m in conversation.bodies]
    assert [c for c in chunks if c] == [b"chunk0;", b"chunk1;", b"chunk2;"]
    assert conversation.bodies[-1].get("more_body", False) is False
    assert value(registry, DURATION_COUNT, route="/stream", method="GET") == 1.0
    # Timed to the last chunk: two 50 ms sleeps happen between the chunks.
    assert value(registry, DURATION_SUM, route="/stream", method="GET") >= 0.1
    assert value(registry, REQUESTS, route="/stream", method="GET", status_class="2xx") == 1.0


def test_streaming_through_test_client(registry: CollectorRegistry, client: TestClient) -> None:
    with client.stream("GET", "/stream") as response:
        received = list(response.iter_bytes())

    assert b"".join(received) == b"chunk0;chunk1;chunk2;"
    assert value(registry, DURATION_COUNT, route="/stream", method="GET") == 1.0


def test_background_task_runs_and_is_not_timed(
    registry: CollectorRegistry, app_state: tuple[Starlette, AppState]
) -> None:
    app, state = app_state
    sent = time.monotonic()
    response = TestClient(app).get("/bg")

    assert (response.status_code, response.text) == (200, "queued")
    assert state.background_ran is True and state.background_started is not None
    assert value(registry, DURATION_COUNT, route="/bg", method="GET") == 1.0
    # The last body chunk ends the timing, and the 1 s task begins after it: the request's time fits
    # between sending it and the task's start, however slow a loaded machine makes either.
    assert value(registry, DURATION_SUM, route="/bg", method="GET") <= state.background_started - sent


def test_lifespan_passes_through(registry: CollectorRegistry, app_state: tuple[Starlette, AppState]) -> None:
    app, state = app_state
    with TestClient(app) as client:
        assert (state.startup, state.shutdown) == (1, 0)
        assert client.get("/items/1").status_code == 200
    assert (state.startup, state.shutdown) == (1, 1)
    assert label_sets(registry, REQUESTS) == {
        (("method", "GET"), ("route", "/items/{item_id}"), ("status_class", "2xx"))
    }


def test_websocket_passes_through_unmetered(registry: CollectorRegistry, client: TestClient) -> None:
    with client.websocket_connect("/ws") as websocket:
        websocket.send_text("hello")
        assert websocket.receive_text() == "echo:hello"

    assert label_sets(registry, REQUESTS) == set()
    assert label_sets(registry, DURATION_COUNT) == set()


# -- FastAPI -------------------------------------------------------------------


def test_fastapi(registry: CollectorRegistry) -> None:
    from fastapi import FastAPI

    app = FastAPI()
    app.add_middleware(mmobs.MMObsMiddleware, registry=registry)

    @app.get("/v1/models/{model_id}/images")
    async def images(model_id: str) -> dict[str, Any]:
        return {"model_id": model_id, **_context()}

    @app.post("/v1/bad")
    async def bad() -> dict[str, Any]:
        raise mmobs.BadImageError("unidentified", "not an image", param="images[0]")

    client = TestClient(app)
    ok = client.get("/v1/models/llava/images", headers={"X-Request-ID": "fa-1"})
    bad_response = client.post("/v1/bad")

    assert ok.status_code == 200
    assert ok.json() == {
        "model_id": "llava",
        "log_request_id": "fa-1",
        "log_route": "/v1/models/{model_id}/images",
        "stats_request_id": "fa-1",
        "stats_route": "/v1/models/{model_id}/images",
    }
    assert (bad_response.status_code, bad_response.json()) == (400, BAD_IMAGE_BODY)
    assert HEX32.fullmatch(bad_response.headers["x-request-id"])
    assert value(registry, REQUESTS, route="/v1/models/{model_id}/images", method="GET", status_class="2xx") == 1.0
    assert value(registry, REQUESTS, route="/v1/bad", method="POST", status_class="4xx") == 1.0
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 1.0
