"""Compressed payloads the costly inputs carry: zlib bombs, and a stream of zeros of any length built cheaply."""

from __future__ import annotations

import struct
import zlib

MiB = 1024 * 1024


def bomb(size: int, fill: bytes = b"\0") -> bytes:
    return zlib.compress(fill * size, 9)


def zeros_deflate(size: int) -> bytes:
    """A zlib stream of ``size`` zero bytes, built without compressing them all.

    After a full flush deflate keeps no history, so the compressed form of one
    1 MiB block of zeros repeats verbatim; the Adler-32 of ``n`` zeros is
    ``(n % 65521) << 16 | 1``.
    """
    if size <= 4 * MiB:
        return zlib.compress(b"\0" * size, 9)
    full, rest = divmod(size, MiB)
    compressor = zlib.compressobj(9)
    head = compressor.compress(b"\0" * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    piece = compressor.compress(b"\0" * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(b"\0" * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert again == piece, "deflate did not reset its state after a full flush"
    end = compressor.compress(b"\0" * rest) + compressor.flush(zlib.Z_FINISH)
    return head + piece * (full - 1) + end[:-4] + struct.pack(">L", ((size % 65521) << 16) | 1)
