"""Header surgery: images whose headers declare another size (pixel bombs)."""

from __future__ import annotations

import struct
import zlib

from .base import base_image
from .exif import PNG_SIGNATURE, png_chunk, riff, riff_chunks


def jpeg_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("JPEG"))
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def png_with_size(width: int, height: int) -> bytes:
    idat = png_chunk(b"IDAT", zlib.compress(b"\x00" * 16))
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return PNG_SIGNATURE + ihdr + idat + png_chunk(b"IEND", b"")


def gif_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("GIF"))
    struct.pack_into("<HH", data, 6, width, height)  # logical screen
    descriptor = data.index(b"\x2c", 13 + 3 * 2 ** ((data[10] & 7) + 1))
    struct.pack_into("<HH", data, descriptor + 5, width, height)
    return bytes(data)


def bmp_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("BMP"))
    struct.pack_into("<ii", data, 18, width, height)
    return bytes(data)


def webp_vp8l_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("WEBP"))
    assert data[12:16] == b"VP8L" and data[20] == 0x2F
    bits = struct.unpack_from("<I", data, 21)[0]
    bits = (bits & ~0x0FFFFFFF) | ((width - 1) & 0x3FFF) | (((height - 1) & 0x3FFF) << 14)
    struct.pack_into("<I", data, 21, bits)
    return bytes(data)


def webp_vp8x_with_canvas(width: int, height: int) -> bytes:
    """An extended WebP whose VP8X canvas is ``width`` x ``height`` around a 16x12 frame."""
    frame = riff_chunks(base_image("WEBP"))
    vp8x = struct.pack("<I", 0) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return riff([(b"VP8X", vp8x), *frame])
