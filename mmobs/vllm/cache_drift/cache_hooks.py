"""Where the plugin reaches into vLLM's multimodal cache path: the plan of replacements, checked first.

Counting (always on where the plugin runs, in the API server only):

==================================================  ==========================================
vLLM attribute                                      reports
==================================================  ==========================================
``LruKeyReplicatedSenderCache.get_and_update_item``  a sender-cache miss (vLLM's assertion);
                                                    the modality of what it caches; with
                                                    healing, what a request inserted
``LruKeyReplicatedSenderCache.is_cached``           nothing: a resubmission finds nothing
                                                    cached (healing only changes its answer)
``AsyncMPClient.get_output_async``                  nothing: remembers the engine index of the
                                                    outputs being processed
``OutputProcessor.process_outputs``                 every hash an engine output says drifted
``AsyncMPClient.add_request_async`` (and the        nothing: the request is now the engine's
data-parallel clients' own)                         (no rollback); modality of by-hash items
==================================================  ==========================================

Healing (``MMOBS_VLLM_MM_CACHE_HEAL``, on unless ``0``): the four wrappers of
:mod:`mmobs.vllm.cache_drift.cache_heal`. As with the rest of the plugin, every target is
looked up and checked before anything is replaced, and a vLLM of another
shape gets one warning and none of these replacements (the rest of the
plugin is unaffected). The engine processes load the plugin too; they hold
P1, not P0, so nothing here is planned there.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any

from mmobs.releases import VLLM_MODULES
from mmobs.vllm.cache_drift.cache_attempt import current_attempt, request_id_now
from mmobs.vllm.cache_drift.cache_heal import (
    chat_completion,
    drift_error_class,
    healing_generate,
    raise_if_drift,
    retry_after_handler,
)
from mmobs.vllm.cache_drift.drift import DriftBook, DriftFailure, drift_book
from mmobs.vllm.shape import Plan, ShapeMismatch, function
from mmobs.vllm.shape import attribute as _attribute
from mmobs.vllm.shape import module as _module

#: ``MMOBS_VLLM_MM_CACHE_HEAL=0``: count cache drift only, change nothing of vLLM's behaviour.
HEAL_ENV = "MMOBS_VLLM_MM_CACHE_HEAL"
#: The message of vLLM's own retryable error for a drift miss (``output_processor.py``, pooling routes).
VLLM_DRIFT_MESSAGE = "Multi-modal processor cache miss."

_LRU = VLLM_MODULES.cache_lru
_ENGINE = VLLM_MODULES.engine
_CLIENT = VLLM_MODULES.engine_client
_OUTPUTS = VLLM_MODULES.output_processor
_ASYNC_LLM = VLLM_MODULES.async_llm
_CHAT = VLLM_MODULES.chat_serving
_SERVING = VLLM_MODULES.base_serving
_ERRORS = VLLM_MODULES.error_handlers
_EXCEPTIONS = VLLM_MODULES.exceptions


def healing_enabled() -> bool:
    return os.environ.get(HEAL_ENV, "1").strip() != "0"


def cache_plan(book: DriftBook | None = None, *, heal: bool | None = None) -> Plan:
    """The replacements, every target checked; raises ``ShapeMismatch`` (nothing replaced) when one is off."""
    heal = healing_enabled() if heal is None else heal
    sender = _attribute(_module(_LRU), "LruKeyReplicatedSenderCache")
    for name in ("is_cached_item", "invalidate"):
        _method(sender, name, 2)
    engine_output = _attribute(_module(_ENGINE), "EngineCoreOutput")
    if "mm_cache_miss_hashes" not in getattr(engine_output, "__struct_fields__", ()):
        raise ShapeMismatch("EngineCoreOutput has no mm_cache_miss_hashes (vLLM's drift recovery, PR #46747)")
    client_module = _module(_CLIENT)
    client = _attribute(client_module, "AsyncMPClient")
    output_processor = _attribute(_module(_OUTPUTS), "OutputProcessor")
    originals = {
        "is_cached": _method(sender, "is_cached", 2),
        "get_and_update_item": _method(sender, "get_and_update_item", 3),
        "get_output_async": _method(client, "get_output_async", 1, coroutine=True),
        "process_outputs": _method(output_processor, "process_outputs"),
    }
    clients = [client] + [
        cls
        for name in ("DPAsyncMPClient", "DPLBAsyncMPClient")
        if isinstance(cls := getattr(client_module, name, None), type) and "add_request_async" in vars(cls)
    ]
    adders = [(cls, _method(cls, "add_request_async", 2, coroutine=True)) for cls in clients]
    book = book or drift_book()
    error, heal_plan = _heal_plan(book) if heal else (None, [])
    engine = _LastEngine()
    plan: Plan = [
        (sender, "is_cached", _is_cached(originals["is_cached"]), False),
        (sender, "get_and_update_item", _get_and_update_item(originals["get_and_update_item"], book, error), False),
        (client, "get_output_async", _get_output_async(originals["get_output_async"], engine), False),
        (
            output_processor,
            "process_outputs",
            _process_outputs(originals["process_outputs"], book, engine, heal),
            False,
        ),
    ]
    plan += [(cls, "add_request_async", _add_request_async(adder, book), False) for cls, adder in adders]
    return plan + heal_plan


def _heal_plan(book: DriftBook) -> tuple[type[Exception], Plan]:
    """The healing replacements, and the ``CacheDriftError`` class they raise (vLLM's 503 error, subclassed)."""
    retryable = _attribute(_module(_EXCEPTIONS), "RetryableRequestError")
    if not (isinstance(retryable, type) and issubclass(retryable, Exception)):
        raise ShapeMismatch("vllm.exceptions.RetryableRequestError is not an exception class")
    async_llm = _attribute(_module(_ASYNC_LLM), "AsyncLLM")
    original_generate = _attribute(async_llm, "generate")
    if not inspect.isasyncgenfunction(original_generate):
        raise ShapeMismatch("AsyncLLM.generate is not an async generator function")
    chat = _attribute(_module(_CHAT), "OpenAIServingChat")
    original_chat = _method(chat, "create_chat_completion", 3, coroutine=True)
    _method(chat, "render_chat_request", 2, coroutine=True)
    serving = _attribute(_module(_SERVING), "GenerateBaseServing")
    original_raise = _method(serving, "_raise_if_error", 3)
    errors = _module(_ERRORS)
    original_handler = _method(errors, "generation_error_handler", 2, coroutine=True)

    error = drift_error_class(retryable)
    return error, [
        (async_llm, "generate", healing_generate(original_generate, book), False),
        (chat, "create_chat_completion", chat_completion(original_chat, book, error), False),
        (serving, "_raise_if_error", raise_if_drift(original_raise, book, error), False),
        (errors, "generation_error_handler", retry_after_handler(original_handler, book, error, retryable, VLLM_DRIFT_MESSAGE), False),
    ]  # fmt: skip


def _method(owner: Any, name: str, parameters: int | None = None, *, coroutine: bool = False) -> Callable[..., Any]:
    found = function(owner, name, parameters)
    if coroutine and not inspect.iscoroutinefunction(found):
        raise ShapeMismatch(f"{name} is not a coroutine function")
    return found


class _LastEngine:
    """The engine index of the outputs the API server's output handler is processing (one task reads it)."""

    __slots__ = ("index",)

    def __init__(self) -> None:
        self.index: object = 0


# -- the counting wrappers ------------------------------------------------------------------------


def _get_and_update_item(
    original: Callable[..., Any], book: DriftBook, drift_error: type[Exception] | None
) -> Callable[..., Any]:
    """P0's update of one item: its own miss reported (and, healing, raised as the retryable drift), insertions noted.

    vLLM asserts when an item it looked up as cached is gone by the time it
    updates it (its own eviction within the request, or an invalidation in
    between): an ``AssertionError``, a 500. With healing the same moment
    raises :class:`~mmobs.vllm.cache_drift.cache_heal.CacheDriftError` instead, which the
    request boundary resubmits. The lookup is ``in`` (no LRU order, no stats).
    """

    @functools.wraps(original)
    def get_and_update_item(self: Any, mm_item: Any, mm_hash: str) -> Any:
        attempt = current_attempt.get()
        if mm_item is None:
            if not self.is_cached_item(mm_hash):
                request_id = request_id_now()
                book.sender_missed(request_id, mm_hash, None)
                if drift_error is not None:
                    if attempt is not None:
                        attempt.drifts += 1
                    raise drift_error(DriftFailure(request_id or "", (mm_hash,), "sender"))
                book.resolved(request_id, "failed", 1)  # vLLM's assertion follows: a 500
            return original(self, mm_item, mm_hash)
        book.note_modality(mm_hash, _item_modality(mm_item))
        if attempt is None:
            return original(self, mm_item, mm_hash)
        if attempt.resend and self.is_cached_item(mm_hash):
            # vLLM would send a cached item by hash even with its data at hand: drop the entry, so the data
            # goes and P0 records it afresh, as P1 does on receiving it (P1 replaces what it holds).
            self.invalidate(mm_hash)
        before = self.is_cached_item(mm_hash)
        result = original(self, mm_item, mm_hash)
        if not before and self.is_cached_item(mm_hash):
            attempt.cache = self
            attempt.inserted.append(mm_hash)
        return result

    return get_and_update_item


def _item_modality(mm_item: Any) -> str | None:
    """The modality of an item P0 is caching, named by its prompt updates (vLLM's ``ResolvedPromptUpdate``)."""
    try:
        updates = mm_item[1]
        return str(updates[0].modality) if updates else None
    except (TypeError, IndexError, KeyError, AttributeError):
        return None


def _is_cached(original: Callable[..., list[bool]]) -> Callable[..., list[bool]]:
    """P0's lookup of a request's items; for a resubmission, none is cached (every item is processed again)."""

    @functools.wraps(original)
    def is_cached(self: Any, mm_hashes: list[str]) -> list[bool]:
        attempt = current_attempt.get()
        if attempt is not None and attempt.resend:
            return [False] * len(mm_hashes)
        return original(self, mm_hashes)

    return is_cached


def _get_output_async(original: Callable[..., Any], engine: _LastEngine) -> Callable[..., Any]:
    @functools.wraps(original)
    async def get_output_async(self: Any) -> Any:
        outputs = await original(self)
        engine.index = getattr(outputs, "engine_index", 0)
        return outputs

    return get_output_async


def _process_outputs(
    original: Callable[..., Any], book: DriftBook, engine: _LastEngine, heal: bool
) -> Callable[..., Any]:
    """vLLM's output processing, reporting each drift miss first (vLLM then fails the request and invalidates)."""

    @functools.wraps(original)
    def process_outputs(self: Any, engine_core_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        for output in engine_core_outputs:
            hashes = output.mm_cache_miss_hashes
            if hashes:
                state = getattr(self, "request_states", {}).get(output.request_id)
                request_id = getattr(state, "external_req_id", None) or output.request_id
                book.engine_missed(request_id, list(hashes), engine.index)
                if not heal:
                    book.resolved(request_id, "failed", 1)  # vLLM answers it with its 500
        return original(self, engine_core_outputs, *args, **kwargs)

    return process_outputs


def _add_request_async(original: Callable[..., Any], book: DriftBook) -> Callable[..., Any]:
    """Handing a request to the engine: from then on its sender-cache entries are the engine's too."""

    @functools.wraps(original)
    async def add_request_async(self: Any, request: Any) -> None:
        await original(self, request)
        attempt = current_attempt.get()
        if attempt is not None:
            attempt.taken = True
        for feature in getattr(request, "mm_features", None) or ():
            if feature.data is None:
                book.note_modality(feature.mm_hash or feature.identifier, feature.modality)

    return add_request_async
