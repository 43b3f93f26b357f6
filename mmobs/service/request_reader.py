"""What a request asks to key, whichever way it sends it: its options and its images, in order.

A JSON body (``images`` or OpenAI chat ``messages``, read by
:mod:`~mmobs.service.hash_request`), a multipart upload, or a raw ``image/*``
body with its options in the query string. A large JSON body is parsed in a
decode worker, under the request's CPU budget, so the event loop
(``/healthz``, ``/metrics``) never waits for it. A body without a
Content-Type is read as JSON when it looks like JSON; otherwise the error
says which Content-Type the sender forgot.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request

from mmobs.events import get_observer
from mmobs.observability.logs import mmobs_logger
from mmobs.service.config import ServiceConfig
from mmobs.service.decode_outcome import CpuBudget, budget_text, unexpected_outcome
from mmobs.service.decode_pool import DecodePool, InlineDecoder, ServerBusy
from mmobs.service.hash_request import HashOptions, RequestError, RequestLimits, hash_options, parse_json_body
from mmobs.service.relay import Replayer
from mmobs.service.request_body import read_body
from mmobs.service.request_image import RequestImage

_log = mmobs_logger()
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


class SetupError(ServerBusy):
    """The server lacks something it needs: a 501, not the client's fault."""


class RequestReader:
    """Reads requests for one service: its limits, and whether this install can read multipart uploads."""

    def __init__(self, config: ServiceConfig, limits: RequestLimits) -> None:
        self.config, self.limits = config, limits
        self.multipart_missing = _multipart_missing()
        self._multipart_logged = False

    async def read(
        self, request: Request, budget: CpuBudget, decoder: DecodePool | InlineDecoder
    ) -> tuple[HashOptions, list[RequestImage]]:
        """The request's options and images; ``decoder`` parses a large JSON body, spending ``budget``."""
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "application/json":
            return await self._read_json(await read_body(request), budget, decoder)
        if content_type == "":
            body = await read_body(request)
            if body.lstrip()[:1] in (b"{", b"[", b""):
                return await self._read_json(body, budget, decoder)
            raise RequestError(415, "unsupported_media_type", _no_content_type(body))
        if content_type == "multipart/form-data":
            return await self._read_multipart(request)
        if content_type.startswith("image/") or content_type == "application/octet-stream":
            body = await read_body(request)
            options = hash_options(dict(request.query_params), 1, self.limits, query=True)
            return options, [RequestImage("body", data=body)]
        raise RequestError(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type {content_type[:64]!r}: send application/json, "
            "multipart/form-data or an image/* body",
        )

    async def _read_json(
        self, body: bytes, budget: CpuBudget, decoder: DecodePool | InlineDecoder
    ) -> tuple[HashOptions, list[RequestImage]]:
        if len(body) <= INLINE_JSON_BYTES:
            parsed = parse_json_body(body, self.limits)
            return parsed.options, [RequestImage(param, url=url) for param, url in parsed.sources]
        header = ("parse", {"limits": self.limits, "cpu_seconds": budget.left})
        blobs = [body]
        del body  # the worker has it once it is sent: the exchange empties ``blobs``
        outcome, urls = await decoder.run(header, blobs, Replayer(get_observer()))
        budget.spend(outcome.get("cpu_seconds", budget.left))
        status = outcome["status"]
        if status == "parsed":
            return outcome["options"], [
                RequestImage(param, url=url) for param, url in zip(outcome["params"], urls, strict=True)
            ]
        if status == "request_error":
            raise RequestError(*outcome["error"])
        if status == "too_costly":
            raise RequestError(
                400,
                "too_costly",
                f"parsing the JSON body needed more than the request's budget ({budget_text(self.config, outcome)})",
            )
        raise unexpected_outcome(outcome)

    async def _read_multipart(self, request: Request) -> tuple[HashOptions, list[RequestImage]]:
        if self.multipart_missing:
            # The server's set-up, not the client's request: a 5xx, and one log line for the operator.
            if not self._multipart_logged:
                self._multipart_logged = True
                _log.error("multipart_unavailable", missing="python-multipart", install=_MULTIPART_HINT)
            raise SetupError(
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
            images: list[RequestImage] = []
            options: dict[str, Any] = {}
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    data = await value.read(self.config.max_image_bytes + 1)
                    images.append(RequestImage(f"{name[:32]}[{len(images)}]", data=data))
                else:
                    options[name] = value
        finally:
            await form.close()
        if not images:
            raise RequestError(400, "invalid_request", "the multipart body holds no image file")
        return hash_options(options, len(images), self.limits, query=True), images


def _malformed_multipart(detail: str) -> RequestError:
    return RequestError(400, "invalid_multipart", f"the multipart body is malformed: {detail[:200]}")


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
