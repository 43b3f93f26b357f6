"""TIFF structures: the body of every EXIF block, and TIFF files themselves."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

from .base import noisy

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
        return (
            struct.pack(endian + "H", len(items) if n is None else n) + table + struct.pack(endian + "L", link) + blob
        )

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
