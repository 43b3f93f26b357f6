"""Image factories for the tests: encoded files, hand-built headers and EXIF traps.

Everything here is built from first principles (raw PNG chunks, raw JPEG
markers) where the point of a test is a malformed or extreme input, so the
inputs do not depend on what Pillow's encoders are willing to write.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"
EXIF_PREFIX = b"Exif\x00\x00"

#: The TIFF header of the vLLM regression image (vLLM issue #56527): neither
#: ``II*\0`` nor ``MM\0*``, so Pillow raises ``SyntaxError`` when it parses it.
BAD_TIFF_HEADER = b"XXXX\x00\x00\x00\x08"
#: A valid little-endian TIFF prefix whose IFD offset is cut to two bytes:
#: Pillow raises ``struct.error`` ("unpack requires a buffer of 4 bytes").
SHORT_TIFF_HEADER = b"II*\x00\x08\x00"

#: EXIF tag numbers used by the tests.
ORIENTATION_TAG = 0x0112
IMAGE_ID_TAG = 0x800D


def noisy_image(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """An image of ``mode`` whose every byte is pseudo-random (palette included)."""
    rng = np.random.default_rng(seed)
    width, height = size
    # Four bytes a pixel is the most any mode packs; frombytes ignores the excess.
    image = Image.frombytes(mode, size, rng.bytes(max(1, width * height * 4)))
    if mode in ("P", "PA"):
        image.putpalette(rng.bytes(768))  # bytes, so the palette is keyed as bytes
    return image


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    """``image`` saved as ``fmt`` into memory."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def png_bytes(mode: str = "RGB", size: tuple[int, int] = (64, 48), seed: int = 0) -> bytes:
    """A valid PNG of noisy pixels (noise keeps it large enough to cut in half)."""
    return encode(noisy_image(mode, size, seed), "PNG")


def jpeg_bytes(size: tuple[int, int] = (64, 48), seed: int = 0) -> bytes:
    """A valid baseline JPEG of noisy pixels."""
    return encode(noisy_image("RGB", size, seed), "JPEG", quality=90)


def exif_bytes(tags: dict[int, object]) -> bytes:
    """A well-formed EXIF block (``Exif\\0\\0`` + TIFF) holding ``tags``."""
    exif = Image.Exif()
    for tag, value in tags.items():
        exif[tag] = value
    return exif.tobytes()


# -- JPEG ---------------------------------------------------------------------


def jpeg_with_exif(tiff: bytes, base: bytes | None = None) -> bytes:
    """``base`` (a JPEG) with an APP1 EXIF segment holding ``tiff`` right after SOI.

    ``tiff`` is the TIFF part of the EXIF block (what follows ``Exif\\0\\0``).
    With ``BAD_TIFF_HEADER`` this rebuilds the vLLM regression image from any
    ordinary JPEG.
    """
    base = jpeg_bytes() if base is None else base
    if not base.startswith(JPEG_SOI):
        raise ValueError("base is not a JPEG (no SOI marker)")
    payload = EXIF_PREFIX + tiff
    segment = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return JPEG_SOI + segment + base[len(JPEG_SOI) :]


# -- PNG ----------------------------------------------------------------------


def png_chunk(chunk_type: bytes, data: bytes) -> bytes:
    """One PNG chunk with a valid CRC."""
    crc = zlib.crc32(chunk_type + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + chunk_type + data + struct.pack(">I", crc)


def png_ihdr(width: int, height: int, *, bit_depth: int = 8, color_type: int = 2) -> bytes:
    """An IHDR chunk (colour type 2 is RGB, 0 is grayscale, 6 is RGBA)."""
    return png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))


def png_header_only(width: int, height: int, *, bit_depth: int = 8, color_type: int = 2) -> bytes:
    """A tiny PNG that *declares* ``width`` x ``height`` pixels but holds almost no data.

    This is the shape of a pixel bomb: a few dozen bytes that would make a
    naive decoder allocate the whole pixel buffer.
    """
    idat = png_chunk(b"IDAT", zlib.compress(b"\x00" * 16))
    ihdr = png_ihdr(width, height, bit_depth=bit_depth, color_type=color_type)
    return PNG_SIGNATURE + ihdr + idat + png_chunk(b"IEND", b"")


def png_with_garbage_idat(width: int = 16, height: int = 16) -> bytes:
    """A PNG with a valid header whose IDAT is not a zlib stream (decoding fails)."""
    return (
        PNG_SIGNATURE
        + png_ihdr(width, height)
        + png_chunk(b"IDAT", b"\x00this is not a zlib stream")
        + png_chunk(b"IEND", b"")
    )


def png_with_exif_chunk(tiff: bytes, base: bytes | None = None) -> bytes:
    """``base`` (a PNG) with an ``eXIf`` chunk holding ``tiff`` right after IHDR."""
    base = png_bytes(size=(16, 12)) if base is None else base
    if not base.startswith(PNG_SIGNATURE):
        raise ValueError("base is not a PNG")
    ihdr_end = len(PNG_SIGNATURE) + 8 + 13 + 4  # length, type, 13 data bytes, CRC
    if base[len(PNG_SIGNATURE) + 4 : len(PNG_SIGNATURE) + 8] != b"IHDR":
        raise ValueError("base does not start with IHDR")
    return base[:ihdr_end] + png_chunk(b"eXIf", tiff) + base[ihdr_end:]


def png_with_orientation(orientation: int, size: tuple[int, int] = (4, 2), seed: int = 0) -> tuple[bytes, Image.Image]:
    """A lossless PNG whose EXIF Orientation is ``orientation``, and its pixels as stored."""
    stored = noisy_image("RGB", size, seed)
    return encode(stored, "PNG", exif=exif_bytes({ORIENTATION_TAG: orientation})), stored


def as_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def as_data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{as_base64(data)}"


def written(tmp_path: Path, data: bytes, name: str = "image.bin") -> Path:
    """``data`` in a file of ``tmp_path``, for the loaders that read files."""
    path = tmp_path / name
    path.write_bytes(data)
    return path
