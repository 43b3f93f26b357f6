"""The stages of vLLM's multimodal front end, timed where vLLM runs them (the API server).

Between a chat request's arrival and its hand-off to the engine, vLLM's API
server fetches each media item, decodes its base64 or its image bytes, keys it,
looks it up in the processor cache and runs the HF processor on the misses.
vLLM's own ``time_to_first_token`` lumps all of that with queueing and
prefill. The plugin's hooks time each stage into
:mod:`mmobs.vllm.front_end.front_end_metrics`:

=============================================  =====================================
vLLM attribute                                 stage
=============================================  =====================================
``MediaConnector.load_from_url`` (and          says which modality a download is for
``load_from_url_async``)
``HTTPConnection.get_bytes`` (and              the download of an http(s) URL
``async_get_bytes``)
``MediaConnector._load_file_url``              reading a file URL (up to the loader)
``MediaConnector._load_data_url``              an image data URL's base64 (up to the
(:mod:`mmobs.vllm.loader_hooks`)               loader; refused ones at their refusal)
``VideoMediaIO.load_base64``,                  a video or audio data URL's base64 (up
``AudioMediaIO.load_base64``                   to ``load_bytes``)
``ImageMediaIO.load_bytes``                    the image decode, by format and outcome
(:mod:`mmobs.vllm.loader_hooks`)
``VideoMediaIO.load_bytes``                    the video decode, by container and outcome,
(:mod:`mmobs.vllm.loader_hooks`)               and its frames read and kept
``BaseMultiModalProcessor``'s instances'       the HF processor on a request's misses
``_apply_hf_processor_main``
``InputProcessor.process_inputs``              the whole front end: from vLLM's arrival
                                               time to the hand-off to the engine
=============================================  =====================================

A file or data URL's stage ends where vLLM hands its bytes to the loader,
in the same thread: the stage is opened in a thread-local and closed by
:func:`loader_entered`. Nothing is timed while nobody observes (vLLM's dummy
inputs at start-up, mmobs's own content keys): those are not traffic.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from time import perf_counter
from typing import Any

from mmobs.events import NULL_OBSERVER, get_observer
from mmobs.observability import tracing
from mmobs.vllm.decode_free_hits.lazy_image import LazyImage
from mmobs.vllm.front_end.front_end_metrics import MODALITIES, front_end_metrics

#: The modality a download in this context is for (set around ``load_from_url``); None: not a media fetch.
_fetching: contextvars.ContextVar[str | None] = contextvars.ContextVar("mmobs_media_fetch", default=None)


class _Pending(threading.local):
    """The data or file URL stage this thread opened, until the loader takes its bytes."""

    stage: str | None = None
    #: The modality of the item being read (a data URL's base64 may be an image's, a video's or an audio clip's).
    modality: str = "image"
    started: float = 0.0
    #: The wall clock when it opened, for its span (0: the request is not traced).
    started_ns: int = 0


_pending = _Pending()
#: The format labels by the bytes' first two, with the signatures that confirm them (those of
#: :func:`mmobs.keys.guard.sniff_format`, which a test holds this to).
_SIGNATURES: dict[bytes, tuple[str, tuple[bytes, ...]]] = {
    b"\xff\xd8": ("jpeg", (b"\xff\xd8\xff",)),
    b"\x89P": ("png", (b"\x89PNG\r\n\x1a\n",)),
    b"GI": ("gif", (b"GIF87a", b"GIF89a")),
    b"II": ("tiff", (b"II\x2a\x00", b"II\x00\x2a", b"II\x2b\x00")),
    b"MM": ("tiff", (b"MM\x00\x2a", b"MM\x2a\x00", b"MM\x00\x2b")),
    b"BM": ("bmp", (b"BM",)),
}


def watched() -> bool:
    """Whether this is traffic: someone observes (not vLLM's dummy inputs, not mmobs's own content keys)."""
    return get_observer() is not NULL_OBSERVER


@lru_cache(maxsize=64)
def _modality_of_class(class_name: str) -> str:
    """``ImageMediaIO`` is ``image``, ``AudioMediaIO`` ``audio``, ``VideoMediaIO`` ``video``; others ``other``."""
    name = class_name.lower()
    return next((modality for modality in ("image", "audio", "video") if name.startswith(modality)), "other")


def media_fetch(original: Callable[..., Any]) -> Callable[..., Any]:
    """``load_from_url`` or ``load_from_url_async``, telling the downloads inside which modality they fetch."""

    def modality(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        media_io = args[2] if len(args) > 2 else kwargs.get("media_io")
        return _modality_of_class(type(media_io).__name__)

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def load_from_url_async(*args: Any, **kwargs: Any) -> Any:
            token = _fetching.set(modality(args, kwargs))
            try:
                return await original(*args, **kwargs)
            finally:
                _fetching.reset(token)

        return load_from_url_async

    @functools.wraps(original)
    def load_from_url(*args: Any, **kwargs: Any) -> Any:
        token = _fetching.set(modality(args, kwargs))
        try:
            return original(*args, **kwargs)
        finally:
            _fetching.reset(token)

    return load_from_url


def download(original: Callable[..., Any]) -> Callable[..., Any]:
    """``HTTPConnection.get_bytes`` or ``async_get_bytes``, timed when a media fetch called it."""

    def observe(modality: str, started: float, data: Any, live: Any) -> None:
        nbytes = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else None
        outcome = "ok" if data is not None else "failed"
        front_end_metrics().observe_download(modality, "http", outcome, perf_counter() - started, nbytes)
        if live is not None:
            live.set_attribute("mmobs.outcome", outcome)
            if nbytes is not None:
                live.set_attribute("mmobs.media.bytes", nbytes)

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def async_get_bytes(*args: Any, **kwargs: Any) -> Any:
            modality = _fetching.get()
            if modality is None or not watched():
                return await original(*args, **kwargs)
            started, data = perf_counter(), None
            with tracing.span("mmobs.media.download", _download_attributes(modality)) as live:
                try:
                    data = await original(*args, **kwargs)
                    return data
                finally:
                    observe(modality, started, data, live)

        return async_get_bytes

    @functools.wraps(original)
    def get_bytes(*args: Any, **kwargs: Any) -> Any:
        modality = _fetching.get()
        if modality is None or not watched():
            return original(*args, **kwargs)
        started, data = perf_counter(), None
        with tracing.span("mmobs.media.download", _download_attributes(modality)) as live:
            try:
                data = original(*args, **kwargs)
                return data
            finally:
                observe(modality, started, data, live)

    return get_bytes


def _download_attributes(modality: str) -> dict[str, tracing.AttributeValue]:
    return {"mmobs.modality": modality, "url.scheme": "http"}


def file_url(original: Callable[..., Any], loader_class: type) -> Callable[..., Any]:
    """``MediaConnector._load_file_url``: an image's file read, timed up to the loader (or to its refusal)."""

    @functools.wraps(original)
    def _load_file_url(self: Any, url_spec: Any, media_io: Any) -> Any:
        if not isinstance(media_io, loader_class) or not watched():
            return original(self, url_spec, media_io)
        _open("file")
        try:
            return original(self, url_spec, media_io)
        finally:
            if _pending.stage is not None:  # refused before the loader (not allowed, not found)
                _pending.stage = None
                front_end_metrics().observe_download("image", "file", "failed", perf_counter() - _pending.started, None)
                _close_span("file", "failed")

    return _load_file_url


def open_data_url(modality: str = "image") -> None:
    """A data URL of ``modality`` is being read: its base64 stage starts (``_load_data_url``, ``load_base64``)."""
    if watched():
        _open("base64", modality)


def close_data_url() -> None:
    """The data URL reader returned or raised: a stage the loader did not close was refused."""
    if _pending.stage == "base64":
        _pending.stage = None
        front_end_metrics().observe_base64(_pending.modality, "refused", perf_counter() - _pending.started)
        _close_span("base64", "refused")


def _open(stage: str, modality: str = "image") -> None:
    _pending.stage, _pending.modality, _pending.started = stage, modality, perf_counter()
    _pending.started_ns = tracing.now_ns() if tracing.recording() else 0


#: The span of each stage that opens in one function and closes in another.
_STAGE_SPANS: dict[str, tuple[str, dict[str, tracing.AttributeValue]]] = {
    "base64": ("mmobs.media.base64", {}),
    "file": ("mmobs.media.download", {"url.scheme": "file"}),
}


def _close_span(stage: str, outcome: str, nbytes: int | None = None) -> None:
    """The pending stage's span, ended now (where the request is traced)."""
    if not _pending.started_ns:
        return
    name, attributes = _STAGE_SPANS[stage]
    attributes = {**attributes, "mmobs.modality": _pending.modality, "mmobs.outcome": outcome}  # a copy
    if nbytes is not None:
        attributes["mmobs.media.bytes"] = nbytes
    tracing.record_span(
        name, _pending.started_ns, tracing.now_ns(), attributes, error=None if outcome == "ok" else outcome
    )


def loader_entered(now: float, data: bytes) -> None:
    """A loader has the bytes: the data or file URL stage that led here ends now."""
    stage = _pending.stage
    if stage is None:
        return
    _pending.stage = None
    seconds = now - _pending.started
    if stage == "base64":
        front_end_metrics().observe_base64(_pending.modality, "ok", seconds)
    else:
        front_end_metrics().observe_download("image", "file", "ok", seconds, len(data))
    _close_span(stage, "ok", len(data))


def decoded(data: bytes, result: Any, seconds: float) -> str:
    """One image's load: decoded, skipped (a decode-free stand-in came back) or refused (``result`` None); its outcome."""
    if result is None:
        outcome = "refused"
    else:
        media = getattr(result, "media", None)
        outcome = "skipped" if isinstance(media, LazyImage) and not media.decoded else "decoded"
    front_end_metrics().observe_decode("image", format_label(data), outcome, seconds)
    return outcome


def video_decoded(data: bytes, result: Any, seconds: float, skipped: bool) -> str:
    """One clip's load: decoded, skipped (a decode-free stand-in) or refused (``result`` None); its outcome.

    A decoded clip's frames are counted too: those kept (its metadata's ``frames_indices``) and those its
    decoder read to get them (up to the last kept one: OpenCV grabs every frame before it).
    """
    outcome = "refused" if result is None else ("skipped" if skipped else "decoded")
    metrics = front_end_metrics()
    metrics.observe_decode("video", video_format_label(data), outcome, seconds)
    media = getattr(result, "media", None)
    metadata = media[1] if outcome == "decoded" and isinstance(media, tuple) and len(media) == 2 else None
    kept = metadata.get("frames_indices") if isinstance(metadata, dict) else None
    if isinstance(kept, list):
        metrics.observe_video_frames(max(kept, default=-1) + 1, len(kept))
    return outcome


def video_format_label(data: bytes) -> str:
    """The container label of a clip's bytes: ``mp4`` (an ISO BMFF ``ftyp`` box), ``webm`` (EBML), ``avi``, else ``other``."""
    head = bytes(data[:12])
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    return "avi" if head[:4] == b"RIFF" and head[8:12] == b"AVI " else "other"


def format_label(data: bytes) -> str:
    """The :data:`~mmobs.vllm.front_end.front_end_metrics.FORMATS` label of ``data``: a lookup, not a sniff (a hot path)."""
    if not isinstance(data, bytes):  # a bytearray or memoryview from a custom caller: its head is enough
        data = bytes(data[:16])
    candidate = _SIGNATURES.get(data[:2])
    if candidate is not None:
        return candidate[0] if data.startswith(candidate[1]) else "other"
    return "webp" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else "other"


def timed_processor(method: Callable[..., Any]) -> Callable[..., Any]:
    """A processor's bound ``_apply_hf_processor_main``, timed when it has items to process (a request's misses).

    Installed on each processor instance (:func:`mmobs.vllm.plugin`'s ``__init__`` hook), so that a model's
    own override is the one timed.
    """

    @functools.wraps(method)
    def _apply_hf_processor_main(mm_items: Any, *args: Any, **kwargs: Any) -> Any:
        counts = _item_counts(mm_items)
        items = sum(counts.values())
        if not items or not watched():
            return method(mm_items, *args, **kwargs)
        started, modality = perf_counter(), _modality(counts)
        with tracing.span("mmobs.hf_processor", {"mmobs.modality": modality, "mmobs.items": items}):
            try:
                return method(mm_items, *args, **kwargs)
            finally:
                front_end_metrics().observe_processor(modality, items, perf_counter() - started)

    _apply_hf_processor_main.__mmobs_timed__ = True  # type: ignore[attr-defined]
    return _apply_hf_processor_main


def _item_counts(mm_items: Any) -> Mapping[str, int]:
    get_all_counts = getattr(mm_items, "get_all_counts", None)
    counts = get_all_counts() if callable(get_all_counts) else {}
    return {modality: count for modality, count in counts.items() if count}


def _modality(counts: Mapping[str, int]) -> str:
    if len(counts) > 1:
        return "mixed"
    (modality,) = counts
    return modality if modality in MODALITIES else "other"


def process_inputs(original: Callable[..., Any]) -> Callable[..., Any]:
    """``InputProcessor.process_inputs``: the front end ends here, at the hand-off to the engine core.

    It started at the request's ``arrival_time``, which vLLM's renderer sets when
    it starts on the request and from which vLLM counts time to first token.
    """

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = original(self, *args, **kwargs)
        arrival = getattr(request, "arrival_time", None)
        if isinstance(arrival, (int, float)) and watched():
            features = getattr(request, "mm_features", None) or ()
            now = time.time()
            front_end_metrics().observe_front_end(_model_name(self), len(features), now - arrival)
            tracing.record_span("mmobs.front_end", int(arrival * 1e9), int(now * 1e9), {"mmobs.items": len(features)})
        return request

    return wrapper


def input_processor_made(input_processor: Any) -> None:
    """A new ``InputProcessor`` (vLLM makes one per API server): its model's front-end series, at zero."""
    front_end_metrics().declare_model(_model_name(input_processor))


def _model_name(input_processor: Any) -> str:
    name = getattr(getattr(input_processor, "model_config", None), "served_model_name", None)
    if isinstance(name, (list, tuple)):
        name = name[0] if name else None
    return str(name) if name else "unknown"


def timed_base64(original: Callable[..., Any], modality: str) -> Callable[..., Any]:
    """A video or audio loader's ``load_base64(self, media_type, data)``: its base64 stage, up to ``load_bytes``.

    The stage opens here and ends where the loader's ``load_bytes`` hook takes the bytes (:func:`loader_entered`);
    a ``video/jpeg`` frame list, which never reaches it (its frames are images), is not timed here.
    """

    @functools.wraps(original)
    def load_base64(self: Any, media_type: str, data: str) -> Any:
        if str(media_type).lower() == "video/jpeg":
            return original(self, media_type, data)
        open_data_url(modality)
        try:
            return original(self, media_type, data)
        finally:
            close_data_url()

    return load_base64


def entering_loader(original: Callable[[Any, bytes], Any]) -> Callable[[Any, bytes], Any]:
    """A loader's ``load_bytes`` that is not timed itself (audio's): it ends the base64 stage that led to it."""

    @functools.wraps(original)
    def load_bytes(self: Any, data: bytes) -> Any:
        loader_entered(perf_counter(), data)
        return original(self, data)

    return load_bytes
