"""Healing vLLM's cache drift inside the API server: roll back, resubmit once, else a 503 that says why.

With ``MMOBS_VLLM_MM_CACHE_HEAL`` on (the default, see ``docs/vllm-cache-drift.md``)
the plugin wraps four of vLLM's functions with these:

* ``OpenAIServingChat.create_chat_completion`` (:func:`chat_completion`): the
  request boundary. It opens the request's :class:`~mmobs.vllm.cache_drift.cache_attempt.Attempt`,
  rolls the sender cache back when the request ends refused before the
  engine took it, and resubmits once a request whose render the sender
  cache itself broke (the item vLLM asserts on).
* ``AsyncLLM.generate`` (:func:`healing_generate`): when the engine's first
  answer to a request is a drift failure, the request is rendered again
  (its media loaded and keyed again, and every item's data sent, whatever P0
  believes: so the resubmission cannot drift) and resubmitted under the same
  request id, before the client has seen anything, streamed or not.
* ``GenerateBaseServing._raise_if_error`` (:func:`raise_if_drift`): a drift
  failure that could not be healed is raised as :class:`CacheDriftError`, a
  subclass of vLLM's ``RetryableRequestError`` (503), never the bare
  ``GenerationError`` (500).
* vLLM's ``generation_error_handler`` (:func:`retry_after_handler`): that 503
  carries ``Retry-After``; vLLM's own retryable answer to the same drift on
  its pooling routes is given the same message and header.

Without a request boundary (another route), nothing is resubmitted: the
client gets the 503.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from mmobs.vllm.cache_drift.cache_attempt import Attempt, current_attempt, roll_back
from mmobs.vllm.cache_drift.drift import DriftBook, DriftFailure, short_hash

#: The drift is gone once the API server dropped the hashes: a retry can come at once.
RETRY_AFTER_SECONDS = "1"
_REFUSED = "refused before the engine took it"
_SENDER_LOST = "the sender cache lost an item of the request"


def drift_message(failure: DriftFailure | None) -> str:
    """What a client is told: the drift, the hashes (shortened), and that a retry carries the data."""
    if failure is None or not failure.hashes:
        items = "an item"
    else:
        shown = ", ".join(short_hash(h) for h in failure.hashes[:4])
        more = f" and {len(failure.hashes) - 4} more" if len(failure.hashes) > 4 else ""
        items = f"{len(failure.hashes)} item(s) ({shown}{more})"
    return (
        f"Multi-modal processor cache drift: the API server's cache and the engine's disagreed on {items}. "
        "The request was not run; retry it (it will carry the data)."
    )


def drift_error_class(retryable: type[Exception]) -> type[Exception]:
    """``CacheDriftError``: vLLM's ``RetryableRequestError`` (a 503 by vLLM's own error mapping), naming the drift."""

    class CacheDriftError(retryable):  # type: ignore[valid-type,misc]
        """A request failed by multimodal cache drift and not healed: retry it."""

        def __init__(self, failure: DriftFailure | None = None) -> None:
            super().__init__(drift_message(failure))
            self.failure = failure

    CacheDriftError.__module__ = __name__
    return CacheDriftError


# -- the request boundary -------------------------------------------------------------------------


def chat_completion(original: Callable[..., Any], book: DriftBook, drift_error: type[Exception]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def create_chat_completion(self: Any, request: Any, raw_request: Any = None) -> Any:
        attempt = Attempt(request_id=_chat_request_id(self, request, raw_request))
        attempt.rerender = functools.partial(_render_chat, self, request)
        # Never reset: the request's task ends with the request, and a streamed answer runs after this returns.
        current_attempt.set(attempt)
        try:
            try:
                result = await original(self, request, raw_request)
            except drift_error:
                roll_back(attempt, book, _SENDER_LOST)
                if attempt.resubmitted:
                    raise
                attempt.resubmitted = True
                attempt.restart()
                result = await original(self, request, raw_request)
        except BaseException:
            roll_back(attempt, book, _REFUSED)
            attempt.resolve(book, "failed")
            raise
        if not inspect.isasyncgen(result) and not attempt.taken:  # an error answer; a stream ends in healing_generate
            roll_back(attempt, book, _REFUSED)
            attempt.resolve(book, "failed")
        return result

    return create_chat_completion


def _chat_request_id(serving: Any, request: Any, raw_request: Any) -> str | None:
    """The id vLLM will give the request (``chatcmpl-`` and the X-Request-Id header or a fresh id), for logs."""
    base = getattr(serving, "_base_request_id", None)
    try:
        return f"chatcmpl-{base(raw_request, getattr(request, 'request_id', None))}" if callable(base) else None
    except Exception:  # noqa: BLE001 - only a log field
        return None


async def _render_chat(serving: Any, request: Any) -> Any:
    """The request rendered again, as the one engine input vLLM's chat path sends; None if that is not what came."""
    rendered = await serving.render_chat_request(request)
    if isinstance(rendered, tuple) and len(rendered) == 2 and len(rendered[1]) == 1:
        return rendered[1][0]
    return None


# -- resubmission ---------------------------------------------------------------------------------


def healing_generate(original: Callable[..., Any], book: DriftBook) -> Callable[..., Any]:
    """``AsyncLLM.generate``, resubmitting once a request whose first answer is a drift failure.

    A plain function returning vLLM's own generator where no request boundary
    opened an attempt (nothing added on those paths), else one more generator
    layer, which costs one ``yield`` per output (measured in the docs).
    """

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        attempt = current_attempt.get()
        if attempt is None:
            return original(self, *args, **kwargs)  # type: ignore[no-any-return]
        return _healing(original, self, attempt, book, args, kwargs)

    return generate


async def _healing(
    original: Callable[..., Any],
    engine: Any,
    attempt: Attempt,
    book: DriftBook,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> AsyncIterator[Any]:
    request_id = kwargs.get("request_id", args[2] if len(args) > 2 else None)
    attempt.request_id = request_id or attempt.request_id
    outputs = original(engine, *args, **kwargs)
    try:
        first = await _first(outputs, attempt, book)
        if first is None:
            return
        if _drift_failed(first, book, request_id):
            attempt.drifts += 1
            if not attempt.resubmitted and attempt.rerender is not None:
                attempt.resubmitted = True
                await outputs.aclose()
                attempt.restart()
                try:
                    rendered = await attempt.rerender()
                except BaseException:
                    roll_back(attempt, book, _REFUSED)
                    attempt.resolve(book, "failed")
                    raise
                if rendered is not None:
                    book.forget(str(request_id))
                    outputs = original(engine, *_with_prompt(args, kwargs, rendered), **kwargs)
                    first = await _first(outputs, attempt, book)
                    if first is None:
                        return
        if not _drift_failed(first, book, request_id):
            attempt.resolve(book, "healed")
        yield first
        async for output in outputs:
            yield output
    finally:
        await outputs.aclose()


async def _first(outputs: Any, attempt: Attempt, book: DriftBook) -> Any:
    """The first output; a request refused before any (admission, validation) has its sender entries rolled back."""
    try:
        return await outputs.__anext__()
    except StopAsyncIteration:
        return None
    except BaseException:
        roll_back(attempt, book, _REFUSED)
        raise


def _drift_failed(output: Any, book: DriftBook, request_id: object) -> bool:
    if not getattr(output, "finished", False) or not isinstance(request_id, str):
        return False
    if not any(getattr(o, "finish_reason", None) == "error" for o in getattr(output, "outputs", ())):
        return False
    return book.failure_of(request_id) is not None


def _with_prompt(args: tuple[Any, ...], kwargs: dict[str, Any], prompt: Any) -> tuple[Any, ...]:
    if args:
        return (prompt, *args[1:])
    kwargs["prompt"] = prompt
    return ()


# -- what a client is told ------------------------------------------------------------------------


def raise_if_drift(original: Callable[..., None], book: DriftBook, drift_error: type[Exception]) -> Callable[..., None]:
    """``_raise_if_error``: a drift failure is raised as the 503 :class:`CacheDriftError`, not a 500."""

    @functools.wraps(original)
    def _raise_if_error(self: Any, finish_reason: str | None, request_id: str) -> None:
        if finish_reason == "error":
            failure = book.failure_of(request_id)
            if failure is not None:
                attempt = current_attempt.get()
                if attempt is not None:
                    attempt.drifts = max(attempt.drifts, 1)
                    attempt.resolve(book, "failed")
                else:
                    book.resolved(request_id, "failed", 1)
                raise drift_error(failure)
        original(self, finish_reason, request_id)

    return _raise_if_error


def retry_after_handler(
    original: Callable[..., Any],
    book: DriftBook,
    drift_error: type[Exception],
    retryable: type[Exception],
    vllm_drift_message: str,
) -> Callable[..., Any]:
    """vLLM's ``generation_error_handler``, adding ``Retry-After`` to the drift's 503.

    vLLM's pooling routes already answer the drift with their own
    ``RetryableRequestError`` (503, "Multi-modal processor cache miss."):
    that one gets the same message and header, and is counted as failed.
    """

    @functools.wraps(original)
    async def generation_error_handler(req: Any, exc: Exception) -> Any:
        if not isinstance(exc, drift_error) and isinstance(exc, retryable) and str(exc) == vllm_drift_message:
            metadata = getattr(getattr(req, "state", None), "request_metadata", None)
            book.resolved(getattr(metadata, "request_id", None), "failed", 1)
            exc = drift_error(None)
        response = await original(req, exc)
        if isinstance(exc, drift_error):
            response.headers["Retry-After"] = RETRY_AFTER_SECONDS
        return response

    return generation_error_handler
