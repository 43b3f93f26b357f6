"""DDS: the pixel count of uncompressed RGB textures.

Pillow decodes a DDS whose pixel format is uncompressed RGB or RGBA (``DDPF_RGB``) in Python
(``DdsRgbDecoder``), a pixel at a time: 1 to 2 s a megapixel on Pillow 11.3 to 13. Pillow before 12
decodes a file cut short as if its pixels were all there, so 188 bytes declaring 1179649x18 cost 22 s
there. Block-compressed (DXT, BCn), luminance and palette textures decode in C and are left alone.
"""

from __future__ import annotations

from mmobs.keys.guard._common import check_pixels, too_costly
from mmobs.keys.guard.limits import DecodeLimits

_HEADER_SIZE = 124
_DDPF_RGB = 0x40


def check_dds(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse an uncompressed RGB texture with more pixels than Pillow's Python decoder should walk."""
    if len(data) < 92 or int.from_bytes(data[4:8], "little") != _HEADER_SIZE:
        return  # Pillow refuses another header size itself
    height = int.from_bytes(data[12:16], "little")
    width = int.from_bytes(data[16:20], "little")
    check_pixels(width, height, max_pixels)
    pixel_format_flags = int.from_bytes(data[80:84], "little")
    if pixel_format_flags & _DDPF_RGB and width * height > limits.max_dds_rgb_pixels:
        raise too_costly(
            f"the uncompressed DDS is {width}x{height} = {width * height} pixels; Pillow decodes uncompressed "
            f"DDS textures in Python, so the limit for them is {limits.max_dds_rgb_pixels} pixels",
            "send it as PNG, or block-compressed (DXT/BCn)",
        )
