"""The EXIF image cases: malformed (and control) EXIF blocks in JPEG, PNG and WebP, raw profiles, MPF segments."""

from __future__ import annotations

import struct
import zlib

from PIL import Image

from .base import EXTENSIONS, MEDIA_TYPES, base_image, encode, noisy
from .case import Case, ok
from .exif import (
    EXIF_PREFIX,
    EXIF_VARIANTS,
    PNG_SIGNATURE,
    _exif_expectation,
    _valid_exif,
    exif_in,
    jpeg_with_exif,
    png_chunk,
    png_with_exif,
    riff,
    riff_chunks,
    webp_with_exif,
)
from .image_expect import _extra
from .tiff import (
    ORIENTATION,
    SHORT,
    entry,
    tiff_bytes,
)


def _exif_cases() -> list[Case]:
    cases: list[Case] = []

    def add(name: str, data: bytes, expect: tuple, note: str, fmt: str = "JPEG") -> None:
        cases.append(Case(name, "image", data, expect, note, media_type=MEDIA_TYPES[fmt]))

    # -- EXIF blocks in JPEG, PNG and WebP -------------------------------------------
    for variant, (tiff, note) in EXIF_VARIANTS.items():
        for container in ("JPEG", "PNG", "WEBP"):
            name = f"exif-{variant}.{EXTENSIONS[container]}"
            add(name, exif_in(container, tiff), _exif_expectation(variant, container), note, container)
    add(
        "exif-bad-tiff-header-after-idat.png",
        png_with_exif(b"XXXX\x00\x00\x00\x08", after_idat=True),
        _extra("exif-bad-tiff-header-after-idat.png"),
        "eXIf after IDAT: Pillow only sees it when loading",
        "PNG",
    )
    add(
        "exif-short-ifd-after-idat.png",
        png_with_exif(EXIF_VARIANTS["short-ifd"][0], after_idat=True),
        _extra("exif-short-ifd-after-idat.png"),
        "short IFD in an eXIf chunk after IDAT",
        "PNG",
    )
    add(
        "exif-bad-then-good-segments.jpg",
        jpeg_with_exif(b"XXXX\x00\x00\x00\x08", jpeg_with_exif(_valid_exif())),
        _extra("exif-bad-then-good-segments.jpg"),
        "two APP1 EXIF segments, the first broken",
    )
    add(
        "exif-app1-length-past-end.jpg",
        base_image("JPEG")[:2] + b"\xff\xe1\xff\xf0" + EXIF_PREFIX + b"II*\x00",
        _extra("exif-app1-length-past-end.jpg"),
        "an APP1 segment longer than the file",
    )
    add(
        "exif-chunk-bad-crc.png",
        _png_exif_bad_crc(),
        _extra("exif-chunk-bad-crc.png"),
        "an eXIf chunk whose CRC is wrong",
        "PNG",
    )
    add(
        "exif-chunk-size-past-end.webp",
        _webp_exif_size_past_end(),
        _extra("exif-chunk-size-past-end.webp"),
        "an EXIF chunk whose RIFF size runs past the file",
        "WEBP",
    )
    add(
        "exif-flag-without-chunk.webp",
        _webp_exif_flag_without_chunk(),
        _extra("exif-flag-without-chunk.webp"),
        "VP8X says EXIF follows; no EXIF chunk",
        "WEBP",
    )
    # The image mode decides whether the loader's conversion hands the hasher a fresh
    # EXIF parse (convert() copies info) or none at all (RGBA and LA, like every image with
    # transparency, are composited onto a new image).
    bad_header, short_header = EXIF_VARIANTS["bad-tiff-header"][0], EXIF_VARIANTS["short-tiff-header"][0]
    for mode in ("L", "P", "LA", "RGBA"):
        base = encode(_mode_image(mode), "PNG")
        add(
            f"exif-bad-tiff-header-{mode.lower()}.png",
            png_with_exif(bad_header, base),
            _extra(f"exif-bad-tiff-header-{mode.lower()}.png"),
            f"the vLLM header in a mode {mode} PNG",
            "PNG",
        )
    add(
        "exif-short-tiff-header-l.png",
        png_with_exif(short_header, encode(_mode_image("L"), "PNG")),
        _extra("exif-short-tiff-header-l.png"),
        "a short TIFF header in a grayscale PNG",
        "PNG",
    )
    add(
        "exif-bad-tiff-header-rgba.webp",
        encode(_mode_image("RGBA"), "WEBP", exif=EXIF_PREFIX + bad_header),
        _extra("exif-bad-tiff-header-rgba.webp"),
        "the vLLM header in an RGBA WebP",
        "WEBP",
    )
    add(
        "exif-bad-tiff-header-l.jpg",
        jpeg_with_exif(bad_header, encode(_mode_image("L"), "JPEG")),
        _extra("exif-bad-tiff-header-l.jpg"),
        "the vLLM header in a grayscale JPEG",
        "JPEG",
    )
    add(
        "exif-bad-tiff-header-cmyk.jpg",
        jpeg_with_exif(bad_header, encode(_mode_image("CMYK"), "JPEG")),
        _extra("exif-bad-tiff-header-cmyk.jpg"),
        "the vLLM header in a CMYK JPEG",
        "JPEG",
    )
    # PNG text chunks may carry EXIF as hex ("Raw profile type exif", ImageMagick's way).
    for mode in ("RGB", "L"):
        base = encode(_mode_image(mode), "PNG")
        suffix = "" if mode == "RGB" else "-l"
        add(
            f"raw-profile-exif-bad-hex{suffix}.png",
            _png_with_text(base, b"tEXt", b"\nexif\n      10\nzz not hex\n"),
            _extra(f"raw-profile-exif-bad-hex{suffix}.png"),
            "a Raw profile type exif text chunk that is not hex",
            "PNG",
        )
        add(
            f"raw-profile-exif-bad-tiff{suffix}.png",
            _png_with_text(base, b"zTXt", _raw_profile(bad_header)),
            _extra(f"raw-profile-exif-bad-tiff{suffix}.png"),
            "a compressed Raw profile type exif holding the vLLM header",
            "PNG",
        )
    # A JPEG with an MPF (multi-picture) APP2 segment opens as MPO; break its TIFF header.
    for label, tiff in (("bad", bad_header), ("short", short_header)):
        payload = b"MPF\x00" + tiff
        jpeg = base_image("JPEG")
        add(
            f"mpf-{label}-tiff-header.jpg",
            jpeg[:2] + b"\xff\xe2" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:],
            _extra(f"mpf-{label}-tiff-header.jpg"),
            f"an MPF segment with a {label} TIFF header",
        )
    add("exif-valid.jpg", jpeg_with_exif(_valid_exif()), ok(False), "a well-formed EXIF block (control)")
    add(
        "exif-orientation-6-valid.webp",
        webp_with_exif(tiff_bytes([entry(ORIENTATION, SHORT, 6)])),
        ok(False),
        "a well-formed rotation (control)",
        "WEBP",
    )
    return cases


def _raw_profile(tiff: bytes) -> bytes:
    blob = EXIF_PREFIX + tiff
    return b"\nexif\n" + b"%8d\n" % len(blob) + blob.hex().encode() + b"\n"


def _png_with_text(base: bytes, kind: bytes, value: bytes) -> bytes:
    keyword = b"Raw profile type exif\x00"
    data = keyword + (b"\x00" + zlib.compress(value) if kind == b"zTXt" else value)
    ihdr_end = len(PNG_SIGNATURE) + 8 + 13 + 4
    return base[:ihdr_end] + png_chunk(kind, data) + base[ihdr_end:]


def _png_exif_bad_crc() -> bytes:
    base = base_image("PNG")
    ihdr_end = len(PNG_SIGNATURE) + 8 + 13 + 4
    return base[:ihdr_end] + png_chunk(b"eXIf", _valid_exif(), crc=0xDEADBEEF) + base[ihdr_end:]


def _webp_exif_size_past_end() -> bytes:
    chunks = riff_chunks(webp_with_exif(b"XXXX\x00\x00\x00\x08"))
    return riff(chunks, size_override={b"EXIF": 0x7FFFFF00})


def _webp_exif_flag_without_chunk() -> bytes:
    chunks = riff_chunks(webp_with_exif(_valid_exif()))
    return riff([(kind, payload) for kind, payload in chunks if kind != b"EXIF"])


def _mode_image(mode: str) -> Image.Image:
    if mode == "P":
        return noisy((16, 12), seed=1).quantize(32)
    return noisy((16, 12), seed=1, mode=mode)
