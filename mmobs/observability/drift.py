"""Cache-key drift: the same content getting a different key than last time.

**The same content** means byte-identical original bytes (the encoded file a
client sent) of the same media kind. The tracker therefore only looks at
:class:`~mmobs.keys.media.MediaWithBytes` items, which is what servers key. The
key it compares is the digest of the item's own framed bytes, which changes
when the key source changes (an ImageID UUID one time, the original bytes the
next, because the EXIF read failed) or when a decode option that enters the
key changes (``io_config``). Other keyword arguments of ``hash_kwargs`` (the
model id, processor kwargs) are deliberately outside the comparison: a
different model legitimately gives a different request key.

Cost control: an item is sampled when a cheap hash of its length and last
256 bytes (entropy-coded data in every common format, where headers are alike)
falls under ``sample_rate``. The decision is deterministic per content within
the process (the tracker's scope), so the same image is either always or never
tracked and two sightings of it are always compared. A sampled item costs one more pass over its bytes
(its own digest, teed off the key stream), and one more only when it was not
keyed by its original bytes. The table is an LRU with a fixed capacity.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from blake3 import blake3

from mmobs.keys.hashing import feed_item
from mmobs.keys.media import is_media_with_bytes
from mmobs.keys.writer import EncodedImage

_TAIL = 256
_SCALE = 1 << 64
_CONTENT_BYTES = 16


@dataclass(frozen=True, slots=True)
class Drift:
    """A content digest seen with two different item keys."""

    kind: str
    previous_key: str
    previous_source: str
    key: str
    key_source: str


class DriftTracker:
    """A bounded, thread-safe memory of recent content -> (item key, key source)."""

    def __init__(self, capacity: int = 10_000, sample_rate: float = 0.05) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, not {capacity!r}")
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be within 0..1, not {sample_rate!r}")
        self.capacity = capacity
        self.sample_rate = sample_rate
        self._threshold = int(sample_rate * _SCALE)
        self._entries: OrderedDict[tuple[str, bytes], tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def samples(self, media: Any) -> bool:
        """Whether this item is tracked. Cheap, and the same answer for the same bytes."""
        if self._threshold == 0 or not (is_media_with_bytes(media) or isinstance(media, EncodedImage)):
            return False  # EncodedImage: an image keyed from its header (mmobs.keys.from_bytes), the same content
        if self._threshold >= _SCALE:
            return True
        data = media.original_bytes
        # Python's hash of (length, tail): a tenth of a blake3 probe's cost, on every key. It is seeded
        # per process, as the tracker is per process: the same bytes get the same answer here.
        return hash((len(data), bytes(data[-_TAIL:]))) % _SCALE < self._threshold

    def observe(self, kind: str, media: Any, key: str, key_source: str) -> Drift | None:
        """Remember this sighting; return a :class:`Drift` if the key changed.

        ``key`` is the hex digest of the item's own framed bytes. Content is
        identified by the digest the item *would* have if keyed by its original
        bytes alone, a function of those bytes only; for the common sighting
        (keyed exactly so) that is ``key`` itself, which saves a full pass.
        """
        # vLLM 0.25's MediaWithBytes has no io_config (its attribute lookups go on to the image).
        if key_source == "original_bytes" and (kind == "video" or not _io_config(media)):
            content = bytes.fromhex(key)[:_CONTENT_BYTES]
        else:
            content = original_bytes_item_digest(kind, media.original_bytes)
        entry = (kind, content)
        with self._lock:
            previous = self._entries.get(entry)
            self._entries[entry] = (key, key_source)
            self._entries.move_to_end(entry)
            if len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        if previous is None or previous[0] == key:
            return None
        return Drift(kind, previous[0], previous[1], key, key_source)


def _io_config(media: Any) -> Any:
    try:
        return media.io_config
    except AttributeError:
        return None


def original_bytes_item_digest(kind: str, data: bytes) -> bytes:
    """The digest the item would have if keyed by its original bytes alone."""
    digest = blake3()
    feed_item(digest, "video" if kind == "video" else "image", data)
    return digest.digest(_CONTENT_BYTES)
