"""The reference service: ``POST /v1/hash`` keys images exactly as vLLM would.

A Starlette app behind :class:`~mmobs.middleware.MMObsMiddleware`. It accepts
a JSON body (``images`` or OpenAI chat ``messages``), a multipart upload, or a
raw ``image/*`` body, and answers every malformed input with a 4xx JSON error
(OpenAI style) that names what to fix. ``{"images": [url]}`` yields exactly
``hash_kwargs(algorithm, image=media)``; optional ``model_id`` and
``mm_processor_kwargs`` are added to the key only when given.

``POST /v1/keys`` takes the same requests and answers the same keys without
decoding pixels where the header decides (:mod:`mmobs.keys`): the call a
cache-aware router makes per image. Its ``verify`` option (``header``, the
default, or ``decode``) is :func:`mmobs.keys.key_image`'s.

Run it with ``mmobs serve``; with ``--workers`` above 1 the CLI sets up
prometheus_client's multiprocess mode so ``/metrics`` sums every worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from PIL import Image
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive

from ._version import __version__
from .config import ServiceConfig
from .errors import BadImageError, InvalidOptionError
from .events import RecordingObserver, get_observer, observing
from .fetch import RemoteFetcher
from .fingerprint import process_fingerprint
from .hashing import ALGORITHMS, MultiModalHasher
from .http_errors import error_body
from .image_io import (
    ImageMediaIO,
    data_url_bytes,
    load_data_url,
    report_bad_image,
)
from .keys import VERIFY_MODES, Verify, key_image
from .logs import configure_logging
from .media import MediaWithBytes
from .middleware import MMObsMiddleware

__all__ = ["HashService", "RequestError", "ServiceConfig", "create_app"]

_MAX_OPTION_DEPTH = 16
_MAX_MODEL_ID_CHARS = 512


class RequestError(Exception):
    """A malformed request (not a bad image): answered with ``status`` and a JSON error."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


@dataclass
class _HashJob:
    """What one request asks for, validated."""

    algorithm: str
    io: ImageMediaIO
    extras: dict[str, Any]
    sources: list[tuple[str, str | bytes]]  # (param, data URL / remote URL / raw bytes)
    verify: Verify = "header"  # /v1/keys only


class HashService:
    """The endpoints, bound to a :class:`ServiceConfig`."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.fetcher = (
            RemoteFetcher(
                config.allowed_hosts,
                max_bytes=config.max_image_bytes,
                timeout_seconds=config.fetch_timeout_seconds,
                allow_private=config.fetch_allow_private,
            )
            if config.allowed_hosts
            else None
        )

    async def hash(self, request: Request) -> Response:
        try:
            request = Request(request.scope, _limited(request.receive, self.config.max_body_bytes))
            job = await self._parse(request)
        except RequestError as error:
            return _error_response(error)
        except ClientDisconnect:
            # Nobody is left to answer; a client fault, never a server error.
            return _error_response(RequestError(400, "client_disconnected", "the client left before sending the whole body"))
        items = await run_in_threadpool(self._hash_all, job)
        return JSONResponse({"algorithm": job.algorithm, "items": items})

    async def keys(self, request: Request) -> Response:
        """``POST /v1/keys``: the requests of ``/v1/hash``, answered with keys read from the headers."""
        try:
            request = Request(request.scope, _limited(request.receive, self.config.max_body_bytes))
            job = await self._parse(request)
        except RequestError as error:
            return _error_response(error)
        except ClientDisconnect:
            message = "the client left before sending the whole body"
            return _error_response(RequestError(400, "client_disconnected", message))
        items = await run_in_threadpool(self._key_all, job)
        return JSONResponse({"algorithm": job.algorithm, "items": items})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "version": __version__, "fingerprint": process_fingerprint().digest}
        )

    # -- parsing ----------------------------------------------------------------

    async def _parse(self, request: Request) -> _HashJob:
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.config.max_body_bytes:
            raise _BodyTooLarge(self.config.max_body_bytes)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type in ("application/json", ""):
            return self._parse_json(await _read_body(request))
        if content_type == "multipart/form-data":
            return await self._parse_multipart(request)
        if content_type.startswith("image/") or content_type == "application/octet-stream":
            options = dict(request.query_params)
            return self._job(options, [("body", await _read_body(request))], query=True)
        raise RequestError(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type {content_type[:64]!r}: send application/json, "
            "multipart/form-data or an image/* body",
        )

    def _parse_json(self, body: bytes) -> _HashJob:
        if not body:
            raise RequestError(400, "invalid_json", "the request body is empty; send a JSON object")
        try:
            document = json.loads(body)
        except RecursionError:
            raise RequestError(400, "invalid_json", "the JSON body is nested too deeply") from None
        except ValueError as error:
            raise RequestError(400, "invalid_json", f"the body is not valid JSON: {str(error)[:200]}") from None
        if not isinstance(document, dict):
            raise RequestError(400, "invalid_request", "the JSON body must be an object")
        has_images, has_messages = "images" in document, "messages" in document
        if has_images == has_messages:
            raise RequestError(
                400, "invalid_request", "send exactly one of 'images' (a list of URLs) or 'messages'"
            )
        sources = _image_list(document["images"]) if has_images else _message_images(document["messages"])
        return self._job(document, sources)

    async def _parse_multipart(self, request: Request) -> _HashJob:
        limit = self.config.max_images
        try:
            form = await request.form(max_files=limit, max_fields=32, max_part_size=1024 * 1024)
        except RequestError:
            raise
        except Exception as error:  # noqa: BLE001 - python-multipart raises several types
            raise RequestError(400, "invalid_multipart", f"the multipart body is malformed: {str(error)[:200]}") from None
        try:
            sources: list[tuple[str, str | bytes]] = []
            options: dict[str, Any] = {}
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    data = await value.read(self.config.max_image_bytes + 1)
                    sources.append((f"{name[:32]}[{len(sources)}]", data))
                else:
                    options[name] = value
        finally:
            await form.close()
        if not sources:
            raise RequestError(400, "invalid_request", "the multipart body holds no image file")
        return self._job(options, sources, query=True)

    def _job(self, options: dict[str, Any], sources: list[tuple[str, str | bytes]], query: bool = False) -> _HashJob:
        if len(sources) > self.config.max_images:
            raise RequestError(
                400, "too_many_images", f"{len(sources)} images sent; the limit is {self.config.max_images}"
            )
        algorithm = options.get("algorithm", "blake3")
        if algorithm not in ALGORITHMS:
            raise RequestError(
                400, "invalid_option", f"algorithm must be one of {', '.join(ALGORITHMS)}", "algorithm"
            )
        io_options: dict[str, Any] = {}
        if "image_mode" in options:
            io_options["image_mode"] = options["image_mode"]
        if "rgba_background_color" in options:
            color = options["rgba_background_color"]
            if query and isinstance(color, str):  # "r,g,b" from a query string or form field
                color = [int(c) if c.strip().isascii() and c.strip().isdigit() else c for c in color.split(",")]
            io_options["rgba_background_color"] = color
        try:
            io = ImageMediaIO(
                **io_options,
                max_pixels=self.config.max_pixels,
                max_bytes=self.config.max_image_bytes,
                formats=self.config.image_formats,
            )
        except InvalidOptionError as error:
            raise RequestError(400, "invalid_option", error.message[:300], error.param) from None
        verify = options.get("verify", "header")
        if verify not in VERIFY_MODES:
            raise RequestError(400, "invalid_option", f"verify must be one of {', '.join(VERIFY_MODES)}", "verify")
        extras: dict[str, Any] = {}
        if "model_id" in options:
            model_id = options["model_id"]
            if not isinstance(model_id, str) or len(model_id) > _MAX_MODEL_ID_CHARS:
                raise RequestError(
                    400, "invalid_option", f"model_id must be a string of at most {_MAX_MODEL_ID_CHARS} characters", "model_id"
                )
            extras["model_id"] = model_id
        if "mm_processor_kwargs" in options:
            kwargs = options["mm_processor_kwargs"]
            if not isinstance(kwargs, dict) or _depth(kwargs) > _MAX_OPTION_DEPTH:
                raise RequestError(
                    400,
                    "invalid_option",
                    f"mm_processor_kwargs must be an object nested at most {_MAX_OPTION_DEPTH} deep",
                    "mm_processor_kwargs",
                )
            extras["mm_processor_kwargs"] = kwargs
        return _HashJob(algorithm, io, extras, sources, cast(Verify, verify))

    # -- hashing (in a worker thread) ---------------------------------------------

    def _hash_all(self, job: _HashJob) -> list[dict[str, Any]]:
        return [self._hash_one(job, index, param, source) for index, (param, source) in enumerate(job.sources)]

    def _hash_one(self, job: _HashJob, index: int, param: str, source: str | bytes) -> dict[str, Any]:
        try:
            media = self._load(job.io, source)
        except BadImageError as error:
            error.with_param(param)
            raise
        recorder = RecordingObserver(get_observer())
        with observing(recorder):
            key = MultiModalHasher.hash_kwargs(job.algorithm, image=media, **job.extras)
        image = media.media
        return {
            "index": index,
            "mm_hash": key,
            "key_source": recorder.keyed[-1].key_source,
            "exif_fallback": bool(recorder.fallbacks),
            "width": image.width,
            "height": image.height,
            "mode": image.mode,
        }

    def _key_all(self, job: _HashJob) -> list[dict[str, Any]]:
        return [self._key_one(job, index, param, source) for index, (param, source) in enumerate(job.sources)]

    def _key_one(self, job: _HashJob, index: int, param: str, source: str | bytes) -> dict[str, Any]:
        try:
            found = key_image(job.io, self._bytes(job.io, source), job.algorithm, verify=job.verify, **job.extras)
        except BadImageError as error:
            error.with_param(param)
            raise
        width, height = found.size
        return {
            "index": index,
            "mm_hash": found.key,
            "key_source": "original_bytes",
            "key_path": found.key_path,
            "format": found.format,
            "width": width,
            "height": height,
        }

    def _bytes(self, io: ImageMediaIO, source: str | bytes) -> bytes:
        """The encoded image a source names (a data URL, an allowed remote URL, or the bytes)."""
        if isinstance(source, bytes):
            return source
        if self.fetcher is not None and source[:8].lower().startswith(("http://", "https://")):
            try:
                return self.fetcher.fetch(source)
            except BadImageError as error:
                report_bad_image(error)
                raise
        return data_url_bytes(source, io.max_bytes)

    def _load(self, io: ImageMediaIO, source: str | bytes) -> MediaWithBytes:
        if isinstance(source, bytes):
            return io.load_bytes(source)
        if self.fetcher is not None and source[:8].lower().startswith(("http://", "https://")):
            try:
                data = self.fetcher.fetch(source)
            except BadImageError as error:
                report_bad_image(error)
                raise
            return io.load_bytes(data)
        return load_data_url(source, io)


# -- request helpers ------------------------------------------------------------


class _BodyTooLarge(RequestError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "payload_too_large", f"the request body is larger than {limit} bytes")


def _limited(receive: Receive, limit: int) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that raises once more than ``limit`` body bytes arrived."""
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _BodyTooLarge(limit)
        return message

    return limited_receive


async def _read_body(request: Request) -> bytes:
    chunks = [chunk async for chunk in request.stream()]
    return b"".join(chunks)


def _image_list(images: Any) -> list[tuple[str, str | bytes]]:
    if not isinstance(images, list) or not images:
        raise RequestError(400, "invalid_request", "'images' must be a non-empty list of URL strings", "images")
    sources: list[tuple[str, str | bytes]] = []
    for index, url in enumerate(images):
        if isinstance(url, dict) and isinstance(url.get("url"), str):
            url = url["url"]
        if not isinstance(url, str):
            raise RequestError(400, "invalid_request", "each image must be a URL string", f"images[{index}]")
        sources.append((f"images[{index}]", url))
    return sources


def _message_images(messages: Any) -> list[tuple[str, str | bytes]]:
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "invalid_request", "'messages' must be a non-empty list", "messages")
    sources: list[tuple[str, str | bytes]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(400, "invalid_request", "each message must be an object", f"messages[{i}]")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise RequestError(
                400, "invalid_request", "message content must be a string or a list of parts", f"messages[{i}].content"
            )
        for j, part in enumerate(content):
            param = f"messages[{i}].content[{j}]"
            if not isinstance(part, dict):
                raise RequestError(400, "invalid_request", "each content part must be an object", param)
            if part.get("type") != "image_url":
                continue
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if not isinstance(url, str):
                raise RequestError(
                    400, "invalid_request", "an image_url part needs image_url.url (a string)", f"{param}.image_url"
                )
            sources.append((f"{param}.image_url", url))
    if not sources:
        raise RequestError(400, "invalid_request", "the messages hold no image_url content part", "messages")
    return sources


def _depth(value: Any, limit: int = _MAX_OPTION_DEPTH + 1) -> int:
    """Nesting depth of a JSON value, counting no further than ``limit``."""
    if limit <= 0 or not isinstance(value, (dict, list)):
        return 0
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)


def _error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error_body(error.message, code=error.code, param=error.param), status_code=error.status)


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    message = {404: f"no route {request.url.path[:100]!r}; try POST /v1/hash", 405: "method not allowed"}.get(
        exc.status_code, str(exc.detail)
    )
    return JSONResponse(
        error_body(message, code=codes.get(exc.status_code, "http_error")),
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _server_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(
        error_body("internal error; the request id names it in the server log", code="internal_error", type="server_error"),
        status_code=500,
    )


def create_app(config: ServiceConfig | None = None) -> Starlette:
    """The reference service (config from ``MMOBS_SERVICE_CONFIG`` when not given)."""
    config = config or ServiceConfig.from_env()
    if "PILLOW_BLOCKS_MAX" not in os.environ:
        # Reuse freed pixel blocks instead of faulting fresh memory in for every
        # decoded image: 1.1-1.3x the images/s (docs/performance.md), at most
        # 8 blocks (<= 128 MiB) held per worker.
        Image.core.set_blocks_max(8)
    if config.log_format:
        configure_logging(config.log_format, config.log_level)  # type: ignore[arg-type]
    service = HashService(config)
    app = Starlette(
        routes=[
            Route("/v1/hash", service.hash, methods=["POST"]),
            Route("/v1/keys", service.keys, methods=["POST"]),
            Route("/healthz", service.healthz, methods=["GET"]),
        ],
        middleware=[
            Middleware(
                MMObsMiddleware,
                metrics_path=config.metrics_path,
                metrics_token=config.metrics_token,
                pillow_errors_as_bad_images=config.pillow_errors_as_bad_images,
                access_log=config.request_log,
            )
        ],
        exception_handlers={HTTPException: _http_exception, 500: _server_error},
    )
    app.state.config = config
    return app
