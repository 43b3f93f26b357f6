"""Costly TIFFs: a huge tile, one row per strip, more strips than rows, many pages, a huge RATIONAL.

libtiff allocates a whole tile (whatever the image size); Pillow's raw-strip reader builds one Python tile
per strip.
"""

from __future__ import annotations

import struct

from ..base import noisy
from ..tiff import LONG, ORIENTATION, RATIONAL, SHORT, Entry, entry, tiff_bytes
from .deflate import zeros_deflate

TILE_WIDTH, TILE_LENGTH, TILE_OFFSETS, TILE_BYTE_COUNTS = 322, 323, 324, 325


def tiff_huge_tile(tile: int, size: tuple[int, int] = (16, 16)) -> bytes:
    """A small grayscale TIFF whose only tile is ``tile`` x ``tile``, deflate-compressed zeros."""
    width, height = size
    data = zeros_deflate(tile * tile)
    entries = [
        entry(256, SHORT, width), entry(257, SHORT, height), entry(258, SHORT, 8), entry(259, SHORT, 8),
        entry(262, SHORT, 1), entry(277, SHORT, 1),
        entry(TILE_WIDTH, LONG, tile), entry(TILE_LENGTH, LONG, tile),
        entry(TILE_OFFSETS, LONG, 8), entry(TILE_BYTE_COUNTS, LONG, len(data)),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=data)


def tiff_strip_per_row(rows: int, width: int = 1) -> bytes:
    """A ``width`` x ``rows`` raw grayscale TIFF with one row per strip, every strip the same bytes."""
    pixels = b"\x80" * width
    entries = [
        entry(256, LONG, width), entry(257, LONG, rows), entry(258, SHORT, 8), entry(259, SHORT, 1),
        entry(262, SHORT, 1), entry(277, SHORT, 1), entry(278, SHORT, 1),
        Entry(273, LONG, rows, struct.pack("<L", 8) * rows),
        Entry(279, SHORT, rows, struct.pack("<H", width) * rows),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=pixels)


def tiff_many_pages(pages: int) -> bytes:
    """A TIFF of ``pages`` 1x1 bilevel pages (five entries each), all sharing one pixel byte."""
    out = bytearray(b"II*\x00" + struct.pack("<L", 10) + b"\x80\x00")
    items = ((256, SHORT, 1), (257, SHORT, 1), (273, LONG, 8), (278, SHORT, 1), (279, LONG, 1))
    size = 2 + 12 * len(items) + 4
    for page in range(pages):
        out += struct.pack("<H", len(items))
        for tag, type_, value in items:
            out += struct.pack("<HHL", tag, type_, 1) + struct.pack("<L", value)
        out += struct.pack("<L", len(out) + 4 if page + 1 < pages else 0)
    assert len(out) == 10 + size * pages
    return bytes(out)


def tiff_orientation_huge_rational(total: int) -> bytes:
    """A TIFF whose own directory holds Orientation 6 and a huge RATIONAL tag."""
    width, height = 8, 6
    pixels = noisy((width, height), seed=3, mode="L").tobytes()
    count = max(1, total // 8)
    entries = [
        entry(256, SHORT, width), entry(257, SHORT, height), entry(258, SHORT, 8), entry(259, SHORT, 1),
        entry(262, SHORT, 1), entry(273, LONG, 8), entry(ORIENTATION, SHORT, 6), entry(277, SHORT, 1),
        entry(278, SHORT, height), entry(279, LONG, len(pixels)),
        Entry(0xC000, RATIONAL, count, struct.pack("<LL", 1, 3) * count),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=pixels)


def tiff_extra_strips(strips: int) -> bytes:
    """An 8x6 grayscale TIFF (one strip needed) whose StripOffsets lists ``strips`` strips."""
    pixels = noisy((8, 6), seed=3, mode="L").tobytes()
    entries = [
        entry(256, SHORT, 8), entry(257, SHORT, 6), entry(258, SHORT, 8), entry(259, SHORT, 1),
        entry(262, SHORT, 1), entry(277, SHORT, 1), entry(278, SHORT, 6),
        Entry(273, LONG, strips, struct.pack("<L", 8) * strips),
        Entry(279, LONG, strips, struct.pack("<L", len(pixels)) * strips),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=pixels)
