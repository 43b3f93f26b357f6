"""Base images (small, noisy, deterministic) that the malformed inputs are built on."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

_FORMAT_PARAMS: dict[str, dict[str, object]] = {
    "JPEG": {"quality": 90},
    "PNG": {},
    "WEBP": {"lossless": True},
    "GIF": {},
    "TIFF": {},
    "BMP": {},
}
MEDIA_TYPES = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "WEBP": "image/webp",
    "GIF": "image/gif",
    "TIFF": "image/tiff",
    "BMP": "image/bmp",
}
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "TIFF": "tif", "BMP": "bmp"}


def noisy(size: tuple[int, int] = (16, 12), seed: int = 0, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    width, height = size
    return Image.frombytes(mode, size, rng.bytes(width * height * len(mode)))


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **{**_FORMAT_PARAMS[fmt], **params})
    return buffer.getvalue()


def base_image(fmt: str, size: tuple[int, int] = (16, 12), seed: int = 0, **params: object) -> bytes:
    """A valid ``fmt`` file of noisy RGB pixels (``P`` for GIF)."""
    image = noisy(size, seed)
    if fmt == "GIF":
        image = image.quantize(64)
    return encode(image, fmt, **params)


def data_url(data: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"
