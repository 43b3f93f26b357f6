"""What the decode-budget test modules (``test_guard_*.py``, ``test_pixel_limit.py``) share.

Encoding an image, a photo-like image, what the check says about some bytes
(:func:`refusal`), whether the whole loader keys them (:func:`loads`), and the
normal files Pillow cannot write or that several modules build: tiled TIFFs,
animations, a phone-like JPEG.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from typing import Any

from PIL import Image, ImageCms

from mmobs import BadImageError, ImageMediaIO, MultiModalHasher
from mmobs.keys.guard import DEFAULT_DECODE_LIMITS, DecodeLimits, check_image_bytes
from scripts.corpus import costly
from scripts.corpus.tiff import LONG, SHORT, Entry, entry, tiff_bytes

ROOT = Path(__file__).resolve().parents[2]
MAX_PIXELS = 50_000_000


def encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def photo(size: tuple[int, int], seed: int = 0) -> Image.Image:
    return costly.photo_like(size, seed=seed)


def refusal(data: bytes, limits: DecodeLimits | None = None) -> BadImageError | None:
    """What the check says about ``data`` (``None``: accepted)."""
    try:
        check_image_bytes(data, limits, max_pixels=MAX_PIXELS)
    except BadImageError as error:
        return error
    return None


def loads(data: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> None:
    """The whole loader accepts ``data`` and keys it."""
    media = ImageMediaIO(decode_limits=limits).load_bytes(data)
    assert MultiModalHasher.hash_kwargs("blake3", image=media)


def tiled_tiff(size: tuple[int, int], tile: int, *, deflate: bool = False) -> bytes:
    """An RGB TIFF in ``tile`` x ``tile`` tiles (Pillow cannot write tiles), like a GIS or scanner file."""
    width, height = size
    image = photo(size)
    tiles = []
    for top in range(0, height, tile):
        for left in range(0, width, tile):
            block = Image.new("RGB", (tile, tile))
            block.paste(image.crop((left, top, min(left + tile, width), min(top + tile, height))))
            raw = block.tobytes()
            tiles.append(zlib.compress(raw) if deflate else raw)
    offsets, at = [], 8
    for data in tiles:
        offsets.append(at)
        at += len(data)
    entries = [
        entry(256, SHORT, width), entry(257, SHORT, height), entry(258, SHORT, 8, 8, 8),
        entry(259, SHORT, 8 if deflate else 1), entry(262, SHORT, 2), entry(277, SHORT, 3),
        entry(322, SHORT, tile), entry(323, SHORT, tile),
        Entry(324, LONG, len(tiles), b"".join(struct.pack("<L", o) for o in offsets)),
        Entry(325, LONG, len(tiles), b"".join(struct.pack("<L", len(t)) for t in tiles)),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=b"".join(tiles))


def animated(fmt: str, size: tuple[int, int], frames: int, **params: Any) -> bytes:
    images = [Image.new("RGB", size, (10 * i % 256, 80, 160)) for i in range(frames)]
    return encode(images[0], fmt, save_all=True, append_images=images[1:], duration=40, loop=0, **params)


def plain_jpeg_with_metadata() -> bytes:
    """A phone-like JPEG: EXIF with a rotation, an ICC profile, XMP and a comment."""
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "mmobs phone"
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    data = encode(photo((640, 480)), "JPEG", quality=90, exif=exif, icc_profile=icc, comment=b"shot on a phone")
    xmp = b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta xmlns:x='adobe:ns:meta/'/>"
    return data[:2] + costly.jpeg_segment(0xFFE1, xmp) + data[2:]
