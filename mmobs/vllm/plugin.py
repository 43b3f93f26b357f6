"""The vLLM general plugin: mmobs's counters and events inside an unmodified vLLM.

vLLM swallows exactly what mmobs exists to count: ``_get_image_id_bytes``
tolerates a malformed EXIF block silently, ``normalize_image`` suppresses every
transpose failure, and its loader's refusals are only a 400 somewhere. The
plugin replaces a few of vLLM's module attributes with versions that return
exactly what vLLM's return (checked on probe images before anything is
replaced) and report to mmobs's observer on the way:

=============================================  =====================================
vLLM attribute                                 reports
=============================================  =====================================
``hasher._get_image_id_bytes``                 ``exif_fallback`` (kind, key source)
``MultiModalHasher.serialize_item``            ``media_keyed`` (key-source mix, drift)
``MultiModalHasher.hash_kwargs``,              ``hashed`` (duration, bytes fed)
``hasher._get_hasher_factory``
``image.normalize_image`` (and every module    ``exif_transpose_failed``
that imported it by name, Molmo2's included)
``ImageMediaIO.load_bytes``                    ``bad_image`` (reason from the cause)
``renderers.base.make_async``,                 nothing: they carry the request's
``media.connector.global_thread_pool``         context into vLLM's executor threads
``BaseMultiModalProcessor``                    nothing: vLLM's own dummy inputs (the
``.get_dummy_mm_inputs``                       start-up warm-up, profiling) are not
                                               traffic, so nobody watches them
=============================================  =====================================

mmobs's log events go through stdlib logging under vLLM's logger tree
(``vllm.mmobs``), so vLLM's handler writes them in vLLM's format, or in the
one a ``VLLM_LOGGING_CONFIG_PATH`` config chooses (:mod:`mmobs.observability.stdlib_events`).

:func:`register` is idempotent, never raises into vLLM, and when vLLM's shape
is not what it expects logs one warning naming the vLLM version and changes
nothing. Every replacement is recorded, so :func:`unregister` restores vLLM.
"""

from __future__ import annotations

import binascii
import contextvars
import functools
import inspect
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from mmobs.errors import BadImageError, BadImageReason
from mmobs.events import ExifFallback, KeySource, MediaKeyed, MediaKind, TransposeFailure, get_observer, observing
from mmobs.keys.guard import check_image_bytes
from mmobs.keys.hashing import IMAGE_ID_TAG
from mmobs.keys.loader import bad_image_from_pillow, empty_image_error, report_bad_image
from mmobs.keys.media import is_media_with_bytes
from mmobs.observability.stdlib_events import log_events_to_stdlib
from mmobs.vllm.shape import ShapeMismatch
from mmobs.vllm.shape import attribute as _attribute
from mmobs.vllm.shape import function as _function
from mmobs.vllm.shape import module as _module

__all__ = ["FAST_KEYS_ENV", "GUARD_ENV", "PLUGIN_ENV", "ShapeMismatch", "register", "registered", "unregister"]

#: ``MMOBS_VLLM_PLUGIN=0`` turns the plugin off.
PLUGIN_ENV = "MMOBS_VLLM_PLUGIN"
#: ``MMOBS_VLLM_FAST_KEYS=1`` keys plain PIL images through mmobs's pixel path.
FAST_KEYS_ENV = "MMOBS_VLLM_FAST_KEYS"
#: ``MMOBS_VLLM_GUARD=1`` runs mmobs's structural checks before vLLM decodes an image.
GUARD_ENV = "MMOBS_VLLM_GUARD"

#: Logged under vLLM's namespace so the warning shows in vLLM's own log stream.
_log = logging.getLogger("vllm.mmobs")
_lock = threading.Lock()
_HASHER = "vllm.multimodal.hasher"
_IMAGE = "vllm.multimodal.image"
_MEDIA_IMAGE = "vllm.multimodal.media.image"
_CONNECTOR = "vllm.multimodal.media.connector"
_RENDERERS = "vllm.renderers.base"
_PROCESSOR = "vllm.multimodal.processing.processor"


@dataclass
class _Replacement:
    target: Any
    name: str
    original: Any
    instance_attribute: bool = False

    def restore(self) -> None:
        if self.instance_attribute:
            vars(self.target).pop(self.name, None)
        else:
            setattr(self.target, self.name, self.original)


_applied: list[_Replacement] = []
_declined = False


def registered() -> bool:
    """Whether the plugin's replacements are in place in this process."""
    return bool(_applied)


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Idempotent; never raises."""
    global _declined
    if os.environ.get(PLUGIN_ENV, "1").strip() == "0":
        return
    with _lock:
        if _applied or _declined:
            return
        try:
            plan = _plan()
            plan += _cache_plan()
        except ShapeMismatch as error:
            _declined = True
            _log.warning(
                "mmobs: vLLM %s is not shaped as this plugin expects (%s); its multimodal path is left "
                "untouched and nothing is counted. Set %s=0 to silence this.",
                _vllm_version(),
                error,
                PLUGIN_ENV,
            )
            return
        except Exception as error:  # noqa: BLE001 - never raise into vLLM
            _declined = True
            _log.warning(
                "mmobs: the vLLM plugin could not load (%s: %s); nothing is counted", type(error).__name__, error
            )
            return
        for target, name, replacement, instance_attribute in plan:
            _applied.append(_Replacement(target, name, inspect.getattr_static(target, name), instance_attribute))
            setattr(target, name, replacement)
        # One log stream: mmobs's events become records of vLLM's logger tree (while structlog is unconfigured).
        log_events_to_stdlib(_log.name)
        _log.info("mmobs: counting vLLM %s's multimodal fallbacks (%d attributes wrapped)", _vllm_version(), len(plan))


def unregister() -> None:
    """Put vLLM's own attributes back (tests; a process that wants vLLM untouched again)."""
    global _declined
    with _lock:
        while _applied:
            _applied.pop().restore()
        _declined = False
        log_events_to_stdlib(None)


# -- the plan: check everything, replace nothing until all is known good -------------


_Plan = list[tuple[Any, str, Any, bool]]


def _plan() -> _Plan:
    hasher = _module(_HASHER)
    image = _module(_IMAGE)
    media_image = _module(_MEDIA_IMAGE)
    connector = _module(_CONNECTOR)
    renderers = _module(_RENDERERS)
    processor_class = _attribute(_module(_PROCESSOR), "BaseMultiModalProcessor")

    hasher_class = _attribute(hasher, "MultiModalHasher")
    original_id_bytes = _function(hasher, "_get_image_id_bytes", parameters=1)
    original_factory = _function(hasher, "_get_hasher_factory", parameters=1)
    original_serialize = _classmethod(hasher_class, "serialize_item")
    original_hash_kwargs = _classmethod(hasher_class, "hash_kwargs")
    original_normalize = _function(image, "normalize_image", parameters=1)
    loader_class = _attribute(media_image, "ImageMediaIO")
    original_load_bytes = _function(loader_class, "load_bytes", parameters=2)
    original_make_async = _function(renderers, "make_async")
    connector_class = _attribute(connector, "MediaConnector")
    original_data_url = _function(connector_class, "_load_data_url", parameters=3)
    original_dummy_inputs = _function(processor_class, "get_dummy_mm_inputs")
    pool = _attribute(connector, "global_thread_pool")
    if not callable(getattr(pool, "submit", None)):
        raise ShapeMismatch(f"{_CONNECTOR}.global_thread_pool has no submit()")

    _same_results(original_id_bytes, _image_id_bytes, _probe_images(), "_get_image_id_bytes")
    _same_results(original_normalize, _normalize_image, _probe_images(), "normalize_image", compare=_pixels)

    guard = _enabled(GUARD_ENV)
    serialize_item = _serialize_item(original_serialize)
    if _enabled(FAST_KEYS_ENV):
        from mmobs.vllm.fast_keys import fast_serialize_item

        serialize_item = fast_serialize_item(serialize_item)
    plan: _Plan = [
        (hasher, "_get_image_id_bytes", _image_id_bytes, False),
        (hasher, "_get_hasher_factory", _counting_factory(original_factory), False),
        (hasher_class, "serialize_item", classmethod(serialize_item), False),
        (hasher_class, "hash_kwargs", classmethod(_hash_kwargs(original_hash_kwargs)), False),
        (loader_class, "load_bytes", _load_bytes(original_load_bytes, guard=guard), False),
        (connector_class, "_load_data_url", _load_data_url(original_data_url, loader_class, guard=guard), False),
        (renderers, "make_async", _context_make_async(original_make_async), False),
        (pool, "submit", _context_submit(pool.submit), True),
        (processor_class, "get_dummy_mm_inputs", _not_traffic(original_dummy_inputs), False),
    ]
    # normalize_image is imported by name (media.image, parse, Molmo2...): rebind every
    # loaded vLLM module that holds vLLM's function; later importers read the patched source.
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("vllm") and m is not None]:
        if getattr(module, "normalize_image", None) is original_normalize:
            plan.append((module, "normalize_image", _normalize_image, False))
    return plan


def _cache_plan() -> _Plan:
    """The multimodal cache drift hooks (:mod:`mmobs.vllm.cache_hooks`), in the API server only.

    They are planned apart: a vLLM whose cache path is shaped otherwise gets
    one warning and no drift counting, and keeps the rest of the plugin.
    """
    from mmobs.vllm import cache_hooks

    if not cache_hooks.api_server_process():
        return []
    try:
        return cache_hooks.cache_plan()
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or anything a foreign vLLM raises on import
        _log.warning(
            "mmobs: vLLM %s's multimodal processor cache is not shaped as mmobs expects (%s: %s); its cache drift "
            "is neither counted nor healed, the rest of the plugin is loaded.",
            _vllm_version(),
            type(error).__name__,
            error,
        )
        return []


def _enabled(variable: str) -> bool:
    return os.environ.get(variable, "0").strip() == "1"


def _classmethod(owner: type, name: str) -> Callable[..., Any]:
    raw = inspect.getattr_static(owner, name, None)
    if not isinstance(raw, classmethod) or inspect.isgeneratorfunction(raw.__func__):
        raise ShapeMismatch(f"{owner.__name__}.{name} is not a classmethod returning chunks eagerly")
    return raw.__func__


def _probe_images() -> list[Callable[[], Image.Image]]:
    """Fresh probe images (EXIF reads are stateful): plain, UUID ImageID, rotated."""

    def plain() -> Image.Image:
        return Image.new("RGB", (3, 2), (1, 2, 3))

    def with_uuid() -> Image.Image:
        image = Image.new("L", (2, 2), 7)
        image.getexif()[IMAGE_ID_TAG] = uuid.UUID(int=0x6D6D6F6273)
        return image

    def rotated() -> Image.Image:
        image = Image.new("RGB", (3, 2), (9, 8, 7))
        image.putpixel((0, 0), (1, 1, 1))
        image.getexif()[0x0112] = 6
        return image

    return [plain, with_uuid, rotated]


def _pixels(image: Any) -> Any:
    return (image.mode, image.size, image.tobytes()) if isinstance(image, Image.Image) else image


def _same_results(
    original: Callable[[Any], Any],
    replacement: Callable[[Any], Any],
    probes: list[Callable[[], Image.Image]],
    name: str,
    compare: Callable[[Any], Any] = lambda value: value,
) -> None:
    for probe in probes:
        if compare(original(probe())) != compare(replacement(probe())):
            raise ShapeMismatch(f"{name} no longer behaves as mmobs's replacement does on {probe.__name__} images")


def _vllm_version() -> str:
    module = sys.modules.get("vllm")
    return str(getattr(module, "__version__", "unknown"))


# -- the replacements ----------------------------------------------------------------


@dataclass
class _Item:
    """The media item vLLM's ``serialize_item`` is keying in this thread, and what it found."""

    kind: MediaKind
    obj: Any
    image_id: bytes | None = None

    def key_source(self) -> KeySource:
        if self.image_id is not None:
            return "image_id"
        if self.kind == "image":
            return "pixels"
        if self.kind == "video" and self.obj.media.nbytes < len(self.obj.original_bytes):
            return "frames"
        return "original_bytes"


_current_item: contextvars.ContextVar[_Item | None] = contextvars.ContextVar("mmobs_vllm_item", default=None)


def _media_kind(obj: object) -> MediaKind | None:
    """The kind vLLM's ``serialize_item`` treats ``obj`` as, or None for other values."""
    if isinstance(obj, Image.Image):
        return "image"
    if is_media_with_bytes(obj):
        media = obj.media  # type: ignore[attr-defined]
        if isinstance(media, Image.Image):
            return "media_with_bytes"
        torch = sys.modules.get("torch")
        if isinstance(media, np.ndarray) or (torch is not None and isinstance(media, torch.Tensor)):
            return "video"
    return None


def _image_id_bytes(image: Image.Image) -> bytes | None:
    """vLLM's tolerant ImageID read, reporting what it swallows."""
    item = _current_item.get()
    try:
        image_id = image.getexif().get(IMAGE_ID_TAG)
        found = image_id.bytes if isinstance(image_id, uuid.UUID) else None
    except Exception as error:  # noqa: BLE001 - tolerated by vLLM; reported here
        if item is not None and item.kind == "media_with_bytes":
            event = ExifFallback("media_with_bytes", error, "original_bytes", image, item.obj.original_bytes)
        else:
            event = ExifFallback("image", error, "pixels", image, None)
        get_observer().exif_fallback(event)
        found = None
    if item is not None:
        item.image_id = found
    return found


def _serialize_item(original: Callable[..., Iterable[Any]]) -> Callable[..., Iterable[Any]]:
    @functools.wraps(original)
    def serialize_item(cls: type, obj: object) -> Iterable[Any]:
        kind = _media_kind(obj)
        if kind is None:
            return original(cls, obj)
        item = _Item(kind, obj)
        token = _current_item.set(item)
        try:
            chunks = original(cls, obj)  # vLLM reads the ImageID here, eagerly
        finally:
            _current_item.reset(token)
        observer = get_observer()
        source = item.key_source()
        if observer.wants_item_digest(kind, obj):
            return _teed(chunks, kind, source, obj)
        observer.media_keyed(MediaKeyed(kind, source, obj, None))
        return chunks

    return serialize_item


def _teed(chunks: Iterable[Any], kind: MediaKind, source: KeySource, obj: object) -> Iterator[Any]:
    """The chunks, unchanged, with the item's own digest reported once they are consumed."""
    from blake3 import blake3

    tee = blake3()
    for chunk in chunks:
        tee.update(chunk)
        yield chunk
    get_observer().media_keyed(MediaKeyed(kind, source, obj, tee.hexdigest()))


class _HashCall:
    __slots__ = ("nbytes",)

    def __init__(self) -> None:
        self.nbytes = 0


_current_hash: contextvars.ContextVar[_HashCall | None] = contextvars.ContextVar("mmobs_vllm_hash", default=None)


class _CountingDigest:
    """vLLM's digest, counting the bytes fed to it for the hash call in progress."""

    __slots__ = ("_call", "_digest")

    def __init__(self, digest: Any, call: _HashCall) -> None:
        self._digest = digest
        self._call = call

    def update(self, data: Any) -> None:
        self._digest.update(data)
        self._call.nbytes += data.nbytes if isinstance(data, memoryview) else len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._digest, name)


def _counting_factory(original: Callable[[Any], Callable[[], Any]]) -> Callable[[Any], Callable[[], Any]]:
    @functools.wraps(original)
    def get_hasher_factory(algorithm: Any) -> Callable[[], Any]:
        factory = original(algorithm)
        call = _current_hash.get()
        if call is None:  # called outside hash_kwargs: nothing to count
            return factory
        return lambda: _CountingDigest(factory(), call)

    return get_hasher_factory


def _hash_kwargs(original: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(original)
    def hash_kwargs(cls: type, algorithm: Any, /, **kwargs: object) -> str:
        call = _HashCall()
        token = _current_hash.set(call)
        started = perf_counter()
        try:
            key = original(cls, algorithm, **kwargs)
        finally:
            _current_hash.reset(token)
        get_observer().hashed(str(algorithm), perf_counter() - started, call.nbytes)
        return key

    return hash_kwargs


def _normalize_image(image: Image.Image) -> Image.Image:
    """vLLM's ``normalize_image`` (EXIF orientation, any failure tolerated), reporting failures."""
    try:
        return ImageOps.exif_transpose(image)
    except Exception as error:  # noqa: BLE001 - tolerated by vLLM; reported here
        get_observer().exif_transpose_failed(TransposeFailure(error, image))
        return image


def _load_bytes(original: Callable[[Any, bytes], Any], *, guard: bool) -> Callable[[Any, bytes], Any]:
    """vLLM's loader, its refusals counted; with the guard, mmobs's structural checks first.

    The guard refuses, before Pillow sees them, the inputs whose structure
    would cost far more to decode than a plain image of their size (see
    :mod:`mmobs.keys.guard`), as a :class:`~mmobs.errors.BadImageError`: a
    ``ValueError``, which vLLM already answers with a 400. With the guard on,
    a decode error vLLM would let escape as something else (``struct.error``,
    Pillow's ``DecompressionBombError``) becomes that ``ValueError`` too, so a
    bad image is a 400 and never a 500. Accepted images load, and key, as before.
    """

    @functools.wraps(original)
    def load_bytes(self: Any, data: bytes) -> Any:
        if guard:
            try:
                check_image_bytes(data, max_pixels=_vllm_max_pixels())
            except BadImageError as error:
                raise _named(report_bad_image(error)) from None
        try:
            return original(self, data)
        except MemoryError:
            raise
        except Exception as error:
            refusal = report_bad_image(_refusal(error) if data else empty_image_error())
            if guard and not isinstance(error, ValueError):
                raise _named(refusal) from error
            setattr(error, _REPORTED, True)  # for _load_data_url, which this call is inside of
            raise

    return load_bytes


#: Set on an exception whose refusal was already counted on its way out of the loader.
_REPORTED = "__mmobs_reported__"


def _load_data_url(original: Callable[..., Any], loader_class: type, *, guard: bool) -> Callable[..., Any]:
    """vLLM's data-URL reader, counting the image URLs it refuses before any image loader sees them.

    A URL without its ``,``, one not base64-encoded, or a payload that is not
    base64 never reaches ``load_bytes``: this counts them as ``bad_data_url`` or
    ``bad_base64`` (refusals of the loader inside were counted there already).
    vLLM answers a URL that is not base64 with ``501 Not Implemented``, which a
    client takes for the server's fault and retries; with the guard on it is the
    ``ValueError`` vLLM answers with a 400, as the others are.
    """

    @functools.wraps(original)
    def load_data_url(self: Any, url: str, media_io: Any) -> Any:
        try:
            return original(self, url, media_io)
        except Exception as error:
            if not isinstance(media_io, loader_class) or getattr(error, _REPORTED, False):
                raise
            reason: BadImageReason = "bad_base64" if isinstance(error, binascii.Error) else "bad_data_url"
            refusal = report_bad_image(BadImageError(reason, f"{type(error).__name__}: {error}"[:300]))
            if guard and not isinstance(error, ValueError):
                raise _named(refusal) from error
            raise

    return load_data_url


def _named(refusal: BadImageError) -> BadImageError:
    """The refusal as vLLM's 400 shows it: its message after its reason (``too_costly: the JPEG has...``)."""
    named = BadImageError(refusal.reason, f"{refusal.reason}: {refusal.message}")  # type: ignore[arg-type]
    named.reported = True
    setattr(named, _REPORTED, True)
    return named


def _vllm_max_pixels() -> int | None:
    """vLLM's own pixel limit (``VLLM_MAX_IMAGE_PIXELS``; 0 or less means none)."""
    envs = sys.modules.get("vllm.envs")
    limit = getattr(envs, "VLLM_MAX_IMAGE_PIXELS", 0) if envs is not None else 0
    return limit if isinstance(limit, int) and limit > 0 else None


def _refusal(error: Exception) -> BadImageError:
    """What vLLM's loader refused, with mmobs's reason.

    The loader does nothing but decode the bytes it was given, so whatever it
    raises (but a MemoryError) is about them: vLLM wraps Pillow's error as the
    ``__cause__`` of a ``ValueError``, or raises its own limit messages.
    """
    if isinstance(error, BadImageError):
        return error
    text = str(error)
    if ("pixels" in text and "exceed" in text) or "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES" in text:
        return BadImageError("too_many_pixels", text[:300])
    cause = error.__cause__ if isinstance(error, ValueError) and error.__cause__ is not None else error
    return bad_image_from_pillow(cause, "image")


def _context_make_async(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``make_async``, with the caller's contextvars carried into the executor thread.

    ``loop.run_in_executor`` does not copy the context (``asyncio.to_thread``
    does), so the request id bound by the middleware is lost in vLLM's
    multimodal executor without this.
    """

    @functools.wraps(original)
    def make_async(func: Callable[..., Any], executor: Any = None) -> Callable[..., Any]:
        def run_in(context: contextvars.Context, *args: Any, **kwargs: Any) -> Any:
            return context.run(func, *args, **kwargs)

        in_executor = original(run_in, executor=executor)

        def _async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return in_executor(contextvars.copy_context(), *args, **kwargs)

        return _async_wrapper

    return make_async


def _context_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    """``executor.submit`` that runs the function in a copy of the submitter's context."""

    @functools.wraps(original)
    def submit(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return original(contextvars.copy_context().run, fn, *args, **kwargs)

    return submit


def _not_traffic(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``get_dummy_mm_inputs`` with nobody watching: its dummy images are vLLM's own work.

    The API server processes a dummy multimodal input at start-up (the renderer's
    warm-up) and the engine profiles with them: counted, they would look like
    traffic before the first request.
    """

    @functools.wraps(original)
    def get_dummy_mm_inputs(*args: Any, **kwargs: Any) -> Any:
        with observing(None):
            return original(*args, **kwargs)

    return get_dummy_mm_inputs
