"""The CI cases: one small case per costly class (each under the corpus's 1 MiB), refused by the guard before
Pillow decodes it, and controls that must load."""

from __future__ import annotations

from ..base import MEDIA_TYPES
from ..case import Case, bad, ok
from ..exif import EXIF_PREFIX
from .bmp import bmp_rle4_runs, bmp_rle_end_of_lines
from .exif import jpeg_exif_huge_rational, png_exif_huge_rational
from .full_size import PLAIN_SIZE
from .gif import gif_canvas, gif_comment_flood, gif_frame_outside_screen, gif_frames, gif_sub_block_flood
from .jpeg import (
    jpeg_app0_flood,
    jpeg_com_flood,
    jpeg_exif_segment_flood,
    jpeg_fill_flood,
    jpeg_icc_chain,
    jpeg_junk_flood,
    jpeg_repeated_scans,
    jpeg_segment,
    jpeg_with_segments,
)
from .png import (
    png_empty_idat_flood,
    png_fdat_flood,
    png_iccp_flood,
    png_idat_split,
    png_itxt_flood,
    png_private_chunk_flood,
    png_text_flood,
    png_ztxt_flood,
)
from .tiff import tiff_extra_strips, tiff_huge_tile, tiff_many_pages, tiff_orientation_huge_rational, tiff_strip_per_row
from .webp import webp_animated_canvas, webp_lossless_solid


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
    add("tiff-more-strips-than-rows.tif", tiff_extra_strips(2000), costly, "an 8x6 image declaring 2,000 strips")
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
