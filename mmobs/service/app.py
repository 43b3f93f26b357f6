"""The reference service: ``POST /v1/hash`` keys images exactly as vLLM would.

A Starlette app behind :class:`~mmobs.asgi.middleware.MMObsMiddleware`. It accepts
a JSON body (``images`` or OpenAI chat ``messages``), a multipart upload, or a
raw ``image/*`` body, and answers every malformed input with a 4xx JSON error
(OpenAI style) that names what to fix. ``{"images": [url]}`` yields exactly
``hash_kwargs(algorithm, image=media)``; optional ``model_id`` and
``mm_processor_kwargs`` are added to the key only when given.

``POST /v1/keys`` takes the same requests and answers the same keys without
decoding pixels where the header decides (:mod:`mmobs.keys.from_bytes`): the call a
cache-aware router makes per image. Its ``verify`` option (``header``, the
default, or ``decode``) is :func:`mmobs.keys.from_bytes.key_image`'s. Opening a header
can cost as much as decoding (Pillow parses metadata there), so it runs in a
decode worker too, under the same budgets.

What one request may cost is bounded (``docs/reliability.md``, "Bounded
resources"): its body (size, JSON values, option sizes; bodies buffered at
once per process), and its decoding and keying, which run in decode worker
processes (:mod:`mmobs.service.decode_pool`) under a per-request CPU budget and a
per-image memory budget. An input over a budget is the client's ``400
too_costly``; the service's own shortage (every worker busy, the waiting line
full, memory) is a ``503`` with ``Retry-After``. Large JSON bodies are parsed
in a decode worker too, so the event loop (``/healthz``, ``/metrics``) never
waits for them.

The library (:class:`~mmobs.keys.loader.ImageMediaIO`) refuses costly inputs it
can recognise from their structure; the service adds the process isolation
that bounds the rest. Run it with ``mmobs serve``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from PIL import _imaging
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive

from mmobs._version import __version__
from mmobs.asgi.http_errors import bad_image_body, error_body
from mmobs.asgi.middleware import MMObsMiddleware
from mmobs.errors import BadImageError, mark_reported
from mmobs.events import get_observer
from mmobs.keys.data_url import decode_base64, parse_data_url
from mmobs.keys.refusals import report_bad_image
from mmobs.observability.fingerprint import process_fingerprint
from mmobs.observability.logs import configure_logging, safe_text
from mmobs.service.config import ServiceConfig
from mmobs.service.decode_pool import DecodePool, InlineDecoder, PoolSettings, ServerBusy
from mmobs.service.fetch import RemoteFetcher
from mmobs.service.hash_request import (
    HashOptions,
    RequestError,
    RequestLimits,
    hash_options,
    parse_json_body,
)
from mmobs.service.malloc import return_large_buffers
from mmobs.service.relay import Replayer

__all__ = ["HashService", "RequestError", "ServiceConfig", "create_app"]

_log = structlog.get_logger("mmobs")
#: JSON bodies up to this size are parsed in the service (a few ms at worst); larger ones in a decode worker.
INLINE_JSON_BYTES = 256 * 1024
_MULTIPART_HINT = "pip install 'mmobs[serve]'"
#: Leading bytes of the image formats clients send, to tell a sender what Content-Type it forgot.
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF8", "image/gif"),
    (b"RIFF", "image/webp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"BM", "image/bmp"),
)


@dataclass
class _Source:
    """One image of a request: its ``param``, and a URL (text, or UTF-8 bytes from a worker) or raw bytes."""

    param: str
    url: str | bytes | None = None
    data: bytes | None = None


class _Budget:
    """The CPU seconds left to one request's decoding and keying."""

    def __init__(self, seconds: float) -> None:
        self.limit = self.left = seconds

    def spend(self, seconds: float) -> None:
        self.left -= max(0.0, seconds)


class _BodyBudget:
    """Request body bytes buffered at once by this process (a single event loop: no lock needed)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise ServerBusy(f"the server is buffering {self.held >> 20} MiB of request bodies; retry shortly")
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


class HashService:
    """The endpoints, bound to a :class:`ServiceConfig`."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.limits = RequestLimits(max_images=config.max_images)
        self.io_limits = {
            "max_pixels": config.max_pixels,
            "max_bytes": config.max_image_bytes,
            "formats": config.image_formats,
        }
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
        self.decoder: DecodePool | InlineDecoder = (
            DecodePool(
                PoolSettings(
                    size=config.decode_workers,
                    memory_bytes=config.max_decode_memory_bytes,
                    queue_limit=config.decode_queue,
                    queue_timeout=config.decode_queue_timeout_seconds,
                )
            )
            if config.decode_workers > 0
            else InlineDecoder()
        )
        self.bodies = _BodyBudget(config.max_buffered_body_bytes)
        self.multipart_missing = _multipart_missing()
        self._multipart_logged = False

    async def start(self) -> None:
        # Request bodies are large and short-lived: hand their buffers back to the system when freed.
        return_large_buffers()
        await self.decoder.start()

    async def close(self) -> None:
        await self.decoder.close()

    # -- endpoints --------------------------------------------------------------------

    async def hash(self, request: Request) -> Response:
        """``POST /v1/hash``: decode and key every image as vLLM would."""
        return await self._answer(request, "key")

    async def keys(self, request: Request) -> Response:
        """``POST /v1/keys``: the requests of ``/v1/hash``, answered with keys read from the headers."""
        return await self._answer(request, "keys")

    async def _answer(self, request: Request, task: str) -> Response:
        held = [0]  # body bytes this request holds against the process's budget
        try:
            return await self._handle(request, held, task)
        except RequestError as error:
            return _error_response(error)
        except BadImageError as error:
            report_bad_image(error)
            return JSONResponse(bad_image_body(error), status_code=400)
        except _SetupError as error:
            return JSONResponse(error_body(error.message, code="not_implemented", type="server_error"), status_code=501)
        except ServerBusy as error:
            return _busy(error.message, error.retry_after)
        except MemoryError:
            return _busy("the server ran out of memory handling this request", 5)
        except ClientDisconnect:
            # Nobody is left to answer; a client fault, never a server error.
            return _error_response(
                RequestError(400, "client_disconnected", "the client left before sending the whole body")
            )
        except Exception as error:  # noqa: BLE001 - a bug: a 500 with the request id, and its traceback logged
            _log.error("internal_error", error_type=type(error).__name__, error=safe_text(error), exc_info=True)
            return JSONResponse(
                error_body("internal error; the request id names it in the server log", code="internal_error",
                           type="server_error"),
                status_code=500,
            )  # fmt: skip
        finally:
            self.bodies.give(held[0])

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "version": __version__,
                "fingerprint": process_fingerprint().digest,
                "decode_workers": self.decoder.ready,
            }
        )

    # -- one request ---------------------------------------------------------------------

    async def _handle(self, request: Request, held: list[int], task: str) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.config.max_body_bytes:
            raise _BodyTooLarge(self.config.max_body_bytes)
        request = Request(request.scope, self._limited(request.receive, held))
        budget = _Budget(self.config.max_request_cpu_seconds)
        options, sources = await self._parse(request, budget)
        items = []
        for index, source in enumerate(sources):
            data = source.data if source.data is not None else await self._fetch(source)
            source.data = source.url = None  # let each image go once it is keyed
            item = await self._key(data, options, budget, source.param, task)
            items.append({"index": index, **item})
        return JSONResponse({"algorithm": options.algorithm, "items": items})

    def _limited(self, receive: Receive, held: list[int]) -> Callable[[], Awaitable[Message]]:
        """A ``receive`` that refuses bodies over the limit, and holds their bytes against the process's budget."""
        limit = self.config.max_body_bytes
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                size = len(message.get("body", b""))
                received += size
                if received > limit:
                    raise _BodyTooLarge(limit)
                self.bodies.take(size)
                held[0] += size
            return message

        return limited_receive

    async def _parse(self, request: Request, budget: _Budget) -> tuple[HashOptions, list[_Source]]:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "application/json":
            return await self._parse_json(await _read_body(request), budget)
        if content_type == "":
            body = await _read_body(request)
            if body.lstrip()[:1] in (b"{", b"[", b""):
                return await self._parse_json(body, budget)
            raise RequestError(415, "unsupported_media_type", _no_content_type(body))
        if content_type == "multipart/form-data":
            return await self._parse_multipart(request)
        if content_type.startswith("image/") or content_type == "application/octet-stream":
            body = await _read_body(request)
            options = hash_options(dict(request.query_params), 1, self.limits, query=True)
            return options, [_Source("body", data=body)]
        raise RequestError(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type {content_type[:64]!r}: send application/json, "
            "multipart/form-data or an image/* body",
        )

    async def _parse_json(self, body: bytes, budget: _Budget) -> tuple[HashOptions, list[_Source]]:
        if len(body) <= INLINE_JSON_BYTES:
            parsed = parse_json_body(body, self.limits)
            return parsed.options, [_Source(param, url=url) for param, url in parsed.sources]
        header = ("parse", {"limits": self.limits, "cpu_seconds": budget.left})
        blobs = [body]
        del body  # the worker has it once it is sent: the exchange empties ``blobs``
        outcome, urls = await self.decoder.run(header, blobs, Replayer(get_observer()))
        budget.spend(outcome.get("cpu_seconds", budget.left))
        status = outcome["status"]
        if status == "parsed":
            return outcome["options"], [
                _Source(param, url=url) for param, url in zip(outcome["params"], urls, strict=True)
            ]
        if status == "request_error":
            raise RequestError(*outcome["error"])
        if status == "too_costly":
            raise RequestError(
                400,
                "too_costly",
                f"parsing the JSON body needed more than the request's budget ({_budget_text(self.config, outcome)})",
            )
        raise self._unexpected(outcome)

    async def _parse_multipart(self, request: Request) -> tuple[HashOptions, list[_Source]]:
        if self.multipart_missing:
            # The server's set-up, not the client's request: a 5xx, and one log line for the operator.
            if not self._multipart_logged:
                self._multipart_logged = True
                _log.error("multipart_unavailable", missing="python-multipart", install=_MULTIPART_HINT)
            raise _SetupError(
                f"this server cannot read multipart uploads: python-multipart is not installed ({_MULTIPART_HINT}); "
                "send the images as data: URLs in a JSON body instead"
            )
        limit = self.config.max_images
        try:
            form = await request.form(max_files=limit, max_fields=32, max_part_size=1024 * 1024)
        except (RequestError, ServerBusy, ClientDisconnect):
            raise
        except HTTPException as error:  # Starlette's wrapping of python-multipart's refusals
            raise _malformed_multipart(str(error.detail)) from None
        except Exception as error:  # noqa: BLE001 - python-multipart raises several types
            raise _malformed_multipart(str(error)) from None
        try:
            sources: list[_Source] = []
            options: dict[str, Any] = {}
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    data = await value.read(self.config.max_image_bytes + 1)
                    sources.append(_Source(f"{name[:32]}[{len(sources)}]", data=data))
                else:
                    options[name] = value
        finally:
            await form.close()
        if not sources:
            raise RequestError(400, "invalid_request", "the multipart body holds no image file")
        return hash_options(options, len(sources), self.limits, query=True), sources

    # -- one image -------------------------------------------------------------------------

    async def _fetch(self, source: _Source) -> bytes:
        """The encoded bytes a URL names: a data: URL decoded here, a remote one fetched."""
        url = source.url if source.url is not None else ""
        try:
            scheme = (url[:8] if isinstance(url, str) else url[:8].decode("latin-1")).lower()
            if scheme.startswith(("http://", "https://")):
                if self.fetcher is None:
                    raise BadImageError(
                        "unsupported_url",
                        "remote image URLs are off on this server (its operator can allow a host with "
                        "--allow-remote-host HOST); send the image as a data: URL",
                    )
                return await self.fetcher.fetch(url if isinstance(url, str) else url.decode("utf-8", "surrogatepass"))
            return _data_url_bytes(url, self.config.max_image_bytes)
        except BadImageError as error:
            raise report_bad_image(error.with_param(source.param)) from None

    async def _key(self, data: bytes, options: HashOptions, budget: _Budget, param: str, task: str) -> dict[str, Any]:
        shared = budget.left < budget.limit  # earlier work of this request spent some of it
        if budget.left <= 0.001:
            raise self._too_costly({"resource": "cpu"}, shared, param)
        replayer = Replayer(get_observer(), data)
        header = (task, {"options": options, "io_limits": self.io_limits, "cpu_seconds": budget.left})
        outcome, _ = await self.decoder.run(header, [data], replayer)
        status = outcome["status"]
        budget.spend(budget.left if status == "too_costly" else outcome.get("cpu_seconds", 0.0))
        if status == "keyed":
            return dict(outcome["item"])
        if status == "bad_image":
            # The worker's loader reported it and the relay counted it. (No local name for the
            # error: a frame holding it would form a cycle with its traceback, keeping ``data``
            # alive until the next full garbage collection.)
            raise _reported(BadImageError(outcome["reason"], outcome["message"], param=param))
        if status == "too_costly":
            raise self._too_costly(outcome, shared, param)
        if status == "crashed":
            raise report_bad_image(
                BadImageError("corrupt", f"the image decoder crashed on this image ({outcome['signal']})", param=param)
            )
        raise self._unexpected(outcome)

    def _too_costly(self, outcome: dict[str, Any], shared: bool, param: str) -> BadImageError:
        text = _budget_text(self.config, outcome)
        spent = " (with the work done before it in this request)" if shared and outcome.get("resource") == "cpu" else ""
        return report_bad_image(
            BadImageError(
                "too_costly",
                f"decoding this image{spent} needs more than {text}; send a smaller image or fewer images per "
                "request (this is not worth retrying as it is)",
                param=param,
            )
        )

    def _unexpected(self, outcome: dict[str, Any]) -> Exception:
        if outcome["status"] == "server_busy":
            _log.warning("decode_unavailable", detail=safe_text(outcome.get("detail", "")))
            detail = outcome.get("detail", "busy")
            return ServerBusy(f"the server could not decode the image ({detail}); retry later", 2)
        _log.error("decode_worker_error", outcome=safe_text(outcome))
        return RuntimeError(f"decode worker: {outcome.get('detail', outcome['status'])}")


# -- helpers ---------------------------------------------------------------------------------


class _BodyTooLarge(RequestError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "payload_too_large", f"the request body is larger than {limit} bytes")


class _SetupError(ServerBusy):
    """The server lacks something it needs: a 501, not the client's fault."""


def _malformed_multipart(detail: str) -> RequestError:
    return RequestError(400, "invalid_multipart", f"the multipart body is malformed: {detail[:200]}")


def _reported(error: BadImageError) -> BadImageError:
    mark_reported(error)
    return error


def _budget_text(config: ServiceConfig, outcome: dict[str, Any]) -> str:
    if outcome.get("resource") == "memory":
        return f"the {config.max_decode_memory_bytes >> 20} MiB of memory one image may use (--max-decode-memory-mib)"
    return f"the {config.max_request_cpu_seconds:g} s of CPU time a request may use (--max-request-cpu-seconds)"


def _data_url_bytes(url: str | bytes, max_bytes: int) -> bytes:
    """Decode a data: URL, given as text or as the UTF-8 bytes a decode worker returned.

    For bytes, only the header (up to the first comma) becomes text: the payload,
    tens of megabytes, is decoded from the bytes it arrived as, without a text copy.
    """
    if isinstance(url, str):
        _, payload = parse_data_url(url)
        return decode_base64(payload, max_bytes)
    comma = url.find(b",", 0, 512)
    if comma < 0:  # no comma, or one past any header the parser accepts: let it say which
        tail = "," if b"," in url else ""
        parse_data_url(url[:300].decode("utf-8", "replace") + tail)
        raise AssertionError("parse_data_url accepted a data: URL without a comma")
    parse_data_url(url[: comma + 1].decode("utf-8", "surrogatepass"))
    encoded = url[comma + 1 :]
    if not encoded.isascii():  # what the text path says when it cannot encode the payload as ASCII
        raise BadImageError("bad_base64", "the base64 payload has non-ASCII characters")
    return decode_base64(encoded, max_bytes)


def _multipart_missing() -> bool:
    from starlette import formparsers

    return getattr(formparsers, "parse_options_header", None) is None


def _no_content_type(body: bytes) -> str:
    for magic, media_type in _MAGIC:
        if body.startswith(magic):
            return (
                f"the request has no Content-Type and its body looks like an image: send it with "
                f"'Content-Type: {media_type}'"
            )
    return (
        "the request has no Content-Type and its body is not JSON: send application/json, "
        "multipart/form-data or an image with its image/* Content-Type"
    )


async def _read_body(request: Request) -> bytes:
    # One growing buffer, each chunk freed as soon as it is copied: a list of chunks
    # joined at the end would leave tens of megabytes of holes in the heap.
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
    return bytes(body)


def _error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error_body(error.message, code=error.code, param=error.param), status_code=error.status)


def _busy(message: str, retry_after: int) -> JSONResponse:
    return JSONResponse(
        error_body(message, code="server_busy", type="server_error"),
        status_code=503,
        headers={"Retry-After": str(retry_after)},
    )


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
        error_body(
            "internal error; the request id names it in the server log", code="internal_error", type="server_error"
        ),
        status_code=500,
    )


def create_app(config: ServiceConfig | None = None) -> Starlette:
    """The reference service (config from ``MMOBS_SERVICE_CONFIG`` when not given)."""
    config = config or ServiceConfig.from_env()
    if "PILLOW_BLOCKS_MAX" not in os.environ and config.decode_workers == 0:
        # Decoding in this process: reuse freed pixel blocks instead of faulting fresh
        # memory in for every image, 1.1-1.3x the images/s (docs/performance.md), at
        # most 8 blocks (<= 128 MiB) held.
        _imaging.set_blocks_max(8)
    if config.log_format:
        configure_logging(config.log_format, config.log_level)  # type: ignore[arg-type]
    service = HashService(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.close()

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
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.service = service
    return app
