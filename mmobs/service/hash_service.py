"""The service's endpoints: one request read, each of its images keyed in a decode worker, one answer.

Every failure becomes an answer here, and only here: the client's input a
``4xx`` naming what to fix, the server's shortage (every worker busy, the
waiting line full, memory) a ``503`` with ``Retry-After``, a bug a ``500``
whose traceback is logged with the request id. Images are keyed one at a
time, each let go once keyed, so a request holds at most one decoded image.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from mmobs._version import __version__
from mmobs.errors import BadImageError, mark_reported
from mmobs.events import get_observer
from mmobs.keys.refusals import report_bad_image
from mmobs.observability import tracing
from mmobs.observability.fingerprint import process_fingerprint
from mmobs.observability.log_fields import safe_text
from mmobs.observability.logs import mmobs_logger
from mmobs.service.config import ServiceConfig
from mmobs.service.decode_outcome import CpuBudget, too_costly, unexpected_outcome
from mmobs.service.decode_pool import DecodePool, InlineDecoder, PoolSettings, ServerBusy
from mmobs.service.error_responses import (
    bad_image_response,
    busy_response,
    error_response,
    internal_error_response,
    not_implemented_response,
)
from mmobs.service.fetch import RemoteFetcher
from mmobs.service.hash_request import HashOptions, RequestError, RequestLimits
from mmobs.service.malloc import return_large_buffers
from mmobs.service.relay import Replayer
from mmobs.service.request_body import BodyBudget, bounded_request
from mmobs.service.request_image import image_bytes
from mmobs.service.request_reader import RequestReader, SetupError

_log = mmobs_logger()


class HashService:
    """The endpoints, bound to a :class:`ServiceConfig`."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.limits = RequestLimits(max_images=config.max_images)
        self.io_limits = {
            "max_pixels": config.max_pixels,
            "max_bytes": config.max_image_bytes,
            "formats": config.image_formats,
            "vllm_version": config.vllm_version,
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
        self.bodies = BodyBudget(config.max_buffered_body_bytes)
        self.reader = RequestReader(config, self.limits)

    @property
    def multipart_missing(self) -> bool:
        """Whether this install lacks python-multipart, so that uploads are answered ``501``."""
        return self.reader.multipart_missing

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

    async def _answer(self, request: Request, task: str) -> Response:
        held = [0]  # body bytes this request holds against the process's budget
        try:
            return await self._handle(request, held, task)
        except RequestError as error:
            return error_response(error)
        except BadImageError as error:
            report_bad_image(error)
            return bad_image_response(error)
        except SetupError as error:
            return not_implemented_response(error.message)
        except ServerBusy as error:
            return busy_response(error.message, error.retry_after)
        except MemoryError:
            return busy_response("the server ran out of memory handling this request", 5)
        except ClientDisconnect:
            # Nobody is left to answer; a client fault, never a server error.
            return error_response(
                RequestError(400, "client_disconnected", "the client left before sending the whole body")
            )
        except Exception as error:  # noqa: BLE001 - a bug: a 500 with the request id, and its traceback logged
            _log.error("internal_error", error_type=type(error).__name__, error=safe_text(error), exc_info=True)
            return internal_error_response()
        finally:
            self.bodies.give(held[0])

    async def _handle(self, request: Request, held: list[int], task: str) -> Response:
        request = bounded_request(request, self.config.max_body_bytes, self.bodies, held)
        budget = CpuBudget(self.config.max_request_cpu_seconds)
        options, images = await self.reader.read(request, budget, self.decoder)
        items = []
        for index, image in enumerate(images):
            with tracing.span("mmobs.image", {"mmobs.image.index": index}) as image_span:
                data = (
                    image.data
                    if image.data is not None
                    else await image_bytes(image, self.fetcher, self.config.max_image_bytes)
                )
                image.data = image.url = None  # let each image go once it is keyed
                item = await self._key(data, options, budget, image.param, task, image_span)
            items.append({"index": index, **item})
        return JSONResponse({"algorithm": options.algorithm, "front_end": options.front_end, "items": items})

    async def _key(
        self, data: bytes, options: HashOptions, budget: CpuBudget, param: str, task: str, image_span: Any = None
    ) -> dict[str, Any]:
        shared = budget.left < budget.limit  # earlier work of this request spent some of it
        if budget.left <= 0.001:
            raise too_costly(self.config, {"resource": "cpu"}, shared, param)
        replayer = Replayer(get_observer(), data)
        header = (task, {"options": options, "io_limits": self.io_limits, "cpu_seconds": budget.left})
        outcome, _ = await self.decoder.run(header, [data], replayer)
        status = outcome["status"]
        budget.spend(budget.left if status == "too_costly" else outcome.get("cpu_seconds", 0.0))
        if image_span is not None:
            _trace_outcome(image_span, len(data), outcome)
        if status == "keyed":
            return dict(outcome["item"])
        if status == "bad_image":
            # The worker's loader reported it and the relay counted it. (No local name for the
            # error: a frame holding it would form a cycle with its traceback, keeping ``data``
            # alive until the next full garbage collection.)
            raise _reported(BadImageError(outcome["reason"], outcome["message"], param=param))
        if status == "too_costly":
            raise too_costly(self.config, outcome, shared, param)
        if status == "crashed":
            raise report_bad_image(
                BadImageError("corrupt", f"the image decoder crashed on this image ({outcome['signal']})", param=param)
            )
        raise unexpected_outcome(outcome)


def _trace_outcome(image_span: Any, nbytes: int, outcome: dict[str, Any]) -> None:
    """The image's span says what became of it; the worker's stages (load, key) become its children."""
    status = outcome["status"]
    image_span.set_attribute("mmobs.media.bytes", nbytes)
    image_span.set_attribute("mmobs.outcome", status)
    item = outcome.get("item") or {}
    if "key_source" in item:
        image_span.set_attribute("mmobs.key_source", item["key_source"])
    if status != "keyed":
        tracing.mark_error(image_span, str(outcome.get("reason") or status))
    for stage, (start_ns, end_ns) in (outcome.get("stages") or {}).items():
        attributes: dict[str, tracing.AttributeValue] = {}
        if stage == "key" and "key_source" in item:
            attributes["mmobs.key_source"] = item["key_source"]
        error = outcome.get("reason") if stage == "load" and status == "bad_image" else None
        tracing.record_span(f"mmobs.image.{stage}", start_ns, end_ns, attributes, error=error)


def _reported(error: BadImageError) -> BadImageError:
    mark_reported(error)
    return error
