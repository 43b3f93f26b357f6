"""WebP: the canvas, animation frames, chunks and the EXIF chunk.

Pillow opens every WebP, still or animated, with libwebp's animation decoder,
which allocates RGBA canvases of the declared size before decoding a pixel:
about 16 bytes a canvas pixel by the time the loader holds an RGB image, so a
94-byte file declaring 7000x7000 costs 750 MiB. This walk reads the RIFF
chunk headers (and the frame headers inside ``ANMF``) without decoding.
"""

from __future__ import annotations

from mmobs.keys.guard._common import check_canvas, check_pixels, too_costly, union
from mmobs.keys.guard.limits import DecodeLimits

_IMAGE_CHUNKS = frozenset((b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"ANIM", b"ANMF"))


def _u24(data: bytes, at: int) -> int:
    return data[at] | data[at + 1] << 8 | data[at + 2] << 16


def _bitstream_size(data: bytes, kind: bytes, body: int, after: int) -> tuple[int, int] | None:
    """The size a VP8 (lossy) or VP8L (lossless) bitstream declares."""
    if kind == b"VP8 " and after - body >= 10 and data[body + 3 : body + 6] == b"\x9d\x01\x2a":
        return (data[body + 6] | data[body + 7] << 8) & 0x3FFF, (data[body + 8] | data[body + 9] << 8) & 0x3FFF
    if kind == b"VP8L" and after - body >= 5 and data[body] == 0x2F:
        bits = int.from_bytes(data[body + 1 : body + 5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def check_webp(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse a WebP whose canvas or chunks cost more than a plain image (``too_costly``) or too large."""
    end = min(len(data), 8 + int.from_bytes(data[4:8], "little"))
    pos = 12
    chunks = metadata = metadata_bytes = frames = 0
    canvas: tuple[int, int] | None = None
    box: tuple[int, int, int, int] | None = None
    while pos + 8 <= end:
        kind = data[pos : pos + 4]
        length = int.from_bytes(data[pos + 4 : pos + 8], "little")
        body, after = pos + 8, pos + 8 + length
        if after > end:
            break  # cut short: libwebp refuses it
        chunks += 1
        if chunks > limits.max_chunks:
            raise too_costly(f"the WebP has more than {limits.max_chunks} chunks", "re-encode it")
        if kind == b"VP8X" and length >= 10 and canvas is None:
            canvas = (_u24(data, body + 4) + 1, _u24(data, body + 7) + 1)
            _check_canvas_size(canvas, limits, max_pixels)
        elif kind in (b"VP8 ", b"VP8L") and canvas is None:
            canvas = _bitstream_size(data, kind, body, after)
            if canvas is not None:
                _check_canvas_size(canvas, limits, max_pixels)
        elif kind == b"ANMF" and length >= 16:
            frames += 1
            if frames > limits.max_frames:
                raise too_costly(f"the WebP has more than {limits.max_frames} frames", "send fewer frames")
            left, top = 2 * _u24(data, body), 2 * _u24(data, body + 3)
            box = union(box, (left, top, left + _u24(data, body + 6) + 1, top + _u24(data, body + 9) + 1))
        elif kind not in _IMAGE_CHUNKS:
            metadata += 1
            metadata_bytes += length
            if metadata > limits.max_metadata_segments or metadata_bytes > limits.max_metadata_bytes:
                raise too_costly(
                    f"the WebP carries more than {limits.max_metadata_segments} metadata chunks or "
                    f"{limits.max_metadata_bytes} bytes of them",
                    "re-save it without the embedded metadata",
                )
            if kind == b"EXIF" and length > limits.max_exif_bytes:
                raise too_costly(
                    f"the WebP's EXIF chunk is {length} bytes, above the limit of {limits.max_exif_bytes}",
                    "re-save it with a standard EXIF block, or without EXIF",
                )
        pos = after + (length & 1)
    if canvas is not None and frames:
        check_canvas("WebP", canvas, box, limits)


def _check_canvas_size(canvas: tuple[int, int], limits: DecodeLimits, max_pixels: int | None) -> None:
    width, height = canvas
    check_pixels(width, height, max_pixels)
    if width * height > limits.max_webp_pixels:
        raise too_costly(
            f"the WebP canvas is {width}x{height} = {width * height} pixels; Pillow decodes WebP through "
            f"libwebp's animation decoder at about 16 bytes a pixel, so the limit for WebP is "
            f"{limits.max_webp_pixels} pixels",
            "resize it, or send it as JPEG or PNG",
        )
