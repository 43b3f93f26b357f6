"""Decode budgets (``mmobs.keys.guard``): each costly class is refused, a plain image of its size passes.

For every costly class a small input is refused with the exact
reason, and a plain image of the same pixel size is accepted, so each check
is tied to structure, not to size. The structures whose cost is close to a
class's (a WebP canvas, a padded TIFF tile, scans after a JPEG's only scan, runs
of PNG image data) are measured one by one.

The other decode-budget modules: ``test_guard_normal.py`` (normal images pass),
``test_guard_robustness.py`` (only ``BadImageError``, bounded memory, the limits'
validation) and ``test_pixel_limit.py`` (``max_pixels``, the single pixel limit).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image

from mmobs import BadImageError, ImageMediaIO
from mmobs.keys.guard import DEFAULT_DECODE_LIMITS, DecodeLimits
from scripts.corpus import costly
from scripts.corpus.tiff import LONG, SHORT, Entry, entry, tiff_bytes
from tests.keys.guard_inputs import animated, encode, loads, photo, refusal, tiled_tiff

pytestmark = pytest.mark.usefixtures("silent_observer")


def _plain_gif(size: tuple[int, int], frames: int = 1) -> bytes:
    images = [Image.new("P", size, i % 4) for i in range(frames)]
    for image in images:
        image.putpalette(bytes(range(12)) * 64)
    return encode(images[0], "GIF", save_all=True, append_images=images[1:], duration=40)


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
                 lambda: animated("PNG", (16, 12), 50), None, id="apng-frame-flood"),
    pytest.param(lambda: costly.png_exif_huge_rational(300 * 1024), "too_costly", "EXIF",
                 lambda: encode(photo((16, 12)), "PNG", exif=costly.exif_huge_rational(16)), None,
                 id="png-exif-huge-rational"),
    pytest.param(lambda: costly.tiff_huge_tile(8192), "too_costly", "tiles",
                 lambda: tiled_tiff((16, 16), 16, deflate=True), None, id="tiff-huge-tile"),
    pytest.param(lambda: costly.tiff_strip_per_row(70_000), "too_costly", "strips",
                 lambda: encode(Image.new("L", (1, 70_000), 128), "TIFF"), None, id="tiff-strip-per-row"),
    pytest.param(lambda: costly.tiff_many_pages(10_001), "too_costly", "pages",
                 lambda: animated("TIFF", (1, 1), 50), None, id="tiff-many-pages"),
    pytest.param(lambda: costly.webp_animated_canvas((3000, 3000)), "too_costly", "canvas",
                 lambda: animated("WEBP", (3000, 3000), 2, lossless=True, method=0), None,
                 id="webp-canvas-over-frames"),
    pytest.param(lambda: costly.webp_animated_canvas((16, 16), frames=10_001), "too_costly", "frames",
                 lambda: animated("WEBP", (16, 16), 50), None, id="webp-frame-flood"),
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
    """The walk stops at the only scan of a single-scan frame: libjpeg reads the rest in C.

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
    """Runs of IDAT chunks of one size are checked at once, for speed, and still counted one by one."""
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


def _dds_declaring(width: int, height: int) -> bytes:
    """An uncompressed RGB DDS header declaring ``width`` x ``height``, followed by 64 bytes of pixels only."""
    header = encode(Image.new("RGB", (4, 4)), "DDS")[:128]
    return header[:12] + struct.pack("<II", height, width) + header[20:] + bytes(64)


def test_an_uncompressed_dds_is_limited_by_pixels_before_pillows_python_decoder_walks_them() -> None:
    """188 bytes declaring 1179649x18 cost 22 s of Pillow 11.3's DDS decoder (it pads what is cut short); refused
    from the header here, under any Pillow. An uncompressed texture within the limit loads."""
    error = refusal(_dds_declaring(1_179_649, 18), None)
    assert error is not None and error.reason == "too_costly", error
    assert "uncompressed DDS is 1179649x18" in error.message and "in Python" in error.message
    texture = encode(photo((300, 200)), "DDS")
    assert refusal(texture, None) is None
    assert refusal(texture, DecodeLimits(max_dds_rgb_pixels=50_000)).reason == "too_costly"  # type: ignore[union-attr]
    loader = ImageMediaIO(formats=("DDS",), decode_limits=DecodeLimits(max_dds_rgb_pixels=50_000))
    with pytest.raises(BadImageError) as info:
        loader.load_bytes(texture)
    assert info.value.reason == "too_costly"
    assert ImageMediaIO(formats=("DDS",)).load_bytes(texture).media.size == (300, 200)
