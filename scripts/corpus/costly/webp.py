"""Costly WebPs: an animated canvas far larger than its frames, many frames, a large lossless solid.

Pillow decodes every WebP through libwebp's animation decoder, which holds RGBA canvases of the declared size.
"""

from __future__ import annotations

import io
import struct

from PIL import Image

from ..base import base_image
from ..exif import riff, riff_chunks


def _vp8x(width: int, height: int, flags: int) -> bytes:
    return struct.pack("<I", flags) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")


def webp_frame_chunks(size: tuple[int, int] = (1, 1)) -> list[tuple[bytes, bytes]]:
    """The ``VP8L`` chunk of a tiny lossless frame."""
    return [c for c in riff_chunks(base_image("WEBP", size=size)) if c[0] in (b"VP8L", b"VP8 ")]


def _anmf(frame: list[tuple[bytes, bytes]], size: tuple[int, int], at: tuple[int, int] = (0, 0)) -> tuple[bytes, bytes]:
    width, height = size
    header = (
        (at[0] // 2).to_bytes(3, "little") + (at[1] // 2).to_bytes(3, "little")
        + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        + (10).to_bytes(3, "little") + b"\x00"
    )  # fmt: skip
    body = b"".join(kind + struct.pack("<I", len(data)) + data + b"\0" * (len(data) & 1) for kind, data in frame)
    return (b"ANMF", header + body)


def webp_animated_canvas(canvas: tuple[int, int], frames: int = 1) -> bytes:
    """An animated WebP: a ``canvas`` declared in VP8X, ``frames`` frames of 1x1 pixel."""
    kind, payload = _anmf(webp_frame_chunks((1, 1)), (1, 1))
    one = kind + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) & 1 else b"")
    head = riff([(b"VP8X", _vp8x(*canvas, 0x02)), (b"ANIM", struct.pack("<IH", 0, 0))])
    body = head[12:] + one * frames
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def webp_lossless_solid(size: tuple[int, int]) -> bytes:
    """A lossless WebP of one colour: a few hundred bytes for any size up to 16383x16383."""
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buffer, "WEBP", lossless=True, quality=0, method=0)
    return buffer.getvalue()
