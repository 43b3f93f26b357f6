"""Costly GIFs: comment and sub-block floods, many frames, a screen far larger than its frames (and the reverse).

Pillow reads every extension sub-block before the first image in Python.
"""

from __future__ import annotations

import struct

from ..base import base_image


def gif_parts(data: bytes) -> tuple[bytes, bytes, bytes]:
    """(header with the global colour table, the blocks up to the trailer, the trailer)."""
    flags = data[10]
    header_end = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    return data[:header_end], data[header_end:-1], data[-1:]


def gif_comment_flood(total: int) -> bytes:
    """Comment extensions of one 1-byte sub-block each, before the first image."""
    head, blocks, trailer = gif_parts(base_image("GIF"))
    one = b"!\xfe\x01x\x00"
    return head + one * (total // len(one)) + blocks + trailer


_GIF_1X1_FRAME = (
    b"!\xf9\x04\x04\x02\x00\x00\x00"  # graphic control: 20 ms, no disposal
    b",\x00\x00\x00\x00\x01\x00\x01\x00\x00"  # a 1x1 image at (0, 0), no local palette
    b"\x02\x02\x44\x01\x00"  # LZW minimum code size 2, one sub-block: clear, pixel 0, end
)


def gif_frames(frames: int, size: tuple[int, int] = (16, 12)) -> bytes:
    """A ``size`` GIF whose first frame is a real image, followed by ``frames - 1`` 1x1 frames."""
    head, blocks, trailer = gif_parts(base_image("GIF", size=size))
    return head + blocks + _GIF_1X1_FRAME * (frames - 1) + trailer


def gif_canvas(screen: tuple[int, int], frames: int = 1) -> bytes:
    """A GIF whose logical screen is ``screen`` and whose frames are all 1x1."""
    head = b"GIF89a" + struct.pack("<HH", *screen) + b"\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff"
    return head + _GIF_1X1_FRAME * frames + b";"


def gif_sub_block_flood(sub_blocks: int) -> bytes:
    """A 16x12 GIF whose image data is followed by ``sub_blocks`` 1-byte sub-blocks in a comment."""
    head, blocks, trailer = gif_parts(base_image("GIF"))
    return head + b"!\xfe" + b"\x01x" * sub_blocks + b"\x00" + blocks + trailer


def gif_frame_outside_screen(screen: tuple[int, int], frame: tuple[int, int]) -> bytes:
    """A GIF whose logical screen is ``screen`` and whose first image descriptor says ``frame``."""
    data = bytearray(base_image("GIF"))
    struct.pack_into("<HH", data, 6, *screen)
    head, _, _ = gif_parts(bytes(data))
    descriptor = data.index(b",", len(head))
    struct.pack_into("<HH", data, descriptor + 5, *frame)
    return bytes(data)
