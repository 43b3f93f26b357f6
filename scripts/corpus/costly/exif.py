"""Costly EXIF: an Orientation with one huge RATIONAL tag, in an EXIF block, a PNG ``eXIf`` chunk or JPEG APP1s.

``exif_transpose`` re-serialises every tag when it rotates, turning each RATIONAL into a Python object.
"""

from __future__ import annotations

import struct

from ..exif import EXIF_PREFIX, png_chunk
from ..tiff import ORIENTATION, RATIONAL, SHORT, Entry, entry, tiff_bytes
from .jpeg import jpeg_segment, jpeg_with_segments
from .png import png_with_chunks


def exif_huge_rational(total: int, orientation: int = 6) -> bytes:
    """An EXIF TIFF with ``Orientation`` and one RATIONAL tag of ``total`` bytes of values."""
    count = max(1, total // 8)
    values = struct.pack("<LL", 1, 3) * count
    return tiff_bytes([entry(ORIENTATION, SHORT, orientation), Entry(0xC000, RATIONAL, count, values)])


def png_exif_huge_rational(total: int) -> bytes:
    """A PNG ``eXIf`` with Orientation 6 and a huge RATIONAL: the transpose re-serialises it."""
    return png_with_chunks(png_chunk(b"eXIf", exif_huge_rational(total)))


def jpeg_exif_huge_rational(total: int) -> bytes:
    """The same EXIF split over APP1 segments (Pillow joins consecutive ``Exif`` segments)."""
    blob = exif_huge_rational(total)
    first, rest = blob[:65000], blob[65000:]
    segments = jpeg_segment(0xFFE1, EXIF_PREFIX + first) + b"".join(
        jpeg_segment(0xFFE1, EXIF_PREFIX + rest[i : i + 65000]) for i in range(0, len(rest), 65000)
    )
    return jpeg_with_segments(segments)
