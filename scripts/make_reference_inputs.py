"""Write the fleet-fingerprint reference inputs to ``mmobs/reference/``.

Run once; the files are committed. They are fixed bytes on purpose: if they
were encoded at run time, replicas with different encoders would disagree on
the fingerprint even when they key client images identically.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parents[1] / "mmobs" / "reference"


def gradient(width: int, height: int, channels: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    planes = [(x * 37 + y * 11 + c * 53) % 256 for c in range(channels)]
    return np.stack(planes, axis=-1).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def with_png_chunk(png: bytes, kind: bytes, data: bytes) -> bytes:
    """Insert a chunk right after IHDR."""
    ihdr_end = 8 + 8 + 13 + 4
    return png[:ihdr_end] + png_chunk(kind, data) + png[ihdr_end:]


def main() -> None:
    OUT.mkdir(exist_ok=True)
    rgb = Image.fromarray(gradient(12, 8, 3), "RGB")
    files = {
        # vLLM issue #56527: a TIFF header that is not II/MM makes getexif() raise SyntaxError.
        "bad-exif-header.jpg": encode(rgb, "JPEG", quality=90, exif=b"Exif\x00\x00XXXX\x00\x00\x00\x08"),
        # A valid TIFF header whose IFD says 5 entries but holds none: struct.error territory.
        "short-ifd.jpg": encode(rgb, "JPEG", quality=90, exif=b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x05\x00"),
        "bad-exif-chunk.png": with_png_chunk(encode(rgb, "PNG"), b"eXIf", b"XXXX\x00\x00\x00\x08"),
        "orientation-6.jpg": encode(rgb, "JPEG", quality=90, exif=_orientation_exif(6)),
        "palette.png": encode(rgb.quantize(colors=7), "PNG", transparency=0),
        "gray16.png": encode(Image.fromarray(gradient(9, 7, 1)[..., 0].astype(np.uint16) * 257), "PNG"),
        "rgba.png": encode(Image.fromarray(gradient(10, 6, 4)), "PNG"),
        "cmyk.jpg": encode(Image.fromarray(gradient(8, 8, 4)).convert("CMYK"), "JPEG", quality=90),
    }
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")


def _orientation_exif(value: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


if __name__ == "__main__":
    main()
