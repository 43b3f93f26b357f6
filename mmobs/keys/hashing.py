"""vLLM-compatible multimodal cache keys, computed without a full pixel copy.

The key is the hexdigest of a framed byte stream (:mod:`mmobs.keys.framing`,
``docs/key-format.md``); keys are byte for byte those of vLLM's
``MultiModalHasher``. The golden vectors pin that down, and CI checks it
against the real vLLM.

:class:`~mmobs.keys.writer.Writer` walks a value once and *pushes* its pieces
into a digest, with no generator per nesting level; the one image known by its
bytes that a server or router keys skips even that walk
(:func:`_one_media_with_bytes`). Pixels reach the digest straight from
Pillow's memory, never as the full copy ``np.asarray(image)`` makes. Reading
the EXIF ImageID is the single tolerant spot
(:func:`~mmobs.keys.writer.read_image_id`): any exception there is swallowed,
reported to the current :class:`~mmobs.events.HashObserver`, and the key falls
back to the pixels (plain image) or the original bytes (a media-with-bytes
object).

This module imports neither prometheus_client nor structlog, and importing it
installs nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any, Protocol

from blake3 import blake3
from PIL import Image

from mmobs.events import (
    NULL_OBSERVER,
    Hashed,
    HashObserver,
    MediaKeyed,
    get_observer,
)
from mmobs.keys.framing import (
    TAG_LEAF,
    Chunk,
    ChunkSink,
    DigestSink,
    Sink,
    blake3_cut,
    encode_length,
)
from mmobs.keys.media import is_media_with_bytes
from mmobs.keys.unframed import UnframedWriter
from mmobs.keys.writer import FRAMED_IMAGE, EncodedImage, Writer, read_image_id
from mmobs.releases import KeyFormat, key_format


class _Digest(Protocol):
    def update(self, data: Any, /) -> object: ...

    def hexdigest(self) -> str: ...


_DIGESTS: dict[str, Callable[[], _Digest]] = {
    "blake3": blake3,
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
}
ALGORITHMS: tuple[str, ...] = tuple(_DIGESTS)


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
        return hash_in_format(_NEWEST_FORMAT, algorithm, kwargs)

    @staticmethod
    def iter_item_to_bytes(key: str, obj: object) -> Iterable[Chunk]:
        """The framed chunks of one item: ``FR(key)`` then the value."""
        sink = ChunkSink()
        Writer(sink, get_observer()).item(key, obj)
        return sink

    @staticmethod
    def serialize_item(obj: object) -> Iterable[Chunk]:
        """The chunks of one leaf value (everything but None, sequences, dicts)."""
        sink = ChunkSink()
        Writer(sink, get_observer()).leaf(obj)
        return sink

    @staticmethod
    def for_vllm(version: str) -> ReleaseHasher | ReleaseHasherReadingTheEnvironment:
        """The hasher of vLLM release ``version``: its key format and its ``hash_kwargs`` signature.

        ``hash_kwargs(algorithm, /, **kwargs)`` from 0.27 on; ``hash_kwargs(**kwargs)`` before, which
        reads the algorithm from ``VLLM_MM_HASHER_ALGORITHM`` as those releases do. An unknown release
        is refused (:class:`~mmobs.errors.InvalidOptionError`, naming the known ones).
        """
        fmt = key_format(version)
        hasher = ReleaseHasher if fmt.algorithm_argument else ReleaseHasherReadingTheEnvironment
        return hasher(version, fmt)


def hash_in_format(fmt: KeyFormat, algorithm: str, kwargs: dict[str, object]) -> str:
    """``hash_kwargs`` of the releases that key in ``fmt``."""
    digest = new_digest(algorithm)
    observer = get_observer()
    started = perf_counter()
    nbytes = _one_media_with_bytes(digest, observer, kwargs) if fmt.framed and len(kwargs) == 1 else None
    if nbytes is None:
        sink = DigestSink(digest)
        writer = _writer(sink, observer, fmt)
        for name in sorted(kwargs):
            writer.item(name, kwargs[name])
        sink.flush()
        nbytes = sink.nbytes
    key = digest.hexdigest()
    if observer is not NULL_OBSERVER:  # reporting off: not even the event record
        observer.hashed(Hashed(algorithm, perf_counter() - started, nbytes))
    return key


def _writer(sink: Sink, observer: HashObserver, fmt: KeyFormat) -> Writer:
    return Writer(sink, observer) if fmt.framed else UnframedWriter(sink, observer, fmt)


_NEWEST_FORMAT = key_format()


class _ReleaseHasherBase:
    """What a release's hasher has besides ``hash_kwargs``, whose signature is the release's."""

    def __init__(self, version: str, fmt: KeyFormat) -> None:
        self.vllm_version = version
        self.key_format = fmt

    def __repr__(self) -> str:
        return f"MultiModalHasher.for_vllm({self.vllm_version!r})"

    def iter_item_to_bytes(self, key: str, obj: object) -> Iterable[Chunk]:
        sink = ChunkSink()
        _writer(sink, get_observer(), self.key_format).item(key, obj)
        return sink

    def serialize_item(self, obj: object) -> Iterable[Chunk]:
        sink = ChunkSink()
        _writer(sink, get_observer(), self.key_format).leaf(obj)
        return sink


class ReleaseHasher(_ReleaseHasherBase):
    """The hasher of a release from 0.27 on: ``hash_kwargs(algorithm, /, **kwargs)``."""

    def hash_kwargs(self, algorithm: str, /, **kwargs: object) -> str:
        return hash_in_format(self.key_format, algorithm, kwargs)


class ReleaseHasherReadingTheEnvironment(_ReleaseHasherBase):
    """The hasher of 0.25 and 0.26: ``hash_kwargs(**kwargs)``, the algorithm in ``VLLM_MM_HASHER_ALGORITHM``."""

    def hash_kwargs(self, **kwargs: object) -> str:
        algorithm = os.environ.get("VLLM_MM_HASHER_ALGORITHM", "blake3").lower()
        return hash_in_format(self.key_format, algorithm, kwargs)


def feed_item(digest: _Digest, key: str, obj: object) -> None:
    """Feed one item's framed bytes to ``digest``, reporting nothing.

    The drift tracker uses it to compute what an item's key *would* be, with
    the same writer the keys themselves come from.
    """
    sink = DigestSink(digest)
    Writer(sink, _SILENT).item(key, obj)
    sink.flush()


_SILENT = HashObserver()


def _one_media_with_bytes(digest: _Digest, observer: HashObserver, kwargs: dict[str, object]) -> int | None:
    """``hash_kwargs`` of one image known by its bytes (what a server or router keys), without the writer.

    One loaded image with its bytes, or one :class:`EncodedImage` (the
    no-decode keys), either without ``io_config``: the same stream, the same
    reports in the same order as :class:`Writer` (ImageID read,
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
        image_id = read_image_id(observer, image, "media_with_bytes", "original_bytes", original)
    else:
        return None
    encoded = name.encode("utf-8")
    head = encode_length(len(encoded)) + encoded + TAG_LEAF
    if image_id is not None:
        item, data, source = encode_length(len(image_id)) + image_id, b"", "image_id"
    else:
        item, data, source = FRAMED_IMAGE + TAG_LEAF + encode_length(len(original)), original, "original_bytes"
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
