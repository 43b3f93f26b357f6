"""Plain references (photo-like images of 49 MP) and each costly class at the size that showed its cost."""

from __future__ import annotations

import io
from collections.abc import Callable

from PIL import Image

from ..tiff import ORIENTATION
from .bmp import bmp_rle4_runs, bmp_rle_end_of_lines
from .deflate import MiB
from .exif import jpeg_exif_huge_rational, png_exif_huge_rational
from .gif import gif_canvas, gif_comment_flood, gif_frame_outside_screen, gif_frames, gif_sub_block_flood
from .jpeg import (
    jpeg_app0_flood,
    jpeg_com_flood,
    jpeg_exif_segment_flood,
    jpeg_fill_flood,
    jpeg_icc_chain,
    jpeg_junk_flood,
    jpeg_photoshop_flood,
    jpeg_repeated_scans,
    jpeg_segment,
    jpeg_with_segments,
)
from .png import (
    png_empty_idat_flood,
    png_fdat_flood,
    png_iccp_flood,
    png_itxt_flood,
    png_private_chunk_flood,
    png_text_flood,
    png_ztxt_flood,
)
from .tiff import tiff_extra_strips, tiff_huge_tile, tiff_many_pages, tiff_orientation_huge_rational, tiff_strip_per_row
from .webp import webp_animated_canvas, webp_lossless_solid

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
        ("TIFF 8x6 declaring 4M strips", lambda: tiff_extra_strips(4_000_000)),
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
