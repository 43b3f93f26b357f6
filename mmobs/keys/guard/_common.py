"""What every container check shares: the refusals and a few readers."""

from __future__ import annotations

from mmobs.errors import BadImageError
from mmobs.keys.guard.limits import DecodeLimits


def too_costly(what: str, fix: str) -> BadImageError:
    """A ``too_costly`` refusal: ``what`` was found, ``fix`` says what to send instead."""
    return BadImageError("too_costly", f"{what}; {fix}")


def pixel_limit_error(width: int, height: int, limit: int) -> BadImageError:
    """The ``too_many_pixels`` refusal, worded as ``ImageMediaIO`` words it."""
    return BadImageError(
        "too_many_pixels",
        f"the image is {width}x{height} = {width * height} pixels, above the limit of {limit}; "
        "resize it before sending",
    )


#: Pillow's decoders address a row in a C int of bits, less a little slack: a wider row fails with a
#: ``MemoryError`` before any pixel is read (measured on Pillow 13: at 268,435,448 8-bit pixels, 89,478,478 RGB).
MAX_ROW_BITS = 2**31 - 1024


def check_pixels(width: int, height: int, max_pixels: int | None, bits_per_pixel: int = 32) -> None:
    """The caller's pixel limit, and the row width Pillow can decode, applied to a size declared in a header.

    ``bits_per_pixel`` is the file's (a PNG's bit depth times its channels); 32, the
    widest of the other formats, where the check does not read it.
    """
    if max_pixels is not None and width * height > max_pixels:
        raise pixel_limit_error(width, height, max_pixels)
    if width * bits_per_pixel > MAX_ROW_BITS:
        raise BadImageError(
            "too_many_pixels",
            f"the image is {width} pixels wide, more than Pillow's decoders can address in one row "
            f"({MAX_ROW_BITS // bits_per_pixel} at {bits_per_pixel} bits a pixel); resize it before sending",
        )


def check_canvas(
    fmt: str, canvas: tuple[int, int], frames_box: tuple[int, int, int, int] | None, limits: DecodeLimits
) -> None:
    """A large animation canvas must be mostly covered by its frames (their bounding box)."""
    width, height = canvas
    if frames_box is None or width * height <= limits.canvas_ratio_min_pixels:
        return
    left, top, right, bottom = frames_box
    covered = max(0, min(right, width) - max(left, 0)) * max(0, min(bottom, height) - max(top, 0))
    if width * height > limits.max_canvas_to_frames_ratio * max(covered, 1):
        raise too_costly(
            f"the {fmt} declares a {width}x{height} canvas but its frames cover only "
            f"{right - left}x{bottom - top} of it (more than {limits.max_canvas_to_frames_ratio}x less)",
            "send the frames on a canvas of their own size",
        )


def union(box: tuple[int, int, int, int] | None, frame: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """The bounding box of ``box`` and ``frame`` (left, top, right, bottom)."""
    if box is None:
        return frame
    return (min(box[0], frame[0]), min(box[1], frame[1]), max(box[2], frame[2]), max(box[3], frame[3]))
