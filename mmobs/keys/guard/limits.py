"""The decode budgets: how much structure one encoded image may carry.

Every default was chosen from two measurements (``docs/reliability.md``,
"Decode budgets"): what the structure costs Pillow 13 per unit, and how much
of it real camera, phone and screenshot files carry. A default sits well
above the second and keeps the first under a fraction of a second, so a
refusal means the file was built to be expensive (or is badly broken), and
the message says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class DecodeLimits:
    """Budgets for :func:`mmobs.keys.guard.check_image_bytes`; every field is a positive integer.

    The pixel limit is not here: it belongs to the caller (``ImageMediaIO``'s
    ``max_pixels``, passed to the check as ``max_pixels=``), so there is one.
    """

    #: Metadata segments: JPEG APPn/COM/table segments before the image data,
    #: PNG chunks other than image data and frame control, GIF extensions
    #: other than frame control, WebP chunks other than image data. Real files
    #: carry a handful (an ICC profile split over APP2 segments, at most 255).
    #: Pillow spends a Python round trip and keeps an object for each one.
    max_metadata_segments: int = 1024
    #: Bytes in those segments, all together (EXIF, XMP, ICC, text, comments...).
    max_metadata_bytes: int = 16 * MiB
    #: PNG ``iCCP``, ``zTXt`` and compressed ``iTXt`` chunks, all together,
    #: after inflating. Pillow inflates each one (up to 1 MiB) whether or not it
    #: keeps it; the check inflates them too, in 64 KiB pieces, and stops here.
    max_inflated_metadata_bytes: int = 8 * MiB
    #: The EXIF block (JPEG ``APP1 Exif`` segments joined as Pillow joins them,
    #: PNG ``eXIf`` or "Raw profile type exif", WebP ``EXIF``). A JPEG segment
    #: holds at most 64 KiB; the EXIF transpose turns every value into a Python
    #: object when it rotates (about 0.7 s per MiB of RATIONAL values).
    max_exif_bytes: int = 256 * KiB
    #: JPEG scans. libjpeg decodes a progressive image once per scan, over the
    #: whole image; encoders write 1 (baseline) to about 10 (progressive).
    max_jpeg_scans: int = 128
    #: JPEG fill bytes (``FF`` runs) and junk between segments. Pillow steps
    #: over them one byte at a time; encoders write none.
    max_jpeg_fill_bytes: int = 64 * KiB
    #: PNG chunks of any kind (and WebP RIFF chunks). libpng writes 8 KiB IDAT
    #: chunks, so a 32 MiB PNG has about 4,096.
    max_chunks: int = 65_536
    #: GIF data sub-blocks (at most 255 bytes each; encoders fill them): enough
    #: for 64 MiB of image data.
    max_gif_sub_blocks: int = 262_144
    #: Frames of an animation (GIF images, APNG ``fcTL``, WebP ``ANMF``) or
    #: pages of a TIFF. Only the first is decoded, but every one is walked.
    max_frames: int = 10_000
    #: TIFF strips or tiles in the first page. A libtiff writer makes 8 KiB
    #: strips: about 18,000 for an uncompressed 49 MP RGB image. Pillow builds
    #: one Python object per strip of an uncompressed image.
    max_tiff_strips: int = 65_536
    #: A TIFF tile may have this many pixels, or twice its image's if that is
    #: more (one tile padded around a whole image is normal); libtiff allocates
    #: and inflates the whole tile, whatever the image size.
    max_tiff_tile_pixels: int = 16 * MiB
    #: WebP canvas pixels. Pillow decodes every WebP through libwebp's
    #: animation decoder, about 16 bytes per canvas pixel (RGBA canvases and
    #: Pillow's copy): 32 Mi pixels is 512 MiB.
    max_webp_pixels: int = 32 * MiB
    #: A GIF or WebP canvas above ``canvas_ratio_min_pixels`` may be at most
    #: this many times the area its frames cover (their bounding box): a tiny
    #: file declaring a huge, empty canvas is built to cost memory.
    max_canvas_to_frames_ratio: int = 16
    canvas_ratio_min_pixels: int = 4_000_000
    #: Pixels of an RLE-compressed BMP: Pillow's RLE decoder is Python and
    #: spends ~80 ns a pixel (0.7 s at this limit).
    max_bmp_rle_pixels: int = 8 * MiB
    #: Pixels of an uncompressed RGB or RGBA DDS texture: Pillow's decoder for them is Python and spends
    #: 1 to 2 us a pixel (0.5 to 1 s at this limit).
    max_dds_rgb_pixels: int = 512 * KiB

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or value < 1:
                raise ValueError(f"DecodeLimits.{field.name} must be a positive integer, not {value!r}")


#: The budgets ``ImageMediaIO`` applies unless told otherwise.
DEFAULT_DECODE_LIMITS = DecodeLimits()
