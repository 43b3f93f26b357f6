"""Decode-free processor-cache hits: bytes this API server decoded before, whose key its cache holds, are not decoded again.

Chat clients re-send every image of a conversation on every turn, and vLLM's
API server decodes each again (open, EXIF transpose, full decode, mode
conversion) before it keys it, although an image's key is taken from its
original bytes and a processor-cache hit sends the engine only that key.

:class:`DecodeSkipper` sits in ``ImageMediaIO.load_bytes``. A decode that
succeeds is remembered, by the blake3 digest of its bytes and the loader's
settings, with what the hasher then read of the image (its EXIF ImageID
reads, failures included), the events the load reported and the keys the
hasher computed for it (:class:`DecodedIndex`, bounded in entries and bytes).
When the same bytes come again and the processor cache holds one of those
keys (a membership test: no LRU move, no statistics), the loader returns a
``MediaWithBytes`` holding a :class:`~mmobs.vllm.decode_free_hits.lazy_image.LazyImage`
instead: vLLM's own hasher keys it from the original bytes; its pixels are
decoded only if something reads them (a *late decode*, counted: the item
left the cache between the lookup and the processor). Bytes it has not seen
decode through vLLM's loader as before, so every refusal and message is
vLLM's own.

A keys-only render (:mod:`mmobs.vllm.render`) reads no pixels at all: there a
remembered decode stands in whether or not the cache holds its key, and a
first-seen JPEG gets a record made from its header
(:mod:`mmobs.vllm.render.header_images`).

Everything vLLM does around the decode happens as it would have: the request's
decoded-bytes budget is charged, the pixel limit applies, the EXIF transpose
failure and ImageID fallback events are reported again, with the same
fields.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from time import thread_time
from typing import Any, Generic, Protocol, TypeVar

from blake3 import blake3
from PIL import Image

from mmobs.events import TransposeFailure, get_observer, observing
from mmobs.vllm.decode_free_hits.decode_metrics import DecodeSkipMetrics, decode_skip_metrics
from mmobs.vllm.decode_free_hits.lazy_image import ImageIdRead, LazyImage, lazy_class
from mmobs.vllm.render import render_mode
from mmobs.vllm.shape import vllm_max_pixels
from mmobs.vllm.startup_log import say, whole_number_env

#: ``MMOBS_VLLM_DECODE_FREE_HITS=0``: decode every image, as vLLM does (on by default).
DECODE_SKIP_ENV = "MMOBS_VLLM_DECODE_FREE_HITS"
#: The index's capacity: remembered decodes, and their approximate bytes.
INDEX_ENTRIES_ENV = "MMOBS_VLLM_DECODED_INDEX_ENTRIES"
INDEX_BYTES_ENV = "MMOBS_VLLM_DECODED_INDEX_BYTES"
DEFAULT_INDEX_ENTRIES = 16_384
DEFAULT_INDEX_BYTES = 16 * 1024 * 1024
#: Keys remembered per decode (one per set of request-level kwargs it was keyed with, most recent last).
MAX_KEYS = 4
#: ImageID reads remembered per decode (vLLM's hasher reads once per key it computes).
MAX_READS = 3
#: Loaded images waiting for their key, at most (a request refused before keying leaves one behind).
MAX_PENDING = 4_096


#: (digest of the bytes, the loader's settings that change what they decode to)
IndexKey = tuple[bytes, object]


@dataclass(slots=True)
class Record:
    """What one successful decode of some bytes gave, and what was read of it: enough to stand in for it."""

    image_class: type[LazyImage]
    mode: str
    size: tuple[int, int]
    #: The size the file declares, before the EXIF orientation: what vLLM's pixel limit and budget read.
    open_size: tuple[int, int]
    format: str | None
    io_config: dict[str, Any] | None
    decode_seconds: float
    #: The events the load reported (EXIF transpose failures), and the facts of the image they named.
    transpose_failures: tuple[tuple[BaseException, str | None, str, tuple[int, int]], ...]
    image_id_reads: list[ImageIdRead] = field(default_factory=list)
    keys: tuple[str, ...] = ()

    def nbytes(self) -> int:
        """An upper bound of what the record holds (the index's byte budget counts this), its keys to come included."""
        texts = sum(len(str(error)) + 64 for error, *_ in self.transpose_failures)
        texts += sum(len(str(error)) + 64 for _, error in self.image_id_reads if error is not None)
        return 512 + 80 * MAX_KEYS + texts


class Remembered(Protocol):
    def nbytes(self) -> int: ...


RecordT = TypeVar("RecordT", bound=Remembered)


class DecodedIndex(Generic[RecordT]):
    """A thread-safe LRU of records (an image's :class:`Record`, a clip's) by :data:`IndexKey`, bounded in entries and in bytes."""

    def __init__(self, max_entries: int, max_bytes: int, on_change: Callable[[int, int], None] | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._records: OrderedDict[IndexKey, tuple[RecordT, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self._records)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, key: IndexKey) -> RecordT | None:
        with self._lock:
            found = self._records.get(key)
            if found is None:
                return None
            self._records.move_to_end(key)
            return found[0]

    def put(self, key: IndexKey, record: RecordT) -> None:
        """Add or refresh ``record``; the least recently used go while either bound is exceeded."""
        size = record.nbytes()
        with self._lock:
            previous = self._records.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            if size > self.max_bytes or self.max_entries <= 0:
                self._changed()
                return
            self._records[key] = (record, size)
            self._bytes += size
            while len(self._records) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, evicted) = self._records.popitem(last=False)
                self._bytes -= evicted
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self._records), self._bytes)


@dataclass(slots=True)
class _Load:
    """What one real decode reported while it ran (set by the loader hook, read by the transpose hook)."""

    open_size: tuple[int, int] | None = None
    transpose_failures: list[TransposeFailure] = field(default_factory=list)


_current_load: contextvars.ContextVar[_Load | None] = contextvars.ContextVar("mmobs_vllm_load", default=None)


@dataclass(slots=True)
class _Pending:
    """A loaded image whose decode may be remembered once the hasher has read and keyed it."""

    media_ref: weakref.ref[Any]
    key: IndexKey
    record: Record


class DecodeSkipper:
    """The decision and its bookkeeping, for one API server process (see the module docstring)."""

    def __init__(
        self,
        media_with_bytes: type,
        loader_class: type,
        *,
        index: DecodedIndex[Record] | None = None,
        metrics: DecodeSkipMetrics | None = None,
    ) -> None:
        self.media_with_bytes = media_with_bytes
        self.loader_class = loader_class
        self.metrics = metrics or decode_skip_metrics()
        self.index: DecodedIndex[Record] = index or DecodedIndex(
            whole_number_env(INDEX_ENTRIES_ENV, DEFAULT_INDEX_ENTRIES),
            whole_number_env(INDEX_BYTES_ENV, DEFAULT_INDEX_BYTES),
            on_change=self.metrics.index_size,
        )
        self.metrics.index_size(0, 0)
        #: The processor caches of this process (P0: vLLM's sender cache, or its processor-only cache).
        self.caches: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Those only render requests use (the renderer's processor-only cache): a hit there is no hit for a
        #: chat request, nor one in the chat's cache for a render, so each looks in its own.
        self.render_caches: weakref.WeakSet[Any] = weakref.WeakSet()
        #: For a keys-only render (:mod:`mmobs.vllm.render`): first-seen images' records from their header, and
        #: the count of where each image's size, or clip's frames, came from (``index``, ``header``, ``decode``).
        self.header_records: Callable[[Any, bytes], Record | None] | None = None
        self.render_images: Callable[[str], None] | None = None
        self.render_videos: Callable[[str], None] | None = None
        self._declined: str | None = None
        self._said = False
        self._pending: OrderedDict[int, _Pending] = OrderedDict()
        self._lock = threading.Lock()

    # -- the processor caches ---------------------------------------------------------------------

    def add_cache(self, cache: object) -> None:
        self.caches.add(cache)

    @property
    def declined(self) -> bool:
        """Whether every item of this process keeps vLLM's path (a cache a stand-in cannot be held to)."""
        return self._declined is not None

    def decline(self, why: str) -> None:
        """Keep vLLM's path for every image of this process, and say why once."""
        self._declined = why
        self._say_once(why)

    def _say_once(self, why: str) -> None:
        if not self._said:
            self._said = True
            say(logging.INFO, "mmobs: decode-free cache hits are off in this API server: %s", why)

    def held(self, keys: tuple[str, ...]) -> bool:
        """Whether a processor cache this request uses holds one of ``keys`` (no LRU move, no statistics)."""
        rendering = render_mode.rendering()
        caches = [cache for cache in list(self.caches) if (cache in self.render_caches) == rendering]
        return any(cache.is_cached_item(key) for cache in caches for key in keys)

    # -- the loader ---------------------------------------------------------------------------------

    def load(self, original: Callable[[Any, bytes], Any], loader: Any, data: bytes) -> Any:
        """``ImageMediaIO.load_bytes(loader, data)``, or a decode-free stand-in where nothing reads its pixels."""
        key = self._index_key(loader, data)
        if key is None:
            return original(loader, data)
        keys_only = render_mode.keys_only()  # a keys-only render reads no pixels, whatever the caches hold
        record = self.index.get(key)
        if record is not None and record.keys and (keys_only or self.held(record.keys)) and within_pixel_limit(record):
            self._rendered("index" if keys_only else None)
            return self._stand_in(original, loader, data, record)
        if keys_only:
            record = None if self.header_records is None else self.header_records(loader, data)
            if record is not None:
                self.index.put(key, record)  # keyed in place: the next request finds it with its key
                self._rendered("header")
                return self._stand_in(original, loader, data, record)
            self._rendered("decode")
        load = _Load()
        token = _current_load.set(load)
        started = thread_time()
        try:
            result = original(loader, data)
        finally:
            _current_load.reset(token)
        self._remember(result, key, load, thread_time() - started)
        return result

    def _rendered(self, source: str | None) -> None:
        """Count where a keys-only render's image got its size (``source`` None: not a keys-only render)."""
        if source is not None and self.render_images is not None:
            self.render_images(source)

    def _index_key(self, loader: Any, data: bytes) -> IndexKey | None:
        if self._declined is not None or type(loader) is not self.loader_class:  # a custom loader: its own rules
            return None
        if not self.caches:  # nothing to hit; said once, and looked at again for the next image
            self._say_once("it has no multimodal processor cache (--mm-processor-cache-gb 0)")
            return None
        settings = (getattr(loader, "image_mode", None), getattr(loader, "rgba_background_color", None))
        try:
            hash(settings)
        except TypeError:
            return None
        return blake3(data).digest(), settings

    def _remember(self, result: Any, key: IndexKey, load: _Load, seconds: float) -> None:
        media = getattr(result, "media", None)
        if type(result) is not self.media_with_bytes or not isinstance(media, Image.Image) or load.open_size is None:
            return
        image_class = lazy_class(type(media))
        if image_class is None:
            return
        failures = tuple(
            (_detached(failure.error), failure.image.format, failure.image.mode, failure.image.size)
            for failure in load.transpose_failures
        )
        io_config: dict[str, Any] | None = getattr(result, "io_config", None)
        record = Record(
            image_class,
            media.mode,
            media.size,
            load.open_size,
            media.format,
            dict(io_config) if io_config else io_config,
            seconds,
            failures,
        )
        with self._lock:
            self._pending[id(result)] = _Pending(weakref.ref(result), key, record)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)

    def _stand_in(self, original: Callable[[Any, bytes], Any], loader: Any, data: bytes, record: Record) -> Any:
        budget = getattr(loader, "decoded_budget", None)
        if budget is not None:  # vLLM 0.33: the request's decoded-bytes budget, charged as vLLM charges it
            width, height = record.open_size
            budget.charge(width * height * 4)
        observer = get_observer()
        for error, fmt, mode, size in record.transpose_failures:
            observer.exif_transpose_failed(TransposeFailure(error, _facts(fmt, mode, size)))
        decode = functools.partial(self._late_decode, original, loader, data)
        reads = tuple(record.image_id_reads)
        image = record.image_class(record.mode, record.size, record.format, reads, decode, record)
        self.metrics.skipped(record.decode_seconds)
        io_config = record.io_config
        return self.media_with_bytes(image, data, dict(io_config) if io_config else io_config)

    def _late_decode(self, original: Callable[[Any, bytes], Any], loader: Any, data: bytes) -> Image.Image:
        """The decode a stand-in skipped, done because something read its pixels: unobserved (its events were reported)."""
        quiet = copy.copy(loader)
        if getattr(quiet, "decoded_budget", None) is not None:
            quiet.decoded_budget = None  # charged when the stand-in was made
        started = thread_time()
        with observing(None):
            media = original(quiet, data).media
        self.metrics.late(thread_time() - started)
        return media  # type: ignore[no-any-return]

    # -- what the hasher read and keyed --------------------------------------------------------------

    def _pending_for(self, obj: object) -> _Pending | None:
        pending = self._pending.get(id(obj))
        if pending is None or pending.media_ref() is not obj:
            return None
        return pending

    def image_id_read(self, obj: object, found: bytes | None, error: BaseException | None) -> None:
        pending = self._pending_for(obj)
        if pending is not None and len(pending.record.image_id_reads) < MAX_READS:
            pending.record.image_id_reads.append((found, _detached(error) if error is not None else None))

    def keyed(self, obj: object, key: str) -> None:
        media = getattr(obj, "media", None)
        if isinstance(media, LazyImage) and isinstance(media.owner, Record):
            _add_key(media.owner, key)
            return
        pending = self._pending_for(obj)
        if pending is None:
            return
        _add_key(pending.record, key)
        self.index.put(pending.key, pending.record)


def _add_key(record: Record, key: str) -> None:
    if key in record.keys:
        return
    record.keys = (*record.keys, key)[-MAX_KEYS:]


def within_pixel_limit(record: Record) -> bool:
    """vLLM's pixel limit as it reads it now (an environment variable): else its loader refuses, in its words."""
    limit = vllm_max_pixels()
    width, height = record.open_size
    return limit is None or width * height <= limit


def _detached(error: BaseException) -> BaseException:
    """The exception without its traceback (the frames it would keep alive): its type and message are what is replayed."""
    return error.with_traceback(None)


def _facts(fmt: str | None, mode: str, size: tuple[int, int]) -> LazyImage:
    """An image that says its format, mode and size, for the replayed events' fields; it has no pixels."""
    return LazyImage(mode, size, fmt, (), _no_pixels)


def _no_pixels() -> Image.Image:
    raise ValueError("the image a replayed event names has no pixels")


#: The skipper of this process, once the plugin has planned one (the hooks below are no-ops until then).
_active: DecodeSkipper | None = None


def active() -> DecodeSkipper | None:
    return _active


def activate(skipper: DecodeSkipper | None) -> None:
    global _active
    _active = skipper


def note_transpose_failure(failure: TransposeFailure) -> None:
    """From the ``normalize_image`` hook: a failure reported while a real decode runs, to replay later."""
    load = _current_load.get()
    if load is not None:
        load.transpose_failures.append(failure)


def note_open(image: Image.Image) -> None:
    """From the ``normalize_image`` hook: the opened image's size, as vLLM's pixel limit read it."""
    load = _current_load.get()
    if load is not None and load.open_size is None:
        load.open_size = image.size


def note_image_id_read(obj: object, found: bytes | None, error: BaseException | None) -> None:
    """From the ImageID hook: what a decoded image answered (remembered for its bytes' stand-ins)."""
    if _active is not None:
        _active.image_id_read(obj, found, error)


def note_key(obj: object, key: str) -> None:
    """From the ``hash_kwargs`` hook: an image item's mm_hash; a decode is remembered from its first key on."""
    if _active is not None:
        _active.keyed(obj, key)
