"""Decode-free hits for video: a re-sent clip whose key vLLM's processor cache holds is not decoded again.

A chat client re-sends every clip of a conversation on every turn. vLLM's API
server decodes each again (OpenCV reads every frame up to the last one it
keeps) only to key it: its key is the digest of the file's bytes with the
decode's metadata (frames kept, fps, total frames, duration, backend), and a
processor-cache hit then sends the engine that key alone.

:class:`ClipSkipper` sits in ``VideoMediaIO.load_bytes``. A decode that
succeeds, and that vLLM keys from the file's bytes (its frames are larger than
the file, as they are for any real clip), is remembered by the digest of its
bytes and the loader's settings: the frames' shape and dtype, the metadata the
decode produced and the keys vLLM's hasher computed (a :class:`ClipIndex`,
bounded in entries and bytes). When the same bytes come with the same settings
and a processor cache holds one of those keys, the loader returns
:class:`UndecodedFrames` in place of the frames: an array of the decoded
frames' shape and dtype that holds no pixels (a zero-stride view), with a copy
of the remembered metadata. vLLM's own hasher keys it as it keys the decoded
clip, from the bytes and the metadata, to the same key.

Nothing in vLLM reads a cached clip's pixels. If the clip left the cache
between the loader's lookup and the processor's, the processor would: the
processor's ``_get_cache_missing_items`` hook (:func:`decode_missing`) decodes
any stand-in among the items it is about to process (a *late decode*, counted)
so that the HF processor sees vLLM's frames. A model whose processor replaces
vLLM's cached path (it never calls that method) gets no stand-ins. Clips keyed from their frames
(frames smaller than the file), clips whose frames are a tensor (a GPU
decoder's) and custom loaders keep vLLM's path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from time import thread_time
from typing import Any

import numpy as np
from blake3 import blake3

from mmobs.vllm.decode_free_hits.decode_metrics import DecodeSkipMetrics, decode_skip_metrics
from mmobs.vllm.decode_free_hits.decode_skip import DecodedIndex, DecodeSkipper, IndexKey
from mmobs.vllm.render import header_clips, render_mode
from mmobs.vllm.shape import vllm_max_pixels
from mmobs.vllm.startup_log import say, whole_number_env

#: The clip index's capacity: remembered decodes, and their approximate bytes (a clip's record holds the
#: indices of the frames it kept, up to 768 for Qwen2-VL: a few KiB).
CLIP_ENTRIES_ENV = "MMOBS_VLLM_DECODED_CLIPS"
CLIP_BYTES_ENV = "MMOBS_VLLM_DECODED_CLIPS_BYTES"
DEFAULT_CLIP_ENTRIES = 4_096
DEFAULT_CLIP_BYTES = 16 * 1024 * 1024
#: Keys remembered per clip (one per set of request-level kwargs it was keyed with, most recent last).
MAX_KEYS = 4
#: Decoded clips waiting for their key, at most (a request refused before keying leaves one behind).
MAX_PENDING = 1_024


@dataclass(slots=True)
class ClipRecord:
    """What one decode of a clip's bytes gave that its key and its placeholders read: enough to stand in for it."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    metadata: dict[str, Any]
    decode_seconds: float
    keys: tuple[str, ...] = ()

    @property
    def frame_size(self) -> tuple[int, int]:
        """(width, height) of its frames (``N x H x W x C``), what vLLM's pixel limit read."""
        return (self.shape[2], self.shape[1]) if len(self.shape) == 4 else (0, 0)

    def nbytes(self) -> int:
        """An upper bound of what the record holds (the index's byte budget counts this)."""
        kept = self.metadata.get("frames_indices")
        return 768 + 80 * MAX_KEYS + 32 * (len(kept) if isinstance(kept, list) else 0)


class UndecodedFrames(np.ndarray):
    """A clip's frames, not decoded: their shape and dtype, no pixels (every element is zero, none is stored).

    Given for a clip whose key its processor cache holds (nothing in vLLM reads a cached clip's pixels), and,
    ``unheld``, for a keys-only render's clip or a chat's clip too long for the context: :func:`decode_stand_ins`
    decodes any that reaches vLLM's processing after all (``decode()``), the misses' hook the cached ones.
    """

    decode: Callable[[], tuple[Any, dict[str, Any]]] | None = None
    record: ClipRecord | None = None
    #: Not made for a processor-cache hit (a keys-only render's, a deferred decode's): decoded before processing.
    unheld: bool = False

    def __array_finalize__(self, obj: Any) -> None:
        self.decode = getattr(obj, "decode", None)
        self.record = getattr(obj, "record", None)
        self.unheld = getattr(obj, "unheld", False)


def undecoded(record: ClipRecord, decode: Callable[[], tuple[Any, dict[str, Any]]], *, unheld: bool) -> UndecodedFrames:
    frames = undecoded_shape(record.shape, decode, record.dtype)
    frames.record, frames.unheld = record, unheld
    return frames


def undecoded_shape(
    shape: tuple[int, ...], decode: Callable[[], tuple[Any, dict[str, Any]]], dtype: Any = np.uint8
) -> UndecodedFrames:
    """Frames of ``shape`` that hold no pixels, decoded by ``decode()`` should anything need them."""
    frames = np.broadcast_to(np.zeros((), dtype=dtype), shape).view(UndecodedFrames)
    frames.decode, frames.unheld = decode, True
    return frames


@dataclass(slots=True)
class _Pending:
    """A decoded clip whose decode may be remembered once vLLM's hasher has keyed it."""

    frames_ref: weakref.ref[Any]
    key: IndexKey
    record: ClipRecord = field(repr=False)


class ClipSkipper:
    """The decision and its bookkeeping for video, in one API server (see the module docstring).

    The processor caches and the switch to vLLM's path come from the images' :class:`DecodeSkipper`.
    """

    def __init__(
        self,
        images: DecodeSkipper,
        media_with_bytes: type,
        loader_class: type,
        *,
        index: DecodedIndex[ClipRecord] | None = None,
        metrics: DecodeSkipMetrics | None = None,
    ) -> None:
        self.images = images
        self.media_with_bytes = media_with_bytes
        self.loader_class = loader_class
        self.metrics = metrics or decode_skip_metrics()
        self.index: DecodedIndex[ClipRecord] = index or DecodedIndex(
            whole_number_env(CLIP_ENTRIES_ENV, DEFAULT_CLIP_ENTRIES),
            whole_number_env(CLIP_BYTES_ENV, DEFAULT_CLIP_BYTES),
            on_change=self._index_size,
        )
        self.metrics.index_size(0, 0, "video")
        self._pending: OrderedDict[int, _Pending] = OrderedDict()
        self._lock = threading.Lock()
        self._said_frames_keyed = False
        #: Whether vLLM's own ``_get_cache_missing_items`` has run in this process (with its hook): a model whose
        #: processor replaces the cached path never calls it, so its clips are never stood in for.
        self.misses_hooked = False
        #: Whether a chat's clip of ``(frames kept, height, width)`` is alone too long for the context: then its
        #: decode is deferred to the processor, which refuses its prompt first (:mod:`mmobs.vllm.video_length`).
        self.over_context: Callable[[tuple[int, int, int]], bool] | None = None
        #: Whether a keys-only render's clip can be answered from its header: where the served model's video rule
        #: holds (None: nothing decides it, and the header is not read).
        self.sized_by_rule: Callable[[tuple[int, int, int]], bool] | None = None

    def _index_size(self, entries: int, nbytes: int) -> None:
        self.metrics.index_size(entries, nbytes, "video")

    def load(self, original: Callable[[Any, bytes], Any], loader: Any, data: bytes) -> Any:
        """``VideoMediaIO.load_bytes(loader, data)``, or a decode-free stand-in where its key is cached."""
        key = self._index_key(loader, data)
        if key is None:
            return original(loader, data)
        keys_only = render_mode.keys_only()  # a keys-only render reads no pixels, whatever the caches hold
        record = self.index.get(key)
        if (
            record is not None
            and record.keys
            and (keys_only or (self.misses_hooked and self.images.held(record.keys)))
            and _within_pixel_limit(record)
        ):
            self._rendered("index" if keys_only else None)
            return self._stand_in(original, loader, data, key, record, unheld=keys_only)
        started = thread_time()
        # A first-seen MP4 answered from its header: in a keys-only render where the model's video rule holds; in a
        # chat only where it alone is too long for the context (its decode deferred to the processor, which refuses
        # the prompt first).
        wanted = self.sized_by_rule if keys_only else self.over_context
        if wanted is not None and header_clips.answerable(data):
            late = functools.partial(self._late_decode, original, loader, data, key)
            with header_clips.from_header(len(data), functools.partial(undecoded_shape, decode=late), wanted) as header:
                result = original(loader, data)
            answered = header.frames is not None
            if answered and frames_of(getattr(result, "media", None)) is not header.frames:
                result, answered = original(loader, data), False  # a loader that made new frames of them: decoded
        else:
            result, answered = original(loader, data), False
        if keys_only:
            if answered:
                self.metrics.skipped(0.0, "video")
            self._rendered("header" if answered else "decode")
        self._remember(result, key, data, thread_time() - started)
        return result

    def _rendered(self, source: str | None) -> None:
        """Count where a keys-only render's clip got its frames' shape (``source`` None: not a keys-only render)."""
        if source is not None and self.images.render_videos is not None:
            self.images.render_videos(source)

    def _index_key(self, loader: Any, data: bytes) -> IndexKey | None:
        if self.images.declined or type(loader) is not self.loader_class or not self.images.caches:
            return None
        settings = (
            type(getattr(loader, "video_loader", None)),
            getattr(loader, "num_frames", None),
            repr(sorted((getattr(loader, "kwargs", None) or {}).items())),
        )
        return blake3(data).digest(), settings

    def _remember(self, result: Any, key: IndexKey, data: bytes, seconds: float) -> None:
        media = getattr(result, "media", None)
        if type(result) is not self.media_with_bytes or not isinstance(media, tuple) or len(media) != 2:
            return
        frames, metadata = media
        if isinstance(frames, UndecodedFrames) and frames.record is None and isinstance(metadata, dict):
            # Answered from the header (header_clips): remembered now, keyed in place by vLLM's hasher.
            frames.record = ClipRecord(tuple(frames.shape), frames.dtype, copy.deepcopy(metadata), 0.0)
            self.index.put(key, frames.record)
            return
        if type(frames) is not np.ndarray or not isinstance(metadata, dict):  # a GPU decoder's tensor: its own path
            return
        if frames.nbytes < len(data):  # keyed from its frames: the key needs them
            self._say_frames_keyed_once()
            return
        record = ClipRecord(tuple(frames.shape), frames.dtype, copy.deepcopy(metadata), seconds)
        with self._lock:
            self._pending[id(frames)] = _Pending(weakref.ref(frames), key, record)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)

    def _say_frames_keyed_once(self) -> None:
        if not self._said_frames_keyed:
            self._said_frames_keyed = True
            say(
                logging.INFO,
                "mmobs: a video clip smaller decoded than as a file is keyed from its frames by vLLM, so it is "
                "decoded on every send (decode-free hits cover clips keyed from their bytes)",
            )

    def _stand_in(
        self,
        original: Callable[[Any, bytes], Any],
        loader: Any,
        data: bytes,
        key: IndexKey,
        record: ClipRecord,
        *,
        unheld: bool,
    ) -> Any:
        budget = getattr(getattr(loader, "image_io", None), "decoded_budget", None)
        if budget is not None:  # vLLM 0.33: the request's decoded-bytes budget, charged as vLLM charges it
            budget.charge(int(np.prod(record.shape)) * record.dtype.itemsize)
        frames = undecoded(record, functools.partial(self._late_decode, original, loader, data, key), unheld=unheld)
        self.metrics.skipped(record.decode_seconds, "video")
        return self.media_with_bytes((frames, copy.deepcopy(record.metadata)), data)

    def _late_decode(
        self, original: Callable[[Any, bytes], Any], loader: Any, data: bytes, key: IndexKey
    ) -> tuple[Any, dict[str, Any]]:
        """The decode a stand-in skipped, done because the processor is about to read its frames (remembered, as
        any decode is, once vLLM keys it)."""
        quiet = copy.copy(loader)
        image_io = getattr(quiet, "image_io", None)
        if getattr(image_io, "decoded_budget", None) is not None:
            quiet.image_io = copy.copy(image_io)
            quiet.image_io.decoded_budget = None  # charged when the stand-in was made
        started = thread_time()
        result = original(quiet, data)
        seconds = thread_time() - started
        self.metrics.late(seconds, "video")
        self._remember(result, key, data, seconds)
        frames, metadata = result.media
        return frames, metadata

    def keyed(self, frames: object, key: str) -> None:
        """vLLM's hasher keyed a clip: a stand-in's record learns the key; a decode is remembered from its first."""
        if isinstance(frames, UndecodedFrames):
            if frames.record is not None:
                _add_key(frames.record, key)
            return
        pending = self._pending.get(id(frames))
        if pending is None or pending.frames_ref() is not frames:
            return
        _add_key(pending.record, key)
        self.index.put(pending.key, pending.record)


def _add_key(record: ClipRecord, key: str) -> None:
    if key not in record.keys:
        record.keys = (*record.keys, key)[-MAX_KEYS:]


def _within_pixel_limit(record: ClipRecord) -> bool:
    """vLLM's frame pixel limit as it reads it now: else its decoder refuses the clip, in its words."""
    limit = vllm_max_pixels()
    width, height = record.frame_size
    return limit is None or width * height <= limit


def frames_of(video: object) -> object:
    """The frames of a video item as the hasher and the processor see it: ``(media, metadata)``, media, frames."""
    if isinstance(video, tuple) and video:
        video = video[0]
    return getattr(video, "media", video)


def decode_missing(original: Callable[..., Any], skipper: ClipSkipper) -> Callable[..., Any]:
    """``BaseMultiModalProcessor._get_cache_missing_items``, with any undecoded clip among the misses decoded.

    The misses are what the HF processor reads next: a clip that left the processor cache since the loader
    looked gets vLLM's frames (a late decode) before that. Its first call lets the skipper stand in for clips:
    only a processor that goes through it fills the cache the skipper looks in.
    """

    @functools.wraps(original)
    def _get_cache_missing_items(self: Any, *args: Any, **kwargs: Any) -> Any:
        skipper.misses_hooked = True
        is_cached, missing = original(self, *args, **kwargs)
        decode_stand_ins(missing)
        return is_cached, missing

    return _get_cache_missing_items


def decode_stand_ins(mm_data_items: Any, *, unheld_only: bool = False) -> None:
    """Decode, in place, the undecoded clips among a request's parsed items (vLLM's processor reads them next).

    ``unheld_only``: only those not made for a cache hit (a keys-only render's, a deferred decode's), which are
    decoded before vLLM keys them: they take the decode's metadata too, so that vLLM keys what it decoded.
    A cache hit's stand-in is decoded (among the misses) after its key: its remembered metadata stays.
    """
    videos = mm_data_items.get("video") if hasattr(mm_data_items, "get") else None
    data = getattr(videos, "data", None)
    if not isinstance(data, list):
        return
    listed = getattr(videos, "metadata", None)
    for index, item in enumerate(data):
        frames = frames_of(item)
        if not isinstance(frames, UndecodedFrames) or frames.decode is None or (unheld_only and not frames.unheld):
            continue
        decoded, metadata = frames.decode()
        data[index] = _replaced(item, decoded, metadata if frames.unheld else None)
        if frames.unheld and isinstance(listed, list) and index < len(listed) and listed[index] is not None:
            listed[index] = metadata


def _replaced(item: Any, frames: Any, metadata: dict[str, Any] | None) -> Any:
    """``item`` with ``frames`` for its frames (and ``metadata`` for its metadata, if given): bare frames,
    ``(frames, metadata)``, or vLLM's ``MediaWithBytes`` of either."""
    if isinstance(item, tuple) and item:
        rest = item[1:] if metadata is None or len(item) < 2 else (metadata, *item[2:])
        return (_replaced(item[0], frames, metadata), *rest)
    if isinstance(item, UndecodedFrames):
        return frames
    media = getattr(item, "media", None)
    if dataclasses.is_dataclass(item) and media is not None:
        return dataclasses.replace(item, media=_replaced(media, frames, metadata))  # type: ignore[type-var]
    return item


#: The skipper of this process, once the plugin has planned one (the key hook's calls are no-ops until then).
_active: ClipSkipper | None = None


def activate(skipper: ClipSkipper | None) -> None:
    global _active
    _active = skipper


def note_key(video: object, key: str) -> None:
    """From the ``hash_kwargs`` hook: a video item's mm_hash; a decode is remembered from its first key on."""
    if _active is not None:
        _active.keyed(frames_of(video), key)
