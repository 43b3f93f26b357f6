"""The framed byte stream behind every key, and the sinks it is written into.

vLLM's key is the digest of a stream that is uniquely decodable, so that no
two different inputs share a key: every variable-length field is preceded by
its length (8 bytes, little-endian) and every value by a one-byte tag saying
what it is (``None``, a sequence, a mapping, or a leaf). ``docs/key-format.md``
spells out the whole format; this module holds its constants and the two
places the stream goes:

* :class:`DigestSink` feeds a digest. Small pieces (lengths, tags, short
  strings) are gathered and fed as one chunk before the next large one:
  a digest update per 8-byte length would cost more than the bytes.
* :class:`ChunkSink` keeps the chunks for a caller who wants to see them
  (``MultiModalHasher.iter_item_to_bytes``). Streamed pixels stay lazy until
  that caller iterates, so no full pixel copy ever exists.

The writer that decides *what* goes into the stream lives in
:mod:`mmobs.keys.hashing`; it only ever talks to a sink.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from blake3 import blake3

Chunk = bytes | memoryview

TAG_NONE = b"\x00"
TAG_SEQUENCE = b"\x01"
TAG_MAPPING = b"\x02"
TAG_LEAF = b"\x03"

#: ``LEN(n)``: n as 8 bytes, little-endian.
encode_length = struct.Struct("<Q").pack

#: Pieces up to this size are gathered and joined rather than fed one by one.
_SMALL_PIECE = 4096
#: blake3 hashes 16 chunks of 1 KiB at once (AVX-512; 8 with AVX2), but only over subtrees that
#: start where the stream position is a multiple of their size. Fed after a short header, a large
#: piece would start one chunk in and ramp up (1, 2, 4, 8 chunks at a time) over its first 15 KiB:
#: about 7 us at any size (+13 % at 0.5 MB). Copying just enough of it to join the header up to
#: the next multiple of 16 KiB lets the rest go at full width (docs/performance.md).
_BLAKE3_SPAN = 16 * 1024


def blake3_cut(position: int, size: int) -> int:
    """How much of a ``size``-byte piece starting at stream ``position`` to join to what precedes it.

    0 when the piece already starts on the 16 KiB grid (or is too short to matter): see
    :data:`_BLAKE3_SPAN`. The rest of the piece then starts on the grid.
    """
    cut = -position % _BLAKE3_SPAN
    return cut if cut < size else 0


def framed(data: bytes) -> bytes:
    """``FR(b)`` for a short ``b``: its length, then the bytes, as one piece."""
    return encode_length(len(data)) + data


class _Digest(Protocol):
    def update(self, data: Any, /) -> object: ...


class Sink(Protocol):
    """Where the writer puts the stream. ``large`` and ``stream`` data must be 1-D bytes."""

    #: Whether :meth:`start_tee` / :meth:`end_tee` give an item's own digest.
    can_tee: bool

    def small(self, piece: bytes) -> None: ...

    def large(self, data: Chunk) -> None: ...

    def stream(self, chunks: Iterable[Chunk]) -> None: ...

    def start_tee(self) -> None: ...

    def end_tee(self) -> str | None: ...


class DigestSink:
    """Feeds a digest; counts the bytes; can tee one item's bytes into a blake3 of its own."""

    __slots__ = ("_aligns", "_pending", "_tee", "_update", "nbytes")
    can_tee = True

    def __init__(self, digest: _Digest) -> None:
        self._update = digest.update
        self._aligns = isinstance(digest, blake3)
        self._pending: list[bytes] = []
        self._tee: Any = None
        self.nbytes = 0

    def small(self, piece: bytes) -> None:
        self._pending.append(piece)

    def large(self, data: Chunk) -> None:
        # Joined with what precedes it: anything short, and with blake3 anything under the grid's
        # span (a copy of under 16 KiB costs less than the second update's ramp-up).
        if type(data) is bytes and (len(data) <= _SMALL_PIECE or (self._aligns and len(data) < _BLAKE3_SPAN)):
            self._pending.append(data)
            return
        if self._aligns:
            cut = blake3_cut(self.nbytes + sum(map(len, self._pending)), len(data))
            if cut:
                view = memoryview(data)
                self._feed(b"".join((*self._pending, view[:cut])))
                self._pending.clear()
                self._feed(view[cut:])
                return
        self.flush()
        self._feed(data)

    def stream(self, chunks: Iterable[Chunk]) -> None:
        self.flush()
        for chunk in chunks:
            self._feed(chunk)

    def flush(self) -> None:
        """Feed the gathered small pieces (call before reading the digest)."""
        if self._pending:
            joined = b"".join(self._pending)
            self._pending.clear()
            self._feed(joined)

    def _feed(self, data: Chunk) -> None:
        self._update(data)
        if self._tee is not None:
            self._tee.update(data)
        self.nbytes += len(data)

    def start_tee(self) -> None:
        self.flush()
        self._tee = blake3()

    def end_tee(self) -> str | None:
        self.flush()
        tee, self._tee = self._tee, None
        return str(tee.hexdigest())


class _Lazy:
    """A stream of chunks that :class:`ChunkSink` hands out only when iterated."""

    __slots__ = ("chunks",)

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self.chunks = chunks


class ChunkSink:
    """Keeps the chunks, in order, for iteration. Streams stay lazy; no tee."""

    __slots__ = ("_parts", "_pending")
    can_tee = False

    def __init__(self) -> None:
        self._parts: list[Chunk | _Lazy] = []
        self._pending: list[bytes] = []

    def small(self, piece: bytes) -> None:
        self._pending.append(piece)

    def large(self, data: Chunk) -> None:
        self._flush()
        self._parts.append(data)

    def stream(self, chunks: Iterable[Chunk]) -> None:
        self._flush()
        self._parts.append(_Lazy(chunks))

    def _flush(self) -> None:
        if self._pending:
            self._parts.append(b"".join(self._pending))
            self._pending.clear()

    def start_tee(self) -> None:
        pass

    def end_tee(self) -> str | None:
        return None

    def __iter__(self) -> Iterator[Chunk]:
        self._flush()
        for part in self._parts:
            if type(part) is _Lazy:
                yield from part.chunks
            else:
                yield part  # type: ignore[misc]
