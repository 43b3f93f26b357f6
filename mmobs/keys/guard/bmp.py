"""BMP: the pixel count of RLE-compressed images.

Pillow decodes RLE8 and RLE4 bitmaps in Python (``BmpRleDecoder``), padding a
row to its end one byte at a time and expanding an RLE4 run one pixel at a
time: about 80 ns a pixel, so a 7000x7000 RLE bitmap of a few KiB costs
seconds. Uncompressed and bit-field bitmaps decode in C and are left alone.
"""

from __future__ import annotations

from mmobs.keys.guard._common import check_pixels, too_costly
from mmobs.keys.guard.limits import DecodeLimits

_RLE = {1: "RLE8", 2: "RLE4"}


def check_bmp(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse an RLE bitmap with more pixels than Pillow's Python decoder should walk."""
    header = int.from_bytes(data[14:18], "little")
    if header < 40 or len(data) < 34:
        return  # OS/2 core headers have no compression field
    width = abs(int.from_bytes(data[18:22], "little", signed=True))
    height = abs(int.from_bytes(data[22:26], "little", signed=True))
    check_pixels(width, height, max_pixels)
    compression = int.from_bytes(data[30:34], "little")
    if compression in _RLE and width * height > limits.max_bmp_rle_pixels:
        raise too_costly(
            f"the {_RLE[compression]} bitmap is {width}x{height} = {width * height} pixels; Pillow decodes "
            f"RLE bitmaps in Python, so the limit for them is {limits.max_bmp_rle_pixels} pixels",
            "send it uncompressed, or as PNG",
        )
