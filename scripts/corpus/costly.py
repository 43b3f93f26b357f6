"""Inputs that cost far more to decode than a plain image of their size (issue #11).

Each builder takes its size as a parameter, so the same structure serves two
uses: a small case for CI (:func:`costly_cases`, every one refused by
:mod:`mmobs.keys.guard` before Pillow decodes it) and the full-size input that
showed the cost (:func:`full_size_inputs`, used by ``scripts/cost_run.py``).
The structures are written by hand (JPEG markers, PNG chunks, TIFF
directories, RIFF chunks, GIF blocks, BMP RLE codes) on top of the small base
images, so nothing depends on what an encoder is willing to write.

Why each one is expensive, in Pillow 13 and its C libraries:

* JPEG: Pillow's marker parser is Python. It appends every ``APP1 Exif``
  segment to ``info["exif"]`` with ``+=`` (quadratic), keeps every APPn/COM
  segment in ``applist`` (a tuple and a bytes object each), and steps over fill
  bytes and junk one ``read(1)`` at a time. libjpeg decodes a progressive
  image once per scan, over the whole coefficient buffer.
* PNG: each ``iCCP`` and compressed ``iTXt``/``zTXt`` chunk is inflated (up to
  1 MiB each, ``MAX_TEXT_CHUNK``); ``iCCP`` and undecodable ``iTXt`` are not
  counted against ``MAX_TEXT_MEMORY``. Every chunk costs a Python round trip.
* EXIF: ``exif_transpose`` re-serialises every tag when it rotates, turning
  each RATIONAL into a Python object.
* TIFF: libtiff allocates a whole tile (whatever the image size); Pillow's
  raw-strip reader builds one Python tile per strip.
* WebP: Pillow decodes every WebP through libwebp's animation decoder, which
  holds RGBA canvases of the declared size.
* GIF: Pillow reads every extension sub-block before the first image in Python.
* BMP: Pillow's RLE decoder is Python, and pads a row one byte at a time.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable

from PIL import Image

from .base import MEDIA_TYPES, base_image, noisy
from .case import Case, bad, ok
from .exif import EXIF_PREFIX, PNG_SIGNATURE, png_chunk, riff, riff_chunks
from .tiff import LONG, ORIENTATION, RATIONAL, SHORT, Entry, entry, tiff_bytes

MiB = 1024 * 1024
_IHDR_END = len(PNG_SIGNATURE) + 8 + 13 + 4


# =============================================================================
# JPEG
# =============================================================================


def jpeg_segment(marker: int, payload: bytes) -> bytes:
    """One marker segment: ``FF xx``, the big-endian length (2 + payload), the payload."""
    return struct.pack(">HH", marker, len(payload) + 2) + payload


def jpeg_with_segments(segments: bytes, base: bytes | None = None) -> bytes:
    """``segments`` inserted right after SOI, where Pillow's header parser reads them."""
    base = base_image("JPEG") if base is None else base
    return base[:2] + segments + base[2:]


def jpeg_exif_segment_flood(total: int, each: int = 10) -> bytes:
    """Many small ``APP1 Exif`` segments: Pillow joins them with ``+=`` (quadratic; worst near 10 bytes each)."""
    one = jpeg_segment(0xFFE1, EXIF_PREFIX + b"\0" * each)
    return jpeg_with_segments(one * (total // len(one)))


def jpeg_app0_flood(total: int) -> bytes:
    """Empty ``APP0`` segments (4 bytes each): one tuple and one bytes in ``applist`` each."""
    one = jpeg_segment(0xFFE0, b"")
    return jpeg_with_segments(one * (total // len(one)))


def jpeg_com_flood(total: int) -> bytes:
    """Empty ``COM`` segments."""
    one = jpeg_segment(0xFFFE, b"")
    return jpeg_with_segments(one * (total // len(one)))


def jpeg_fill_flood(total: int) -> bytes:
    """Fill bytes (``FF``) before a marker: legal, and read one at a time."""
    base = base_image("JPEG")
    return base[:2] + b"\xff" * total + base[2:]


def jpeg_junk_flood(total: int) -> bytes:
    """Non-marker junk between segments: Pillow skips it a byte at a time."""
    base = base_image("JPEG")
    return base[:2] + jpeg_segment(0xFFFE, b"x") + b"\x00" * total + base[2:]


def jpeg_photoshop_flood(total: int) -> bytes:
    """Full APP13 ``Photoshop 3.0`` segments of empty 8BIM resources: Pillow parses each one in Python."""
    resource = b"8BIM" + struct.pack(">H", 0x0404) + b"\0\0" + struct.pack(">I", 0)
    one = jpeg_segment(0xFFED, b"Photoshop 3.0\x00" + resource * ((65533 - 2 - 14) // len(resource)))
    return jpeg_with_segments(one * max(1, total // len(one)))


def jpeg_icc_chain(segments: int, each: int) -> bytes:
    """An ``ICC_PROFILE`` APP2 chain of ``segments`` pieces of ``each`` bytes."""
    count = min(segments, 255)
    body = b"".join(
        jpeg_segment(0xFFE2, b"ICC_PROFILE\0" + bytes([i % 255 + 1, count]) + b"\0" * each) for i in range(segments)
    )
    return jpeg_with_segments(body)


def progressive_jpeg(size: tuple[int, int], mode: str = "RGB") -> bytes:
    """A flat progressive JPEG: cheap to encode at any size, every scan tiny."""
    buffer = io.BytesIO()
    Image.new(mode, size, 128 if mode == "L" else (128, 96, 64)).save(buffer, "JPEG", progressive=True, quality=75)
    return buffer.getvalue()


def jpeg_scans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every scan (SOS segment and its entropy-coded data) of a JPEG."""
    scans, at = [], 2
    while at + 4 <= len(data):
        marker, length = struct.unpack_from(">HH", data, at)
        if marker == 0xFFD9:
            break
        end = at + 2 + length
        if marker == 0xFFDA:
            while True:  # entropy-coded data runs to the next marker that is not RSTn or a stuffed 00
                end = data.index(b"\xff", end)
                if data[end + 1] not in (0x00, *range(0xD0, 0xD8)):
                    break
                end += 2
            scans.append((at, end))
        at = end
    return scans


def jpeg_repeated_scans(size: tuple[int, int], repeats: int) -> bytes:
    """A progressive JPEG whose first AC scan is repeated ``repeats`` times.

    libjpeg warns about the inconsistent progression and decodes every copy,
    each over the whole coefficient buffer.
    """
    data = progressive_jpeg(size)
    ac = next((start, end) for start, end in jpeg_scans(data) if data[start + 5 + 2 * data[start + 4]] > 0)
    start, end = ac
    return data[:end] + data[start:end] * repeats + data[end:]


# =============================================================================
# PNG
# =============================================================================


def png_with_chunks(chunks: bytes, base: bytes | None = None, *, after_idat: bool = False) -> bytes:
    """Chunks inserted after IHDR (read at open) or before IEND (read at the end of load)."""
    base = base_image("PNG") if base is None else base
    if after_idat:
        end = base.rindex(b"IEND") - 4
        return base[:end] + chunks + base[end:]
    return base[:_IHDR_END] + chunks + base[_IHDR_END:]


def png_rechunked(png: bytes, size: int = 8192) -> bytes:
    """The same PNG with its image data in ``size``-byte IDAT chunks (libpng writes 8 KiB, Pillow 64 KiB)."""
    position, head, data = 8, b"", b""
    while position + 8 <= len(png):
        length, kind = struct.unpack_from(">I4s", png, position)
        if kind == b"IDAT":
            data += png[position + 8 : position + 8 + length]
        elif kind != b"IEND":
            head += png[position : position + 12 + length]
        position += 12 + length
    idat = b"".join(png_chunk(b"IDAT", data[at : at + size]) for at in range(0, len(data), size))
    return png[:8] + head + idat + png_chunk(b"IEND", b"")


def _repeat_chunk(chunk: bytes, total: int) -> bytes:
    return chunk * max(1, total // len(chunk))


def _bomb(size: int, fill: bytes = b"\0") -> bytes:
    return zlib.compress(fill * size, 9)


def png_iccp_flood(total: int, inflated: int = MiB - 1024) -> bytes:
    """``iCCP`` chunks that each inflate to just under Pillow's 1 MiB cap."""
    chunk = png_chunk(b"iCCP", b"icc\0\0" + _bomb(inflated))
    return png_with_chunks(_repeat_chunk(chunk, total))


def png_itxt_flood(total: int, inflated: int = MiB - 1024) -> bytes:
    """Compressed ``iTXt`` chunks whose text is not UTF-8: inflated, then dropped uncounted."""
    chunk = png_chunk(b"iTXt", b"k\0\x01\x00\0\0" + _bomb(inflated, b"\xff"))
    return png_with_chunks(_repeat_chunk(chunk, total))


def png_ztxt_flood(total: int, inflated: int = MiB - 1024) -> bytes:
    """Compressed ``zTXt`` chunks (Pillow stops at 64 MiB of text, after inflating it)."""
    chunk = png_chunk(b"zTXt", b"k\0\0" + _bomb(inflated, b"a"))
    return png_with_chunks(_repeat_chunk(chunk, total))


def png_private_chunk_flood(total: int) -> bytes:
    """Empty private ancillary chunks: each a CRC check and a Python round trip."""
    return png_with_chunks(_repeat_chunk(png_chunk(b"prIv", b""), total))


def png_text_flood(total: int) -> bytes:
    """Tiny ``tEXt`` chunks with distinct keywords (each a dict entry)."""
    chunks = b"".join(png_chunk(b"tEXt", b"k%07d\0v" % i) for i in range(total // 22))
    return png_with_chunks(chunks)


def png_idat_split(pieces: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A valid PNG whose image data is split over ``pieces`` IDAT chunks (an encoder's choice)."""
    pixels, stride = noisy(size, seed=5).tobytes(), size[0] * 3
    raw = b"".join(b"\0" + pixels[y * stride : (y + 1) * stride] for y in range(size[1]))
    stream = zlib.compress(raw)
    step = max(1, -(-len(stream) // pieces))
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", size[0], size[1], 8, 2, 0, 0, 0))
    idats = b"".join(png_chunk(b"IDAT", stream[i : i + step]) for i in range(0, len(stream), step))
    return PNG_SIGNATURE + ihdr + idats + png_chunk(b"IEND", b"")


def png_empty_idat_flood(total: int) -> bytes:
    """The image data followed by a flood of empty IDAT chunks (each a decoder round trip)."""
    data = png_idat_split(1, (16, 12))
    end = data.rindex(b"IEND") - 4
    return data[:end] + _repeat_chunk(png_chunk(b"IDAT", b""), total) + data[end:]


def png_fdat_flood(total: int) -> bytes:
    """An APNG whose frames are a flood of tiny ``fcTL``/``fdAT`` pairs after the default image."""
    width, height = 16, 12
    base = png_idat_split(1, (width, height))
    frames = max(1, total // 70)
    actl = png_chunk(b"acTL", struct.pack(">II", frames + 1, 0))
    first = png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, width, height, 0, 0, 1, 10, 0, 0))
    tiny = zlib.compress(b"\0\0\0\0")  # one 1x1 RGB row
    body = []
    for i in range(frames):
        seq = 1 + 2 * i
        body.append(png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", seq, 1, 1, 0, 0, 1, 10, 0, 0)))
        body.append(png_chunk(b"fdAT", struct.pack(">I", seq + 1) + tiny))
    idat_at = base.index(b"IDAT") - 4
    end = base.rindex(b"IEND") - 4
    return base[:idat_at] + actl + first + base[idat_at:end] + b"".join(body) + base[end:]


# =============================================================================
# EXIF
# =============================================================================


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


# =============================================================================
# TIFF
# =============================================================================

TILE_WIDTH, TILE_LENGTH, TILE_OFFSETS, TILE_BYTE_COUNTS = 322, 323, 324, 325


def zeros_deflate(size: int) -> bytes:
    """A zlib stream of ``size`` zero bytes, built without compressing them all.

    After a full flush deflate keeps no history, so the compressed form of one
    1 MiB block of zeros repeats verbatim; the Adler-32 of ``n`` zeros is
    ``(n % 65521) << 16 | 1``.
    """
    if size <= 4 * MiB:
        return zlib.compress(b"\0" * size, 9)
    full, rest = divmod(size, MiB)
    compressor = zlib.compressobj(9)
    head = compressor.compress(b"\0" * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    piece = compressor.compress(b"\0" * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(b"\0" * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert again == piece, "deflate did not reset its state after a full flush"
    end = compressor.compress(b"\0" * rest) + compressor.flush(zlib.Z_FINISH)
    return head + piece * (full - 1) + end[:-4] + struct.pack(">L", ((size % 65521) << 16) | 1)


def tiff_huge_tile(tile: int, size: tuple[int, int] = (16, 16)) -> bytes:
    """A small grayscale TIFF whose only tile is ``tile`` x ``tile``, deflate-compressed zeros."""
    width, height = size
    data = zeros_deflate(tile * tile)
    entries = [
        entry(256, SHORT, width), entry(257, SHORT, height), entry(258, SHORT, 8), entry(259, SHORT, 8),
        entry(262, SHORT, 1), entry(277, SHORT, 1),
        entry(TILE_WIDTH, LONG, tile), entry(TILE_LENGTH, LONG, tile),
        entry(TILE_OFFSETS, LONG, 8), entry(TILE_BYTE_COUNTS, LONG, len(data)),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=data)


def tiff_strip_per_row(rows: int, width: int = 1) -> bytes:
    """A ``width`` x ``rows`` raw grayscale TIFF with one row per strip, every strip the same bytes."""
    pixels = b"\x80" * width
    entries = [
        entry(256, LONG, width), entry(257, LONG, rows), entry(258, SHORT, 8), entry(259, SHORT, 1),
        entry(262, SHORT, 1), entry(277, SHORT, 1), entry(278, SHORT, 1),
        Entry(273, LONG, rows, struct.pack("<L", 8) * rows),
        Entry(279, SHORT, rows, struct.pack("<H", width) * rows),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=pixels)


def tiff_many_pages(pages: int) -> bytes:
    """A TIFF of ``pages`` 1x1 bilevel pages (five entries each), all sharing one pixel byte."""
    out = bytearray(b"II*\x00" + struct.pack("<L", 10) + b"\x80\x00")
    items = ((256, SHORT, 1), (257, SHORT, 1), (273, LONG, 8), (278, SHORT, 1), (279, LONG, 1))
    size = 2 + 12 * len(items) + 4
    for page in range(pages):
        out += struct.pack("<H", len(items))
        for tag, type_, value in items:
            out += struct.pack("<HHL", tag, type_, 1) + struct.pack("<L", value)
        out += struct.pack("<L", len(out) + 4 if page + 1 < pages else 0)
    assert len(out) == 10 + size * pages
    return bytes(out)


def tiff_orientation_huge_rational(total: int) -> bytes:
    """A TIFF whose own directory holds Orientation 6 and a huge RATIONAL tag."""
    width, height = 8, 6
    pixels = noisy((width, height), seed=3, mode="L").tobytes()
    count = max(1, total // 8)
    entries = [
        entry(256, SHORT, width), entry(257, SHORT, height), entry(258, SHORT, 8), entry(259, SHORT, 1),
        entry(262, SHORT, 1), entry(273, LONG, 8), entry(ORIENTATION, SHORT, 6), entry(277, SHORT, 1),
        entry(278, SHORT, height), entry(279, LONG, len(pixels)),
        Entry(0xC000, RATIONAL, count, struct.pack("<LL", 1, 3) * count),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=pixels)


# =============================================================================
# WebP
# =============================================================================


def _vp8x(width: int, height: int, flags: int) -> bytes:
    return struct.pack("<I", flags) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")


def webp_frame_chunks(size: tuple[int, int] = (1, 1)) -> list[tuple[bytes, bytes]]:
    """The ``VP8L`` chunk of a tiny lossless frame."""
    return [c for c in riff_chunks(base_image("WEBP", size=size)) if c[0] in (b"VP8L", b"VP8 ")]


def _anmf(frame: list[tuple[bytes, bytes]], size: tuple[int, int], at: tuple[int, int] = (0, 0)) -> tuple[bytes, bytes]:
    width, height = size
    header = (
        (at[0] // 2).to_bytes(3, "little") + (at[1] // 2).to_bytes(3, "little")
        + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        + (10).to_bytes(3, "little") + b"\x00"
    )  # fmt: skip
    body = b"".join(kind + struct.pack("<I", len(data)) + data + b"\0" * (len(data) & 1) for kind, data in frame)
    return (b"ANMF", header + body)


def webp_animated_canvas(canvas: tuple[int, int], frames: int = 1) -> bytes:
    """An animated WebP: a ``canvas`` declared in VP8X, ``frames`` frames of 1x1 pixel."""
    kind, payload = _anmf(webp_frame_chunks((1, 1)), (1, 1))
    one = kind + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) & 1 else b"")
    head = riff([(b"VP8X", _vp8x(*canvas, 0x02)), (b"ANIM", struct.pack("<IH", 0, 0))])
    body = head[12:] + one * frames
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def webp_lossless_solid(size: tuple[int, int]) -> bytes:
    """A lossless WebP of one colour: a few hundred bytes for any size up to 16383x16383."""
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buffer, "WEBP", lossless=True, quality=0, method=0)
    return buffer.getvalue()


# =============================================================================
# GIF
# =============================================================================


def gif_parts(data: bytes) -> tuple[bytes, bytes, bytes]:
    """(header with the global colour table, the blocks up to the trailer, the trailer)."""
    flags = data[10]
    header_end = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    return data[:header_end], data[header_end:-1], data[-1:]


def gif_comment_flood(total: int) -> bytes:
    """Comment extensions of one 1-byte sub-block each, before the first image."""
    head, blocks, trailer = gif_parts(base_image("GIF"))
    one = b"!\xfe\x01x\x00"
    return head + one * (total // len(one)) + blocks + trailer


_GIF_1X1_FRAME = (
    b"!\xf9\x04\x04\x02\x00\x00\x00"  # graphic control: 20 ms, no disposal
    b",\x00\x00\x00\x00\x01\x00\x01\x00\x00"  # a 1x1 image at (0, 0), no local palette
    b"\x02\x02\x44\x01\x00"  # LZW minimum code size 2, one sub-block: clear, pixel 0, end
)


def gif_frames(frames: int, size: tuple[int, int] = (16, 12)) -> bytes:
    """A ``size`` GIF whose first frame is a real image, followed by ``frames - 1`` 1x1 frames."""
    head, blocks, trailer = gif_parts(base_image("GIF", size=size))
    return head + blocks + _GIF_1X1_FRAME * (frames - 1) + trailer


def gif_canvas(screen: tuple[int, int], frames: int = 1) -> bytes:
    """A GIF whose logical screen is ``screen`` and whose frames are all 1x1."""
    head = b"GIF89a" + struct.pack("<HH", *screen) + b"\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff"
    return head + _GIF_1X1_FRAME * frames + b";"


def gif_sub_block_flood(sub_blocks: int) -> bytes:
    """A 16x12 GIF whose image data is followed by ``sub_blocks`` 1-byte sub-blocks in a comment."""
    head, blocks, trailer = gif_parts(base_image("GIF"))
    return head + b"!\xfe" + b"\x01x" * sub_blocks + b"\x00" + blocks + trailer


def gif_frame_outside_screen(screen: tuple[int, int], frame: tuple[int, int]) -> bytes:
    """A GIF whose logical screen is ``screen`` and whose first image descriptor says ``frame``."""
    data = bytearray(base_image("GIF"))
    struct.pack_into("<HH", data, 6, *screen)
    head, _, _ = gif_parts(bytes(data))
    descriptor = data.index(b",", len(head))
    struct.pack_into("<HH", data, descriptor + 5, *frame)
    return bytes(data)


# =============================================================================
# BMP
# =============================================================================


def bmp_rle(size: tuple[int, int], body: bytes, bits: int = 8) -> bytes:
    """A BMP (BITMAPINFOHEADER) with ``RLE8``/``RLE4`` compressed data ``body``."""
    width, height = size
    colours = 2**bits
    palette = b"".join(bytes((i, i, i, 0)) for i in range(colours))
    offset = 14 + 40 + len(palette)
    compression = 1 if bits == 8 else 2
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, compression, len(body), 2835, 2835, colours, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset) + info + palette + body


def bmp_rle_end_of_lines(size: tuple[int, int]) -> bytes:
    """RLE8 rows of one pixel and an end-of-line code: Pillow pads every row a byte at a time."""
    return bmp_rle(size, b"\x01\x07\x00\x00" * size[1] + b"\x00\x01")


def bmp_rle4_runs(size: tuple[int, int]) -> bytes:
    """RLE4 runs of 255 pixels: Pillow's decoder loops once per pixel in Python."""
    width, height = size
    row = b"\xff\x12" * (width // 255) + bytes((width % 255, 0x12)) + b"\x00\x00"
    return bmp_rle(size, row * height + b"\x00\x01", bits=4)


# =============================================================================
# The CI cases: every class small, refused by the guard before Pillow decodes
# =============================================================================


def costly_cases() -> list[Case]:
    """One small case per costly class (each under the corpus's 1 MiB), and controls that must load."""
    costly = bad("too_costly")
    cases: list[Case] = []

    def add(name: str, data: bytes, expect: tuple, note: str) -> None:
        ext = name.rsplit(".", 1)[1]
        fmt = {"jpg": "JPEG", "png": "PNG", "tif": "TIFF", "webp": "WEBP", "gif": "GIF", "bmp": "BMP"}[ext]
        cases.append(Case(f"costly-{name}", "image", data, expect, note, media_type=MEDIA_TYPES[fmt]))

    big_exif = EXIF_PREFIX + b"\0" * 65000
    add("jpeg-exif-segment-flood.jpg", jpeg_exif_segment_flood(2000 * 20), costly, "2,000 10-byte APP1 Exif segments")
    add(
        "jpeg-exif-over-limit.jpg",
        jpeg_with_segments(jpeg_segment(0xFFE1, big_exif) * 5),
        costly,
        "five full APP1 Exif segments: 325 KB of EXIF",
    )
    add(
        "jpeg-exif-huge-rational.jpg",
        jpeg_exif_huge_rational(300 * 1024),
        costly,
        "Orientation 6 and a 300 KB RATIONAL tag over APP1 segments",
    )
    add(
        "jpeg-repeated-scans.jpg",
        jpeg_repeated_scans((256, 256), 200),
        costly,
        "one AC scan of a progressive JPEG x200",
    )
    add("jpeg-app0-flood.jpg", jpeg_app0_flood(2000 * 4), costly, "2,000 empty APP0 segments")
    add("jpeg-com-flood.jpg", jpeg_com_flood(2000 * 4), costly, "2,000 empty COM segments")
    add(
        "jpeg-table-flood.jpg",
        jpeg_with_segments(jpeg_segment(0xFFDD, b"\0\0") * 2000),
        costly,
        "2,000 DRI (restart interval) table segments",
    )
    add("jpeg-fill-flood.jpg", jpeg_fill_flood(100_000), costly, "100,000 FF fill bytes before a marker")
    add("jpeg-junk-flood.jpg", jpeg_junk_flood(100_000), costly, "100,000 junk bytes between segments")
    add("jpeg-icc-chain-flood.jpg", jpeg_icc_chain(1100, 4), costly, "1,100 tiny ICC_PROFILE APP2 segments")
    add(
        "jpeg-icc-chain-10x60k.jpg",
        jpeg_icc_chain(10, 60_000),
        ok(False),
        "a 600 KB ICC profile over 10 APP2 segments (control)",
    )
    add("png-iccp-flood.png", png_iccp_flood(9 * 1100), costly, "9 iCCP chunks of ~1 KB, each inflating to ~1 MiB")
    add(
        "png-itxt-flood.png", png_itxt_flood(9 * 1100), costly, "9 compressed iTXt chunks of invalid UTF-8, ~1 MiB each"
    )
    add("png-ztxt-flood.png", png_ztxt_flood(9 * 1100), costly, "9 zTXt chunks inflating to ~1 MiB each")
    add("png-private-chunk-flood.png", png_private_chunk_flood(2000 * 12), costly, "2,000 empty private chunks")
    add("png-text-flood.png", png_text_flood(2000 * 22), costly, "2,000 tEXt chunks")
    add("png-empty-idat-flood.png", png_empty_idat_flood(70_000 * 12), costly, "70,000 empty IDAT chunks")
    add("png-idat-split-4096.png", png_idat_split(4096), ok(False), "image data split over 4,096 IDAT chunks (control)")
    add("apng-frame-flood.png", png_fdat_flood(10_001 * 70), costly, "10,001 fcTL/fdAT frames")
    add(
        "png-exif-huge-rational.png",
        png_exif_huge_rational(300 * 1024),
        costly,
        "eXIf with Orientation 6 and a 300 KB RATIONAL tag",
    )
    add("tiff-huge-tile.tif", tiff_huge_tile(8192), costly, "a 16x16 image in one 8192x8192 deflate tile")
    add("tiff-strip-per-row.tif", tiff_strip_per_row(70_000), costly, "1 x 70,000 pixels, one row per strip")
    add("tiff-more-strips-than-rows.tif", _tiff_extra_strips(2000), costly, "an 8x6 image declaring 2,000 strips")
    add("tiff-many-pages.tif", tiff_many_pages(10_001), costly, "10,001 pages")
    add(
        "tiff-orientation-huge-rational.tif",
        tiff_orientation_huge_rational(300 * 1024),
        ok(False),
        "Orientation 6 and a 300 KB RATIONAL tag in the TIFF's own directory: Pillow 13 applies the "
        "rotation without re-serialising the tags, so this stays cheap and loads",
    )
    add(
        "webp-animated-huge-canvas.webp",
        webp_animated_canvas(PLAIN_SIZE),
        costly,
        "94 bytes: an animated 7000x7000 canvas with one 1x1 frame",
    )
    add(
        "webp-canvas-over-frames.webp",
        webp_animated_canvas((3000, 3000)),
        costly,
        "an animated 3000x3000 canvas (under the WebP limit) whose only frame is 1x1",
    )
    add(
        "webp-lossless-solid-36mp.webp",
        webp_lossless_solid((6000, 6000)),
        costly,
        "a one-colour 6000x6000 lossless WebP",
    )
    add("webp-frame-flood.webp", webp_animated_canvas((16, 16), frames=10_001), costly, "10,001 ANMF frames")
    add("gif-comment-flood.gif", gif_comment_flood(2000 * 5), costly, "2,000 one-byte comment extensions")
    add("gif-frame-flood.gif", gif_frames(10_001), costly, "10,001 frames")
    add("gif-sub-block-flood.gif", gif_sub_block_flood(262_145), costly, "a comment of 262,145 one-byte sub-blocks")
    add("gif-canvas-over-frames.gif", gif_canvas((3000, 3000)), costly, "a 3000x3000 screen with one 1x1 frame")
    add(
        "gif-frame-past-screen.gif",
        gif_frame_outside_screen((1, 1), (8000, 7000)),
        bad("too_many_pixels"),
        "a 1x1 screen whose first frame is 8000x7000: Pillow grows the image to 56 MP",
    )
    add("bmp-rle8-end-of-lines.bmp", bmp_rle_end_of_lines((3000, 3000)), costly, "3000x3000 RLE8, one pixel per row")
    add("bmp-rle4-runs.bmp", bmp_rle4_runs((3000, 3000)), costly, "3000x3000 RLE4 runs")
    add("bmp-rle8-small.bmp", bmp_rle_end_of_lines((300, 200)), ok(False), "a 300x200 RLE8 bitmap (control)")
    return cases


def _tiff_extra_strips(strips: int) -> bytes:
    """An 8x6 grayscale TIFF (one strip needed) whose StripOffsets lists ``strips`` strips."""
    pixels = noisy((8, 6), seed=3, mode="L").tobytes()
    entries = [
        entry(256, SHORT, 8), entry(257, SHORT, 6), entry(258, SHORT, 8), entry(259, SHORT, 1),
        entry(262, SHORT, 1), entry(277, SHORT, 1), entry(278, SHORT, 6),
        Entry(273, LONG, strips, struct.pack("<L", 8) * strips),
        Entry(279, LONG, strips, struct.pack("<L", len(pixels)) * strips),
    ]  # fmt: skip
    return tiff_bytes(entries, prefix=pixels)


# =============================================================================
# Plain references and the full-size inputs
# =============================================================================

PLAIN_SIZE = (7000, 7000)  # 49 MP, under the default 50 MP limit


def photo_like(size: tuple[int, int] = PLAIN_SIZE, seed: int = 0, noise: int = 6) -> Image.Image:
    """Smooth gradients with mild noise: compresses like a photograph, not like noise or a flat fill."""
    import numpy as np

    width, height = size
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    planes = [(x + y) / 2, np.abs(x - y), 255 - (x * y) / 255]
    grain = rng.integers(-noise, noise + 1, size=(height, width), dtype=np.int16)
    stacked = np.stack([np.clip(p + grain, 0, 255).astype(np.uint8) for p in planes], axis=-1)
    return Image.fromarray(stacked, "RGB")


def plain(fmt: str, size: tuple[int, int] = PLAIN_SIZE, noise: int = 6, **params: object) -> bytes:
    """A photo-like image of ``size`` in ``fmt``: the reference a costly input is compared with."""
    buffer = io.BytesIO()
    photo_like(size, noise=noise).save(buffer, fmt, **params)
    return buffer.getvalue()


def _rotation_exif() -> Image.Exif:
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    return exif


def _plain_rgba_png() -> bytes:
    image = photo_like(PLAIN_SIZE, noise=1)
    image.putalpha(200)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def full_size_inputs() -> list[tuple[str, Callable[[], bytes]]]:
    """(name, builder) of each class at the size that showed its cost, plus plain references.

    Builders are called one at a time by ``scripts/cost_run.py`` (some build
    tens of MiB); every input is at most 32 MiB, the service's default limit.
    """
    return [
        ("plain 49 MP JPEG (q90)", lambda: plain("JPEG", quality=90)),
        ("plain 49 MP progressive JPEG", lambda: plain("JPEG", quality=90, progressive=True)),
        ("plain 49 MP PNG", lambda: plain("PNG", noise=1)),
        ("plain 49 MP lossy WebP", lambda: plain("WEBP", quality=80, method=0)),
        ("plain 49 MP JPEG, EXIF Orientation 6", lambda: plain("JPEG", quality=90, exif=_rotation_exif())),
        ("plain 49 MP RGBA PNG", lambda: _plain_rgba_png()),
        ("JPEG APP1 Exif flood, 4 MiB", lambda: jpeg_exif_segment_flood(4 * MiB)),
        ("JPEG progressive, one AC scan x2000, 49 MP", lambda: jpeg_repeated_scans(PLAIN_SIZE, 2000)),
        ("JPEG APP0 flood, 30 MiB", lambda: jpeg_app0_flood(30 * MiB)),
        ("JPEG COM flood, 30 MiB", lambda: jpeg_com_flood(30 * MiB)),
        ("JPEG fill-byte flood, 30 MiB", lambda: jpeg_fill_flood(30 * MiB)),
        ("JPEG junk before marker, 30 MiB", lambda: jpeg_junk_flood(30 * MiB)),
        ("JPEG DRI table-segment flood, 30 MiB", lambda: jpeg_with_segments(jpeg_segment(0xFFDD, b"\0\0") * (5 * MiB))),
        ("JPEG APP13 Photoshop flood, 30 MiB", lambda: jpeg_photoshop_flood(30 * MiB)),
        ("JPEG ICC APP2 chain 255 x 64 KiB", lambda: jpeg_icc_chain(255, 65000)),
        ("JPEG EXIF huge RATIONAL over APP1s, 4 MiB", lambda: jpeg_exif_huge_rational(4 * MiB)),
        ("PNG iCCP flood, 30 MiB", lambda: png_iccp_flood(30 * MiB)),
        ("PNG compressed iTXt flood, 30 MiB", lambda: png_itxt_flood(30 * MiB)),
        ("PNG zTXt flood, 30 MiB", lambda: png_ztxt_flood(30 * MiB)),
        ("PNG private chunk flood, 30 MiB", lambda: png_private_chunk_flood(30 * MiB)),
        ("PNG tEXt flood, 30 MiB", lambda: png_text_flood(30 * MiB)),
        ("PNG empty IDAT flood, 30 MiB", lambda: png_empty_idat_flood(30 * MiB)),
        ("APNG fcTL/fdAT flood, 30 MiB", lambda: png_fdat_flood(30 * MiB)),
        ("PNG eXIf Orientation 6 + huge RATIONAL, 30 MiB", lambda: png_exif_huge_rational(30 * MiB)),
        ("TIFF 16x16, one 46336x46336 deflate tile", lambda: tiff_huge_tile(46336)),
        ("TIFF 1 x 4M, one row per strip", lambda: tiff_strip_per_row(4_000_000)),
        ("TIFF 8x6 declaring 4M strips", lambda: _tiff_extra_strips(4_000_000)),
        ("TIFF 100,000 pages", lambda: tiff_many_pages(100_000)),
        ("TIFF Orientation 6 + huge RATIONAL, 30 MiB", lambda: tiff_orientation_huge_rational(30 * MiB)),
        ("WebP animated, 7000x7000 canvas, 1x1 frame", lambda: webp_animated_canvas(PLAIN_SIZE)),
        ("WebP lossless solid 7000x7000", lambda: webp_lossless_solid(PLAIN_SIZE)),
        ("WebP 100,000 ANMF frames", lambda: webp_animated_canvas((64, 64), frames=100_000)),
        ("GIF comment flood, 30 MiB", lambda: gif_comment_flood(30 * MiB)),
        ("GIF one comment of 1-byte sub-blocks, 30 MiB", lambda: gif_sub_block_flood(15 * MiB)),
        ("GIF 60,000 frames", lambda: gif_frames(60_000)),
        ("GIF 7000x7000 screen, one 1x1 frame", lambda: gif_canvas(PLAIN_SIZE)),
        ("GIF 1x1 screen, 7000x7000 frame", lambda: gif_frame_outside_screen((1, 1), PLAIN_SIZE)),
        ("BMP RLE8 end-of-line codes, 7000x7000", lambda: bmp_rle_end_of_lines(PLAIN_SIZE)),
        ("BMP RLE4 runs, 7000x7000", lambda: bmp_rle4_runs(PLAIN_SIZE)),
    ]
