"""vLLM-compatible multimodal cache keys, computed without a full pixel copy.

The key is the hexdigest of a *framed* byte stream (see ``design.md``): every
variable-length field is preceded by its length as 8 bytes little-endian, and
every value by a one-byte type tag, so no two different inputs share a stream.
Keys are byte-for-byte those of vLLM's ``MultiModalHasher``; the golden
vectors in ``shared/golden`` pin that down.

Two things differ from a straightforward implementation:

* Pixels reach the digest straight from Pillow's memory or chunk by chunk
  from its raw encoder (:mod:`mmobs.pixels`), never as the full copy that
  ``np.asarray(image)`` makes, yet as exactly the bytes it would hold.
* Reading the EXIF ImageID is the single tolerant spot: any exception there is
  swallowed, reported to the current :class:`~mmobs.events.HashObserver`, and
  the key falls back to the pixels (plain image) or the original bytes
  (:class:`~mmobs.media.MediaWithBytes`).

This module deliberately imports neither prometheus_client nor structlog.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import struct
import sys
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from time import perf_counter
from typing import Any, Protocol

import numpy as np
from blake3 import blake3
from PIL import Image, ImageMode

from .events import (
    ExifFallback,
    KeySource,
    MediaKeyed,
    MediaKind,
    get_observer,
)
from .media import MediaWithBytes
from .pixels import pixel_chunks

__all__ = ["ALGORITHMS", "MultiModalHasher", "UnsupportedTypeWarning"]

Chunk = bytes | memoryview

#: EXIF tag 0x800D. vLLM lets a caller pin an image's key by setting it to a UUID.
IMAGE_ID_TAG = 0x800D

_TAG_NONE = b"\x00"
_TAG_SEQUENCE = b"\x01"
_TAG_MAPPING = b"\x02"
_TAG_LEAF = b"\x03"
_pack_len = struct.Struct("<Q").pack


class _Digest(Protocol):
    def update(self, data: Any, /) -> object: ...

    def hexdigest(self) -> str: ...


_DIGESTS: dict[str, Callable[[], _Digest]] = {
    "blake3": blake3,
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
}
ALGORITHMS: tuple[str, ...] = tuple(_DIGESTS)


class UnsupportedTypeWarning(UserWarning):
    """A value had no dedicated serialization and was keyed through pickle."""


def new_digest(algorithm: str) -> _Digest:
    """A fresh digest object for ``algorithm``; ``ValueError`` names the choices."""
    try:
        factory = _DIGESTS[algorithm]
    except (KeyError, TypeError):
        choices = ", ".join(ALGORITHMS)
        raise ValueError(f"unknown hash algorithm {algorithm!r}; choose one of: {choices}") from None
    return factory()


def _framed(data: Chunk) -> Iterator[Chunk]:
    """``FR(b)``: the length, then the bytes."""
    yield _pack_len(len(data))
    yield data


def _as_byte_view(view: memoryview) -> Chunk:
    """A 1-D unsigned-byte view (so ``len`` is the byte count) or a C-order copy."""
    if view.c_contiguous:
        return view.cast("B") if view.format != "B" or view.ndim != 1 else view
    return view.tobytes()


def _pixel_layout(image: Image.Image) -> tuple[str, tuple[int, ...], str]:
    """(dtype string, shape, raw mode) of ``np.asarray(image)``, without building it."""
    mode_info = ImageMode.getmode(image.mode)
    shape: tuple[int, ...] = (image.height, image.width)
    if len(mode_info.bands) != 1:
        shape += (len(mode_info.bands),)
    # Pillow exposes mode "1" to NumPy as one byte per pixel (0 or 255).
    rawmode = "L" if image.mode == "1" else image.mode
    return np.dtype(mode_info.typestr).str, shape, rawmode


class MultiModalHasher:
    """Cache keys for multimodal inputs, identical to vLLM's framed hasher."""

    @classmethod
    def hash_kwargs(cls, algorithm: str, /, **kwargs: object) -> str:
        """Key the keyword arguments (sorted by name) with ``algorithm``.

        ``algorithm`` is one of ``blake3``, ``sha256``, ``sha512``.
        """
        digest = new_digest(algorithm)
        started = perf_counter()
        fed = 0
        update = digest.update
        for name in sorted(kwargs):
            for chunk in cls.iter_item_to_bytes(name, kwargs[name]):
                update(chunk)
                fed += len(chunk)
        key = digest.hexdigest()
        get_observer().hashed(algorithm, perf_counter() - started, fed)
        return key

    @classmethod
    def iter_item_to_bytes(cls, key: str, obj: object) -> Iterator[Chunk]:
        """The framed chunks of one item: ``FR(key)`` then the value."""
        yield from _framed(key.encode("utf-8"))
        yield from cls._iter_value(obj)

    @classmethod
    def _iter_value(cls, obj: object) -> Iterator[Chunk]:
        if obj is None:
            yield _TAG_NONE
        elif isinstance(obj, (list, tuple)):
            yield _TAG_SEQUENCE
            yield _pack_len(len(obj))
            for element in obj:
                yield from cls._iter_value(element)
        elif isinstance(obj, dict):
            yield _TAG_MAPPING
            yield _pack_len(len(obj))
            for name, element in obj.items():
                yield from _framed(str(name).encode("utf-8"))
                yield from cls._iter_value(element)
        else:
            yield _TAG_LEAF
            yield from cls.serialize_item(obj)

    @classmethod
    def serialize_item(cls, obj: object) -> Iterator[Chunk]:
        """The chunks of one leaf value (everything but None, sequences, dicts)."""
        if isinstance(obj, bytes):
            yield from _framed(obj)
        elif isinstance(obj, memoryview):
            yield from _framed(_as_byte_view(obj))
        elif isinstance(obj, str):
            yield from _framed(obj.encode("utf-8"))
        elif isinstance(obj, (int, float)):
            scalar = np.array(obj)
            if scalar.dtype == object:  # an int beyond 64 bits: no fixed-width form
                yield from cls._pickled(obj)
            else:
                yield from _framed(scalar.tobytes())
        elif isinstance(obj, (Image.Image, MediaWithBytes)):
            yield from cls._media_item(obj)
        elif isinstance(obj, np.ndarray) and obj.dtype != object:
            yield from cls._ndarray_item(obj)
        elif _is_torch_tensor(obj):
            yield from cls._tensor_item(obj)
        else:
            yield from cls._pickled(obj)

    @staticmethod
    def _pickled(obj: object) -> Iterator[Chunk]:
        warnings.warn(
            f"mmobs has no serialization for {type(obj).__qualname__}; keying it through "
            "pickle, which is slow and may differ between Python versions",
            UnsupportedTypeWarning,
            stacklevel=4,
        )
        yield from _framed(pickle.dumps(obj))

    # -- arrays ---------------------------------------------------------------

    @classmethod
    def _ndarray_item(cls, array: np.ndarray) -> Iterator[Chunk]:
        data: object
        if array.ndim == 0:
            data = array.item()
        else:
            contiguous = array if array.flags.c_contiguous else np.ascontiguousarray(array)
            data = memoryview(contiguous.reshape(-1).view(np.uint8))
        yield from cls.iter_item_to_bytes(
            "ndarray", {"dtype": array.dtype.str, "shape": array.shape, "data": data}
        )

    @classmethod
    def _tensor_item(cls, tensor: Any) -> Iterator[Chunk]:
        torch = sys.modules["torch"]
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            # NumPy has no bfloat16: key the raw bytes plus the original dtype/shape.
            raw = tensor.contiguous().view(tensor.numel()).view(torch.uint8).numpy()
            yield from cls.iter_item_to_bytes(
                "tensor",
                {
                    "original_dtype": str(tensor.dtype),
                    "original_shape": tuple(tensor.shape),
                    "data": raw,
                },
            )
        else:
            yield from cls.iter_item_to_bytes("tensor", tensor.numpy())

    # -- images and media -----------------------------------------------------

    @classmethod
    def _media_item(cls, obj: Image.Image | MediaWithBytes) -> Iterator[Chunk]:
        kind, key_source, chunks = cls._plan_media(obj)
        observer = get_observer()
        item_digest = None
        if observer.wants_item_digest(kind, obj):
            tee = blake3()
            for chunk in chunks:
                tee.update(chunk)
                yield chunk
            item_digest = tee.hexdigest()
        else:
            yield from chunks
        observer.media_keyed(MediaKeyed(kind, key_source, obj, item_digest))

    @classmethod
    def _plan_media(
        cls, obj: Image.Image | MediaWithBytes
    ) -> tuple[MediaKind, KeySource, Iterable[Chunk]]:
        """Decide where the key comes from (reading the ImageID now), then its chunks."""
        if isinstance(obj, Image.Image):
            image_id = _read_image_id(obj, "image", "pixels", None)
            if image_id is not None:
                return "image", "image_id", _framed(image_id)
            return "image", "pixels", cls._pixels_item(obj)

        media, original = obj.media, obj.original_bytes
        if isinstance(media, Image.Image):
            image_id = _read_image_id(media, "media_with_bytes", "original_bytes", original)
            if image_id is not None:
                return "media_with_bytes", "image_id", _framed(image_id)
            value: object = original
            if obj.io_config:
                value = {"io_config": obj.io_config, "data": original}
            return "media_with_bytes", "original_bytes", cls.iter_item_to_bytes("image", value)
        if isinstance(media, np.ndarray):
            if media.nbytes < len(original):
                return "video", "frames", cls.iter_item_to_bytes("video", media)
            return "video", "original_bytes", cls.iter_item_to_bytes("video", original)
        raise TypeError(
            f"MediaWithBytes holding {type(media).__qualname__} has no cache-key format; "
            "expected a PIL image or an ndarray of video frames"
        )

    @classmethod
    def _pixels_item(cls, image: Image.Image) -> Iterator[Chunk]:
        """The item ``image`` of ``{mode, data[, palette, palette_rawmode]}``, streamed.

        Emits the same bytes as ``iter_item_to_bytes("image", {..., "data":
        np.asarray(image)})`` would, but packs the pixels chunk by chunk.
        """
        # vLLM evaluates {"mode": image.mode, "data": np.asarray(image)} and only
        # then reads the palette: the mode is read before, the palette after, the
        # load that np.asarray triggers (some plugins change them when loading).
        mode = image.mode
        image.load()
        dtype, shape, rawmode = _pixel_layout(image)
        nbytes = np.dtype(dtype).itemsize * math.prod(shape)
        fields = 2
        palette = image.palette
        palette_bytes = palette_rawmode = None
        if palette is not None:
            palette_bytes = palette.palette
            palette_rawmode = palette.rawmode
            fields += (palette_bytes is not None) + (palette_rawmode is not None)

        # The ~200 bytes of framing go out as one chunk: some 35 tiny chunks through
        # nested generators and as many digest updates cost more than the bytes.
        # {"dtype", "shape", "data"} is written out so that "data" can be a stream.
        yield b"".join(
            [
                *_framed(b"image"), _TAG_MAPPING, _pack_len(fields),
                *cls.iter_item_to_bytes("mode", mode),
                *_framed(b"data"), _TAG_LEAF, *_framed(b"ndarray"), _TAG_MAPPING, _pack_len(3),
                *cls.iter_item_to_bytes("dtype", dtype),
                *cls.iter_item_to_bytes("shape", shape),
                *_framed(b"data"), _TAG_LEAF, _pack_len(nbytes),
            ]
        )  # fmt: skip
        yield from pixel_chunks(image, rawmode, nbytes)
        trailer: list[Chunk] = []
        if palette_bytes is not None:
            trailer += cls.iter_item_to_bytes("palette", palette_bytes)
        if palette_rawmode is not None:
            trailer += cls.iter_item_to_bytes("palette_rawmode", palette_rawmode)
        if trailer:
            yield b"".join(trailer)


def _read_image_id(
    image: Image.Image,
    kind: MediaKind,
    fallback: KeySource,
    original_bytes: bytes | None,
) -> bytes | None:
    """The ImageID UUID's bytes, or None. The one place any exception is tolerated.

    A malformed EXIF block makes Pillow raise (``SyntaxError`` for a bad TIFF
    header, ``struct.error`` for a short IFD, and others) from ``getexif()``
    or from reading a tag. Such an image still has pixels and bytes to key by,
    so the exception is swallowed here and reported, never re-raised.
    """
    try:
        image_id = image.getexif().get(IMAGE_ID_TAG)
    except Exception as error:  # noqa: BLE001 - tolerated by design, and reported
        get_observer().exif_fallback(
            ExifFallback(kind, error, fallback, image, original_bytes)
        )
        return None
    return image_id.bytes if isinstance(image_id, uuid.UUID) else None


def _is_torch_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)
