"""The golden inputs the observability modules hash: the malformed-EXIF JPEG, a PNG with a bad eXIf chunk, a photo."""

from __future__ import annotations

from io import BytesIO

from PIL import Image

from tests.support import golden

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
BAD_CHUNK_PNG = golden.input_bytes("bad-exif-chunk.png")
PHOTO_JPEG = golden.input_bytes("photo.jpg")


def fresh_bad_png() -> Image.Image:
    image = Image.open(BytesIO(BAD_CHUNK_PNG))
    image.load()
    return image
