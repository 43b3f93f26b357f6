"""Wrap a fuzzed TIFF structure as the EXIF block of an image (JPEG, PNG, WebP)."""

from __future__ import annotations

import struct

from .modules import CONTAINERS, EXIF_FLAG, M


class Wrapper:
    """Fast wrappers around precomputed base images (no encoder runs per input)."""

    def __init__(self) -> None:
        mc = M.make_corpus
        self.jpeg = mc.base_image("JPEG", size=(8, 8))
        self.jpeg_gray = mc.encode(mc.noisy((8, 8), seed=2, mode="L"), "JPEG")
        self.png = mc.base_image("PNG", size=(8, 8))
        self.png_gray = mc.encode(mc.noisy((8, 8), seed=2, mode="L"), "PNG")
        self.webp_frame = [c for c in mc.riff_chunks(mc.base_image("WEBP", size=(8, 8))) if c[0] in (b"VP8L", b"VP8 ")]
        self.ihdr_end = len(mc.PNG_SIGNATURE) + 8 + 13 + 4

    def wrap(self, container: str, tiff: bytes) -> bytes:
        mc = M.make_corpus
        if container in ("jpeg", "jpeg-gray"):
            base = self.jpeg if container == "jpeg" else self.jpeg_gray
            payload = (b"Exif\x00\x00" + tiff)[:65533]
            return base[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + base[2:]
        if container in ("png", "png-gray"):
            base = self.png if container == "png" else self.png_gray
            return base[: self.ihdr_end] + mc.png_chunk(b"eXIf", tiff) + base[self.ihdr_end :]
        if container == "png-raw-profile":
            blob = b"Exif\x00\x00" + tiff
            text = b"\nexif\n" + b"%8d\n" % len(blob) + blob.hex().encode() + b"\n"
            chunk = mc.png_chunk(b"tEXt", b"Raw profile type exif\x00" + text)
            return self.png_gray[: self.ihdr_end] + chunk + self.png_gray[self.ihdr_end :]
        if container == "webp":
            width = height = 8
            vp8x = struct.pack("<I", 0x08) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
            return mc.riff([(b"VP8X", vp8x), *self.webp_frame, (b"EXIF", tiff)])
        raise ValueError(container)


_WRAPPER: Wrapper | None = None


def materialize(data: bytes) -> tuple[str, bytes]:
    """(what the input is, the bytes given to the loader) for a fuzz input."""
    global _WRAPPER
    if not data:
        return "file", b""
    selector, payload = data[0], data[1:]
    if selector < EXIF_FLAG:
        return "file", payload
    if _WRAPPER is None:
        _WRAPPER = Wrapper()
    container = CONTAINERS[(selector & 0x7F) % len(CONTAINERS)]
    return container, _WRAPPER.wrap(container, payload)
