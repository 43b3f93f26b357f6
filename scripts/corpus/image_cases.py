"""The image cases: EXIF in every container, TIFF files, truncations, pixel bombs, non-images.

The EXIF cases are built in ``exif_cases.py``, the TIFF files in ``tiff_cases.py``; what the
cases that are not EXIF variants must get is in ``image_expect.py``.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from .base import EXTENSIONS, MEDIA_TYPES, base_image, noisy
from .case import Case, bad
from .exif import (
    PNG_SIGNATURE,
    png_chunk,
)
from .exif_cases import _exif_cases
from .headers import (
    bmp_with_size,
    gif_with_size,
    jpeg_with_size,
    png_with_size,
    webp_vp8l_with_size,
    webp_vp8x_with_canvas,
)
from .image_expect import _extra
from .tiff import (
    LONG,
    entry,
    tiff_image,
)
from .tiff_cases import _tiff_cases


def _image_cases() -> list[Case]:
    cases: list[Case] = []

    def add(name: str, data: bytes, expect: tuple, note: str, fmt: str = "JPEG") -> None:
        cases.append(Case(name, "image", data, expect, note, media_type=MEDIA_TYPES[fmt]))

    cases += _exif_cases()

    # -- TIFF files: the TIFF structure is both the image and its EXIF -----------------
    for name, data, note in _tiff_cases():
        add(name, data, _extra(name), note, "TIFF")

    # -- truncations of each format ------------------------------------------------------
    for fmt in ("JPEG", "PNG", "WEBP", "GIF", "TIFF", "BMP"):
        whole = base_image(fmt, size=(40, 30))
        ext = EXTENSIONS[fmt]
        add(
            f"truncated-half.{ext}",
            whole[: len(whole) // 2],
            _extra(f"truncated-half.{ext}"),
            "the first half of a valid file",
            fmt,
        )
        add(f"truncated-header.{ext}", whole[:16], _extra(f"truncated-header.{ext}"), "the first 16 bytes", fmt)
        add(
            f"truncated-last-byte.{ext}", whole[:-1], _extra(f"truncated-last-byte.{ext}"), "all but the last byte", fmt
        )

    # -- pixel bombs: headers that declare huge images -----------------------------------
    bombs = [
        ("bomb-40000x40000.png", png_with_size(40000, 40000), "PNG"),
        ("bomb-8000x7000.png", png_with_size(8000, 7000), "PNG"),  # 56 MP: over mmobs's limit, under Pillow's
        ("bomb-100000000x1.png", png_with_size(100_000_000, 1), "PNG"),
        ("bomb-40000x40000.jpg", jpeg_with_size(40000, 40000), "JPEG"),
        ("bomb-10000x10000.jpg", jpeg_with_size(10000, 10000), "JPEG"),  # between Pillow's warning and error
        ("bomb-40000x40000.gif", gif_with_size(40000, 40000), "GIF"),
        ("bomb-40000x40000.bmp", bmp_with_size(40000, 40000), "BMP"),
        ("bomb-40000x-40000.bmp", bmp_with_size(40000, -40000), "BMP"),
        (
            "bomb-40000x40000.tif",
            tiff_image(size=(8, 6), replace={256: entry(256, LONG, 40000), 257: entry(257, LONG, 40000)}),
            "TIFF",
        ),
        ("bomb-16384x16384-vp8l.webp", webp_vp8l_with_size(16384, 16384), "WEBP"),
        ("bomb-40000x40000-vp8x.webp", webp_vp8x_with_canvas(40000, 40000), "WEBP"),
        ("bomb-8000x7000-vp8x.webp", webp_vp8x_with_canvas(8000, 7000), "WEBP"),
        ("bomb-8000x7000-vp8l.webp", webp_vp8l_with_size(8000, 7000), "WEBP"),
    ]
    for name, data, fmt in bombs:
        add(name, data, _extra(name), "a header that declares more pixels than allowed", fmt)
    add("zero-size.png", png_with_size(0, 0), _extra("zero-size.png"), "IHDR of 0x0", "PNG")

    # -- not images at all -----------------------------------------------------------------
    rng = np.random.default_rng(7)
    add("empty.bin", b"", bad("empty"), "no bytes at all")
    add("random-4k.bin", rng.bytes(4096), bad("unidentified"), "4 KiB of random bytes")
    add("text.txt", b"this is a plain text file, not an image\n" * 20, bad("unidentified"), "text")
    add("html.html", b"<!doctype html><html><body><img src=x></body></html>", bad("unidentified"), "an HTML page")
    add(
        "svg.svg",
        b'<svg xmlns="http://www.w3.org/2000/svg" width="40000" height="40000"/>',
        bad("unidentified"),
        "SVG is not decoded",
    )
    add("one-byte.bin", b"\xff", bad("unidentified"), "a single byte")
    add(
        "format-tga.tga",
        _tga_bytes(),
        bad("unsupported_format"),
        "a TGA image: vLLM opens it, mmobs's default formats do not",
    )
    add("jpeg-soi-only.jpg", b"\xff\xd8", _extra("jpeg-soi-only.jpg"), "just a JPEG SOI marker")
    add("png-signature-only.png", PNG_SIGNATURE, _extra("png-signature-only.png"), "just the PNG signature", "PNG")
    add(
        "riff-webp-empty.webp",
        b"RIFF\x04\x00\x00\x00WEBP",
        bad("unidentified"),
        "a RIFF header and nothing else",
        "WEBP",
    )
    add(
        "png-garbage-idat.png",
        PNG_SIGNATURE
        + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
        + png_chunk(b"IDAT", b"\x00 not a zlib stream")
        + png_chunk(b"IEND", b""),
        bad("corrupt"),
        "an IDAT that is not zlib",
        "PNG",
    )
    return cases


def _tga_bytes() -> bytes:
    buffer = io.BytesIO()
    noisy((8, 6)).save(buffer, "TGA")
    return buffer.getvalue()
