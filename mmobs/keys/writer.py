"""The framed byte stream of a value, pushed into a sink in one walk.

:class:`Writer` is what every key is made of (:mod:`mmobs.keys.hashing` feeds
it a digest, the drift tracker a digest of one item, ``iter_item_to_bytes`` a
list): it walks a value once, with no generator per nesting level, and pushes
the framing (:mod:`mmobs.keys.framing`) and the leaves' bytes into the sink.
Pixels go in straight from Pillow's memory or its raw encoder
(:mod:`mmobs.keys.pixels`), never as the copy ``np.asarray(image)`` makes, yet
as exactly its bytes; what precedes them is written once per pixel layout
(:func:`_pixel_frame`). :func:`read_image_id` is the one place an exception is
tolerated: a malformed EXIF block falls back to the pixels or the original
bytes, and is reported.
"""

from __future__ import annotations

import math
import pickle
import sys
import uuid
import warnings
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image, ImageMode

from mmobs.events import NULL_OBSERVER, ExifFallback, HashObserver, KeySource, MediaKeyed, MediaKind
from mmobs.keys.framing import TAG_LEAF, TAG_MAPPING, TAG_NONE, TAG_SEQUENCE, Chunk, Sink, encode_length
from mmobs.keys.media import is_media_with_bytes
from mmobs.keys.pixels import pixel_chunks

#: EXIF tag 0x800D. vLLM lets a caller pin an image's key by setting it to a ``uuid.UUID``.
IMAGE_ID_TAG = 0x800D


class UnsupportedTypeWarning(UserWarning):
    """A value had no dedicated serialization and was keyed through pickle."""


#: ``FR("image")``: what precedes the original bytes of an image keyed by them.
FRAMED_IMAGE = encode_length(5) + b"image"
_FRAMED_VIDEO = encode_length(5) + b"video"


class Writer:
    """Walks a value and pushes the framed stream into a sink (see the module docstring)."""

    __slots__ = ("observer", "sink")

    def __init__(self, sink: Sink, observer: HashObserver) -> None:
        self.sink = sink
        self.observer = observer

    def item(self, key: str, obj: object) -> None:
        """``FR(key)`` then the value."""
        encoded = key.encode("utf-8")
        self.sink.small(encode_length(len(encoded)) + encoded)
        self.value(obj)

    def value(self, obj: object) -> None:
        sink = self.sink
        if obj is None:
            sink.small(TAG_NONE)
        elif isinstance(obj, (list, tuple)):
            sink.small(TAG_SEQUENCE + encode_length(len(obj)))
            for element in obj:
                self.value(element)
        elif isinstance(obj, dict):
            sink.small(TAG_MAPPING + encode_length(len(obj)))
            for name, element in obj.items():
                self.item(str(name), element)
        else:
            sink.small(TAG_LEAF)
            self.leaf(obj)

    def leaf(self, obj: object) -> None:
        """One leaf, in vLLM's order of type checks."""
        if isinstance(obj, bytes):
            self.raw(obj)
        elif isinstance(obj, memoryview):
            self.raw(_as_byte_view(obj))
        elif isinstance(obj, str):
            self.raw(obj.encode("utf-8"))
        elif isinstance(obj, (int, float)):
            scalar = np.array(obj)
            if scalar.dtype == object:  # an int beyond 64 bits: vLLM would key pointer bytes
                self.pickled(obj)
            else:
                self.raw(scalar.tobytes())
        elif isinstance(obj, Image.Image):
            self.plain_image(obj)
        elif is_media_with_bytes(obj):
            self.media_with_bytes(obj)
        elif is_torch_tensor(obj):
            self.tensor(obj)
        elif isinstance(obj, np.ndarray):
            self.ndarray(obj)
        elif isinstance(obj, _SelfWriting):
            obj.write(self)
        else:
            self.pickled(obj)

    def raw(self, data: Chunk) -> None:
        """``FR(data)`` for 1-D bytes."""
        self.sink.small(encode_length(len(data)))
        self.sink.large(data)

    def pickled(self, obj: object) -> None:
        warnings.warn(
            f"mmobs has no serialization for {type(obj).__qualname__}; keying it through "
            "pickle, which is slow and may differ between Python versions",
            UnsupportedTypeWarning,
            stacklevel=2,
        )
        self.raw(pickle.dumps(obj))

    # -- arrays ---------------------------------------------------------------

    def ndarray(self, array: np.ndarray[Any, Any]) -> None:
        data: object
        if array.ndim == 0:
            data = array.item()  # any dtype, objects included: the item is keyed as a value
        elif array.dtype == object:
            # vLLM would key the pointers in the array (a different key every run).
            self.pickled(array)
            return
        else:
            contiguous = array if array.flags.c_contiguous else np.ascontiguousarray(array)
            data = contiguous.reshape(-1).view(np.uint8).data
        self.array_item(array.dtype.str, array.shape, data)

    def array_item(self, dtype: str, shape: tuple[int, ...], data: object) -> None:
        """The ``ndarray`` item: ``{"dtype", "shape", "data"}``."""
        self.item("ndarray", {"dtype": dtype, "shape": shape, "data": data})

    def tensor(self, tensor: Any) -> None:
        torch = sys.modules["torch"]
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            # NumPy has no bfloat16: key the raw bytes plus the original dtype and shape.
            raw = tensor.contiguous().view(tensor.numel()).view(torch.uint8).numpy()
            fields = {"original_dtype": str(tensor.dtype), "original_shape": tuple(tensor.shape), "data": raw}
            self.item("tensor", fields)
        else:
            self.item("tensor", tensor.numpy())

    # -- images and media -----------------------------------------------------

    def plain_image(self, image: Image.Image) -> None:
        image_id = self._image_id(image, "image", "pixels", None)
        self._keyed(image, "image", "image_id" if image_id is not None else "pixels", image_id)

    def media_with_bytes(self, media: Any) -> None:
        inner = media.media
        if isinstance(inner, Image.Image):
            image_id = self._image_id(inner, "media_with_bytes", "original_bytes", media.original_bytes)
            source: KeySource = "image_id" if image_id is not None else "original_bytes"
            self._keyed(media, "media_with_bytes", source, image_id)
        elif isinstance(inner, np.ndarray) or is_torch_tensor(inner):
            # Decoded video frames: whichever of frames and file is smaller.
            source = "frames" if inner.nbytes < len(media.original_bytes) else "original_bytes"
            self._keyed(media, "video", source, None)
        else:
            self.pickled(media)

    def _keyed(self, obj: Any, kind: MediaKind, source: KeySource, image_id: bytes | None) -> None:
        """Write a media item's value and report where its key came from."""
        sink, observer = self.sink, self.observer
        tee = sink.can_tee and observer.wants_item_digest(kind, obj)
        if tee:
            sink.start_tee()
        self.keyed_value(obj, kind, source, image_id)
        item_digest = sink.end_tee() if tee else None
        observer.media_keyed(MediaKeyed(kind, source, obj, item_digest))

    def keyed_value(self, obj: Any, kind: MediaKind, source: KeySource, image_id: bytes | None) -> None:
        """A media item's value, keyed from ``source`` (the part of the stream a key format changes)."""
        if image_id is not None:
            self.raw(image_id)
        elif source == "pixels":
            self.pixels(obj)
        elif kind == "video":
            self.sink.small(_FRAMED_VIDEO)
            self.value(obj.media if source == "frames" else obj.original_bytes)
        else:
            self.sink.small(FRAMED_IMAGE)
            original = obj.original_bytes
            self.value({"io_config": obj.io_config, "data": original} if obj.io_config else original)

    def pixels(self, image: Image.Image) -> None:
        """The item ``image`` of ``{mode, data[, palette, palette_rawmode]}``, ``data`` streamed.

        vLLM evaluates ``{"mode": image.mode, "data": np.asarray(image)}`` and
        only then reads the palette: the mode is read before, the palette after,
        the load that ``np.asarray`` triggers (some plugins change it on load).
        """
        mode = image.mode
        image.load()
        dtype, shape, rawmode = pixel_layout(image)
        palette = image.palette
        after: list[tuple[str, object]] = []
        if palette is not None:
            after.append(("palette", palette.palette))
            if palette.rawmode is not None:
                after.append(("palette_rawmode", palette.rawmode))
        # Everything up to the pixel bytes depends on the layout alone: written once per layout.
        frame, nbytes = _pixel_frame(mode, dtype, shape, 2 + len(after))
        self.sink.small(frame)
        self.sink.stream(pixel_chunks(image, rawmode, nbytes))
        for name, value in after:
            self.item(name, value)

    def _image_id(
        self, image: Image.Image, kind: MediaKind, fallback: KeySource, original: bytes | None
    ) -> bytes | None:
        return read_image_id(self.observer, image, kind, fallback, original)


def read_image_id(
    observer: HashObserver, image: Image.Image, kind: MediaKind, fallback: KeySource, original: bytes | None
) -> bytes | None:
    """The ImageID UUID's bytes, or None. The one place any exception is tolerated.

    A malformed EXIF block makes Pillow raise (``SyntaxError`` for a bad
    TIFF header, ``struct.error`` for a short IFD, and others) from
    ``getexif()`` or from reading a tag. Such an image still has pixels and
    bytes to key by, so the exception is swallowed here and reported.
    """
    try:
        exif = image.getexif()
        # ``exif.get`` reads the tag the same way; asking first spares the KeyError of the usual absence.
        image_id = exif[IMAGE_ID_TAG] if IMAGE_ID_TAG in exif else None  # noqa: SIM401
    except Exception as error:  # noqa: BLE001 - tolerated by design, and reported
        observer.exif_fallback(ExifFallback(kind, error, fallback, image, original))
        return None
    return image_id.bytes if isinstance(image_id, uuid.UUID) else None


class _SelfWriting:
    """A leaf only mmobs creates, which knows how to write itself."""

    __slots__ = ()

    def write(self, writer: Writer) -> None:
        raise NotImplementedError


class EncodedImage(_SelfWriting):
    """An image known by its encoded bytes: keyed as the media-with-bytes vLLM's loader makes of them.

    That key is ``FR("image")`` and the original bytes, or ``{"io_config",
    "data"}`` when the loader converted the image; the pixels play no part.
    The one other branch, an EXIF ImageID that is a ``uuid.UUID``, cannot
    fire for bytes (Pillow parses a tag into numbers, text or bytes, never a
    UUID), so the EXIF is not read at all: no exception can be swallowed and
    no fallback can run. Which ``io_config`` applies is for the caller to
    know (:mod:`mmobs.keys.from_bytes` reads it from the header).
    """

    __slots__ = ("io_config", "original_bytes")

    def __init__(self, original_bytes: bytes, io_config: dict[str, Any] | None = None) -> None:
        self.original_bytes = original_bytes
        self.io_config = io_config

    def write(self, writer: Writer) -> None:
        writer._keyed(self, "media_with_bytes", "original_bytes", None)


class _FrameEnd(Exception):
    """Raised by :class:`_FrameSink` where the stream of pixel bytes would begin."""


class _FrameSink:
    """Records what the writer puts before the first stream, then stops it there."""

    can_tee = False

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def small(self, piece: bytes) -> None:
        self.pieces.append(piece)

    def large(self, data: Chunk) -> None:
        self.pieces.append(bytes(data))

    def stream(self, chunks: Iterable[Chunk]) -> None:
        raise _FrameEnd

    def start_tee(self) -> None:  # pragma: no cover - can_tee is False
        raise NotImplementedError

    def end_tee(self) -> str | None:  # pragma: no cover - can_tee is False
        raise NotImplementedError


@lru_cache(maxsize=1024)
def _pixel_frame(mode: str, dtype: str, shape: tuple[int, ...], n_fields: int) -> tuple[bytes, int]:
    """The item ``image`` up to its pixel bytes, and their count: ``FR("image")``, the mapping, mode, ndarray head.

    The writer's own walk of ``{"mode", "data": {"dtype", "shape", "data"}, ...}``
    (``n_fields`` entries; those after ``data``, the palette's, are written by
    the caller), run once per layout: a key then pays for its pixels and not
    for ten nested calls and a NumPy scalar per dimension (about 30 us).
    """
    nbytes = np.dtype(dtype).itemsize * math.prod(shape)
    placeholders = {f"after {i}": None for i in range(n_fields - 2)}  # never reached: the frame ends at the data
    fields = {"mode": mode, "data": _PixelArray(dtype, shape, nbytes), **placeholders}
    sink = _FrameSink()
    try:
        Writer(sink, NULL_OBSERVER).item("image", fields)
    except _FrameEnd:
        pass
    return b"".join(sink.pieces), nbytes


class _PixelArray(_SelfWriting):
    """The ndarray leaf ``np.asarray(image)`` would be, for :func:`_pixel_frame`: its head, then a stream."""

    __slots__ = ("dtype", "nbytes", "shape")

    def __init__(self, dtype: str, shape: tuple[int, ...], nbytes: int) -> None:
        self.dtype, self.shape, self.nbytes = dtype, shape, nbytes

    def write(self, writer: Writer) -> None:
        writer.array_item(self.dtype, self.shape, _Stream(self.nbytes, ()))


class _Stream(_SelfWriting):
    """A leaf of ``nbytes`` bytes produced lazily: ``FR`` of the concatenated chunks."""

    __slots__ = ("chunks", "nbytes")

    def __init__(self, nbytes: int, chunks: Iterable[Chunk]) -> None:
        self.nbytes = nbytes
        self.chunks = chunks

    def write(self, writer: Writer) -> None:
        writer.sink.small(encode_length(self.nbytes))
        writer.sink.stream(self.chunks)


def pixel_layout(image: Image.Image) -> tuple[str, tuple[int, ...], str]:
    """(dtype string, shape, raw mode) of ``np.asarray(image)``, without building it."""
    dtype, bands = _mode_layout(image.mode)
    shape: tuple[int, ...] = (image.height, image.width)
    if bands != 1:
        shape += (bands,)
    # Pillow exposes mode "1" to NumPy as one byte per pixel (0 or 255).
    rawmode = "L" if image.mode == "1" else image.mode
    return dtype, shape, rawmode


@lru_cache(maxsize=64)
def _mode_layout(mode: str) -> tuple[str, int]:
    """A mode's NumPy dtype string and band count (Pillow's modes are a closed set)."""
    mode_info = ImageMode.getmode(mode)
    return np.dtype(mode_info.typestr).str, len(mode_info.bands)


def _as_byte_view(view: memoryview) -> Chunk:
    """A 1-D unsigned-byte view (so ``len`` is the byte count), or a C-order copy."""
    if view.nbytes == 0:
        return b""  # a view with a zero in its shape cannot be cast
    if view.c_contiguous:
        return view.cast("B") if view.format != "B" or view.ndim != 1 else view
    return view.tobytes()


def is_torch_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)
