"""Decode budgets (``mmobs.keys.guard``): normal images pass.

Real-looking images that Pillow writes in every default format, as cameras,
phones and screenshots write them (a 49 MP JPEG among them), pass the check and
load; so do the images mmobs ships.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image, ImageCms

from mmobs.keys.guard import sniff_format
from scripts.corpus import costly
from tests.keys.guard_inputs import ROOT, animated, encode, loads, photo, plain_jpeg_with_metadata, refusal, tiled_tiff

pytestmark = pytest.mark.usefixtures("silent_observer")


def _normal_images() -> dict[str, Callable[[], bytes]]:
    exif = Image.Exif()
    exif[0x0112] = 8
    return {
        "jpeg-phone-metadata": plain_jpeg_with_metadata,
        "jpeg-progressive": lambda: encode(photo((1200, 900)), "JPEG", quality=85, progressive=True),
        "jpeg-progressive-gray": lambda: encode(photo((640, 480)).convert("L"), "JPEG", progressive=True),
        "jpeg-cmyk": lambda: encode(photo((320, 240)).convert("CMYK"), "JPEG"),
        "jpeg-restart-markers": lambda: encode(photo((640, 480)), "JPEG", restart_marker_rows=1),
        "jpeg-optimized-subsampling-444": lambda: encode(photo((640, 480)), "JPEG", optimize=True, subsampling=0),
        "png-16-bit-gray": lambda: encode(Image.new("I;16", (320, 240), 40000), "PNG"),
        "png-16-bit-rgb": lambda: _png_rgb16((320, 240)),
        "png-rgba-text-icc": lambda: encode(
            photo((400, 300)).convert("RGBA"), "PNG", pnginfo=_pnginfo(),
            icc_profile=ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes(),
        ),
        "png-exif-orientation": lambda: encode(photo((300, 200)), "PNG", exif=exif),
        "png-palette": lambda: encode(photo((300, 200)).quantize(64), "PNG", optimize=True),
        "apng-30-frames": lambda: animated("PNG", (120, 90), 30),
        "gif-animated-60-frames": lambda: animated("GIF", (200, 150), 60),
        "gif-still": lambda: encode(photo((320, 240)).quantize(256), "GIF"),
        "webp-lossy-photo": lambda: encode(photo((1600, 1200)), "WEBP", quality=80),
        "webp-lossless-rgba-exif": lambda: encode(photo((300, 200)).convert("RGBA"), "WEBP", lossless=True, exif=exif),
        "webp-animated-40-frames": lambda: animated("WEBP", (160, 120), 40),
        "tiff-tiled-256": lambda: tiled_tiff((600, 400), 256),
        "tiff-tiled-deflate": lambda: tiled_tiff((600, 400), 128, deflate=True),
        "tiff-lzw": lambda: encode(photo((640, 480)), "TIFF", compression="tiff_lzw"),
        "tiff-deflate-multipage": lambda: animated("TIFF", (200, 150), 12, compression="tiff_adobe_deflate"),
        "tiff-16-bit-gray": lambda: encode(Image.new("I;16", (320, 240), 1000), "TIFF"),
        "tiff-exif-orientation": lambda: encode(photo((300, 200)), "TIFF", exif=exif),
        "bmp-24-bit": lambda: encode(photo((640, 480)), "BMP"),
        "bmp-8-bit-palette": lambda: encode(photo((640, 480)).quantize(256), "BMP"),
        "screenshot-png-2560x1600": lambda: encode(_screenshot((2560, 1600)), "PNG"),
    }  # fmt: skip


def _png_rgb16(size: tuple[int, int]) -> bytes:
    """A 16-bit-per-channel RGB PNG (Pillow cannot write one; phones and editors do)."""
    import numpy as np

    width, height = size
    plane = (np.arange(width * height, dtype=">u2") * 7).reshape(height, width)
    rows = np.stack([plane, plane[::-1], plane[:, ::-1]], axis=-1).astype(">u2").tobytes()
    stride = width * 6
    raw = b"".join(b"\0" + rows[y * stride : (y + 1) * stride] for y in range(height))
    ihdr = costly.png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0))
    return costly.PNG_SIGNATURE + ihdr + costly.png_chunk(b"IDAT", zlib.compress(raw)) + costly.png_chunk(b"IEND", b"")


def _pnginfo() -> Any:
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("parameters", "a long prompt " * 200)
    info.add_text("workflow", "{}" * 5000, zip=True)
    info.add_itxt("XML:com.adobe.xmp", "<x:xmpmeta xmlns:x='adobe:ns:meta/'/>" * 50, zip=True)
    return info


def _screenshot(size: tuple[int, int]) -> Image.Image:
    image = Image.new("RGB", size, (250, 250, 250))
    for i in range(0, size[1], 40):
        image.paste((30, 30, 30), (40, i + 10, size[0] // 2, i + 24))
    return image


NORMAL = _normal_images()


@pytest.mark.parametrize("name", sorted(NORMAL))
def test_normal_images_pass_and_load(name: str) -> None:
    data = NORMAL[name]()
    assert sniff_format(data) is not None
    assert refusal(data) is None, refusal(data)
    loads(data)


def test_49_megapixel_photo_passes() -> None:
    """A 49 MP baseline JPEG is a normal camera file (progressive ones are in NORMAL, at 1200x900)."""
    ramp = Image.linear_gradient("L").resize(costly.PLAIN_SIZE)  # cheap to make; the scan data is not read anyway
    flipped, turned = ramp.transpose(Image.Transpose.FLIP_LEFT_RIGHT), ramp.transpose(Image.Transpose.ROTATE_90)
    image = Image.merge("RGB", [ramp, flipped, turned])
    assert refusal(encode(image, "JPEG", quality=90)) is None


def test_reference_inputs_and_goldens_pass() -> None:
    """The images mmobs ships (fingerprint references) pass; test_golden.py keys the goldens unchanged."""
    for path in sorted((ROOT / "mmobs" / "reference").iterdir()):
        assert refusal(path.read_bytes()) is None, path.name
