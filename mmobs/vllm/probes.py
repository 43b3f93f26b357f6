"""What the plugin checks vLLM's own functions against before it replaces anything.

A replacement must return exactly what vLLM's function returns. These probes
are small inputs built fresh for each check (EXIF reads are stateful): images
with and without an ImageID or an orientation, and encoded files the loader
decodes. A difference is a :class:`~mmobs.vllm.shape.ShapeMismatch`, which makes
the plugin keep vLLM's path and say why.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from io import BytesIO
from typing import Any

from PIL import Image

from mmobs.keys.writer import IMAGE_ID_TAG
from mmobs.vllm.decode_free_hits.lazy_image import lazy_class
from mmobs.vllm.shape import ShapeMismatch


def probe_images() -> list[Callable[[], Image.Image]]:
    """Fresh probe images (EXIF reads are stateful): plain, UUID ImageID, rotated."""

    def plain() -> Image.Image:
        return Image.new("RGB", (3, 2), (1, 2, 3))

    def with_uuid() -> Image.Image:
        image = Image.new("L", (2, 2), 7)
        image.getexif()[IMAGE_ID_TAG] = uuid.UUID(int=0x6D6D6F6273)
        return image

    def rotated() -> Image.Image:
        image = Image.new("RGB", (3, 2), (9, 8, 7))
        image.putpixel((0, 0), (1, 1, 1))
        image.getexif()[0x0112] = 6
        return image

    return [plain, with_uuid, rotated]


def pixels(image: Any) -> Any:
    return (image.mode, image.size, image.tobytes()) if isinstance(image, Image.Image) else image


def same_results(
    original: Callable[[Any], Any],
    replacement: Callable[[Any], Any],
    probes: list[Callable[[], Image.Image]],
    name: str,
    compare: Callable[[Any], Any] = lambda value: value,
) -> None:
    for probe in probes:
        if compare(original(probe())) != compare(replacement(probe())):
            raise ShapeMismatch(f"{name} no longer behaves as mmobs's replacement does on {probe.__name__} images")


def probe_decodes(original: Callable[[Any, bytes], Any], loader_class: type, media_with_bytes: type) -> None:
    """vLLM's loader decodes eagerly, and a stand-in decodes to exactly what it returned, on probe files."""
    for name, data in probe_files():
        loaded = original(loader_class(), data)
        media = getattr(loaded, "media", None)
        if type(loaded) is not media_with_bytes or not isinstance(media, Image.Image) or vars(media).get("_im") is None:
            raise ShapeMismatch(f"ImageMediaIO.load_bytes no longer decodes eagerly ({type(media).__name__} on {name})")
        stand_in_class = lazy_class(type(media))
        if stand_in_class is None:
            raise ShapeMismatch(f"ImageMediaIO.load_bytes returns a {type(media).__name__}, not a Pillow image")
        decode = functools.partial(_decoded_media, original, loader_class, data)
        stand_in = stand_in_class(media.mode, media.size, media.format, (), decode)
        if pixels(stand_in) != pixels(media) or stand_in.info != media.info or stand_in.palette != media.palette:
            raise ShapeMismatch(f"a stand-in does not decode to what vLLM's loader returns on {name}")


def _decoded_media(original: Callable[[Any, bytes], Any], loader_class: type, data: bytes) -> Image.Image:
    return original(loader_class(), data).media  # type: ignore[no-any-return]


def probe_files() -> list[tuple[str, bytes]]:
    """Small encoded probes: RGB and RGBA PNGs, an L PNG, and a JPEG with an EXIF orientation."""
    files = []
    probes = (
        ("rgb.png", "RGB", "PNG"),
        ("rgba.png", "RGBA", "PNG"),
        ("l.png", "L", "PNG"),
        ("rotated.jpg", "RGB", "JPEG"),
    )
    for name, mode, fmt in probes:
        image = Image.new(mode, (5, 3), 200 if mode == "L" else (10, 20, 30, 40)[: len(mode)])
        image.putpixel((0, 0), 7 if mode == "L" else (1, 2, 3, 4)[: len(mode)])
        buffer = BytesIO()
        if fmt == "JPEG":
            exif = Image.Exif()
            exif[0x0112] = 6  # rotated 90 degrees: the loader's transpose swaps the size
            image.save(buffer, fmt, exif=exif)
        else:
            image.save(buffer, fmt)
        files.append((name, buffer.getvalue()))
    return files
