"""Decode budgets: cheap structural checks on encoded image bytes, before Pillow decodes them.

A small file can cost far more to decode than a plain image of its size: a
JPEG of thousands of tiny EXIF segments, a PNG of compressed metadata chunks
each inflating to 1 MiB, a TIFF declaring one giant tile, a 92-byte WebP
declaring a 7000x7000 canvas (``docs/reliability.md`` lists and measures
them). :func:`check_image_bytes` recognises the container from its
first bytes, walks its structure once (one module per format) and refuses
what exceeds a :class:`DecodeLimits` budget with a ``BadImageError`` whose
reason is ``too_costly`` (or ``too_many_pixels`` for a declared size above
``max_pixels``), saying what to change.

The checks are O(input size) with small constants, allocate nothing
proportional to a declared size (compressed metadata is inflated 64 KiB at a
time and only up to its budget), and decide nothing else: a structure they
cannot follow (cut short, damaged) is left to Pillow, which refuses it as
``truncated`` or ``corrupt`` as before. They raise nothing but
``BadImageError``.

They need no ``ImageMediaIO``: any loader can call them on the bytes it is
about to hand to ``PIL.Image.open`` (vLLM's, through the mmobs plugin).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection

from mmobs.keys.guard.bmp import check_bmp
from mmobs.keys.guard.dds import check_dds
from mmobs.keys.guard.gif import check_gif
from mmobs.keys.guard.jpeg import check_jpeg
from mmobs.keys.guard.limits import DEFAULT_DECODE_LIMITS, DecodeLimits
from mmobs.keys.guard.png import check_png
from mmobs.keys.guard.tiff import check_tiff
from mmobs.keys.guard.webp import check_webp

__all__ = ["DEFAULT_DECODE_LIMITS", "DecodeLimits", "check_image_bytes", "sniff_format"]

_Check = Callable[[bytes, DecodeLimits, "int | None"], None]
_CHECKS: dict[str, _Check] = {
    "JPEG": check_jpeg,
    "PNG": check_png,
    "GIF": check_gif,
    "WEBP": check_webp,
    "TIFF": check_tiff,
    "BMP": check_bmp,
    "DDS": check_dds,
}
_TIFF_PREFIXES = (b"MM\x00\x2a", b"II\x2a\x00", b"MM\x2a\x00", b"II\x00\x2a", b"MM\x00\x2b", b"II\x2b\x00")


def sniff_format(data: bytes | bytearray | memoryview) -> str | None:
    """The Pillow format name whose plugin would open ``data``, for the formats checked here.

    Uses the same signatures as Pillow's ``_accept`` functions; ``None`` for
    anything else (those formats get no structural check).
    """
    head = bytes(data[:16])
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith(_TIFF_PREFIXES):
        return "TIFF"
    if head.startswith(b"BM"):
        return "BMP"
    if head.startswith(b"DDS "):
        return "DDS"
    return None


def check_image_bytes(
    data: bytes | bytearray | memoryview,
    limits: DecodeLimits | None = None,
    *,
    max_pixels: int | None = None,
    formats: Collection[str] | None = None,
) -> None:
    """Refuse ``data`` if decoding it would cost more than its budget allows; return ``None`` otherwise.

    ``limits`` defaults to :data:`DEFAULT_DECODE_LIMITS`. ``max_pixels``, when
    given, also refuses a header that declares more pixels (``too_many_pixels``)
    before any decoder allocates them. ``formats``, when given, checks only
    those formats: a loader that refuses the others leaves them to its own,
    clearer refusal (``unsupported_format``). Raises only ``BadImageError``.
    """
    limits = DEFAULT_DECODE_LIMITS if limits is None else limits
    fmt = sniff_format(data)
    if fmt is None or (formats is not None and fmt not in formats):
        return
    raw = data if isinstance(data, bytes) else bytes(data)
    try:
        _CHECKS[fmt](raw, limits, max_pixels)
    except (IndexError, struct.error, OverflowError):
        return  # a structure that ends early or points past the end: Pillow refuses it as truncated or corrupt
