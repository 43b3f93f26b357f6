"""vLLM-compatible multimodal cache keys, computed without a full pixel copy.

The key is the hexdigest of a framed byte stream (:mod:`mmobs.keys.framing`,
``docs/key-format.md``); keys are byte for byte those of vLLM's
``MultiModalHasher``. The golden vectors pin that down, and CI checks it
against the real vLLM.

The writer below walks a value once and *pushes* its pieces into a sink, with
no generator per nesting level: the overhead over the digest itself is a few
microseconds whatever the value. Two things differ from a straightforward
implementation:

* Pixels reach the digest straight from Pillow's memory or chunk by chunk
  from its raw encoder (:mod:`mmobs.keys.pixels`), never as the full copy that
  ``np.asarray(image)`` makes, yet as exactly the bytes it would hold.
* Reading the EXIF ImageID is the single tolerant spot: any exception there is
  swallowed, reported to the current :class:`~mmobs.events.HashObserver`, and
  the key falls back to the pixels (plain image) or the original bytes
  (a media-with-bytes object).

This module imports neither prometheus_client nor structlog, and importing it
installs nothing.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import sys
import uuid
import warnings
from collections.abc import Callable, Iterable
from functools import lru_cache
from time import perf_counter
from typing import Any, Protocol

import numpy as np
from blake3 import blake3
from PIL import Image, ImageMode

from mmobs.events import (
    NULL_OBSERVER,
    ExifFallback,
    Hashed,
    HashObserver,
    KeySource,
    MediaKeyed,
    MediaKind,
    get_observer,
)
from mmobs.keys.framing import (
    TAG_LEAF,
    TAG_MAPPING,
    TAG_NONE,
    TAG_SEQUENCE,
    Chunk,
    ChunkSink,
    DigestSink,
    Sink,
    blake3_cut,
    encode_length,
)
from mmobs.keys.media import is_media_with_bytes
from mmobs.keys.pixels import pixel_chunks

__all__ = [
    "ALGORITHMS",
    "IMAGE_ID_TAG",
    "EncodedImage",
    "MultiModalHasher",
    "UnsupportedTypeWarning",
    "feed_item",
    "new_digest",
]

#: EXIF tag 0x800D. vLLM lets a caller pin an image's key by setting it to a ``uuid.UUID``.
IMAGE_ID_TAG = 0x800D


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


class MultiModalHasher:
    """Cache keys for multimodal inputs, identical to vLLM's framed hasher."""

    @staticmethod
    def hash_kwargs(algorithm: str, /, **kwargs: object) -> str:
        """Key the keyword arguments (sorted by name) with ``algorithm``.

        ``algorithm`` is one of ``blake3``, ``sha256``, ``sha512``.
        """
        digest = new_digest(algorithm)
        observer = get_observer()
        started = perf_counter()
        nbytes = _one_media_with_bytes(digest, observer, kwargs) if len(kwargs) == 1 else None
        if nbytes is None:
            sink = DigestSink(digest)
            writer = _Writer(sink, observer)
            for name in sorted(kwargs):
                writer.item(name, kwargs[name])
            sink.flush()
            nbytes = sink.nbytes
        key = digest.hexdigest()
        observer.hashed(Hashed(algorithm, perf_counter() - started, nbytes))
        return key

    @staticmethod
    def iter_item_to_bytes(key: str, obj: object) -> Iterable[Chunk]:
        """The framed chunks of one item: ``FR(key)`` then the value."""
        sink = ChunkSink()
        _Writer(sink, get_observer()).item(key, obj)
        return sink

    @staticmethod
    def serialize_item(obj: object) -> Iterable[Chunk]:
        """The chunks of one leaf value (everything but None, sequences, dicts)."""
        sink = ChunkSink()
        _Writer(sink, get_observer()).leaf(obj)
        return sink


def feed_item(digest: _Digest, key: str, obj: object) -> None:
    """Feed one item's framed bytes to ``digest``, reporting nothing.

    The drift tracker uses it to compute what an item's key *would* be, with
    the same writer the keys themselves come from.
    """
    sink = DigestSink(digest)
    _Writer(sink, _SILENT).item(key, obj)
    sink.flush()


_SILENT = HashObserver()
_FRAMED_IMAGE = encode_length(5) + b"image"
_FRAMED_VIDEO = encode_length(5) + b"video"


class _Writer:
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
        elif _is_torch_tensor(obj):
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

    def ndarray(self, array: np.ndarray) -> None:
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
        elif isinstance(inner, np.ndarray) or _is_torch_tensor(inner):
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
        if image_id is not None:
            self.raw(image_id)
        elif source == "pixels":
            self._pixels(obj)
        elif kind == "video":
            sink.small(_FRAMED_VIDEO)
            self.value(obj.media if source == "frames" else obj.original_bytes)
        else:
            sink.small(_FRAMED_IMAGE)
            original = obj.original_bytes
            self.value({"io_config": obj.io_config, "data": original} if obj.io_config else original)
        item_digest = sink.end_tee() if tee else None
        observer.media_keyed(MediaKeyed(kind, source, obj, item_digest))

    def _pixels(self, image: Image.Image) -> None:
        """The item ``image`` of ``{mode, data[, palette, palette_rawmode]}``, ``data`` streamed.

        vLLM evaluates ``{"mode": image.mode, "data": np.asarray(image)}`` and
        only then reads the palette: the mode is read before, the palette after,
        the load that ``np.asarray`` triggers (some plugins change it on load).
        """
        mode = image.mode
        image.load()
        dtype, shape, rawmode = _pixel_layout(image)
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
        return _read_image_id(self.observer, image, kind, fallback, original)


def _read_image_id(
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


def _one_media_with_bytes(digest: _Digest, observer: HashObserver, kwargs: dict[str, object]) -> int | None:
    """``hash_kwargs`` of one image known by its bytes (what a server or router keys), without the writer.

    One loaded image with its bytes, or one :class:`EncodedImage` (the
    no-decode keys), either without ``io_config``: the same stream, the same
    reports in the same order as :class:`_Writer` (ImageID read,
    ``wants_item_digest``, ``media_keyed``), fed as
    :class:`~mmobs.keys.framing.DigestSink` feeds it (the framing joined with
    the first bytes up to blake3's grid, then the rest). The writer's walk (a
    call per nesting level, a type check per branch) cost a few microseconds a
    key. Returns the bytes fed, or ``None`` when the value is anything else
    (then the writer keys it).
    """
    ((name, media),) = kwargs.items()
    if type(media) is EncodedImage:  # the no-decode keys: no EXIF to read (see EncodedImage)
        original, image_id = media.original_bytes, None
        if media.io_config or type(original) is not bytes:
            return None
    elif is_media_with_bytes(media):
        image, original = media.media, media.original_bytes  # type: ignore[attr-defined]
        if not isinstance(image, Image.Image) or media.io_config or type(original) is not bytes:  # type: ignore[attr-defined]
            return None
        image_id = _read_image_id(observer, image, "media_with_bytes", "original_bytes", original)
    else:
        return None
    encoded = name.encode("utf-8")
    head = encode_length(len(encoded)) + encoded + TAG_LEAF
    if image_id is not None:
        item, data, source = encode_length(len(image_id)) + image_id, b"", "image_id"
    else:
        item, data, source = _FRAMED_IMAGE + TAG_LEAF + encode_length(len(original)), original, "original_bytes"
    item_digest = None
    if observer.wants_item_digest("media_with_bytes", media):  # the drift tracker samples this content
        tee_cut = blake3_cut(len(item), len(data))
        tee = blake3(b"".join((item, memoryview(data)[:tee_cut])))
        tee.update(memoryview(data)[tee_cut:])
        item_digest = tee.hexdigest()
    head += item
    cut = blake3_cut(len(head), len(data)) if isinstance(digest, blake3) else 0
    if cut:  # the framing and the first bytes, then the rest on blake3's grid (framing.DigestSink does the same)
        view = memoryview(data)
        digest.update(b"".join((head, view[:cut])))
        digest.update(view[cut:])
    elif len(data) < 16 * 1024:  # short: one update of a joined copy costs less than two
        digest.update(head + data)
    else:
        digest.update(head)
        digest.update(data)
    if observer is not NULL_OBSERVER:  # reporting off: not even the event record
        observer.media_keyed(MediaKeyed("media_with_bytes", source, media, item_digest))  # type: ignore[arg-type]
    return len(head) + len(data)


class _SelfWriting:
    """A leaf only mmobs creates, which knows how to write itself."""

    __slots__ = ()

    def write(self, writer: _Writer) -> None:
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

    def write(self, writer: _Writer) -> None:
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
        _Writer(sink, NULL_OBSERVER).item("image", fields)
    except _FrameEnd:
        pass
    return b"".join(sink.pieces), nbytes


class _PixelArray(_SelfWriting):
    """The ndarray leaf ``np.asarray(image)`` would be, for :func:`_pixel_frame`: its head, then a stream."""

    __slots__ = ("dtype", "nbytes", "shape")

    def __init__(self, dtype: str, shape: tuple[int, ...], nbytes: int) -> None:
        self.dtype, self.shape, self.nbytes = dtype, shape, nbytes

    def write(self, writer: _Writer) -> None:
        writer.array_item(self.dtype, self.shape, _Stream(self.nbytes, ()))


class _Stream(_SelfWriting):
    """A leaf of ``nbytes`` bytes produced lazily: ``FR`` of the concatenated chunks."""

    __slots__ = ("chunks", "nbytes")

    def __init__(self, nbytes: int, chunks: Iterable[Chunk]) -> None:
        self.nbytes = nbytes
        self.chunks = chunks

    def write(self, writer: _Writer) -> None:
        writer.sink.small(encode_length(self.nbytes))
        writer.sink.stream(self.chunks)


def _pixel_layout(image: Image.Image) -> tuple[str, tuple[int, ...], str]:
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


def _is_torch_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)
