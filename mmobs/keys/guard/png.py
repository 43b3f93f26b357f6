"""PNG (and APNG): chunk counts, metadata bytes, inflated metadata, EXIF and frames.

Pillow reads every chunk through a Python handler and checks its CRC; it
inflates each ``iCCP``, ``zTXt`` and compressed ``iTXt`` chunk up to 1 MiB
(``PngImagePlugin.MAX_TEXT_CHUNK``) and counts only decodable text against
``MAX_TEXT_MEMORY``, so thousands of small compressed chunks cost seconds of
inflating each. This walk visits each chunk header once, and inflates the
compressed metadata itself in 64 KiB pieces, never past the budget, keeping
none of the output.

Most of a large PNG is a run of image-data chunks of one size (libpng writes
8 KiB, Pillow 64 KiB): about a thousand chunk headers in 8 MB, which at a
Python iteration each would cost a quarter of hashing the file.
:func:`idat_run` checks such a run's headers in one vectorised comparison
instead, so the walk's loop runs once per run, not once per chunk.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from mmobs.keys.guard._common import check_pixels, too_costly
from mmobs.keys.guard.limits import DecodeLimits

#: Chunks that carry the image or the animation, not metadata.
_IMAGE_CHUNKS = frozenset((b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"acTL", b"fcTL", b"fdAT"))
#: Samples per pixel by PNG colour type (grey, RGB, palette, grey+alpha, RGBA).
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _row_bits(bit_depth: int, color_type: int) -> int:
    """Bits a pixel takes in Pillow's decoder or in its image, whichever is more (a byte for one
    channel, four for more: Pillow keeps RGB and LA in four)."""
    channels = _CHANNELS.get(color_type, 4)
    return max(bit_depth * channels, 8 if channels == 1 else 32)


_COMPRESSED = frozenset((b"iCCP", b"zTXt", b"iTXt"))
_IDAT = b"IDAT"
_CHUNK_HEADER = struct.Struct(">I4s")
#: Below this many chunks ahead, the walk's own loop is cheaper than setting up the comparison.
_RUN_MIN = 8
_RAW_PROFILE_EXIF = b"Raw profile type exif"
_INPUT_PIECE = 16 * 1024
_OUTPUT_PIECE = 64 * 1024


def check_png(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse a PNG whose chunks cost more than its pixels (``too_costly``) or that is too large."""
    chunks = metadata = metadata_bytes = inflated = frames = 0
    for pos, kind, length, count in png_chunks(data):
        body, after = pos + 8, pos + 8 + length
        if after > len(data):
            return  # cut short: Pillow calls it truncated
        chunks += count
        if chunks > limits.max_chunks:
            raise too_costly(
                f"the PNG has more than {limits.max_chunks} chunks (an encoder writes one per 8-64 KiB of data)",
                "re-encode it",
            )
        if kind == b"IEND":
            return
        if kind == b"IHDR" and length >= 10:
            width = int.from_bytes(data[body : body + 4], "big")
            height = int.from_bytes(data[body + 4 : body + 8], "big")
            check_pixels(width, height, max_pixels, _row_bits(data[body + 8], data[body + 9]))
        elif kind == b"fcTL":
            frames += 1
            if frames > limits.max_frames:
                raise too_costly(f"the APNG has more than {limits.max_frames} frames", "send fewer frames")
        elif kind not in _IMAGE_CHUNKS:
            if kind == b"eXIf":
                _check_exif(length, limits)
            elif kind == b"tEXt" and data.startswith(_RAW_PROFILE_EXIF + b"\0", body):
                _check_exif(length // 2, limits)  # hex digits: two per byte
            metadata += 1
            metadata_bytes += length
            if metadata > limits.max_metadata_segments:
                raise too_costly(
                    f"the PNG has more than {limits.max_metadata_segments} metadata chunks (text, ICC, private...)",
                    "re-save it without the extra chunks",
                )
            if metadata_bytes > limits.max_metadata_bytes:
                raise too_costly(
                    f"the PNG carries more than {limits.max_metadata_bytes} bytes of metadata chunks",
                    "re-save it without the embedded metadata",
                )
            if kind in _COMPRESSED:
                inflated += _inflated_size(data, kind, body, after, limits.max_inflated_metadata_bytes - inflated)
                if inflated > limits.max_inflated_metadata_bytes:
                    raise too_costly(
                        f"the PNG's compressed metadata chunks (iCCP, zTXt, iTXt) inflate to more than "
                        f"{limits.max_inflated_metadata_bytes} bytes",
                        "re-save it without the embedded profiles and text",
                    )


def png_chunks(data: bytes) -> Iterator[tuple[int, bytes, int, int]]:
    """Each chunk header of a PNG, as (position, type, data length, count), until the bytes end.

    ``count`` is 1, or for a run of image-data chunks with the very same header
    (:func:`idat_run`) the run's length: the run is visited once, at its first
    chunk. A last chunk cut short is still visited (its data runs past the end).
    """
    pos, end = 8, len(data)
    while pos + 8 <= end:
        length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        count = (idat_run(data, pos) if kind == _IDAT else 0) or 1
        yield pos, kind, length, count
        pos += count * (length + 12)  # the header, the data, the CRC


def idat_run(data: bytes, pos: int) -> int:
    """How many chunks from ``pos`` on have the very header of the IDAT chunk at ``pos``, CRCs included.

    0 when there are too few chunks ahead to be worth a comparison (the caller
    walks them one by one). The run is every chunk whose 8 header bytes (length
    and type) equal the first one's at a stride of its size, up to the first
    that differs or does not fit before the end.
    """
    length = int.from_bytes(data[pos : pos + 4], "big")
    stride = length + 12
    ahead = (len(data) - pos) // stride
    if ahead < _RUN_MIN:
        return 0
    # Each chunk's 8 header bytes, no copy.
    headers: np.ndarray[Any, np.dtype[np.uint64]] = np.ndarray((ahead,), np.uint64, data, pos, (stride,))
    differs = headers != headers[0]
    return ahead if not differs.any() else int(differs.argmax())


def _check_exif(size: int, limits: DecodeLimits) -> None:
    if size > limits.max_exif_bytes:
        raise too_costly(
            f"the PNG's EXIF block is about {size} bytes, above the limit of {limits.max_exif_bytes}",
            "re-save it with a standard EXIF block, or without EXIF",
        )


def _compressed_start(data: bytes, kind: bytes, body: int, after: int) -> int | None:
    """Where the zlib stream of a compressed metadata chunk starts (``None``: not compressed)."""
    keyword_end = data.find(b"\0", body, min(after, body + 80))
    if keyword_end < 0:
        return None
    if kind in (b"iCCP", b"zTXt"):
        return keyword_end + 2  # compression method byte
    if keyword_end + 3 > after or data[keyword_end + 1] != 1 or data[keyword_end + 2] != 0:
        return None  # iTXt stored uncompressed (or with a method Pillow ignores)
    language_end = data.find(b"\0", keyword_end + 3, after)
    translated_end = -1 if language_end < 0 else data.find(b"\0", language_end + 1, after)
    return None if translated_end < 0 else translated_end + 1


def _inflated_size(data: bytes, kind: bytes, body: int, after: int, budget: int) -> int:
    """Bytes the chunk's zlib stream inflates to, counted up to ``budget + 1`` and then abandoned.

    The input is fed 16 KiB at a time and the output taken 64 KiB at a time,
    so neither the work nor the memory depends on what the stream declares.
    """
    start = _compressed_start(data, kind, body, after)
    if start is None or start >= after:
        return 0
    inflater = zlib.decompressobj()
    total = 0
    try:
        for at in range(start, after, _INPUT_PIECE):
            pending = data[at : min(at + _INPUT_PIECE, after)]
            while pending:
                total += len(inflater.decompress(pending, _OUTPUT_PIECE))
                if total > budget or inflater.eof:
                    return total
                pending = inflater.unconsumed_tail
    except zlib.error:
        return total  # Pillow drops a chunk it cannot inflate; what was inflated so far was spent
    return total
