"""Costly BMPs: RLE bitmaps of end-of-line codes and of runs.

Pillow's RLE decoder is Python, and pads a row one byte at a time.
"""

from __future__ import annotations

import struct


def bmp_rle(size: tuple[int, int], body: bytes, bits: int = 8) -> bytes:
    """A BMP (BITMAPINFOHEADER) with ``RLE8``/``RLE4`` compressed data ``body``."""
    width, height = size
    colours = 2**bits
    palette = b"".join(bytes((i, i, i, 0)) for i in range(colours))
    offset = 14 + 40 + len(palette)
    compression = 1 if bits == 8 else 2
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, compression, len(body), 2835, 2835, colours, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset) + info + palette + body


def bmp_rle_end_of_lines(size: tuple[int, int]) -> bytes:
    """RLE8 rows of one pixel and an end-of-line code: Pillow pads every row a byte at a time."""
    return bmp_rle(size, b"\x01\x07\x00\x00" * size[1] + b"\x00\x01")


def bmp_rle4_runs(size: tuple[int, int]) -> bytes:
    """RLE4 runs of 255 pixels: Pillow's decoder loops once per pixel in Python."""
    width, height = size
    row = b"\xff\x12" * (width // 255) + bytes((width % 255, 0x12)) + b"\x00\x00"
    return bmp_rle(size, row * height + b"\x00\x01", bits=4)
