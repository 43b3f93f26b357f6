#!/usr/bin/env python
"""The bad-input corpus: every malformed input mmobs must refuse (4xx) or key (200).

``build_corpus()`` returns a list of :class:`Case`; ``tests/test_corpus.py``
sends each one to a real ``mmobs serve`` (started with :data:`SERVE_ARGS`) and
loads every image case in-process too. Run ``python scripts/make_corpus.py
OUTDIR`` to write the inputs as files (plus ``index.json``) to look at them,
for example with ``mmobs inspect OUTDIR/images/<name>.jpg``.

Every input is built here from first principles (hand-written TIFF/EXIF
structures, PNG chunks, JPEG markers, RIFF chunks, patched headers) on top of
small images that Pillow encodes from a fixed seed, so the corpus does not
depend on files shipped elsewhere.

Expectations (``Case.expect``):

* ``("ok", fallback)``: 200; ``fallback`` is whether the tolerant EXIF ImageID
  read must swallow an exception (``exif_fallback`` in the response, one more
  ``mmobs_exif_fallback_total``).
* ``("error", status, code, reason)``: a refusal. ``code`` is the JSON error
  code (``bad_image``, ``invalid_json``...), ``reason`` the ``BadImageError``
  reason for ``bad_image`` and ``None`` otherwise. ``code`` is ``None`` only
  when the HTTP server itself (h11, under uvicorn) refuses the request before
  the application sees it: then the status must be a 4xx and the body is not
  mmobs's JSON.
* ``("not_5xx",)``: the answer cannot be observed or depends on how TCP
  delivers the bytes (a one-shot 100 KB header, an upload cut short): any
  status below 500, or no answer at all, passes, but the service's own
  ``mmobs_http_requests_total{status_class="5xx"}`` must not move either.

The EXIF expectations record what Pillow 13 does, path by path (see
``design.md``, "Pillow's EXIF traps", and the comment above
:data:`EXIF_EXPECT`): whether the fallback runs depends on whether the EXIF
transpose in the loader already consumed the exception (RGB PNG and WebP) or
the hasher meets it again on a fresh copy (JPEG, and any image the loader
converts). A change here is worth a look, not a silent update: it means the
installed Pillow parses EXIF differently.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image, features

__all__ = [
    "EXIF_VARIANTS",
    "IMAGE_MAX_BYTES",
    "IMAGE_MAX_PIXELS",
    "SERVE_ARGS",
    "Case",
    "base_image",
    "build_corpus",
    "data_url",
    "exif_in",
    "tiff_bytes",
    "tiff_image",
]

#: Limits of the service the corpus is written for (``tests/test_corpus.py``).
IMAGE_MAX_PIXELS = 50_000_000
IMAGE_MAX_BYTES = 1024 * 1024
BODY_MAX_BYTES = 2 * 1024 * 1024
SERVE_ARGS: tuple[str, ...] = (
    "--max-pixels", str(IMAGE_MAX_PIXELS),
    "--max-image-bytes", str(IMAGE_MAX_BYTES),
    "--max-body-bytes", str(BODY_MAX_BYTES),
    "--log-level", "warning",
)  # fmt: skip

Kind = Literal["image", "url", "request"]
OK = "ok"
ERROR = "error"
NOT_5XX = "not_5xx"


@dataclass(frozen=True)
class Case:
    """One input and what the service must answer.

    ``payload`` is the encoded image (``image``), the URL string (``url``) or
    the raw HTTP body (``request``, sent with ``content_type`` and
    ``headers``). ``transport`` says how a request is sent: ``httpx`` (an
    ordinary client request), ``chunked`` (no Content-Length, the body in
    64 KiB pieces), ``socket`` (written verbatim on a raw socket, so headers a
    client library would refuse, like a lying Content-Length, go out as
    given) or ``trickle`` (like ``socket``, in 4 KiB pieces, polling for an
    early answer, the way a slow client sends) or ``cut`` (like ``socket``,
    but the body stops short of its Content-Length and the client half-closes
    the connection: an upload the client gave up on).
    """

    name: str
    kind: Kind
    payload: bytes | str
    expect: tuple
    note: str = ""
    media_type: str = "image/jpeg"
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())
    transport: Literal["httpx", "chunked", "socket", "trickle", "cut"] = "httpx"
    path: str = "/v1/hash"
    method: str = "POST"

    @property
    def only_not_5xx(self) -> bool:
        """The answer depends on how TCP splits the bytes: only "no 5xx" is asserted."""
        return self.expect[0] == NOT_5XX

    @property
    def ok(self) -> bool:
        return self.expect[0] == OK

    @property
    def fallback(self) -> bool:
        return self.ok and bool(self.expect[1])

    @property
    def status(self) -> int | None:
        return 200 if self.ok else None if self.only_not_5xx else self.expect[1]

    @property
    def code(self) -> str | None:
        return None if self.ok or self.only_not_5xx else self.expect[2]

    @property
    def reason(self) -> str | None:
        return None if self.ok or self.only_not_5xx else self.expect[3]


def ok(fallback: bool) -> tuple:
    return (OK, fallback)


def bad(reason: str) -> tuple:
    return (ERROR, 400, "bad_image", reason)


def refused(status: int, code: str | None) -> tuple:
    return (ERROR, status, code, None)


# =============================================================================
# Base images (small, noisy, deterministic)
# =============================================================================

_FORMAT_PARAMS: dict[str, dict[str, object]] = {
    "JPEG": {"quality": 90},
    "PNG": {},
    "WEBP": {"lossless": True},
    "GIF": {},
    "TIFF": {},
    "BMP": {},
}
MEDIA_TYPES = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "WEBP": "image/webp",
    "GIF": "image/gif",
    "TIFF": "image/tiff",
    "BMP": "image/bmp",
}
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "TIFF": "tif", "BMP": "bmp"}


def noisy(size: tuple[int, int] = (16, 12), seed: int = 0, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    width, height = size
    return Image.frombytes(mode, size, rng.bytes(width * height * len(mode)))


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **{**_FORMAT_PARAMS[fmt], **params})
    return buffer.getvalue()


def base_image(fmt: str, size: tuple[int, int] = (16, 12), seed: int = 0, **params: object) -> bytes:
    """A valid ``fmt`` file of noisy RGB pixels (``P`` for GIF)."""
    image = noisy(size, seed)
    if fmt == "GIF":
        image = image.quantize(64)
    return encode(image, fmt, **params)


def data_url(data: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


# =============================================================================
# TIFF structures (the body of every EXIF block, and TIFF files themselves)
# =============================================================================

BYTE, ASCII, SHORT, LONG, RATIONAL, UNDEFINED, SLONG, SRATIONAL = 1, 2, 3, 4, 5, 7, 9, 10
TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8}
_PACK = {1: "B", 3: "H", 4: "L", 6: "b", 8: "h", 9: "l", 13: "L"}

ORIENTATION = 0x0112
IMAGE_DESCRIPTION = 0x010E
X_RESOLUTION = 0x011A
EXIF_IFD = 0x8769
GPS_IFD = 0x8825
IMAGE_ID = 0x800D
SOFTWARE = 0x0131
XMP = 0x02BC


@dataclass(frozen=True)
class Entry:
    """One IFD entry. ``raw`` (4 bytes) overrides the value field verbatim."""

    tag: int
    type: int
    count: int
    data: bytes = b""
    raw: bytes | None = None


def entry(tag: int, type_: int, *values: object, endian: str = "<") -> Entry:
    """An entry whose value is packed from ``values`` (str for ASCII, bytes for UNDEFINED)."""
    if type_ == ASCII:
        (text,) = values
        data = text.encode("latin-1") + b"\0" if isinstance(text, str) else bytes(text)  # type: ignore[union-attr]
        return Entry(tag, type_, len(data), data)
    if type_ == UNDEFINED or type_ == 7:
        (blob,) = values
        return Entry(tag, type_, len(blob), bytes(blob))  # type: ignore[arg-type]
    if type_ in (RATIONAL, SRATIONAL):
        fmt = "L" if type_ == RATIONAL else "l"
        data = b"".join(struct.pack(endian + fmt * 2, n, d) for n, d in values)  # type: ignore[misc]
        return Entry(tag, type_, len(values), data)
    data = b"".join(struct.pack(endian + _PACK[type_], v) for v in values)
    return Entry(tag, type_, len(values), data)


def raw_entry(tag: int, type_: int, count: int, value: int, endian: str = "<") -> Entry:
    """An entry whose 4-byte value field is ``value`` as given (an offset, usually)."""
    return Entry(tag, type_, count, raw=struct.pack(endian + "L", value & 0xFFFFFFFF))


def tiff_bytes(
    entries: list[Entry],
    *,
    endian: str = "<",
    magic: bytes | None = None,
    prefix: bytes = b"",
    ifd_offset: int | None = None,
    next_ifd: int | Literal["self"] = 0,
    count: int | None = None,
    cut_ifd_after: int | None = None,
    second_ifd: list[Entry] | None = None,
    second_next: int | Literal["self"] = 0,
) -> bytes:
    """A TIFF stream: header, ``prefix`` (pixel data), IFD0 and its out-of-line values.

    ``count`` overrides IFD0's entry count, ``cut_ifd_after`` stops IFD0
    after that many entries (a short IFD), ``next_ifd="self"`` makes IFD0
    point at itself (a loop), ``second_ifd`` is appended as IFD1.
    """
    marker = (b"II" if endian == "<" else b"MM") + struct.pack(endian + "H", 42)
    header_magic = magic if magic is not None else marker
    ifd0 = 8 + len(prefix) if ifd_offset is None else ifd_offset
    layout_ifd0 = 8 + len(prefix)
    head = header_magic + struct.pack(endian + "L", ifd0)

    def build(items: list[Entry], at: int, next_value: int | str, n: int | None, cut: int | None) -> bytes:
        size = 2 + 12 * len(items) + 4
        data_at = at + size
        table, blob = b"", b""
        for item in items:
            field_bytes = item.raw
            if field_bytes is None:
                if len(item.data) <= 4:
                    field_bytes = item.data.ljust(4, b"\0")
                else:
                    field_bytes = struct.pack(endian + "L", data_at + len(blob))
                    blob += item.data + (b"\0" if len(item.data) % 2 else b"")
            table += struct.pack(endian + "HHL", item.tag, item.type, item.count) + field_bytes
        if cut is not None:
            table = table[: 12 * cut]
        link = at if next_value == "self" else next_value
        return struct.pack(endian + "H", len(items) if n is None else n) + table + struct.pack(endian + "L", link) + blob

    first = build(entries, layout_ifd0, next_ifd if second_ifd is None else 0, count, cut_ifd_after)
    if second_ifd is not None:
        at1 = layout_ifd0 + len(first)
        first = build(entries, layout_ifd0, at1, count, cut_ifd_after)
        second = build(second_ifd, at1, second_next, None, None)
        return head + prefix + first + second
    return head + prefix + first


def tiff_image(
    extra: list[Entry] | None = None,
    *,
    size: tuple[int, int] = (8, 6),
    endian: str = "<",
    replace: dict[int, Entry] | None = None,
    mode: Literal["RGB", "L"] = "RGB",
    **options: object,
) -> bytes:
    """An uncompressed RGB (or L) TIFF built by hand, with ``extra`` entries in IFD0."""
    width, height = size
    pixels = noisy(size, seed=3, mode=mode).tobytes()
    samples = len(mode)
    base = {
        256: entry(256, SHORT, width, endian=endian),
        257: entry(257, SHORT, height, endian=endian),
        258: entry(258, SHORT, *(8,) * samples, endian=endian),
        259: entry(259, SHORT, 1, endian=endian),
        262: entry(262, SHORT, 2 if samples == 3 else 1, endian=endian),
        273: entry(273, LONG, 8, endian=endian),  # pixels right after the header
        277: entry(277, SHORT, samples, endian=endian),
        278: entry(278, SHORT, height, endian=endian),
        279: entry(279, LONG, len(pixels), endian=endian),
    }
    base.update(replace or {})
    for item in extra or []:
        base[item.tag] = item
    entries = [base[tag] for tag in sorted(base)]
    return tiff_bytes(entries, endian=endian, prefix=pixels, **options)  # type: ignore[arg-type]


# =============================================================================
# EXIF containers
# =============================================================================

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
#   the hasher's read raises: fallback. RGBA is composited onto a new image
#   that has no EXIF at all: no fallback.
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


# =============================================================================
# Header surgery for truncations and pixel bombs
# =============================================================================


def jpeg_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("JPEG"))
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def png_with_size(width: int, height: int) -> bytes:
    idat = png_chunk(b"IDAT", zlib.compress(b"\x00" * 16))
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return PNG_SIGNATURE + ihdr + idat + png_chunk(b"IEND", b"")


def gif_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("GIF"))
    struct.pack_into("<HH", data, 6, width, height)  # logical screen
    descriptor = data.index(b"\x2c", 13 + 3 * 2 ** ((data[10] & 7) + 1))
    struct.pack_into("<HH", data, descriptor + 5, width, height)
    return bytes(data)


def bmp_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("BMP"))
    struct.pack_into("<ii", data, 18, width, height)
    return bytes(data)


def webp_vp8l_with_size(width: int, height: int) -> bytes:
    data = bytearray(base_image("WEBP"))
    assert data[12:16] == b"VP8L" and data[20] == 0x2F
    bits = struct.unpack_from("<I", data, 21)[0]
    bits = (bits & ~0x0FFFFFFF) | ((width - 1) & 0x3FFF) | (((height - 1) & 0x3FFF) << 14)
    struct.pack_into("<I", data, 21, bits)
    return bytes(data)


def webp_vp8x_with_canvas(width: int, height: int) -> bytes:
    """An extended WebP whose VP8X canvas is ``width`` x ``height`` around a 16x12 frame."""
    frame = riff_chunks(base_image("WEBP"))
    vp8x = struct.pack("<I", 0) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return riff([(b"VP8X", vp8x), *frame])


# =============================================================================
# The corpus
# =============================================================================


def _image_cases() -> list[Case]:
    cases: list[Case] = []

    def add(name: str, data: bytes, expect: tuple, note: str, fmt: str = "JPEG") -> None:
        cases.append(Case(name, "image", data, expect, note, media_type=MEDIA_TYPES[fmt]))

    # -- EXIF blocks in JPEG, PNG and WebP -------------------------------------------
    for variant, (tiff, note) in EXIF_VARIANTS.items():
        for container in ("JPEG", "PNG", "WEBP"):
            name = f"exif-{variant}.{EXTENSIONS[container]}"
            add(name, exif_in(container, tiff), _exif_expectation(variant, container), note, container)
    add("exif-bad-tiff-header-after-idat.png", png_with_exif(b"XXXX\x00\x00\x00\x08", after_idat=True),
        _extra("exif-bad-tiff-header-after-idat.png"), "eXIf after IDAT: Pillow only sees it when loading", "PNG")
    add("exif-short-ifd-after-idat.png", png_with_exif(EXIF_VARIANTS["short-ifd"][0], after_idat=True),
        _extra("exif-short-ifd-after-idat.png"), "short IFD in an eXIf chunk after IDAT", "PNG")
    add("exif-bad-then-good-segments.jpg", jpeg_with_exif(b"XXXX\x00\x00\x00\x08", jpeg_with_exif(_valid_exif())),
        _extra("exif-bad-then-good-segments.jpg"), "two APP1 EXIF segments, the first broken")
    add("exif-app1-length-past-end.jpg", base_image("JPEG")[:2] + b"\xff\xe1\xff\xf0" + EXIF_PREFIX + b"II*\x00",
        _extra("exif-app1-length-past-end.jpg"), "an APP1 segment longer than the file")
    add("exif-chunk-bad-crc.png", _png_exif_bad_crc(), _extra("exif-chunk-bad-crc.png"),
        "an eXIf chunk whose CRC is wrong", "PNG")
    add("exif-chunk-size-past-end.webp", _webp_exif_size_past_end(), _extra("exif-chunk-size-past-end.webp"),
        "an EXIF chunk whose RIFF size runs past the file", "WEBP")
    add("exif-flag-without-chunk.webp", _webp_exif_flag_without_chunk(), _extra("exif-flag-without-chunk.webp"),
        "VP8X says EXIF follows; no EXIF chunk", "WEBP")
    # The image mode decides whether the loader's conversion hands the hasher a fresh
    # EXIF parse (convert() copies info) or none at all (RGBA and LA, like every image with
    # transparency, are composited onto a new image).
    bad_header, short_header = EXIF_VARIANTS["bad-tiff-header"][0], EXIF_VARIANTS["short-tiff-header"][0]
    for mode in ("L", "P", "LA", "RGBA"):
        base = encode(_mode_image(mode), "PNG")
        add(f"exif-bad-tiff-header-{mode.lower()}.png", png_with_exif(bad_header, base), _extra(f"exif-bad-tiff-header-{mode.lower()}.png"),
            f"the vLLM header in a mode {mode} PNG", "PNG")
    add("exif-short-tiff-header-l.png", png_with_exif(short_header, encode(_mode_image("L"), "PNG")),
        _extra("exif-short-tiff-header-l.png"), "a short TIFF header in a grayscale PNG", "PNG")
    add("exif-bad-tiff-header-rgba.webp", encode(_mode_image("RGBA"), "WEBP", exif=EXIF_PREFIX + bad_header),
        _extra("exif-bad-tiff-header-rgba.webp"), "the vLLM header in an RGBA WebP", "WEBP")
    add("exif-bad-tiff-header-l.jpg", jpeg_with_exif(bad_header, encode(_mode_image("L"), "JPEG")),
        _extra("exif-bad-tiff-header-l.jpg"), "the vLLM header in a grayscale JPEG", "JPEG")
    add("exif-bad-tiff-header-cmyk.jpg", jpeg_with_exif(bad_header, encode(_mode_image("CMYK"), "JPEG")),
        _extra("exif-bad-tiff-header-cmyk.jpg"), "the vLLM header in a CMYK JPEG", "JPEG")
    # PNG text chunks may carry EXIF as hex ("Raw profile type exif", ImageMagick's way).
    for mode in ("RGB", "L"):
        base = encode(_mode_image(mode), "PNG")
        suffix = "" if mode == "RGB" else "-l"
        add(f"raw-profile-exif-bad-hex{suffix}.png", _png_with_text(base, b"tEXt", b"\nexif\n      10\nzz not hex\n"),
            _extra(f"raw-profile-exif-bad-hex{suffix}.png"), "a Raw profile type exif text chunk that is not hex", "PNG")
        add(f"raw-profile-exif-bad-tiff{suffix}.png", _png_with_text(base, b"zTXt", _raw_profile(bad_header)),
            _extra(f"raw-profile-exif-bad-tiff{suffix}.png"), "a compressed Raw profile type exif holding the vLLM header", "PNG")
    # A JPEG with an MPF (multi-picture) APP2 segment opens as MPO; break its TIFF header.
    for label, tiff in (("bad", bad_header), ("short", short_header)):
        payload = b"MPF\x00" + tiff
        jpeg = base_image("JPEG")
        add(f"mpf-{label}-tiff-header.jpg", jpeg[:2] + b"\xff\xe2" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:],
            _extra(f"mpf-{label}-tiff-header.jpg"), f"an MPF segment with a {label} TIFF header")
    add("exif-valid.jpg", jpeg_with_exif(_valid_exif()), ok(False), "a well-formed EXIF block (control)")
    add("exif-orientation-6-valid.webp", webp_with_exif(tiff_bytes([entry(ORIENTATION, SHORT, 6)])), ok(False),
        "a well-formed rotation (control)", "WEBP")

    # -- TIFF files: the TIFF structure is both the image and its EXIF -----------------
    for name, data, note in _tiff_cases():
        add(name, data, _extra(name), note, "TIFF")

    # -- truncations of each format ------------------------------------------------------
    for fmt in ("JPEG", "PNG", "WEBP", "GIF", "TIFF", "BMP"):
        whole = base_image(fmt, size=(40, 30))
        ext = EXTENSIONS[fmt]
        add(f"truncated-half.{ext}", whole[: len(whole) // 2], _extra(f"truncated-half.{ext}"), "the first half of a valid file", fmt)
        add(f"truncated-header.{ext}", whole[:16], _extra(f"truncated-header.{ext}"), "the first 16 bytes", fmt)
        add(f"truncated-last-byte.{ext}", whole[:-1], _extra(f"truncated-last-byte.{ext}"), "all but the last byte", fmt)

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
        ("bomb-40000x40000.tif", tiff_image(size=(8, 6), replace={256: entry(256, LONG, 40000), 257: entry(257, LONG, 40000)}), "TIFF"),
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
    add("svg.svg", b'<svg xmlns="http://www.w3.org/2000/svg" width="40000" height="40000"/>', bad("unidentified"), "SVG is not decoded")
    add("one-byte.bin", b"\xff", bad("unidentified"), "a single byte")
    add("format-tga.tga", _tga_bytes(), bad("unsupported_format"),
        "a TGA image: vLLM opens it, mmobs's default formats do not")
    add("jpeg-soi-only.jpg", b"\xff\xd8", _extra("jpeg-soi-only.jpg"), "just a JPEG SOI marker")
    add("png-signature-only.png", PNG_SIGNATURE, _extra("png-signature-only.png"), "just the PNG signature", "PNG")
    add("riff-webp-empty.webp", b"RIFF\x04\x00\x00\x00WEBP", bad("unidentified"), "a RIFF header and nothing else", "WEBP")
    add("png-garbage-idat.png", PNG_SIGNATURE + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
        + png_chunk(b"IDAT", b"\x00 not a zlib stream") + png_chunk(b"IEND", b""), bad("corrupt"), "an IDAT that is not zlib", "PNG")
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
        ("tiff-exif-ifd-self-loop.tif", tiff_image([raw_entry(EXIF_IFD, LONG, 1, 8 + 8 * 6 * 3)]), "the Exif sub-IFD is IFD0"),
        ("tiff-exif-ifd-out-of-range.tif", tiff_image([raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]), "the Exif sub-IFD past the end"),
        ("tiff-strip-offset-out-of-range.tif", tiff_image(replace={273: raw_entry(273, LONG, 1, 0x7FFFFFF0)}), "pixels past the end"),
        ("tiff-strip-bytes-huge.tif", tiff_image(replace={279: raw_entry(279, LONG, 1, 0x7FFFFFF0)}), "a strip of 2 GiB"),
        ("tiff-width-ascii.tif", tiff_image(replace={256: entry(256, ASCII, "8")}), "ImageWidth as a string"),
        ("tiff-bits-per-sample-wrong-count.tif", tiff_image(replace={258: entry(258, s, 8)}), "one BitsPerSample for three samples"),
        ("tiff-unknown-compression.tif", tiff_image(replace={259: entry(259, s, 60000)}), "compression 60000"),
        ("tiff-unknown-type.tif", tiff_image([Entry(SOFTWARE, 99, 4, raw=b"abcd")]), "a field of type 99"),
        ("tiff-value-offset-out-of-range.tif", tiff_image([raw_entry(IMAGE_DESCRIPTION, ASCII, 64, 0xFFFFFF00)]), "an ASCII value past the end"),
        ("tiff-orientation-6.tif", tiff_image([entry(ORIENTATION, s, 6)]), "a real rotation"),
        ("tiff-orientation-6-exif-ifd-out-of-range.tif", tiff_image([entry(ORIENTATION, s, 6), raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]), "a rotation and a broken sub-IFD"),
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
        ("tiff-xmp-ascii-l.tif", tiff_image([entry(XMP, ASCII, "tiff:Orientation=\"6\"")], mode="L"), "the XMP tag as ASCII text, grayscale"),
        ("tiff-xmp-short-with-orientation.tif", tiff_image([entry(ORIENTATION, s, 1), entry(XMP, s, 2)]),
         "the XMP tag as a SHORT next to Orientation 1 (the fuzzer's input, rebuilt)"),
        ("tiff-xmp-ascii-with-orientation-l.tif", tiff_image([entry(ORIENTATION, s, 1), entry(XMP, ASCII, "x")], mode="L"),
         "the XMP tag as ASCII next to Orientation 1, grayscale"),
        ("tiff-xmp-rational-with-orientation.tif", tiff_image([entry(ORIENTATION, s, 1), entry(XMP, RATIONAL, (1, 3))]),
         "the XMP tag as a RATIONAL next to Orientation 1"),
        ("tiff-xmp-bytes-orientation-l.tif", tiff_image([entry(XMP, BYTE, *b'<x tiff:Orientation="6"/>')], mode="L"),
         "a well-formed XMP orientation in a grayscale TIFF (control)"),
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
    "tiff-xmp-short.tif": bad("corrupt"),
    "tiff-xmp-ascii-l.tif": bad("corrupt"),
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
    "bomb-8000x7000-vp8x.webp": bad("corrupt"),
    "bomb-8000x7000-vp8l.webp": bad("too_many_pixels"),
    "zero-size.png": bad("unidentified"),
    "jpeg-soi-only.jpg": bad("unidentified"),
    "png-signature-only.png": bad("unidentified"),
}


def _extra(name: str) -> tuple:
    return EXTRA_EXPECT[name]


def _url_cases() -> list[Case]:
    png = base_image("PNG")
    b64 = base64.b64encode(png).decode()
    wrapped = "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
    too_large = base64.b64encode(b"\x00" * (IMAGE_MAX_BYTES + 1024)).decode()
    cases = [
        ("url-http", "http://example.com/cat.png", bad("unsupported_url")),
        ("url-https", "https://example.com/cat.png", bad("unsupported_url")),
        ("url-ftp", "ftp://example.com/cat.png", bad("unsupported_url")),
        ("url-file", "file:///etc/passwd", bad("unsupported_url")),
        ("url-loopback", "http://127.0.0.1:1/x.png", bad("unsupported_url")),
        ("url-no-scheme", "cat.png", bad("unsupported_url")),
        ("url-empty-string", "", bad("unsupported_url")),
        ("url-javascript", "javascript:alert(1)", bad("unsupported_url")),
        ("data-no-comma", "data:image/png;base64" + b64, bad("bad_data_url")),
        ("data-not-base64", "data:image/png,%89PNG%0D%0A", bad("bad_data_url")),
        ("data-text-plain", f"data:text/plain;base64,{b64}", bad("bad_data_url")),
        ("data-header-too-long", "data:image/png;" + "x=y;" * 80 + "base64," + b64, bad("bad_data_url")),
        ("data-bad-base64-chars", "data:image/png;base64,@@@not*base64", bad("bad_base64")),
        ("data-bad-base64-padding", "data:image/png;base64," + b64[:-3] + "=", bad("bad_base64")),
        ("data-base64-non-ascii", "data:image/png;base64,iVBORw0KGgo\u00e9\u00e9", bad("bad_base64")),
        ("data-base64-nul", "data:image/png;base64,iVBO\x00Rw0KGgo=", bad("bad_base64")),
        ("data-empty-payload", "data:image/png;base64,", bad("empty")),
        ("data-too-large", "data:image/png;base64," + too_large, bad("too_large")),
        ("data-uppercase-scheme", f"DATA:IMAGE/PNG;BASE64,{b64}", ok(False)),
        ("data-mime-wrapped", f"data:image/png;base64,{wrapped}", ok(False)),
        ("data-octet-stream", f"data:application/octet-stream;base64,{b64}", ok(False)),
        ("data-no-media-type", f"data:;base64,{b64}", ok(False)),
        ("data-media-type-lies", f"data:image/gif;base64,{b64}", ok(False)),
    ]
    return [Case(name, "url", url, expect) for name, url, expect in cases]


def multipart_field(name: str, value: str, boundary: str) -> bytes:
    """A multipart body with one text field and one valid PNG file."""
    return (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.png\"\r\n"
        "Content-Type: image/png\r\n\r\n"
    ).encode() + base_image("PNG") + f"\r\n--{boundary}--\r\n".encode()


def _request_cases() -> list[Case]:
    url = data_url(base_image("PNG"), "image/png")
    good = json.dumps({"images": [url]}).encode()
    nested: dict = {}
    cursor = nested
    for _ in range(20):
        cursor["k"] = {}
        cursor = cursor["k"]
    nested_wide: list = [[[]] * 50] * 50  # small depth, many nodes
    boundary = "mmobs-boundary"
    multipart_text = (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"algorithm\"\r\n\r\nblake3\r\n--{boundary}--\r\n"
    ).encode()
    multipart_bad_image = (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.png\"\r\n"
        f"Content-Type: image/png\r\n\r\n"
    ).encode() + b"\x89PNG not really" + f"\r\n--{boundary}--\r\n".encode()
    gray_url = data_url(encode(_mode_image("L"), "PNG"), "image/png")
    cases = [
        Case("req-malformed-json", "request", b'{"images": [', refused(400, "invalid_json")),
        Case("req-empty-body", "request", b"", refused(400, "invalid_json")),
        Case("req-json-not-utf8", "request", b'{"images": ["\xff\xfe"]}', refused(400, "invalid_json")),
        Case("req-json-array", "request", b"[1, 2, 3]", refused(400, "invalid_request")),
        Case("req-json-string", "request", b'"images"', refused(400, "invalid_request")),
        Case("req-json-null", "request", b"null", refused(400, "invalid_request")),
        Case("req-neither-images-nor-messages", "request", b'{"model_id": "m"}', refused(400, "invalid_request")),
        Case("req-both-images-and-messages", "request", b'{"images": ["x"], "messages": []}', refused(400, "invalid_request")),
        Case("req-images-not-list", "request", b'{"images": "data:image/png;base64,AAAA"}', refused(400, "invalid_request")),
        Case("req-images-empty", "request", b'{"images": []}', refused(400, "invalid_request")),
        Case("req-images-int", "request", b'{"images": [7]}', refused(400, "invalid_request")),
        Case("req-images-null", "request", b'{"images": [null]}', refused(400, "invalid_request")),
        Case("req-images-nan", "request", b'{"images": [NaN]}', refused(400, "invalid_request")),
        Case("req-images-huge-number", "request", b'{"images": [1e999]}', refused(400, "invalid_request")),
        Case("req-images-object-without-url", "request", b'{"images": [{"uri": "x"}]}', refused(400, "invalid_request")),
        Case("req-images-object-url-int", "request", b'{"images": [{"url": 5}]}', refused(400, "invalid_request")),
        Case("req-images-object-ok", "request", json.dumps({"images": [{"url": url}]}).encode(), ok(False)),
        Case("req-messages-not-list", "request", b'{"messages": {"content": []}}', refused(400, "invalid_request")),
        Case("req-messages-no-image", "request", b'{"messages": [{"role": "user", "content": "hi"}]}', refused(400, "invalid_request")),
        Case("req-messages-part-not-object", "request", b'{"messages": [{"content": [5]}]}', refused(400, "invalid_request")),
        Case("req-messages-content-int", "request", b'{"messages": [{"content": 5}]}', refused(400, "invalid_request")),
        Case("req-messages-image-url-missing", "request", b'{"messages": [{"content": [{"type": "image_url"}]}]}', refused(400, "invalid_request")),
        Case("req-messages-bad-image", "request", b'{"messages": [{"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}', bad("unidentified")),
        Case("req-deep-nesting-arrays", "request", b"[" * 100_000 + b"]" * 100_000, refused(400, "invalid_json")),
        Case("req-deep-nesting-objects", "request", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, refused(400, "invalid_json")),
        Case("req-deep-processor-kwargs", "request", json.dumps({"images": [url], "mm_processor_kwargs": nested}).encode(), refused(400, "invalid_option")),
        Case("req-wide-processor-kwargs", "request", json.dumps({"images": [url], "mm_processor_kwargs": {"a": nested_wide}}).encode(), ok(False)),
        Case("req-processor-kwargs-list", "request", json.dumps({"images": [url], "mm_processor_kwargs": [1]}).encode(), refused(400, "invalid_option")),
        Case("req-bad-algorithm", "request", json.dumps({"images": [url], "algorithm": "md5"}).encode(), refused(400, "invalid_option")),
        Case("req-algorithm-not-string", "request", json.dumps({"images": [url], "algorithm": ["blake3"]}).encode(), refused(400, "invalid_option")),
        Case("req-bad-image-mode", "request", json.dumps({"images": [url], "image_mode": "RGBZ"}).encode(), refused(400, "invalid_option")),
        Case("req-image-mode-not-string", "request", json.dumps({"images": [url], "image_mode": {"x": 1}}).encode(), refused(400, "invalid_option")),
        Case("req-bad-background", "request", json.dumps({"images": [url], "rgba_background_color": [1, 2, 999]}).encode(), refused(400, "invalid_option")),
        Case("req-background-string", "request", json.dumps({"images": [url], "rgba_background_color": "red"}).encode(), refused(400, "invalid_option")),
        Case("req-model-id-int", "request", json.dumps({"images": [url], "model_id": 7}).encode(), refused(400, "invalid_option")),
        Case("req-model-id-too-long", "request", json.dumps({"images": [url], "model_id": "m" * 600}).encode(), refused(400, "invalid_option")),
        Case("req-too-many-images", "request", json.dumps({"images": ["x"] * 65}).encode(), refused(400, "too_many_images")),
        Case("req-unsupported-content-type", "request", b"hello", refused(415, "unsupported_media_type"), content_type="text/plain"),
        Case("req-content-type-garbage", "request", good, refused(415, "unsupported_media_type"), content_type="image; ;;=\"x\""),
        Case("req-content-type-xml", "request", good, refused(415, "unsupported_media_type"), content_type="application/xml"),
        Case("req-raw-image-body-bad", "request", b"GIF89a broken", bad("unidentified"), content_type="image/gif"),
        Case("req-raw-image-body-empty", "request", b"", bad("empty"), content_type="image/png"),
        Case("req-raw-image-bad-query-algorithm", "request", base_image("PNG"), refused(400, "invalid_option"), content_type="image/png",
             path="/v1/hash?algorithm=md5"),
        Case("req-raw-image-query-background", "request", base_image("PNG"), ok(False), content_type="image/png",
             path="/v1/hash?rgba_background_color=1,2,3"),
        Case("req-raw-image-query-background-arabic-digits", "request", base_image("PNG"), refused(400, "invalid_option"),
             content_type="image/png", path="/v1/hash?rgba_background_color=%D9%A1,2,3",
             note="int() would accept any Unicode decimal digit; the service takes ASCII digits only"),
        Case("req-raw-image-query-background-words", "request", base_image("PNG"), refused(400, "invalid_option"),
             content_type="image/png", path="/v1/hash?rgba_background_color=red,green,blue"),
        Case("req-raw-image-query-background-superscript", "request", base_image("PNG"), refused(400, "invalid_option"),
             content_type="image/png", path="/v1/hash?rgba_background_color=%C2%B2,1,1",
             note="'\u00b2'.isdigit() is True but int('\u00b2') raises ValueError"),
        Case("req-multipart-background-superscript", "request", multipart_field("rgba_background_color", "\u00b2,1,1", boundary),
             refused(400, "invalid_option"), content_type=f"multipart/form-data; boundary={boundary}",
             note="the same superscript digit as a multipart field"),
        Case("req-image-mode-null", "request", json.dumps({"images": [url], "image_mode": None}).encode(), ok(False),
             note="keep the decoded mode"),
        Case("req-unsupported-mode", "request", json.dumps({"images": [gray_url], "image_mode": "La"}).encode(),
             bad("unsupported_mode"), note="Pillow cannot convert L to La"),
        Case("req-path-invalid-utf8", "request", good, refused(404, "not_found"), path="/%ff%fe", transport="socket"),
        Case("req-path-nul", "request", good, refused(404, "not_found"), path="/v1/hash%00", transport="socket"),
        Case("req-path-60k", "request", good, refused(404, "not_found"), path="/" + "a" * 60_000, transport="socket"),
        Case("req-method-put", "request", good, refused(405, "method_not_allowed"), method="PUT"),
        Case("req-method-unknown", "request", good, refused(405, "method_not_allowed"), method="BREW", transport="socket"),
        Case("req-get-hash", "request", b"", refused(405, "method_not_allowed"), method="GET"),
        Case("req-content-length-superscript", "request", good, refused(400, None), headers=(("content-length", "\u00b2"),),
             transport="socket", note="h11 accepts only ASCII digits in Content-Length"),
        Case("req-multipart-no-boundary", "request", b"--x\r\n", refused(400, "invalid_multipart"), content_type="multipart/form-data"),
        Case("req-multipart-broken", "request", b"--x\r\nbroken", refused(400, "invalid_request"), content_type="multipart/form-data; boundary=x"),
        Case("req-multipart-no-file", "request", multipart_text, refused(400, "invalid_request"), content_type=f"multipart/form-data; boundary={boundary}"),
        Case("req-multipart-bad-image", "request", multipart_bad_image, bad("unidentified"), content_type=f"multipart/form-data; boundary={boundary}"),
        Case("req-huge-header", "request", good, (NOT_5XX,), headers=(("x-padding", "a" * 100_000),),
             note="a 100 KB header in one write: mmobs serve sets h11_max_incomplete_event_size to 64 KiB, but h11 "
             "applies it only to an *incomplete* header block; asyncio reads up to 256 KiB at once, so on loopback "
             "the whole block usually arrives complete and is accepted (200). Only 'no 5xx' is asserted."),
        Case("req-huge-header-trickled", "request", good, refused(400, None), headers=(("x-padding", "a" * 100_000),),
             transport="trickle", note="the same 100 KB header sent slowly: h11 refuses it past 64 KiB (400)"),
        Case("req-many-headers", "request", good, ok(False), headers=tuple((f"x-h{i}", "v") for i in range(500)),
             note="500 small headers are fine"),
        Case("req-bad-request-id", "request", good, ok(False), headers=(("x-request-id", "bad id/../<script>;" * 20),),
             note="a request id outside the safe alphabet is replaced, not echoed"),
        Case("req-oversized-body", "request", b'{"images": ["' + b"A" * (BODY_MAX_BYTES + 10) + b'"]}', refused(413, "payload_too_large")),
        Case("req-oversized-body-chunked", "request", b'{"images": ["' + b"A" * (BODY_MAX_BYTES + 10) + b'"]}', refused(413, "payload_too_large"),
             transport="chunked", note="no Content-Length: the limit is enforced while reading"),
        Case("req-content-length-lies-high", "request", good, refused(413, "payload_too_large"),
             headers=(("content-length", str(BODY_MAX_BYTES + 1)),), transport="socket",
             note="declared above the limit: refused before reading"),
        Case("req-body-cut-short-json", "request", good, (NOT_5XX,), transport="cut",
             note="the client declares the whole body, sends half of it and half-closes: the service must not "
             "count (or log) a server error for a client that went away"),
        Case("req-body-cut-short-raw-image", "request", base_image("PNG"), (NOT_5XX,), transport="cut",
             content_type="image/png", note="the same for a raw image/* upload"),
        Case("req-body-cut-short-multipart", "request", multipart_bad_image, (NOT_5XX,), transport="cut",
             content_type=f"multipart/form-data; boundary={boundary}", note="the same for a multipart upload"),
        Case("req-content-length-not-a-number", "request", good, refused(400, None), headers=(("content-length", "12abc"),),
             transport="socket", note="h11 refuses a malformed Content-Length"),
        Case("req-content-length-and-chunked", "request", b"%x\r\n%s\r\n0\r\n\r\n" % (len(good), good), ok(False),
             headers=(("content-length", "5"), ("transfer-encoding", "chunked")), transport="socket",
             note="both framings at once (the request-smuggling shape): h11 lets Transfer-Encoding win (RFC 9112 6.3)"),
    ]
    return cases


def build_corpus() -> list[Case]:
    """Every case, in a stable order, with unique names."""
    cases = _image_cases() + _url_cases() + _request_cases()
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise AssertionError(f"duplicate corpus case names: {sorted(duplicates)}")
    return cases


# =============================================================================
# Writing it out
# =============================================================================


def write_corpus(outdir: Path) -> list[Case]:
    cases = build_corpus()
    index = []
    for case in cases:
        if case.kind == "image":
            path = outdir / "images" / case.name
            data = case.payload
        elif case.kind == "url":
            path = outdir / "urls" / f"{case.name}.txt"
            data = case.payload.encode("utf-8", "surrogateescape")  # type: ignore[union-attr]
        else:
            path = outdir / "requests" / f"{case.name}.body"
            data = case.payload
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)  # type: ignore[arg-type]
        index.append({
            "name": case.name,
            "kind": case.kind,
            "file": str(path.relative_to(outdir)),
            "bytes": len(data),
            "expect": list(case.expect),
            "note": case.note,
            **({"content_type": case.content_type, "headers": {k: v[:80] for k, v in case.headers},
                "transport": case.transport, "path": case.path[:200], "method": case.method} if case.kind == "request" else {}),
        })  # fmt: skip
    (outdir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return cases


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/make_corpus.py OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    cases = write_corpus(outdir)
    kinds = {kind: sum(case.kind == kind for case in cases) for kind in ("image", "url", "request")}
    print(f"wrote {len(cases)} cases to {outdir} ({', '.join(f'{n} {k}' for k, n in kinds.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
