"""In-process tests of :class:`mmobs.MMObsMiddleware` (Starlette, FastAPI, plain ASGI).

Every test gets a fresh ``CollectorRegistry``; building the middleware on it
installs an ``Instrumentation`` on that registry as the process-wide observer,
and the ``observer`` fixture puts the previous one back afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import random
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from PIL import Image, UnidentifiedImageError
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

import mmobs
from mmobs.asgi.routing import UNMATCHED_ROUTE, RouteResolver
from mmobs.observability.context import current_request
from mmobs.observability.logs import REQUEST_ATTRIBUTE, add_request_context

from . import golden
from .asgi_apps import call_http, http_scope
from .support import value

GOLDEN_INPUTS = golden.GOLDEN_DIR / "inputs"
BAD_EXIF_JPEG = GOLDEN_INPUTS / "bad-exif-header.jpg"
GOOD_JPEG = GOLDEN_INPUTS / "photo.jpg"
HEX32 = re.compile(r"[0-9a-f]{32}")
REQUESTS = "mmobs_http_requests_total"
DURATION_COUNT = "mmobs_http_request_duration_seconds_count"
DURATION_SUM = "mmobs_http_request_duration_seconds_sum"
INTERNAL_ERROR_BODY = {
    "error": {
        "message": "internal error; the request id names it in the server log",
        "type": "server_error",
        "code": "internal_error",
        "param": None,
    }
}
BAD_IMAGE_BODY = {
    "error": {
        "message": "not an image",
        "type": "invalid_request_error",
        "code": "bad_image",
        "param": "images[0]",
        "reason": "unidentified",
    }
}


# =============================================================================
# Fixtures and helpers
# =============================================================================


@pytest.fixture(autouse=True)
def observer() -> Iterator[None]:
    """Put the process-wide observer back: the middleware installs its own."""
    previous = mmobs.get_observer()
    try:
        yield
    finally:
        mmobs.set_observer(previous)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def context_logs() -> Iterator[list[dict[str, Any]]]:
    """Captured log events *with* ``merge_contextvars`` in the chain (structlog's default chain has it)."""
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        yield capture.entries
    finally:
        structlog.reset_defaults()


def label_sets(registry: CollectorRegistry, name: str) -> set[tuple[tuple[str, str], ...]]:
    return {
        tuple(sorted(sample.labels.items()))
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def counted_label_sets(registry: CollectorRegistry, name: str) -> set[tuple[tuple[str, str], ...]]:
    """Label sets of the series that counted something (known routes start at 0)."""
    return {
        tuple(sorted(sample.labels.items()))
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name and sample.value
    }


def events(entries: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [entry for entry in entries if entry["event"] == name]


# =============================================================================
# The Starlette test app
# =============================================================================


class AppState:
    def __init__(self) -> None:
        self.startup = 0
        self.shutdown = 0
        self.background_ran = False
        self.entered = 0
        self.release = asyncio.Event()


#: One response object answered to every request of /reused: the middleware must not grow its headers.
REUSED_RESPONSE = PlainTextResponse("same object")


def _context() -> dict[str, Any]:
    """What an event logged here would carry (both ways), and what the hashing hooks would count into."""
    stats = current_request.get()
    bound = structlog.contextvars.get_contextvars()
    assert add_request_context(None, "info", {}) == {k: bound[k] for k in ("request_id", "route") if k in bound}
    return {
        "log_request_id": bound.get("request_id"),
        "log_route": bound.get("route"),
        "stats_request_id": None if stats is None else stats.request_id,
        "stats_route": None if stats is None else stats.route,
    }


def _hash_file(path: Path) -> str:
    media = mmobs.ImageMediaIO().load_bytes(path.read_bytes())
    return mmobs.MultiModalHasher.hash_kwargs("blake3", image=media)


def _hash_bad_exif() -> str:
    return _hash_file(BAD_EXIF_JPEG)


def build_routes(state: AppState) -> list[Any]:
    async def item(request: Request) -> JSONResponse:
        return JSONResponse({"item_id": request.path_params["item_id"], **_context()})

    async def bad(request: Request) -> Response:
        raise mmobs.BadImageError("unidentified", "not an image", param="images[0]")

    async def bad_load(request: Request) -> Response:
        mmobs.ImageMediaIO().load_bytes(b"these bytes are not an image")
        return PlainTextResponse("unreachable")

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    async def stream(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for index in range(3):
                if index:
                    await asyncio.sleep(0.05)
                yield f"chunk{index};".encode()

        return StreamingResponse(chunks(), media_type="text/plain")

    async def background(request: Request) -> Response:
        async def task() -> None:
            await asyncio.sleep(0.3)
            state.background_ran = True

        return PlainTextResponse("queued", background=BackgroundTask(task))

    async def late_bad(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"first;"
            await asyncio.sleep(0)
            raise mmobs.BadImageError("corrupt", "broke mid-stream")

        return StreamingResponse(chunks(), media_type="text/plain")

    async def hash_route(request: Request) -> JSONResponse:
        key = await run_in_threadpool(_hash_bad_exif)
        return JSONResponse({"key": key})

    def hash_sync(request: Request) -> JSONResponse:
        return JSONResponse({"key": _hash_bad_exif()})

    async def hash_good(request: Request) -> JSONResponse:
        key = await run_in_threadpool(_hash_file, GOOD_JPEG)
        return JSONResponse({"key": key})

    async def no_images(request: Request) -> PlainTextResponse:
        return PlainTextResponse("nothing to see")

    def pillow(request: Request) -> Response:
        Image.open(io.BytesIO(b"not an image"))
        return PlainTextResponse("unreachable")

    async def ctx(request: Request) -> JSONResponse:
        await asyncio.sleep(random.uniform(0.0, 0.02))
        return JSONResponse(_context())

    async def echo_socket(websocket: WebSocket) -> None:
        await websocket.accept()
        text = await websocket.receive_text()
        await websocket.send_text(f"echo:{text}")
        await websocket.close()

    async def user(request: Request) -> JSONResponse:
        return JSONResponse(_context())

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def echo(request: Request) -> Response:
        body = await request.body()
        return Response(b"x" * (len(body) // 2), media_type="application/octet-stream")

    async def slow_first(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            await asyncio.sleep(0.12)
            yield b"late;"
            yield b"then quick"

        return StreamingResponse(chunks(), media_type="text/plain")

    async def wait(request: Request) -> PlainTextResponse:
        state.entered += 1
        await state.release.wait()
        return PlainTextResponse("released")

    async def reused(request: Request) -> Response:
        return REUSED_RESPONSE

    async def own_id(request: Request) -> PlainTextResponse:
        return PlainTextResponse("mine", headers={"X-Request-ID": "set-by-the-app"})

    return [
        Route("/items/{item_id}", item, methods=["GET"]),
        Route("/bad", bad),
        Route("/bad-load", bad_load),
        Route("/boom", boom),
        Route("/stream", stream),
        Route("/bg", background),
        Route("/late-bad", late_bad),
        Route("/hash-route", hash_route),
        Route("/hash-sync", hash_sync),
        Route("/hash-good", hash_good),
        Route("/no-images", no_images),
        Route("/pillow", pillow),
        Route("/ctx", ctx),
        Route("/healthz", healthz),
        Route("/echo", echo, methods=["POST"]),
        Route("/slow-first", slow_first),
        Route("/wait", wait),
        Route("/reused", reused),
        Route("/own-id", own_id),
        WebSocketRoute("/ws", echo_socket),
        Mount(
            "/api",
            routes=[
                Route("/users/{user_id}", user),
                Mount("/v2", routes=[Route("/things/{thing_id:int}", user)]),
            ],
        ),
    ]


def make_app(registry: CollectorRegistry, style: str = "middleware", **options: Any) -> tuple[Starlette, AppState]:
    state = AppState()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.startup += 1
        yield
        state.shutdown += 1

    if style == "middleware":
        app = Starlette(
            routes=build_routes(state),
            lifespan=lifespan,
            middleware=[Middleware(mmobs.MMObsMiddleware, registry=registry, **options)],
        )
    else:
        assert style == "add_middleware"
        app = Starlette(routes=build_routes(state), lifespan=lifespan)
        app.add_middleware(mmobs.MMObsMiddleware, registry=registry, **options)
    return app, state


STYLES = ["middleware", "add_middleware"]


@pytest.fixture(params=STYLES)
def style(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def app_state(registry: CollectorRegistry, style: str) -> tuple[Starlette, AppState]:
    return make_app(registry, style)


@pytest.fixture
def client(app_state: tuple[Starlette, AppState]) -> Iterator[TestClient]:
    with TestClient(app_state[0]) as test_client:
        yield test_client


# =============================================================================
# Plain ASGI apps (no router)
# =============================================================================


async def plain_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    if scope["path"] == "/bad":
        raise mmobs.BadImageError("unidentified", "not an image", param="images[0]")
    if scope["path"] == "/boom":
        raise RuntimeError("boom")
    if scope["path"] == "/late-bad":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        raise mmobs.BadImageError("corrupt", "broke mid-stream")
    if scope["path"] == "/no-headers":
        # ASGI: "headers" is optional in http.response.start (defaults to []).
        await send({"type": "http.response.start", "status": 200})
        await send({"type": "http.response.body", "body": b"bare"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"plain"})


# =============================================================================
# Bad images -> 400, other errors left alone
# =============================================================================


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


# =============================================================================
# Request ids
# =============================================================================


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


# =============================================================================
# Route template labels
# =============================================================================


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


# =============================================================================
# Streaming, background tasks, lifespan, websockets
# =============================================================================


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
    response = TestClient(app).get("/bg")

    assert (response.status_code, response.text) == (200, "queued")
    assert state.background_ran is True
    assert value(registry, DURATION_COUNT, route="/bg", method="GET") == 1.0
    # The 300 ms task runs after the last body chunk, which ends the timing.
    assert value(registry, DURATION_SUM, route="/bg", method="GET") < 0.25


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


# =============================================================================
# Context isolation under concurrency
# =============================================================================


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


# =============================================================================
# EXIF fallback: request context and per-request counters
# =============================================================================


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


# =============================================================================
# A bad image after the response started
# =============================================================================


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
    with pytest.raises(mmobs.BadImageError):
        TestClient(app_state[0]).get("/late-bad")

    response = TestClient(app_state[0], raise_server_exceptions=False).get("/late-bad")
    assert (response.status_code, response.content) == (200, b"first;")


# =============================================================================
# /metrics
# =============================================================================


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


# =============================================================================
# Pillow's own errors
# =============================================================================


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


# =============================================================================
# FastAPI
# =============================================================================


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


# =============================================================================
# Options: skip_paths, buckets, exemplars, gzip, access log
# =============================================================================

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
    # /stream: the first chunk at once, the last after two 50 ms sleeps.
    assert value(registry, TTFB_SUM, **stream) < 0.05 <= 0.1 <= value(registry, DURATION_SUM, **stream)
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
