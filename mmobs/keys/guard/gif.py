"""GIF: extensions, sub-blocks, frames, and the canvas against the frames.

Pillow reads every extension before the first image in Python, sub-block by
sub-block, and keeps each comment sub-block; a first frame reaching past the
logical screen grows the image to cover it. This walk visits every block
once (GIF has no lengths to skip by: a sub-block chain must be walked).
"""

from __future__ import annotations

from mmobs.keys.guard._common import check_canvas, check_pixels, too_costly, union
from mmobs.keys.guard.limits import DecodeLimits

_EXTENSION, _IMAGE, _TRAILER = 0x21, 0x2C, 0x3B
_GRAPHIC_CONTROL = 0xF9


def check_gif(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse a GIF whose blocks cost more than its pixels (``too_costly``) or that is too large."""
    screen = (data[6] | data[7] << 8, data[8] | data[9] << 8)
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    end = len(data)
    extensions = frames = sub_blocks = 0
    box: tuple[int, int, int, int] | None = None
    canvas = screen
    while pos < end:
        block = data[pos]
        if block == _TRAILER:
            break
        if block == _EXTENSION:
            if data[pos + 1] != _GRAPHIC_CONTROL:
                extensions += 1
                if extensions > limits.max_metadata_segments:
                    raise too_costly(
                        f"the GIF has more than {limits.max_metadata_segments} extension blocks (comments, "
                        "application data)",
                        "re-save it without the extra extensions",
                    )
            pos += 2
        elif block == _IMAGE:
            frames += 1
            if frames > limits.max_frames:
                raise too_costly(f"the GIF has more than {limits.max_frames} frames", "send fewer frames")
            left, top = data[pos + 1] | data[pos + 2] << 8, data[pos + 3] | data[pos + 4] << 8
            width, height = data[pos + 5] | data[pos + 6] << 8, data[pos + 7] | data[pos + 8] << 8
            frame_flags = data[pos + 9]
            box = union(box, (left, top, left + width, top + height))
            if frames == 1:  # Pillow grows the image to the first frame's extent
                canvas = (max(screen[0], left + width), max(screen[1], top + height))
                check_pixels(*canvas, max_pixels)
            pos += 10 + (3 << ((frame_flags & 7) + 1) if frame_flags & 0x80 else 0) + 1  # + LZW code size
        else:
            return  # not a GIF block: Pillow stops here (or refuses the file)
        while True:  # the sub-block chain, ended by a zero-length block
            size = data[pos]
            pos += 1 + size
            if not size:
                break
            sub_blocks += 1
            if sub_blocks > limits.max_gif_sub_blocks:
                raise too_costly(
                    f"the GIF has more than {limits.max_gif_sub_blocks} data sub-blocks (encoders fill each "
                    "with 255 bytes)",
                    "re-encode it",
                )
    check_canvas("GIF", canvas, box, limits)
