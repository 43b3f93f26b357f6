"""The apps and helpers :mod:`mmobs.MMObsMiddleware`'s tests share: a Starlette app with every kind of route, a plain ASGI app, and readers of a registry's series."""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog
from PIL import Image
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

import mmobs
from mmobs.observability.context import current_request
from mmobs.observability.logs import add_request_context
from tests.support import golden

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


class AppState:
    def __init__(self) -> None:
        self.startup = 0
        self.shutdown = 0
        self.background_ran = False
        #: When the background task began (``time.monotonic()``): after the response's last chunk.
        self.background_started: float | None = None
        self.entered = 0
        self.release = asyncio.Event()


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
            state.background_started = time.monotonic()
            await asyncio.sleep(1.0)
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
