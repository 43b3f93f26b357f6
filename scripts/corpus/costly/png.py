"""Costly PNGs: compressed-chunk floods (iCCP, iTXt, zTXt), chunk floods, split and empty IDATs, APNG frames.

Each ``iCCP`` and compressed ``iTXt``/``zTXt`` chunk is inflated (up to 1 MiB each, ``MAX_TEXT_CHUNK``);
``iCCP`` and undecodable ``iTXt`` are not counted against ``MAX_TEXT_MEMORY``. Every chunk costs a Python
round trip.
"""

from __future__ import annotations

import struct
import zlib

from ..base import base_image, noisy
from ..exif import PNG_SIGNATURE, png_chunk
from .deflate import MiB, bomb

_IHDR_END = len(PNG_SIGNATURE) + 8 + 13 + 4


def png_with_chunks(chunks: bytes, base: bytes | None = None, *, after_idat: bool = False) -> bytes:
    """Chunks inserted after IHDR (read at open) or before IEND (read at the end of load)."""
    base = base_image("PNG") if base is None else base
    if after_idat:
        end = base.rindex(b"IEND") - 4
        return base[:end] + chunks + base[end:]
    return base[:_IHDR_END] + chunks + base[_IHDR_END:]


def png_rechunked(png: bytes, size: int = 8192) -> bytes:
    """The same PNG with its image data in ``size``-byte IDAT chunks (libpng writes 8 KiB, Pillow 64 KiB)."""
    position, head, data = 8, b"", b""
    while position + 8 <= len(png):
        length, kind = struct.unpack_from(">I4s", png, position)
        if kind == b"IDAT":
            data += png[position + 8 : position + 8 + length]
        elif kind != b"IEND":
            head += png[position : position + 12 + length]
        position += 12 + length
    idat = b"".join(png_chunk(b"IDAT", data[at : at + size]) for at in range(0, len(data), size))
    return png[:8] + head + idat + png_chunk(b"IEND", b"")


def _repeat_chunk(chunk: bytes, total: int) -> bytes:
    return chunk * max(1, total // len(chunk))


def png_iccp_flood(total: int, inflated: int = MiB - 1024) -> bytes:
    """``iCCP`` chunks that each inflate to just under Pillow's 1 MiB cap."""
    chunk = png_chunk(b"iCCP", b"icc\0\0" + bomb(inflated))
    return png_with_chunks(_repeat_chunk(chunk, total))


def png_itxt_flood(total: int, inflated: int = MiB - 1024) -> bytes:
    """Compressed ``iTXt`` chunks whose text is not UTF-8: inflated, then dropped uncounted."""
    chunk = png_chunk(b"iTXt", b"k\0\x01\x00\0\0" + bomb(inflated, b"\xff"))
    return png_with_chunks(_repeat_chunk(chunk, total))


def png_ztxt_flood(total: int, inflated: int = MiB - 1024) -> bytes:
    """Compressed ``zTXt`` chunks (Pillow stops at 64 MiB of text, after inflating it)."""
    chunk = png_chunk(b"zTXt", b"k\0\0" + bomb(inflated, b"a"))
    return png_with_chunks(_repeat_chunk(chunk, total))


def png_private_chunk_flood(total: int) -> bytes:
    """Empty private ancillary chunks: each a CRC check and a Python round trip."""
    return png_with_chunks(_repeat_chunk(png_chunk(b"prIv", b""), total))


def png_text_flood(total: int) -> bytes:
    """Tiny ``tEXt`` chunks with distinct keywords (each a dict entry)."""
    chunks = b"".join(png_chunk(b"tEXt", b"k%07d\0v" % i) for i in range(total // 22))
    return png_with_chunks(chunks)


def png_idat_split(pieces: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A valid PNG whose image data is split over ``pieces`` IDAT chunks (an encoder's choice)."""
    pixels, stride = noisy(size, seed=5).tobytes(), size[0] * 3
    raw = b"".join(b"\0" + pixels[y * stride : (y + 1) * stride] for y in range(size[1]))
    stream = zlib.compress(raw)
    step = max(1, -(-len(stream) // pieces))
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", size[0], size[1], 8, 2, 0, 0, 0))
    idats = b"".join(png_chunk(b"IDAT", stream[i : i + step]) for i in range(0, len(stream), step))
    return PNG_SIGNATURE + ihdr + idats + png_chunk(b"IEND", b"")


def png_empty_idat_flood(total: int) -> bytes:
    """The image data followed by a flood of empty IDAT chunks (each a decoder round trip)."""
    data = png_idat_split(1, (16, 12))
    end = data.rindex(b"IEND") - 4
    return data[:end] + _repeat_chunk(png_chunk(b"IDAT", b""), total) + data[end:]


def png_fdat_flood(total: int) -> bytes:
    """An APNG whose frames are a flood of tiny ``fcTL``/``fdAT`` pairs after the default image."""
    width, height = 16, 12
    base = png_idat_split(1, (width, height))
    frames = max(1, total // 70)
    actl = png_chunk(b"acTL", struct.pack(">II", frames + 1, 0))
    first = png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, width, height, 0, 0, 1, 10, 0, 0))
    tiny = zlib.compress(b"\0\0\0\0")  # one 1x1 RGB row
    body = []
    for i in range(frames):
        seq = 1 + 2 * i
        body.append(png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", seq, 1, 1, 0, 0, 1, 10, 0, 0)))
        body.append(png_chunk(b"fdAT", struct.pack(">I", seq + 1) + tiny))
    idat_at = base.index(b"IDAT") - 4
    end = base.rindex(b"IEND") - 4
    return base[:idat_at] + actl + first + base[idat_at:end] + b"".join(body) + base[end:]
