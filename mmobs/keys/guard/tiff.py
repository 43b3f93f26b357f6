"""TIFF: strip and tile geometry against the image, and the page count.

libtiff allocates and inflates a whole tile whatever the image size (a 16x16
image with one 46336x46336 deflate tile costs 2 GiB from 2 MB), and Pillow
builds one Python object per strip of an uncompressed image (a 1 x 4M image
with a strip per row costs 15 s and 1.3 GiB). This reads the first page's
directory (its entry values only where they are inline or small) and walks the
chain of page directories, and refuses geometry that makes the decoder do more
than the image needs.
"""

from __future__ import annotations

import struct

from mmobs.keys.guard._common import check_pixels, too_costly
from mmobs.keys.guard.limits import DecodeLimits

_WIDTH, _HEIGHT, _SAMPLES, _ROWS_PER_STRIP, _PLANAR = 256, 257, 277, 278, 284
_STRIP_OFFSETS, _TILE_WIDTH, _TILE_LENGTH, _TILE_OFFSETS = 273, 322, 323, 324
_GEOMETRY = frozenset((_WIDTH, _HEIGHT, _SAMPLES, _ROWS_PER_STRIP, _PLANAR, _TILE_WIDTH, _TILE_LENGTH))
#: More strips or tiles than the geometry needs cost Pillow nothing below this many.
_PIECES_SLACK = 1024
#: Directory entries Pillow reads one by one in Python (a classic TIFF holds at most 65,535).
_MAX_ENTRIES = 65_535
#: Integer field types and their sizes: SHORT, LONG, LONG8 (BigTIFF) and BYTE.
_INT_FORMATS = {1: "B", 3: "H", 4: "L", 16: "Q"}


class _Layout:
    """Byte order and offset size of a classic or BigTIFF file."""

    def __init__(self, data: bytes) -> None:
        self.endian = "<" if data[:2] == b"II" else ">"
        self.big = struct.unpack_from(self.endian + "H", data, 2)[0] == 43
        self.entry_size, self.count_format, self.offset_format = (20, "Q", "Q") if self.big else (12, "H", "L")

    def first_ifd(self, data: bytes) -> int:
        offset: int = struct.unpack_from(self.endian + self.offset_format, data, 8 if self.big else 4)[0]
        return offset


def check_tiff(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse a TIFF whose strips, tiles or pages cost more than its pixels, or that is too large."""
    layout = _Layout(data)
    first = layout.first_ifd(data)
    tags = _geometry(data, layout, first)
    _check_first_page(tags, limits, max_pixels)
    _count_pages(data, layout, first, limits)


def _geometry(data: bytes, layout: _Layout, at: int) -> dict[int, int]:
    """The geometry tags of the directory at ``at``: their first value, or their count for offsets."""
    if at + 8 > len(data):
        return {}  # the directory is not in the file: Pillow refuses it
    (count,) = struct.unpack_from(layout.endian + layout.count_format, data, at)
    at += 8 if layout.big else 2
    value_at = 12 if layout.big else 8
    tags: dict[int, int] = {}
    present = min(count, (len(data) - at) // layout.entry_size)
    if present > _MAX_ENTRIES:
        raise too_costly(
            f"the TIFF's first directory has {present} entries (a classic TIFF holds at most {_MAX_ENTRIES})",
            "re-save it",
        )
    for _ in range(present):
        tag, kind = struct.unpack_from(layout.endian + "HH", data, at)
        (values,) = struct.unpack_from(layout.endian + layout.offset_format, data, at + 4)
        if tag in (_STRIP_OFFSETS, _TILE_OFFSETS):
            tags[tag] = values
        elif tag in _GEOMETRY and kind in _INT_FORMATS and values >= 1:
            size = struct.calcsize("<" + _INT_FORMATS[kind])
            inline = values * size <= (8 if layout.big else 4)
            offset = at + value_at
            if not inline:
                (offset,) = struct.unpack_from(layout.endian + layout.offset_format, data, offset)
            if offset + size <= len(data):
                (tags[tag],) = struct.unpack_from(layout.endian + _INT_FORMATS[kind], data, offset)
        at += layout.entry_size
    return tags


def _check_first_page(tags: dict[int, int], limits: DecodeLimits, max_pixels: int | None) -> None:
    width, height = tags.get(_WIDTH, 0), tags.get(_HEIGHT, 0)
    if not width or not height:
        return  # Pillow refuses a page without a size
    check_pixels(width, height, max_pixels)
    planes = tags.get(_SAMPLES, 1) if tags.get(_PLANAR, 1) == 2 else 1
    if _TILE_OFFSETS in tags:
        tile_width, tile_length = tags.get(_TILE_WIDTH, 0), tags.get(_TILE_LENGTH, 0)
        if not tile_width or not tile_length:
            return
        tile = tile_width * tile_length
        if tile > max(2 * width * height, limits.max_tiff_tile_pixels):
            raise too_costly(
                f"the TIFF is {width}x{height} but its tiles are {tile_width}x{tile_length} "
                f"(libtiff decodes whole tiles; a tile may have twice the image's pixels, or "
                f"{limits.max_tiff_tile_pixels})",
                "re-save it with tiles of at most 1024x1024, or without tiles",
            )
        needed = -(-width // tile_width) * -(-height // tile_length) * planes
        geometry = f"{width}x{height} in {tile_width}x{tile_length} tiles"
        _check_pieces("tiles", tags[_TILE_OFFSETS], needed, geometry, limits)
    elif _STRIP_OFFSETS in tags:
        rows = min(tags.get(_ROWS_PER_STRIP) or height, height)
        needed = -(-height // rows) * planes
        _check_pieces("strips", tags[_STRIP_OFFSETS], needed, f"{height} rows, {rows} per strip", limits)


def _check_pieces(kind: str, declared: int, needed: int, geometry: str, limits: DecodeLimits) -> None:
    if declared > limits.max_tiff_strips:
        raise too_costly(
            f"the TIFF's first page has {declared} {kind}, above the limit of {limits.max_tiff_strips} "
            "(Pillow handles each one in Python)",
            f"re-save it with fewer, larger {kind} (libtiff's default strips hold 8 KiB)",
        )
    if declared > max(needed, _PIECES_SLACK):
        raise too_costly(
            f"the TIFF's first page declares {declared} {kind} where its geometry ({geometry}) needs {needed}",
            "re-save it",
        )


def _count_pages(data: bytes, layout: _Layout, at: int, limits: DecodeLimits) -> None:
    """Walk the chain of page directories (a loop ends it, as in Pillow) and count the pages."""
    seen: set[int] = set()
    head = 8 if layout.big else 2
    while at and at not in seen and at + head <= len(data):
        seen.add(at)
        if len(seen) > limits.max_frames:
            raise too_costly(f"the TIFF has more than {limits.max_frames} pages", "send fewer pages")
        (count,) = struct.unpack_from(layout.endian + layout.count_format, data, at)
        link = at + head + count * layout.entry_size
        if link + (8 if layout.big else 4) > len(data):
            return
        (at,) = struct.unpack_from(layout.endian + layout.offset_format, data, link)
