"""The plugin's key hooks: vLLM's hasher, reporting what it swallows and what it keyed.

=============================================  =====================================
vLLM attribute                                 reports
=============================================  =====================================
``hasher._get_image_id_bytes``                 ``exif_fallback`` (kind, key source)
``MultiModalHasher.serialize_item``            ``media_keyed`` (key-source mix, drift);
                                               before vLLM 0.31, ``exif_fallback`` too,
                                               and PR #56576's fix (:func:`tolerant_image_id`)
``MultiModalHasher.hash_kwargs``,              ``hashed`` (duration, bytes fed)
``hasher._get_hasher_factory``
=============================================  =====================================

Each replacement returns exactly what vLLM's own returns. An image whose
decode was skipped (:mod:`mmobs.vllm.decode_free_hits.decode_skip`) is keyed by vLLM's own
``serialize_item`` too, from its original bytes: its ImageID reads are
answered with what the same bytes' decoded image answered, and report the
same events.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import numpy as np
from PIL import Image

from mmobs.events import ExifFallback, Hashed, KeySource, MediaKeyed, MediaKind, get_observer
from mmobs.keys.media import is_media_with_bytes
from mmobs.keys.writer import IMAGE_ID_TAG
from mmobs.observability import tracing
from mmobs.vllm.decode_free_hits import clip_skip, decode_skip
from mmobs.vllm.decode_free_hits.lazy_image import LazyImage


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


def image_id_bytes(image: Image.Image) -> bytes | None:
    """vLLM's tolerant ImageID read, reporting what it swallows."""
    item = _current_item.get()
    error: BaseException | None = None
    if isinstance(image, LazyImage) and not image.decoded:
        found, error = image.next_image_id_read()
    else:
        found, error = read_image_id(image)
        if item is not None:
            decode_skip.note_image_id_read(item.obj, found, error)
    if error is not None:
        _report_fallback(image, item, error)
    if item is not None:
        item.image_id = found
    return found


def read_image_id(image: Image.Image) -> tuple[bytes | None, BaseException | None]:
    """What vLLM's tolerant ImageID read finds in ``image``: the UUID's bytes (or None), and what it swallowed."""
    try:
        return _image_id_of(image.getexif()), None
    except Exception as raised:  # noqa: BLE001 - tolerated by vLLM; the caller reports it
        return None, raised


def _image_id_of(exif: Image.Exif) -> bytes | None:
    image_id = exif.get(IMAGE_ID_TAG)
    return image_id.bytes if isinstance(image_id, uuid.UUID) else None


def _report_fallback(image: Image.Image, item: _Item | None, error: BaseException) -> None:
    if item is not None and item.kind == "media_with_bytes":
        event = ExifFallback("media_with_bytes", error, "original_bytes", image, item.obj.original_bytes)
    else:
        event = ExifFallback("image", error, "pixels", image, None)
    get_observer().exif_fallback(event)


def tolerant_image_id(original: Callable[..., Iterable[Any]], *, fix: bool) -> Callable[..., Iterable[Any]]:
    """``serialize_item`` of a vLLM that reads the ImageID bare (0.25 to 0.30): vLLM PR #56576's fix, reported.

    Those releases call ``getexif()`` on the image unguarded, so a broken EXIF block raises out of the
    hasher and the request is a 500 (fixed in vLLM 0.31, PR #56576). For the one call, the image's
    ``getexif`` is the release's read done tolerantly (:func:`_tolerant_exif`): what it swallows is
    reported as on 0.31 and later, and with ``fix`` on the release sees an empty EXIF, so it keys the
    image without an ImageID (the upstream fix's key, in the release's own format). With ``fix`` off
    the read raises as it always did, counted first. Pillow remembers a failed EXIF parse, so the
    read happens once, inside the release's own code, never before it.
    """

    @functools.wraps(original)
    def serialize_item(cls: type, obj: object) -> Iterable[Any]:
        kind = _media_kind(obj)
        if kind not in ("image", "media_with_bytes"):
            return original(cls, obj)
        image: Image.Image = obj if kind == "image" else obj.media  # type: ignore[attr-defined, assignment]
        image.getexif = functools.partial(_tolerant_exif, image, type(image).getexif, fix)  # type: ignore[method-assign]
        try:
            return original(cls, obj)  # the release reads the EXIF eagerly, before it returns
        finally:
            del image.getexif

    return serialize_item


def _tolerant_exif(image: Image.Image, getexif: Callable[[Image.Image], Image.Exif], fix: bool) -> Image.Exif:
    """``image.getexif()`` and its ImageID (the part the release reads), reported; an empty EXIF if they raise."""
    item = _current_item.get()
    try:
        exif = getexif(image)
        found = _image_id_of(exif)  # decodes the tag here, so the release's own exif[ImageID] cannot raise
    except Exception as error:
        _report_fallback(image, item, error)
        if not fix:
            raise
        return Image.Exif()
    if item is not None:
        item.image_id = found
    return exif


def serialize_item(original: Callable[..., Iterable[Any]]) -> Callable[..., Iterable[Any]]:
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
        call = _current_hash.get()
        if call is not None:
            call.key_source = source
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
    """One ``hash_kwargs`` call: the bytes fed to the digest, and the key source of its media item."""

    __slots__ = ("key_source", "nbytes")

    def __init__(self) -> None:
        self.nbytes = 0
        self.key_source: KeySource | None = None


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


def counting_factory(original: Callable[[Any], Callable[[], Any]]) -> Callable[[Any], Callable[[], Any]]:
    @functools.wraps(original)
    def get_hasher_factory(algorithm: Any) -> Callable[[], Any]:
        factory = original(algorithm)
        call = _current_hash.get()
        if call is None:  # called outside hash_kwargs: nothing to count
            return factory
        return lambda: _CountingDigest(factory(), call)

    return get_hasher_factory


def hash_kwargs(original: Callable[..., str]) -> Callable[..., str]:
    """``hash_kwargs(algorithm, /, **kwargs)``, as vLLM has it from 0.27 on."""

    @functools.wraps(original)
    def hash_kwargs(cls: type, algorithm: Any, /, **kwargs: object) -> str:
        return _timed_hash(lambda: original(cls, algorithm, **kwargs), str(algorithm), kwargs)

    return hash_kwargs


def hash_kwargs_reading_the_environment(original: Callable[..., str]) -> Callable[..., str]:
    """``hash_kwargs(**kwargs)`` of vLLM 0.25 and 0.26, whose algorithm is ``VLLM_MM_HASHER_ALGORITHM``."""

    @functools.wraps(original)
    def hash_kwargs(cls: type, **kwargs: object) -> str:
        algorithm = os.environ.get("VLLM_MM_HASHER_ALGORITHM", "blake3").lower()
        return _timed_hash(lambda: original(cls, **kwargs), algorithm, kwargs)

    return hash_kwargs


def _timed_hash(call_original: Callable[[], str], algorithm: str, kwargs: dict[str, object]) -> str:
    call = _HashCall()
    name = "mmobs.image.key" if "image" in kwargs else "mmobs.media.key"
    with tracing.span(name, {"mmobs.hash.algorithm": algorithm}) as live:  # the fallback's event goes on it
        token = _current_hash.set(call)
        started = perf_counter()
        try:
            key = call_original()
        finally:
            _current_hash.reset(token)
        if live is not None:
            live.set_attribute("mmobs.hash.bytes", call.nbytes)
            if call.key_source is not None:
                live.set_attribute("mmobs.key_source", call.key_source)
    get_observer().hashed(Hashed(algorithm, perf_counter() - started, call.nbytes))
    image = kwargs.get("image")
    if image is not None:  # an image item's mm_hash, as the processor cache knows it
        decode_skip.note_key(image, key)
    video = kwargs.get("video")
    if video is not None:
        clip_skip.note_key(video, key)
    return key
