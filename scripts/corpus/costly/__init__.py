"""Inputs that cost far more to decode than a plain image of their size.

Each builder takes its size as a parameter, so the same structure serves two
uses: a small case for CI (:func:`costly_cases`, in ``cases.py``, every one
refused by :mod:`mmobs.keys.guard` before Pillow decodes it) and the full-size
input that showed the cost (:func:`full_size_inputs`, in ``full_size.py``, used by
``scripts/cost_run.py``). One module per format (``jpeg``, ``png``, ``exif``,
``tiff``, ``webp``, ``gif``, ``bmp``), the compressed payloads they share in
``deflate``; this package exports them all.
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

# Used through this package by the tests, as when it was one module.
from ..base import base_image
from ..exif import PNG_SIGNATURE, png_chunk
from .bmp import bmp_rle, bmp_rle4_runs, bmp_rle_end_of_lines
from .cases import costly_cases
from .deflate import MiB, bomb, zeros_deflate
from .exif import exif_huge_rational, jpeg_exif_huge_rational, png_exif_huge_rational
from .full_size import PLAIN_SIZE, full_size_inputs, photo_like, plain
from .gif import gif_canvas, gif_comment_flood, gif_frame_outside_screen, gif_frames, gif_parts, gif_sub_block_flood
from .jpeg import (
    jpeg_app0_flood,
    jpeg_com_flood,
    jpeg_exif_segment_flood,
    jpeg_fill_flood,
    jpeg_icc_chain,
    jpeg_junk_flood,
    jpeg_photoshop_flood,
    jpeg_repeated_scans,
    jpeg_scans,
    jpeg_segment,
    jpeg_with_segments,
    progressive_jpeg,
)
from .png import (
    png_empty_idat_flood,
    png_fdat_flood,
    png_iccp_flood,
    png_idat_split,
    png_itxt_flood,
    png_private_chunk_flood,
    png_rechunked,
    png_text_flood,
    png_with_chunks,
    png_ztxt_flood,
)
from .tiff import (
    TILE_BYTE_COUNTS,
    TILE_LENGTH,
    TILE_OFFSETS,
    TILE_WIDTH,
    tiff_extra_strips,
    tiff_huge_tile,
    tiff_many_pages,
    tiff_orientation_huge_rational,
    tiff_strip_per_row,
)
from .webp import webp_animated_canvas, webp_frame_chunks, webp_lossless_solid

__all__ = [
    "PLAIN_SIZE",
    "PNG_SIGNATURE",
    "TILE_BYTE_COUNTS",
    "TILE_LENGTH",
    "TILE_OFFSETS",
    "TILE_WIDTH",
    "MiB",
    "base_image",
    "bmp_rle",
    "bmp_rle4_runs",
    "bmp_rle_end_of_lines",
    "bomb",
    "costly_cases",
    "exif_huge_rational",
    "full_size_inputs",
    "gif_canvas",
    "gif_comment_flood",
    "gif_frame_outside_screen",
    "gif_frames",
    "gif_parts",
    "gif_sub_block_flood",
    "jpeg_app0_flood",
    "jpeg_com_flood",
    "jpeg_exif_huge_rational",
    "jpeg_exif_segment_flood",
    "jpeg_fill_flood",
    "jpeg_icc_chain",
    "jpeg_junk_flood",
    "jpeg_photoshop_flood",
    "jpeg_repeated_scans",
    "jpeg_scans",
    "jpeg_segment",
    "jpeg_with_segments",
    "photo_like",
    "plain",
    "png_chunk",
    "png_empty_idat_flood",
    "png_exif_huge_rational",
    "png_fdat_flood",
    "png_iccp_flood",
    "png_idat_split",
    "png_itxt_flood",
    "png_private_chunk_flood",
    "png_rechunked",
    "png_text_flood",
    "png_with_chunks",
    "png_ztxt_flood",
    "progressive_jpeg",
    "tiff_extra_strips",
    "tiff_huge_tile",
    "tiff_many_pages",
    "tiff_orientation_huge_rational",
    "tiff_strip_per_row",
    "webp_animated_canvas",
    "webp_frame_chunks",
    "webp_lossless_solid",
    "zeros_deflate",
]
