"""Costly JPEGs: marker-segment floods (Exif, APP0, COM, Photoshop, ICC), fill and junk bytes, repeated scans.

Pillow's marker parser is Python: it appends every ``APP1 Exif`` segment to ``info["exif"]`` with ``+=``
(quadratic), keeps every APPn/COM segment in ``applist``, and steps over fill bytes and junk one ``read(1)``
at a time. libjpeg decodes a progressive image once per scan, over the whole coefficient buffer.
"""

from __future__ import annotations

import io
import struct

from PIL import Image

from ..base import base_image
from ..exif import EXIF_PREFIX


def jpeg_segment(marker: int, payload: bytes) -> bytes:
    """One marker segment: ``FF xx``, the big-endian length (2 + payload), the payload."""
    return struct.pack(">HH", marker, len(payload) + 2) + payload


def jpeg_with_segments(segments: bytes, base: bytes | None = None) -> bytes:
    """``segments`` inserted right after SOI, where Pillow's header parser reads them."""
    base = base_image("JPEG") if base is None else base
    return base[:2] + segments + base[2:]


def jpeg_exif_segment_flood(total: int, each: int = 10) -> bytes:
    """Many small ``APP1 Exif`` segments: Pillow joins them with ``+=`` (quadratic; worst near 10 bytes each)."""
    one = jpeg_segment(0xFFE1, EXIF_PREFIX + b"\0" * each)
    return jpeg_with_segments(one * (total // len(one)))


def jpeg_app0_flood(total: int) -> bytes:
    """Empty ``APP0`` segments (4 bytes each): one tuple and one bytes in ``applist`` each."""
    one = jpeg_segment(0xFFE0, b"")
    return jpeg_with_segments(one * (total // len(one)))


def jpeg_com_flood(total: int) -> bytes:
    """Empty ``COM`` segments."""
    one = jpeg_segment(0xFFFE, b"")
    return jpeg_with_segments(one * (total // len(one)))


def jpeg_fill_flood(total: int) -> bytes:
    """Fill bytes (``FF``) before a marker: legal, and read one at a time."""
    base = base_image("JPEG")
    return base[:2] + b"\xff" * total + base[2:]


def jpeg_junk_flood(total: int) -> bytes:
    """Non-marker junk between segments: Pillow skips it a byte at a time."""
    base = base_image("JPEG")
    return base[:2] + jpeg_segment(0xFFFE, b"x") + b"\x00" * total + base[2:]


def jpeg_photoshop_flood(total: int) -> bytes:
    """Full APP13 ``Photoshop 3.0`` segments of empty 8BIM resources: Pillow parses each one in Python."""
    resource = b"8BIM" + struct.pack(">H", 0x0404) + b"\0\0" + struct.pack(">I", 0)
    one = jpeg_segment(0xFFED, b"Photoshop 3.0\x00" + resource * ((65533 - 2 - 14) // len(resource)))
    return jpeg_with_segments(one * max(1, total // len(one)))


def jpeg_icc_chain(segments: int, each: int) -> bytes:
    """An ``ICC_PROFILE`` APP2 chain of ``segments`` pieces of ``each`` bytes."""
    count = min(segments, 255)
    body = b"".join(
        jpeg_segment(0xFFE2, b"ICC_PROFILE\0" + bytes([i % 255 + 1, count]) + b"\0" * each) for i in range(segments)
    )
    return jpeg_with_segments(body)


def progressive_jpeg(size: tuple[int, int], mode: str = "RGB") -> bytes:
    """A flat progressive JPEG: cheap to encode at any size, every scan tiny."""
    buffer = io.BytesIO()
    Image.new(mode, size, 128 if mode == "L" else (128, 96, 64)).save(buffer, "JPEG", progressive=True, quality=75)
    return buffer.getvalue()


def jpeg_scans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every scan (SOS segment and its entropy-coded data) of a JPEG."""
    scans, at = [], 2
    while at + 4 <= len(data):
        marker, length = struct.unpack_from(">HH", data, at)
        if marker == 0xFFD9:
            break
        end = at + 2 + length
        if marker == 0xFFDA:
            while True:  # entropy-coded data runs to the next marker that is not RSTn or a stuffed 00
                end = data.index(b"\xff", end)
                if data[end + 1] not in (0x00, *range(0xD0, 0xD8)):
                    break
                end += 2
            scans.append((at, end))
        at = end
    return scans


def jpeg_repeated_scans(size: tuple[int, int], repeats: int) -> bytes:
    """A progressive JPEG whose first AC scan is repeated ``repeats`` times.

    libjpeg warns about the inconsistent progression and decodes every copy,
    each over the whole coefficient buffer.
    """
    data = progressive_jpeg(size)
    ac = next((start, end) for start, end in jpeg_scans(data) if data[start + 5 + 2 * data[start + 4]] > 0)
    start, end = ac
    return data[:end] + data[start:end] * repeats + data[end:]
