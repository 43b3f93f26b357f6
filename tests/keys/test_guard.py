"""Decode budgets (``mmobs.keys.guard``) and the single pixel limit (``mmobs.keys.pixel_limit``).

For every costly class (issue #11) a small input is refused with the exact
reason, and a plain image of the same pixel size is accepted, so each check
is tied to structure, not to size. Real-looking images that Pillow writes in
every default format (a 49 MP JPEG among them) pass. The checks raise nothing
but ``BadImageError`` on fuzzed bytes, and allocate nothing proportional to
what a header declares. ``max_pixels`` is the loader's only pixel limit:
above or below Pillow's ``MAX_IMAGE_PIXELS``, with mmobs's message, no Pillow
warning, and no effect on Pillow's behaviour outside the loader.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import threading
import tracemalloc
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageCms

from mmobs import BAD_IMAGE_REASONS, BadImageError, ImageMediaIO, MultiModalHasher
from mmobs.keys.guard import (
    DEFAULT_DECODE_LIMITS,
    DecodeLimits,
    check_image_bytes,
    sniff_format,
)
from mmobs.keys.pixel_limit import pixel_limit
from scripts.corpus import costly
from scripts.corpus.tiff import LONG, SHORT, Entry, entry, tiff_bytes
from tests.support.images import png_header_only

pytestmark = pytest.mark.usefixtures("silent_observer")
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


# =============================================================================
# Each costly class: refused with its reason; a plain image of its size passes
# =============================================================================


def _tiled_tiff(size: tuple[int, int], tile: int, *, deflate: bool = False) -> bytes:
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


def _animated(fmt: str, size: tuple[int, int], frames: int, **params: Any) -> bytes:
    images = [Image.new("RGB", size, (10 * i % 256, 80, 160)) for i in range(frames)]
    return encode(images[0], fmt, save_all=True, append_images=images[1:], duration=40, loop=0, **params)


def _plain_gif(size: tuple[int, int], frames: int = 1) -> bytes:
    images = [Image.new("P", size, i % 4) for i in range(frames)]
    for image in images:
        image.putpalette(bytes(range(12)) * 64)
    return encode(images[0], "GIF", save_all=True, append_images=images[1:], duration=40)


def _plain_jpeg_with_metadata() -> bytes:
    """A phone-like JPEG: EXIF with a rotation, an ICC profile, XMP and a comment."""
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "mmobs phone"
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    data = encode(photo((640, 480)), "JPEG", quality=90, exif=exif, icc_profile=icc, comment=b"shot on a phone")
    xmp = b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta xmlns:x='adobe:ns:meta/'/>"
    return data[:2] + costly.jpeg_segment(0xFFE1, xmp) + data[2:]


#: (id, costly input, reason, a word of the message, a plain image of the same pixel size, limits).
CLASSES: list[Any] = [
    pytest.param(lambda: costly.jpeg_exif_segment_flood(2000 * 20), "too_costly", "segments",
                 lambda: costly.base_image("JPEG"), None, id="jpeg-exif-segment-flood"),
    pytest.param(lambda: costly.jpeg_with_segments(costly.jpeg_segment(0xFFE1, b"Exif\0\0" + bytes(65000)) * 5),
                 "too_costly", "EXIF", lambda: costly.base_image("JPEG"), None, id="jpeg-exif-over-limit"),
    pytest.param(lambda: costly.jpeg_repeated_scans((256, 256), 200), "too_costly", "scans",
                 lambda: costly.progressive_jpeg((256, 256)), None, id="jpeg-repeated-scans"),
    pytest.param(lambda: costly.jpeg_app0_flood(2000 * 4), "too_costly", "segments",
                 lambda: costly.base_image("JPEG"), None, id="jpeg-app0-flood"),
    pytest.param(lambda: costly.jpeg_com_flood(2000 * 4), "too_costly", "segments",
                 lambda: costly.base_image("JPEG"), None, id="jpeg-com-flood"),
    pytest.param(lambda: costly.jpeg_fill_flood(70_000), "too_costly", "fill",
                 lambda: costly.base_image("JPEG"), None, id="jpeg-fill-flood"),
    pytest.param(lambda: costly.jpeg_junk_flood(70_000), "too_costly", "junk",
                 lambda: costly.base_image("JPEG"), None, id="jpeg-junk-flood"),
    pytest.param(lambda: costly.jpeg_icc_chain(1100, 4), "too_costly", "segments",
                 lambda: costly.jpeg_icc_chain(10, 60_000), None, id="jpeg-icc-segment-flood"),
    pytest.param(lambda: costly.png_iccp_flood(9 * 1100), "too_costly", "inflate",
                 lambda: costly.base_image("PNG"), None, id="png-iccp-flood"),
    pytest.param(lambda: costly.png_itxt_flood(9 * 1100), "too_costly", "inflate",
                 lambda: costly.base_image("PNG"), None, id="png-itxt-flood"),
    pytest.param(lambda: costly.png_ztxt_flood(9 * 1100), "too_costly", "inflate",
                 lambda: costly.base_image("PNG"), None, id="png-ztxt-flood"),
    pytest.param(lambda: costly.png_private_chunk_flood(2000 * 12), "too_costly", "metadata chunks",
                 lambda: costly.base_image("PNG"), None, id="png-private-chunk-flood"),
    pytest.param(lambda: costly.png_text_flood(2000 * 22), "too_costly", "metadata chunks",
                 lambda: costly.base_image("PNG"), None, id="png-text-flood"),
    pytest.param(lambda: costly.png_empty_idat_flood(70_000 * 12), "too_costly", "chunks",
                 lambda: costly.png_idat_split(4096, (16, 12)), None, id="png-empty-idat-flood"),
    pytest.param(lambda: costly.png_fdat_flood(10_001 * 70), "too_costly", "frames",
                 lambda: _animated("PNG", (16, 12), 50), None, id="apng-frame-flood"),
    pytest.param(lambda: costly.png_exif_huge_rational(300 * 1024), "too_costly", "EXIF",
                 lambda: encode(photo((16, 12)), "PNG", exif=costly.exif_huge_rational(16)), None,
                 id="png-exif-huge-rational"),
    pytest.param(lambda: costly.tiff_huge_tile(8192), "too_costly", "tiles",
                 lambda: _tiled_tiff((16, 16), 16, deflate=True), None, id="tiff-huge-tile"),
    pytest.param(lambda: costly.tiff_strip_per_row(70_000), "too_costly", "strips",
                 lambda: encode(Image.new("L", (1, 70_000), 128), "TIFF"), None, id="tiff-strip-per-row"),
    pytest.param(lambda: costly.tiff_many_pages(10_001), "too_costly", "pages",
                 lambda: _animated("TIFF", (1, 1), 50), None, id="tiff-many-pages"),
    pytest.param(lambda: costly.webp_animated_canvas((3000, 3000)), "too_costly", "canvas",
                 lambda: _animated("WEBP", (3000, 3000), 2, lossless=True, method=0), None,
                 id="webp-canvas-over-frames"),
    pytest.param(lambda: costly.webp_animated_canvas((16, 16), frames=10_001), "too_costly", "frames",
                 lambda: _animated("WEBP", (16, 16), 50), None, id="webp-frame-flood"),
    pytest.param(lambda: costly.gif_comment_flood(2000 * 5), "too_costly", "extension",
                 lambda: costly.base_image("GIF"), None, id="gif-comment-flood"),
    pytest.param(lambda: costly.gif_frames(10_001), "too_costly", "frames",
                 lambda: _plain_gif((16, 12), 50), None, id="gif-frame-flood"),
    pytest.param(lambda: costly.gif_sub_block_flood(262_145), "too_costly", "sub-blocks",
                 lambda: costly.base_image("GIF"), None, id="gif-sub-block-flood"),
    pytest.param(lambda: costly.gif_canvas((2100, 2100)), "too_costly", "canvas",
                 lambda: _plain_gif((2100, 2100), 2), None, id="gif-canvas-over-frames"),
    pytest.param(lambda: costly.gif_frame_outside_screen((1, 1), (8000, 7000)), "too_many_pixels", "56000000",
                 lambda: _plain_gif((2000, 2000)), None, id="gif-frame-past-screen"),
    pytest.param(lambda: costly.bmp_rle_end_of_lines((300, 200)), "too_costly", "RLE8",
                 lambda: encode(Image.new("L", (300, 200)), "BMP"), DecodeLimits(max_bmp_rle_pixels=50_000),
                 id="bmp-rle8-end-of-lines"),
    pytest.param(lambda: costly.bmp_rle4_runs((300, 200)), "too_costly", "RLE4",
                 lambda: encode(Image.new("L", (300, 200)), "BMP"), DecodeLimits(max_bmp_rle_pixels=50_000),
                 id="bmp-rle4-runs"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "reason", "keyword", "plain", "limits"), CLASSES)
def test_costly_class_is_refused_and_a_plain_image_of_its_size_passes(
    build: Callable[[], bytes], reason: str, keyword: str, plain: Callable[[], bytes], limits: DecodeLimits | None
) -> None:
    data = build()
    error = refusal(data, limits)
    assert error is not None, "the costly input was accepted"
    assert error.reason == reason, error.message
    assert keyword in error.message
    assert ";" in error.message  # what was found; what to send instead
    reference = plain()
    with Image.open(io.BytesIO(reference)) as opened:
        pixels = opened.size[0] * opened.size[1]
    with Image.open(io.BytesIO(data)) as opened:
        costly_pixels = opened.size[0] * opened.size[1]
    assert pixels == costly_pixels or reason == "too_many_pixels", (pixels, costly_pixels)
    assert refusal(reference, limits) is None
    if pixels <= 10_000_000:
        loads(reference, limits or DEFAULT_DECODE_LIMITS)
    # The loader refuses it the same way, and reports it once.
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(decode_limits=limits or DEFAULT_DECODE_LIMITS).load_bytes(data)
    assert info.value.reason == reason


def test_webp_canvas_is_limited_by_pixels_not_structure() -> None:
    """A plain WebP costs ~16 bytes a canvas pixel in Pillow: above 32 Mi pixels even a plain one is refused."""
    tiny_animation = costly.webp_animated_canvas(costly.PLAIN_SIZE)  # 94 bytes
    plain = costly.webp_lossless_solid((6000, 6000))
    assert len(tiny_animation) < 100
    for data in (tiny_animation, plain):
        error = refusal(data)
        assert error is not None and error.reason == "too_costly" and "WebP" in error.message
    assert refusal(costly.webp_lossless_solid((5000, 5000))) is None  # 25 MP: under the WebP limit


def test_one_tiff_tile_padded_around_a_large_image_passes() -> None:
    """A 4200x4200 image in one 4208x4208 tile (multiples of 16) costs what the image costs."""

    def header(tile: int) -> bytes:
        return tiff_bytes(
            [entry(256, SHORT, 4200), entry(257, SHORT, 4200), entry(258, SHORT, 8), entry(259, SHORT, 8),
             entry(262, SHORT, 1), entry(277, SHORT, 1), entry(322, SHORT, tile), entry(323, SHORT, tile),
             entry(324, LONG, 8), entry(325, LONG, 16)],
            prefix=bytes(16),
        )  # fmt: skip

    assert refusal(header(4208)) is None
    error = refusal(header(6000))  # 36 MP: over twice the image and over 16 Mi
    assert error is not None and error.reason == "too_costly" and "tiles are 6000x6000" in error.message


def test_tiff_declaring_more_strips_than_rows_is_refused() -> None:
    pixels = bytes(48)
    strips = 2000
    data = tiff_bytes(
        [entry(256, SHORT, 8), entry(257, SHORT, 6), entry(258, SHORT, 8), entry(259, SHORT, 1), entry(262, SHORT, 1),
         entry(278, SHORT, 6), Entry(273, LONG, strips, struct.pack("<L", 8) * strips),
         Entry(279, LONG, strips, struct.pack("<L", 48) * strips)],
        prefix=pixels,
    )  # fmt: skip
    error = refusal(data)
    assert error is not None and error.reason == "too_costly" and "needs 1" in error.message


def _after_the_only_scan(extra: bytes) -> bytes:
    """The baseline base JPEG (one interleaved scan) with ``extra`` between its scan's data and EOI."""
    base = costly.base_image("JPEG")
    ((_, scan_end),) = costly.jpeg_scans(base)
    return base[:scan_end] + extra + base[scan_end:]


def test_after_a_frames_only_scan_nothing_is_read_because_nothing_costs() -> None:
    """The walk stops at the only scan of a single-scan frame (issue #22): libjpeg reads the rest in C.

    So the entropy-coded data is never searched. What is past that point can
    cost nothing: metadata segments and fill there are skipped by libjpeg in C
    (the image decodes as fast as without them), and a second scan is refused by
    libjpeg itself (Pillow's "broken data stream", ``corrupt``), never decoded.
    """
    base = costly.base_image("JPEG")
    ((scan_start, scan_end),) = costly.jpeg_scans(base)
    segments = _after_the_only_scan(costly.jpeg_segment(0xFFFE, b"") * 5000 + b"\xff" * 70_000)
    assert refusal(segments) is None
    loads(segments)
    rescans = _after_the_only_scan(base[scan_start:scan_end] * 200)
    assert refusal(rescans) is None
    with pytest.raises(BadImageError) as info:
        ImageMediaIO().load_bytes(rescans)
    assert info.value.reason == "corrupt"


def test_a_frame_that_can_have_more_scans_has_every_scan_counted() -> None:
    """Progressive frames, and a first scan without every component, are walked to the end."""
    assert refusal(costly.jpeg_repeated_scans((64, 64), 200)).reason == "too_costly"  # type: ignore[union-attr]
    base = costly.base_image("JPEG")
    ((scan_start, scan_end),) = costly.jpeg_scans(base)
    one_component = bytearray(base)
    one_component[scan_start + 4] = 1  # Ns: the first scan claims one of the frame's three components
    data = bytes(one_component[:scan_end]) + base[scan_start:scan_end] * 200 + base[scan_end:]
    error = refusal(data)
    assert error is not None and "scans" in str(error)


def _chunk_count(png: bytes) -> int:
    """Chunks whose data is all there, counted one by one."""
    position, count = 8, 0
    while position + 8 <= len(png):
        length = struct.unpack_from(">I", png, position)[0]
        if position + 8 + length > len(png):
            break
        position += 12 + length
        count += 1
    return count


def test_a_run_of_image_data_chunks_counts_every_chunk() -> None:
    """Runs of IDAT chunks of one size are checked at once (issue #22), and still counted one by one."""
    png = costly.png_rechunked(encode(photo((320, 240)), "PNG"), 512)
    chunks = _chunk_count(png)
    assert chunks > 100
    assert refusal(png, DecodeLimits(max_chunks=chunks)) is None
    assert refusal(png, DecodeLimits(max_chunks=chunks - 1)).reason == "too_costly"  # type: ignore[union-attr]
    # A metadata chunk in the middle of a run ends it: it is still seen and counted.
    middle = png.index(b"IDAT", len(png) // 2) - 4
    text = costly.png_chunk(b"tEXt", b"k\0v")
    assert refusal(png[:middle] + text + png[middle:], DecodeLimits(max_metadata_segments=1)) is None
    with_two = png[:middle] + text * 2 + png[middle:]
    assert refusal(with_two, DecodeLimits(max_metadata_segments=1)).reason == "too_costly"  # type: ignore[union-attr]
    # Cut inside the run: the chunks before the cut are counted, the cut one left to Pillow (truncated).
    cut = png[: len(png) // 2 + 100]
    whole = _chunk_count(cut)
    assert refusal(cut, DecodeLimits(max_chunks=whole)) is None
    assert refusal(cut, DecodeLimits(max_chunks=whole - 1)).reason == "too_costly"  # type: ignore[union-attr]


# =============================================================================
# Normal images pass: every default format, as cameras, phones and screenshots write them
# =============================================================================


def _normal_images() -> dict[str, Callable[[], bytes]]:
    exif = Image.Exif()
    exif[0x0112] = 8
    return {
        "jpeg-phone-metadata": _plain_jpeg_with_metadata,
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
        "apng-30-frames": lambda: _animated("PNG", (120, 90), 30),
        "gif-animated-60-frames": lambda: _animated("GIF", (200, 150), 60),
        "gif-still": lambda: encode(photo((320, 240)).quantize(256), "GIF"),
        "webp-lossy-photo": lambda: encode(photo((1600, 1200)), "WEBP", quality=80),
        "webp-lossless-rgba-exif": lambda: encode(photo((300, 200)).convert("RGBA"), "WEBP", lossless=True, exif=exif),
        "webp-animated-40-frames": lambda: _animated("WEBP", (160, 120), 40),
        "tiff-tiled-256": lambda: _tiled_tiff((600, 400), 256),
        "tiff-tiled-deflate": lambda: _tiled_tiff((600, 400), 128, deflate=True),
        "tiff-lzw": lambda: encode(photo((640, 480)), "TIFF", compression="tiff_lzw"),
        "tiff-deflate-multipage": lambda: _animated("TIFF", (200, 150), 12, compression="tiff_adobe_deflate"),
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


# =============================================================================
# Robustness: only BadImageError, bounded memory, standalone use
# =============================================================================

_SEEDS = [
    costly.base_image("JPEG"), costly.progressive_jpeg((32, 32)), costly.base_image("PNG"), costly.base_image("GIF"),
    costly.base_image("WEBP"), costly.webp_animated_canvas((8, 8), frames=3), costly.tiff_many_pages(3),
    _tiled_tiff((40, 30), 16), costly.base_image("BMP"), costly.bmp_rle_end_of_lines((20, 10)),
    costly.png_fdat_flood(700), costly.gif_frames(4), costly.jpeg_icc_chain(3, 10),
]  # fmt: skip


@settings(
    derandomize=True, max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    seed=st.sampled_from(_SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 4096), st.binary(min_size=0, max_size=8), st.booleans()), max_size=6),
    cut=st.integers(0, 4096),
)
def test_mutated_inputs_raise_only_bad_image_error(seed: bytes, edits: list[tuple[int, bytes, bool]], cut: int) -> None:
    """Overwrite or insert bytes anywhere, cut anywhere: the check raises nothing but BadImageError."""
    data = bytearray(seed)
    for at, blob, insert in edits:
        at %= len(data) + 1
        data[at : at if insert else at + len(blob)] = blob
    for candidate in (bytes(data), bytes(data[: len(data) - cut % (len(data) + 1)])):
        try:
            check_image_bytes(candidate, max_pixels=MAX_PIXELS)
        except BadImageError as error:
            assert error.reason in BAD_IMAGE_REASONS


@settings(derandomize=True, max_examples=200, deadline=None, database=None)
@given(
    prefix=st.sampled_from(
        [
            b"\xff\xd8\xff",
            b"\x89PNG\r\n\x1a\n",
            b"GIF89a",
            b"RIFF\0\0\0\0WEBP",
            b"II*\0",
            b"MM\0*",
            b"II+\0\x08\0\0\0",
            b"BM",
        ]
    ),
    rest=st.binary(max_size=300),
)
def test_random_bytes_behind_a_signature_raise_only_bad_image_error(prefix: bytes, rest: bytes) -> None:
    try:
        check_image_bytes(prefix + rest, max_pixels=MAX_PIXELS)
    except BadImageError as error:
        assert error.reason in BAD_IMAGE_REASONS


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: costly.png_iccp_flood(8 * 2**20), id="iccp-8MiB"),
        pytest.param(lambda: costly.png_itxt_flood(8 * 2**20), id="itxt-8MiB"),
        pytest.param(lambda: costly.png_exif_huge_rational(8 * 2**20), id="exif-8MiB"),
        pytest.param(lambda: costly.tiff_huge_tile(46336), id="tile-46336"),
        pytest.param(lambda: costly.gif_sub_block_flood(400_000), id="gif-sub-blocks-800KiB"),
        pytest.param(lambda: costly.jpeg_fill_flood(8 * 2**20), id="jpeg-fill-8MiB"),
    ],
)
def test_checks_allocate_nothing_proportional_to_the_input(build: Callable[[], bytes]) -> None:
    """Inflating is done 64 KiB at a time and stops at the budget; nothing copies the input."""
    data = build()
    tracemalloc.start()
    try:
        with pytest.raises(BadImageError) as info:
            check_image_bytes(data, max_pixels=MAX_PIXELS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.reason == "too_costly"
    assert peak < 512 * 1024, f"{peak} bytes allocated while checking {len(data)} bytes"


def test_check_takes_any_buffer_and_ignores_other_formats() -> None:
    data = costly.jpeg_app0_flood(2000 * 4)
    for buffer in (data, bytearray(data), memoryview(data)):
        with pytest.raises(BadImageError):
            check_image_bytes(buffer)
    assert sniff_format(b"\x00\x00\x01\x00") is None
    check_image_bytes(b"not an image at all")
    check_image_bytes(b"")


def test_pixel_limit_is_only_applied_when_given() -> None:
    data = png_header_only(40000, 40000)
    check_image_bytes(data)  # no max_pixels: structure only
    with pytest.raises(BadImageError) as info:
        check_image_bytes(data, max_pixels=1_000_000)
    assert info.value.reason == "too_many_pixels"
    assert "40000x40000" in info.value.message


def test_loader_frees_the_decoded_original_before_converting(tmp_path: Path) -> None:
    """An RGBA image costs its decode, the transpose's copy and the RGB composite, not all three at once.

    ``exif_transpose`` returns a copy even without a rotation; the loader closes
    the original before compositing, so a 49 MP RGBA PNG peaks at ~420 MiB,
    not ~610 (``docs/reliability.md``). Measured here on 12 MP, in a fresh process,
    by its own ``VmHWM`` (``ru_maxrss`` would include the parent's high-water mark).
    """
    path = tmp_path / "rgba.png"
    path.write_bytes(encode(Image.new("RGBA", (4000, 3000), (10, 20, 30, 128)), "PNG", compress_level=1))
    script = (
        "import os, sys, mmobs\n"
        "mmobs.set_observer(None)\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "loader = mmobs.ImageMediaIO()\n"
        "rss = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20\n"
        "media = loader.load_bytes(data)\n"
        "peak = next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print(peak / 1024 - rss)\n"
    )
    command = [sys.executable, "-c", script, str(path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    core = 4000 * 3000 * 4 / 2**20  # MiB of one RGBA (or RGB: 4 bytes a pixel too) image core
    # decode + copy (2 cores), then the copy + RGB + alpha (2.25 cores); all at once would be 3.25.
    assert float(done.stdout) < 2.6 * core, (float(done.stdout), core)


# =============================================================================
# Limits: validated, tunable, and off when asked
# =============================================================================


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", None, True])
def test_decode_limits_must_be_positive_integers(value: Any) -> None:
    with pytest.raises(ValueError, match="max_jpeg_scans"):
        DecodeLimits(max_jpeg_scans=value)


def test_loader_validates_and_can_disable_the_checks() -> None:
    with pytest.raises(ValueError, match="decode_limits"):
        ImageMediaIO(decode_limits={"max_jpeg_scans": 5})  # type: ignore[arg-type]
    flood = costly.jpeg_app0_flood(2000 * 4)
    with pytest.raises(BadImageError):
        ImageMediaIO().load_bytes(flood)
    assert ImageMediaIO(decode_limits=None).load_bytes(flood).media.size == (16, 12)
    assert "decode_limits=DecodeLimits(" in repr(ImageMediaIO())


def test_raising_a_limit_accepts_the_input() -> None:
    data = costly.jpeg_repeated_scans((64, 64), 200)
    assert refusal(data).reason == "too_costly"  # type: ignore[union-attr]
    assert refusal(data, DecodeLimits(max_jpeg_scans=1000)) is None
    loads(data, DecodeLimits(max_jpeg_scans=1000))


def test_the_check_respects_the_format_allow_list() -> None:
    """A format the loader does not open is refused by name, whatever its structure."""
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(formats=["PNG"]).load_bytes(costly.jpeg_app0_flood(2000 * 4))
    assert info.value.reason == "unsupported_format"


# =============================================================================
# max_pixels is the one pixel limit (issue #12)
# =============================================================================


def _bilevel_png(size: tuple[int, int]) -> bytes:
    """A real, fully decodable mode-1 PNG: one byte a pixel once decoded, a few KiB encoded."""
    return encode(Image.new("1", size), "PNG")


def test_max_pixels_above_pillows_limit_loads_without_a_warning() -> None:
    """90 MP is above Pillow's MAX_IMAGE_PIXELS (89.5 MP): with max_pixels=100 M it loads, silently."""
    data = _bilevel_png((10000, 9000))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        media = ImageMediaIO(max_pixels=100_000_000, image_mode=None).load_bytes(data)
    assert media.media.size == (10000, 9000)
    assert [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)] == []


def test_max_pixels_above_twice_pillows_limit_is_not_pillows_refusal() -> None:
    """400 MP with max_pixels=500 M: Pillow's "decompression bomb" error used to refuse it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BadImageError) as info:
            loader = ImageMediaIO(max_pixels=500_000_000, image_mode=None)
            loader.load_bytes(png_header_only(20000, 20000, color_type=0))
    assert info.value.reason == "truncated", info.value.message  # it got past every pixel limit
    assert "decompression bomb" not in info.value.message


@pytest.mark.parametrize("size", [(10000, 10000), (20000, 20000), (8000, 7000)])
def test_above_max_pixels_is_mmobs_refusal_with_mmobs_message(size: tuple[int, int]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Pillow warning would fail the test
        with pytest.raises(BadImageError) as info:
            ImageMediaIO().load_bytes(png_header_only(*size))
    assert info.value.reason == "too_many_pixels"
    assert info.value.message.endswith("above the limit of 50000000; resize it before sending")


def test_pillow_limit_applies_inside_the_decoder_too() -> None:
    """A size met while decoding (here a GIF frame past its screen, with the checks off) uses mmobs's limit."""
    data = costly.gif_frame_outside_screen((1, 1), (8000, 7000))
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(decode_limits=None).load_bytes(data)
    assert info.value.reason == "too_many_pixels"
    assert "above the limit of 50000000" in info.value.message


def test_no_pillow_warning_reaches_stderr() -> None:
    """In a fresh interpreter (default warning filters), loads between 89.5 MP and 179 MP print nothing."""
    script = (
        "import mmobs\n"
        "mmobs.set_observer(None)\n"
        "from mmobs import ImageMediaIO, BadImageError\n"
        "from tests.support.images import png_header_only\n"
        "from PIL import Image; import io\n"
        "big = io.BytesIO(); Image.new('1', (10000, 9000)).save(big, 'PNG')\n"
        "ImageMediaIO(max_pixels=100_000_000, image_mode=None).load_bytes(big.getvalue())\n"
        "for limit in (50_000_000, 150_000_000):\n"
        "    try: ImageMediaIO(max_pixels=limit).load_bytes(png_header_only(10000, 10000))\n"
        "    except BadImageError as e: print(e.reason)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["too_many_pixels", "truncated"]
    assert done.stderr == ""


def test_pillow_is_unchanged_outside_the_loader() -> None:
    """Other code in the process keeps Pillow's own limit, warning and error."""
    before = Image.MAX_IMAGE_PIXELS
    ImageMediaIO(max_pixels=500_000_000).load_bytes(encode(Image.new("RGB", (4, 4)), "PNG"))
    assert before == Image.MAX_IMAGE_PIXELS
    with pytest.raises(Image.DecompressionBombError, match="could be decompression bomb"):
        Image.open(io.BytesIO(png_header_only(20000, 20000)))
    with pytest.warns(Image.DecompressionBombWarning):
        Image.open(io.BytesIO(png_header_only(10000, 10000)))


def test_pixel_limits_of_concurrent_loaders_do_not_mix() -> None:
    """Threads with different limits, and plain Pillow in a third, each see their own limit."""
    data = png_header_only(10000, 10000, color_type=0)  # 100 MP
    outcomes: dict[str, set[str]] = {"high": set(), "low": set(), "pillow": set()}
    start = threading.Barrier(3)

    def loader(name: str, limit: int) -> None:
        start.wait()
        io_ = ImageMediaIO(max_pixels=limit, image_mode=None)
        for _ in range(40):
            try:
                io_.load_bytes(data)
            except BadImageError as error:
                outcomes[name].add(error.reason)

    def pillow() -> None:
        start.wait()
        for _ in range(200):
            try:
                Image._decompression_bomb_check((20000, 20000))  # Pillow's own check, outside any loader
            except Image.DecompressionBombError as error:
                outcomes["pillow"].add(type(error).__name__)

    threads = [
        threading.Thread(target=loader, args=("high", 200_000_000)),
        threading.Thread(target=loader, args=("low", 50_000_000)),
        threading.Thread(target=pillow),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {"high": {"truncated"}, "low": {"too_many_pixels"}, "pillow": {"DecompressionBombError"}}


def test_pixel_limit_context_restores_the_previous_limit() -> None:
    with pixel_limit(10):
        with pixel_limit(1_000_000_000):
            Image._decompression_bomb_check((20000, 20000))  # allowed by the inner limit
        with pytest.raises(Image.DecompressionBombError):
            Image._decompression_bomb_check((4, 4))
    with pytest.warns(Image.DecompressionBombWarning):
        Image._decompression_bomb_check((10000, 10000))  # Pillow's own again


@pytest.mark.parametrize(
    ("bit_depth", "color_type"),
    [(1, 0), (8, 0), (16, 0), (8, 2), (16, 2), (8, 3), (8, 4), (16, 4), (8, 6), (16, 6)],
)
def test_a_row_wider_than_pillow_can_address_is_refused_from_the_header(bit_depth: int, color_type: int) -> None:
    """Pillow fails a row of more than about 2^31 bits with a MemoryError before reading a pixel (a 68-byte PNG of
    100,000,000x1 was a 500 inside vLLM). The widest row the check lets through decodes without one; one pixel
    more is refused as too_many_pixels, whatever the pixel limit."""
    narrow, wide = 1, 2**31  # a binary search for the widest row the check lets through
    while wide - narrow > 1:
        middle = (narrow + wide) // 2
        passes = _passes(png_header_only(middle, 1, bit_depth=bit_depth, color_type=color_type))
        narrow, wide = (middle, wide) if passes else (narrow, middle)
    widest = narrow
    with pytest.raises(BadImageError) as refused:
        check_image_bytes(png_header_only(widest + 1, 1, bit_depth=bit_depth, color_type=color_type))
    assert refused.value.reason == "too_many_pixels" and "wide" in refused.value.message
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        image = Image.open(io.BytesIO(png_header_only(widest, 1, bit_depth=bit_depth, color_type=color_type)))
        with pytest.raises(OSError, match="truncated"):  # the data ends early, as it does: no MemoryError
            image.load()
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def _passes(data: bytes) -> bool:
    try:
        check_image_bytes(data)
    except BadImageError:
        return False
    return True
