"""EXIF containers (JPEG APP1, PNG eXIf, WebP EXIF) and the malformed EXIF matrix."""

from __future__ import annotations

import struct
import zlib

from PIL import features

from .base import base_image, encode, noisy
from .case import ok
from .tiff import (
    ASCII,
    EXIF_IFD,
    GPS_IFD,
    IMAGE_DESCRIPTION,
    IMAGE_ID,
    LONG,
    ORIENTATION,
    RATIONAL,
    SHORT,
    SOFTWARE,
    SRATIONAL,
    UNDEFINED,
    X_RESOLUTION,
    Entry,
    entry,
    raw_entry,
    tiff_bytes,
)

EXIF_PREFIX = b"Exif\x00\x00"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunk(kind: bytes, data: bytes, crc: int | None = None) -> bytes:
    value = zlib.crc32(kind + data) & 0xFFFFFFFF if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", value)


def jpeg_with_exif(tiff: bytes, base: bytes | None = None, *, prefix: bytes = EXIF_PREFIX) -> bytes:
    base = base_image("JPEG") if base is None else base
    payload = prefix + tiff
    return base[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + base[2:]


def png_with_exif(tiff: bytes, base: bytes | None = None, *, after_idat: bool = False) -> bytes:
    base = base_image("PNG") if base is None else base
    chunk = png_chunk(b"eXIf", tiff)
    if after_idat:
        end = base.rindex(b"IEND") - 4
        return base[:end] + chunk + base[end:]
    ihdr_end = len(PNG_SIGNATURE) + 8 + 13 + 4
    return base[:ihdr_end] + chunk + base[ihdr_end:]


def riff_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, at = [], 12
    while at + 8 <= len(data):
        kind, size = data[at : at + 4], struct.unpack("<I", data[at + 4 : at + 8])[0]
        chunks.append((kind, data[at + 8 : at + 8 + size]))
        at += 8 + size + (size & 1)
    return chunks


def riff(chunks: list[tuple[bytes, bytes]], *, size_override: dict[bytes, int] | None = None) -> bytes:
    body = b"WEBP"
    for kind, payload in chunks:
        size = (size_override or {}).get(kind, len(payload))
        body += kind + struct.pack("<I", size) + payload + (b"\0" if len(payload) & 1 else b"")
    return b"RIFF" + struct.pack("<I", len(body)) + body


def webp_with_exif(tiff: bytes, *, prefix: bytes = b"") -> bytes:
    """A lossless WebP that Pillow writes with ``tiff`` as its EXIF chunk."""
    if not features.check("webp"):
        raise RuntimeError("this Pillow cannot write WebP (features.check('webp') is False)")
    # Pillow strips a leading Exif\0\0 and writes the rest verbatim as the EXIF chunk.
    return encode(noisy((16, 12)), "WEBP", exif=EXIF_PREFIX + prefix + tiff)


def exif_in(container: str, tiff: bytes) -> bytes:
    return {"JPEG": jpeg_with_exif, "PNG": png_with_exif, "WEBP": webp_with_exif}[container](tiff)


def _valid_exif() -> bytes:
    return tiff_bytes([
        entry(IMAGE_DESCRIPTION, ASCII, "a perfectly fine description of this image"),
        entry(ORIENTATION, SHORT, 1),
        entry(X_RESOLUTION, RATIONAL, (72, 1)),
        entry(SOFTWARE, ASCII, "mmobs corpus"),
    ])  # fmt: skip


_UUID = bytes.fromhex("123e4567e89b12d3a456426614174000")

#: The TIFF part of an EXIF block, malformed in one way each.
EXIF_VARIANTS: dict[str, tuple[bytes, str]] = {
    "bad-tiff-header": (b"XXXX\x00\x00\x00\x08", "the vLLM #56527 header: neither II*\\0 nor MM\\0*"),
    "short-tiff-header": (b"II*\x00\x08\x00", "the IFD offset cut to two bytes"),
    "empty-tiff": (b"", "an EXIF block with nothing after its identifier"),
    "header-without-ifd": (b"II*\x00\x08\x00\x00\x00", "a valid header pointing at an IFD that is not there"),
    "ifd-offset-out-of-range": (tiff_bytes([entry(ORIENTATION, SHORT, 1)], ifd_offset=0x7FFFFFF0), "IFD0 offset far past the end"),
    "ifd-offset-zero": (tiff_bytes([entry(ORIENTATION, SHORT, 1)], ifd_offset=0), "IFD0 at offset 0: the header read as an IFD of 0x4949 entries"),
    "short-ifd": (tiff_bytes([entry(ORIENTATION, SHORT, 1), entry(SOFTWARE, ASCII, "x")], count=6, cut_ifd_after=1), "IFD0 declares 6 entries, holds 1"),
    "huge-entry-count": (tiff_bytes([entry(ORIENTATION, SHORT, 1)], count=0xFFFF), "IFD0 declares 65535 entries"),
    "ifd-self-loop": (tiff_bytes([entry(ORIENTATION, SHORT, 1)], next_ifd="self"), "IFD0's next-IFD link points at IFD0"),
    "ifd1-self-loop": (tiff_bytes([entry(ORIENTATION, SHORT, 1)], second_ifd=[entry(SOFTWARE, ASCII, "thumb")], second_next="self"), "IFD1 links to itself"),
    "exif-ifd-self-loop": (tiff_bytes([raw_entry(EXIF_IFD, LONG, 1, 8)]), "the Exif sub-IFD pointer points back at IFD0"),
    "exif-ifd-out-of-range": (tiff_bytes([raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]), "the Exif sub-IFD pointer points past the end"),
    "exif-ifd-wrong-type": (tiff_bytes([entry(EXIF_IFD, ASCII, "not an offset")]), "the Exif sub-IFD pointer is an ASCII string"),
    "gps-ifd-out-of-range": (tiff_bytes([raw_entry(GPS_IFD, LONG, 1, 0xFFFFFF00)]), "the GPS sub-IFD pointer points past the end"),
    "value-offset-out-of-range": (tiff_bytes([raw_entry(IMAGE_DESCRIPTION, ASCII, 64, 0xFFFFFF00)]), "an ASCII value stored past the end"),
    "count-overflow": (tiff_bytes([raw_entry(SOFTWARE, LONG, 0x3FFFFFFF, 8)]), "count x size = 4 GiB"),
    "unknown-type": (tiff_bytes([Entry(SOFTWARE, 99, 4, raw=b"abcd")]), "field type 99"),
    "type-zero": (tiff_bytes([Entry(ORIENTATION, 0, 1, raw=b"\x06\0\0\0")]), "field type 0"),
    "orientation-ascii": (tiff_bytes([entry(ORIENTATION, ASCII, "6")]), "Orientation as an ASCII string"),
    "orientation-rational": (tiff_bytes([entry(ORIENTATION, RATIONAL, (6, 1))]), "Orientation as a RATIONAL"),
    "orientation-out-of-range": (tiff_bytes([entry(ORIENTATION, SHORT, 9)]), "Orientation 9"),
    "orientation-array": (tiff_bytes([entry(ORIENTATION, SHORT, 6, 3)]), "Orientation with two values"),
    "orientation-6-exif-ifd-out-of-range": (tiff_bytes([entry(ORIENTATION, SHORT, 6), raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]), "a real rotation, and a broken sub-IFD the transpose rewrites"),
    "orientation-6-exif-ifd-loop": (tiff_bytes([entry(ORIENTATION, SHORT, 6), raw_entry(EXIF_IFD, LONG, 1, 8)]), "a real rotation, and a sub-IFD loop"),
    "orientation-6-short-ifd": (tiff_bytes([entry(ORIENTATION, SHORT, 6), entry(SOFTWARE, ASCII, "x")], count=3, cut_ifd_after=2), "a real rotation in an IFD cut short"),
    "rational-zero-denominator": (tiff_bytes([entry(X_RESOLUTION, RATIONAL, (72, 0))]), "XResolution 72/0"),
    "srational-min": (tiff_bytes([entry(0x9204, SRATIONAL, (-(2**31), -1))]), "an SRATIONAL of INT_MIN/-1"),
    "ascii-not-utf8": (tiff_bytes([entry(IMAGE_DESCRIPTION, ASCII, b"\xff\xfe\xc0\x80 bad utf-8\0")]), "an ASCII tag holding invalid UTF-8"),
    "imageid-string": (tiff_bytes([entry(IMAGE_ID, ASCII, "not-a-uuid")]), "ImageID as a string"),
    "imageid-uuid-text": (tiff_bytes([entry(IMAGE_ID, ASCII, "123e4567-e89b-12d3-a456-426614174000")]), "ImageID as the text of a UUID (still not a uuid.UUID)"),
    "imageid-int": (tiff_bytes([entry(IMAGE_ID, LONG, 12345)]), "ImageID as a LONG"),
    "imageid-bytes": (tiff_bytes([entry(IMAGE_ID, UNDEFINED, _UUID)]), "ImageID as 16 UNDEFINED bytes"),
    "imageid-short-array": (tiff_bytes([entry(IMAGE_ID, SHORT, 1, 2, 3)]), "ImageID as three SHORTs"),
    "imageid-out-of-range": (tiff_bytes([raw_entry(IMAGE_ID, ASCII, 37, 0xFFFFFF00)]), "ImageID's value stored past the end"),
    "endian-mismatch": (b"MM\x00*" + tiff_bytes([entry(ORIENTATION, SHORT, 6)])[4:], "big-endian marker, little-endian body"),
    "bigtiff-header": (b"II+\x00\x08\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00", "a BigTIFF header inside EXIF, IFD past the end"),
    "truncated-exif": (_valid_exif()[:40], "a valid EXIF block cut in its values"),
    "double-exif-prefix": (EXIF_PREFIX + b"XXXX\x00\x00\x00\x08", "Exif\\0\\0 twice, then the bad header"),
}  # fmt: skip


# =============================================================================
# Expectations for the EXIF matrix (what Pillow 13 does, reviewed by hand)
# =============================================================================

# Why so few fallbacks: Pillow turns most IFD damage (short or looping IFDs, offsets
# past the end, unknown types, huge counts) into a "Corrupt EXIF data" warning and
# an empty or partial tag set, so getexif() does not raise. It raises for a bad
# TIFF header (SyntaxError) and a short one (struct.error, also BigTIFF's). Then:
# * JPEG: the plugin already parsed the EXIF at open (to read the DPI) and kept
#   the exception; exif_transpose returns a *copy* without that state, and the
#   hasher's first read of the copy raises again: fallback.
# * PNG and WebP (RGB): exif_transpose's own read raises (tolerated, counted
#   as a transpose failure) and leaves the image marked "EXIF loaded", so the
#   hasher's read does not raise: no fallback. A grayscale or palette image is
#   then converted to RGB, and convert() copies ``info`` but not that state, so
#   the hasher's read raises: fallback. An image with transparency (RGBA, LA,
#   PA, a tRNS entry) is composited onto a new image that has no EXIF at all:
#   no fallback.
# The key is the original bytes either way, so the fallback never changes it.
#: (variant, container) -> expectation; containers are JPEG, PNG, WEBP.
EXIF_EXPECT: dict[str, dict[str, tuple]] = {
    "bad-tiff-header": {"JPEG": ok(True), "PNG": ok(False), "WEBP": ok(False)},
    "short-tiff-header": {"JPEG": ok(True), "PNG": ok(False), "WEBP": ok(False)},
    "empty-tiff": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "header-without-ifd": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "ifd-offset-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "ifd-offset-zero": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "short-ifd": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "huge-entry-count": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "ifd-self-loop": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "ifd1-self-loop": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "exif-ifd-self-loop": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "exif-ifd-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "exif-ifd-wrong-type": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "gps-ifd-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "value-offset-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "count-overflow": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "unknown-type": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "type-zero": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-ascii": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-rational": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-array": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-6-exif-ifd-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-6-exif-ifd-loop": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "orientation-6-short-ifd": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "rational-zero-denominator": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "srational-min": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "ascii-not-utf8": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "imageid-string": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "imageid-uuid-text": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "imageid-int": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "imageid-bytes": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "imageid-short-array": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "imageid-out-of-range": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "endian-mismatch": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "bigtiff-header": {"JPEG": ok(True), "PNG": ok(False), "WEBP": ok(False)},
    "truncated-exif": {"JPEG": ok(False), "PNG": ok(False), "WEBP": ok(False)},
    "double-exif-prefix": {"JPEG": ok(True), "PNG": ok(False), "WEBP": ok(False)},
}


def _exif_expectation(variant: str, container: str) -> tuple:
    return EXIF_EXPECT[variant][container]
