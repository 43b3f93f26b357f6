"""The image cases: EXIF in every container, TIFF files, truncations, pixel bombs, non-images."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

from .base import EXTENSIONS, MEDIA_TYPES, base_image, encode, noisy
from .case import Case, bad, ok
from .exif import (
    _UUID,
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
from .headers import (
    bmp_with_size,
    gif_with_size,
    jpeg_with_size,
    png_with_size,
    webp_vp8l_with_size,
    webp_vp8x_with_canvas,
)
from .tiff import (
    ASCII,
    BYTE,
    EXIF_IFD,
    IMAGE_DESCRIPTION,
    IMAGE_ID,
    LONG,
    ORIENTATION,
    RATIONAL,
    SHORT,
    SOFTWARE,
    UNDEFINED,
    XMP,
    Entry,
    entry,
    raw_entry,
    tiff_bytes,
    tiff_image,
)


def _image_cases() -> list[Case]:
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


def _mode_image(mode: str) -> Image.Image:
    if mode == "P":
        return noisy((16, 12), seed=1).quantize(32)
    return noisy((16, 12), seed=1, mode=mode)


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


def _tiff_cases() -> list[tuple[str, bytes, str]]:
    s = SHORT
    return [
        ("tiff-valid.tif", tiff_image(), "a hand-built 8x6 RGB TIFF (control)"),
        ("tiff-bad-magic.tif", b"II*\x01" + tiff_image()[4:], "a TIFF with a wrong version number"),
        ("tiff-ifd-offset-out-of-range.tif", tiff_image(ifd_offset=0x7FFFFFF0), "IFD0 past the end"),
        ("tiff-short-ifd.tif", tiff_image(count=40), "IFD0 declares 40 entries, holds 9"),
        ("tiff-huge-entry-count.tif", tiff_image(count=0xFFFF), "IFD0 declares 65535 entries"),
        ("tiff-ifd-self-loop.tif", tiff_image(next_ifd="self"), "IFD0 links to itself"),
        (
            "tiff-exif-ifd-self-loop.tif",
            tiff_image([raw_entry(EXIF_IFD, LONG, 1, 8 + 8 * 6 * 3)]),
            "the Exif sub-IFD is IFD0",
        ),
        (
            "tiff-exif-ifd-out-of-range.tif",
            tiff_image([raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]),
            "the Exif sub-IFD past the end",
        ),
        (
            "tiff-strip-offset-out-of-range.tif",
            tiff_image(replace={273: raw_entry(273, LONG, 1, 0x7FFFFFF0)}),
            "pixels past the end",
        ),
        (
            "tiff-strip-bytes-huge.tif",
            tiff_image(replace={279: raw_entry(279, LONG, 1, 0x7FFFFFF0)}),
            "a strip of 2 GiB",
        ),
        ("tiff-width-ascii.tif", tiff_image(replace={256: entry(256, ASCII, "8")}), "ImageWidth as a string"),
        (
            "tiff-bits-per-sample-wrong-count.tif",
            tiff_image(replace={258: entry(258, s, 8)}),
            "one BitsPerSample for three samples",
        ),
        ("tiff-unknown-compression.tif", tiff_image(replace={259: entry(259, s, 60000)}), "compression 60000"),
        ("tiff-unknown-type.tif", tiff_image([Entry(SOFTWARE, 99, 4, raw=b"abcd")]), "a field of type 99"),
        (
            "tiff-value-offset-out-of-range.tif",
            tiff_image([raw_entry(IMAGE_DESCRIPTION, ASCII, 64, 0xFFFFFF00)]),
            "an ASCII value past the end",
        ),
        ("tiff-orientation-6.tif", tiff_image([entry(ORIENTATION, s, 6)]), "a real rotation"),
        (
            "tiff-orientation-6-exif-ifd-out-of-range.tif",
            tiff_image([entry(ORIENTATION, s, 6), raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]),
            "a rotation and a broken sub-IFD",
        ),
        ("tiff-orientation-ascii.tif", tiff_image([entry(ORIENTATION, ASCII, "6")]), "Orientation as a string"),
        ("tiff-imageid-string.tif", tiff_image([entry(IMAGE_ID, ASCII, "not-a-uuid")]), "ImageID as a string"),
        ("tiff-imageid-int.tif", tiff_image([entry(IMAGE_ID, LONG, 12345)]), "ImageID as a LONG"),
        ("tiff-imageid-bytes.tif", tiff_image([entry(IMAGE_ID, UNDEFINED, _UUID)]), "ImageID as 16 bytes"),
        ("tiff-big-endian.tif", tiff_image(endian=">"), "a valid big-endian TIFF (control)"),
        # Found by the fuzzer (atheris): Pillow puts a TIFF's XMP tag (700) into info["xmp"] as
        # decoded, and getexif() runs a bytes regex over it when the EXIF has no Orientation:
        # TypeError unless the tag really is bytes. Without an Orientation tag, Pillow's own
        # TIFF load() calls getexif() and fails (refused, corrupt); with one, the file loads,
        # the loader hands the hasher a copy whose EXIF is empty, and the hasher's read raises.
        ("tiff-xmp-short.tif", tiff_image([entry(XMP, s, 2)]), "the XMP tag as a SHORT"),
        (
            "tiff-xmp-ascii-l.tif",
            tiff_image([entry(XMP, ASCII, 'tiff:Orientation="6"')], mode="L"),
            "the XMP tag as ASCII text, grayscale",
        ),
        (
            "tiff-xmp-short-with-orientation.tif",
            tiff_image([entry(ORIENTATION, s, 1), entry(XMP, s, 2)]),
            "the XMP tag as a SHORT next to Orientation 1 (the fuzzer's input, rebuilt)",
        ),
        (
            "tiff-xmp-ascii-with-orientation-l.tif",
            tiff_image([entry(ORIENTATION, s, 1), entry(XMP, ASCII, "x")], mode="L"),
            "the XMP tag as ASCII next to Orientation 1, grayscale",
        ),
        (
            "tiff-xmp-rational-with-orientation.tif",
            tiff_image([entry(ORIENTATION, s, 1), entry(XMP, RATIONAL, (1, 3))]),
            "the XMP tag as a RATIONAL next to Orientation 1",
        ),
        (
            "tiff-xmp-bytes-orientation-l.tif",
            tiff_image([entry(XMP, BYTE, *b'<x tiff:Orientation="6"/>')], mode="L"),
            "a well-formed XMP orientation in a grayscale TIFF (control)",
        ),
        ("tiff-endian-mismatch.tif", b"MM\x00*" + tiff_image()[4:], "big-endian marker, little-endian body"),
    ]


#: Expectations of the other image cases, observed and reviewed one by one.
#: Classification notes: libwebp reports any damage (truncation included) as
#: "could not create decoder object", so WebP truncations are ``corrupt``; a PNG
#: ancillary chunk with a bad CRC makes Pillow's open raise SyntaxError, which
#: Image.open reports as unidentified. A TIFF's own directory is its EXIF, and Pillow's
#: TIFF load() reads it (and applies the orientation) itself: damage there is refused as
#: corrupt or tolerated with a warning, and the hasher, which gets a copy without the
#: directory, only meets what sits in ``info`` (the XMP cases).
EXTRA_EXPECT: dict[str, tuple] = {
    "exif-bad-tiff-header-after-idat.png": ok(False),
    "exif-short-ifd-after-idat.png": ok(False),
    "exif-bad-then-good-segments.jpg": ok(True),
    "exif-app1-length-past-end.jpg": bad("truncated"),
    "exif-chunk-bad-crc.png": bad("unidentified"),
    "exif-chunk-size-past-end.webp": bad("corrupt"),
    "exif-flag-without-chunk.webp": ok(False),
    "exif-bad-tiff-header-l.png": ok(True),
    "exif-bad-tiff-header-p.png": ok(True),
    "exif-bad-tiff-header-la.png": ok(False),
    "exif-bad-tiff-header-rgba.png": ok(False),
    "exif-short-tiff-header-l.png": ok(True),
    "exif-bad-tiff-header-rgba.webp": ok(False),
    "exif-bad-tiff-header-l.jpg": ok(True),
    "exif-bad-tiff-header-cmyk.jpg": ok(True),
    "raw-profile-exif-bad-hex.png": ok(False),
    "raw-profile-exif-bad-tiff.png": ok(False),
    "raw-profile-exif-bad-hex-l.png": ok(True),
    "raw-profile-exif-bad-tiff-l.png": ok(True),
    "mpf-bad-tiff-header.jpg": ok(False),
    "mpf-short-tiff-header.jpg": ok(False),
    "tiff-valid.tif": ok(False),
    "tiff-bad-magic.tif": bad("unidentified"),
    "tiff-ifd-offset-out-of-range.tif": bad("unidentified"),
    "tiff-short-ifd.tif": ok(False),
    "tiff-huge-entry-count.tif": ok(False),
    "tiff-ifd-self-loop.tif": ok(False),
    "tiff-exif-ifd-self-loop.tif": ok(False),
    "tiff-exif-ifd-out-of-range.tif": ok(False),
    "tiff-strip-offset-out-of-range.tif": bad("truncated"),
    "tiff-strip-bytes-huge.tif": ok(False),
    "tiff-width-ascii.tif": bad("corrupt"),
    "tiff-bits-per-sample-wrong-count.tif": ok(False),
    "tiff-unknown-compression.tif": bad("unidentified"),
    "tiff-unknown-type.tif": ok(False),
    "tiff-value-offset-out-of-range.tif": bad("unidentified"),
    "tiff-orientation-6.tif": ok(False),
    "tiff-orientation-6-exif-ifd-out-of-range.tif": ok(False),
    "tiff-orientation-ascii.tif": ok(False),
    "tiff-imageid-string.tif": ok(False),
    "tiff-imageid-int.tif": ok(False),
    "tiff-imageid-bytes.tif": ok(False),
    "tiff-big-endian.tif": ok(False),
    "tiff-endian-mismatch.tif": bad("unidentified"),
    "tiff-xmp-short.tif": ok(False),  # the XMP error comes after the pixels: counted, tolerated, as in vLLM
    "tiff-xmp-ascii-l.tif": ok(True),
    "tiff-xmp-short-with-orientation.tif": ok(True),
    "tiff-xmp-ascii-with-orientation-l.tif": ok(True),
    "tiff-xmp-rational-with-orientation.tif": ok(True),
    "tiff-xmp-bytes-orientation-l.tif": ok(False),
    "truncated-half.jpg": bad("truncated"),
    "truncated-header.jpg": bad("truncated"),
    "truncated-last-byte.jpg": bad("truncated"),
    "truncated-half.png": bad("truncated"),
    "truncated-header.png": bad("truncated"),
    "truncated-last-byte.png": ok(False),
    "truncated-half.webp": bad("corrupt"),
    "truncated-header.webp": bad("corrupt"),
    "truncated-last-byte.webp": bad("corrupt"),
    "truncated-half.gif": bad("truncated"),
    "truncated-header.gif": bad("unidentified"),
    "truncated-last-byte.gif": ok(False),
    "truncated-half.tif": bad("truncated"),
    "truncated-header.tif": bad("unidentified"),
    "truncated-last-byte.tif": bad("truncated"),
    "truncated-half.bmp": bad("truncated"),
    "truncated-header.bmp": bad("unidentified"),
    "truncated-last-byte.bmp": bad("truncated"),
    "bomb-40000x40000.png": bad("too_many_pixels"),
    "bomb-8000x7000.png": bad("too_many_pixels"),
    "bomb-100000000x1.png": bad("too_many_pixels"),
    "bomb-40000x40000.jpg": bad("too_many_pixels"),
    "bomb-10000x10000.jpg": bad("too_many_pixels"),
    "bomb-40000x40000.gif": bad("too_many_pixels"),
    "bomb-40000x40000.bmp": bad("too_many_pixels"),
    "bomb-40000x-40000.bmp": bad("too_many_pixels"),
    "bomb-40000x40000.tif": bad("too_many_pixels"),
    "bomb-16384x16384-vp8l.webp": bad("too_many_pixels"),
    "bomb-40000x40000-vp8x.webp": bad("too_many_pixels"),
    "bomb-8000x7000-vp8x.webp": bad("too_many_pixels"),  # the guard reads the VP8X canvas before libwebp refuses it
    "bomb-8000x7000-vp8l.webp": bad("too_many_pixels"),
    "zero-size.png": bad("unidentified"),
    "jpeg-soi-only.jpg": bad("unidentified"),
    "png-signature-only.png": bad("unidentified"),
}


def _extra(name: str) -> tuple:
    return EXTRA_EXPECT[name]
