"""Byte-level and EXIF-structure-aware mutations, with PNG CRCs repaired half the time."""

from __future__ import annotations

import random
import struct
import zlib

from .modules import INTERESTING_8, INTERESTING_16, INTERESTING_32, TAGS


def _find_tiff_headers(data: bytes | bytearray) -> list[int]:
    found = []
    for marker in (b"II*\x00", b"MM\x00*"):
        at = data.find(marker)
        while at != -1 and len(found) < 8:
            found.append(at)
            at = data.find(marker, at + 1)
    return found


def tiff_mutation(data: bytearray, rng: random.Random) -> bool:
    """Rewrite one field of a TIFF structure found in ``data``, in place."""
    starts = _find_tiff_headers(data)
    if not starts:
        return False
    base = rng.choice(starts)
    endian = "<" if data[base : base + 2] == b"II" else ">"
    span = len(data) - base

    def u16(at: int) -> int | None:
        return struct.unpack_from(endian + "H", data, at)[0] if 0 <= at <= len(data) - 2 else None

    def put16(at: int, value: int) -> None:
        if 0 <= at <= len(data) - 2:
            struct.pack_into(endian + "H", data, at, value & 0xFFFF)

    def put32(at: int, value: int) -> None:
        if 0 <= at <= len(data) - 4:
            struct.pack_into(endian + "L", data, at, value & 0xFFFFFFFF)

    def offset_value() -> int:
        choice = rng.randrange(6)
        return (0, 8, span, span - 2, rng.randrange(max(1, span)), rng.choice(INTERESTING_32))[choice]

    ifd_field = base + 4
    ifd = struct.unpack_from(endian + "L", data, ifd_field)[0] if ifd_field + 4 <= len(data) else 0
    count = u16(base + ifd)
    action = rng.randrange(10)
    if action == 0 or count is None:
        put32(ifd_field, offset_value())  # IFD0 offset
        return True
    entries_at = base + ifd + 2
    if action == 1:
        put16(base + ifd, rng.choice((0, 1, count + 1, count - 1, 0xFFFF, rng.randrange(0x10000))))  # entry count
        return True
    if action == 2:
        put32(entries_at + 12 * count, rng.choice((ifd, 0, offset_value())))  # next-IFD link (loops included)
        return True
    if count == 0:
        put16(base + ifd, 1)
        count = 1
    entry = entries_at + 12 * rng.randrange(min(count, 64))
    if action == 3:
        put16(entry, rng.choice(TAGS) if rng.random() < 0.8 else rng.randrange(0x10000))  # tag
    elif action == 4:
        put16(entry + 2, rng.choice((0, 1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 13, 16, 17, 99, 0xFFFF)))  # type
    elif action == 5:
        put32(entry + 4, rng.choice((0, 1, 2, 4, 16, 37, 0xFFFF, 0x3FFFFFFF, 0xFFFFFFFF, rng.randrange(256))))  # count
    elif action == 6:
        put32(entry + 8, offset_value())  # value or value offset
    elif action == 7:
        # A sub-IFD pointer (Exif, GPS, Interop) to somewhere, often back to IFD0.
        put16(entry, rng.choice((0x8769, 0x8825, 0xA005)))
        put16(entry + 2, rng.choice((4, 13, 3, 2)))
        put32(entry + 4, 1)
        put32(entry + 8, rng.choice((ifd, offset_value())))
    elif action == 8:
        # An ImageID of some type: the one tag the hasher reads.
        put16(entry, 0x800D)
        put16(entry + 2, rng.choice((1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 16)))
        put32(entry + 4, rng.choice((1, 2, 4, 16, 36, 37)))
        put32(entry + 8, offset_value())
    else:
        data[base : base + 4] = rng.choice((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+", b"IM*\x00"))
    return True


def _fix_png_crcs(data: bytearray) -> None:
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return
    at = 8
    while at + 12 <= len(data):
        length = struct.unpack_from(">I", data, at)[0]
        end = at + 8 + length
        if end + 4 > len(data):
            return
        struct.pack_into(">I", data, end, zlib.crc32(data[at + 4 : end]) & 0xFFFFFFFF)
        at = end + 4


def mutate(data: bytes, rng: random.Random, pool: list[bytes] | None = None, max_len: int = 1 << 16) -> bytes:
    """One to four stacked mutations of a fuzz input (its selector byte mostly kept)."""
    if not data:
        return bytes([rng.randrange(256)])
    selector, body = data[0], bytearray(data[1:])
    for _ in range(1 + min(3, int(rng.expovariate(1.0)))):
        size = len(body)
        action = rng.randrange(16)
        if action <= 4 and tiff_mutation(body, rng):
            continue
        if size == 0:
            body += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
            continue
        at = rng.randrange(size)
        if action == 5:
            body[at] ^= 1 << rng.randrange(8)
        elif action == 6:
            body[at] = rng.choice(INTERESTING_8)
        elif action == 7 and size >= 2:
            at = rng.randrange(size - 1)
            struct.pack_into(rng.choice("<>") + "H", body, at, rng.choice(INTERESTING_16))
        elif action == 8 and size >= 4:
            at = rng.randrange(size - 3)
            struct.pack_into(rng.choice("<>") + "L", body, at, rng.choice(INTERESTING_32))
        elif action == 9:
            body[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        elif action == 10:
            del body[at : at + rng.randrange(1, 64)]
        elif action == 11:
            length = rng.randrange(1, 64)
            body[rng.randrange(size) : rng.randrange(size)] = body[at : at + length]
        elif action == 12:
            del body[rng.randrange(size) :]  # truncation
        elif action == 13 and pool:
            other = rng.choice(pool)[1:]
            if other:
                cut = rng.randrange(len(other))
                body = body[:at] + bytearray(other[cut:]) if rng.random() < 0.5 else bytearray(other[:cut]) + body[at:]
        elif action == 14:
            body[at : at + 1] = bytes([rng.randrange(256)])
        else:
            selector = rng.randrange(256) if rng.random() < 0.1 else selector
    if rng.random() < 0.5:
        _fix_png_crcs(body)
    return (bytes([selector]) + bytes(body))[:max_len]
