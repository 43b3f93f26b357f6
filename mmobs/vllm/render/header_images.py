"""First-seen JPEGs of a keys-only render, sized from their header: what vLLM's loader would return, no decode.

A keys-only render needs of a loaded image its key (from the original bytes),
its mode and its size after vLLM's loader: ``open_image``, the pixel limit,
``normalize_image`` (the EXIF orientation, any failure tolerated), ``load``,
then ``_convert_image_mode``. For a JPEG all of that but the pixels is in the
header. :meth:`HeaderImages.record` opens the header as vLLM does and runs
Pillow's own ``exif_transpose`` and vLLM's own ``_convert_image_mode`` on a
1x2 image that carries the header's ``info`` (its EXIF and XMP) and the EXIF
Pillow already parsed while opening it: the turn, the
mode conversion, what the EXIF ImageID read finds and what the transpose
raises come out as they would for the decoded image, from the same code. The
result is a decoded-bytes :class:`~mmobs.vllm.decode_free_hits.decode_skip.Record`,
so the image is handed on as a decode-free stand-in (decoded on first access,
should anything read its pixels).

Only where the decode cannot fail for any reason the header hides: a JPEG of
one scan (one SOS marker) that ends with its EOI marker, that mmobs's
structural checks (:mod:`mmobs.keys.guard`) accept and whose size is within
vLLM's pixel limit, in mode L, RGB or CMYK, opened by Pillow's plain JPEG
plugin (not MPO). Anything else, PNGs included (Pillow reads a PNG's chunks
after the image data while decoding), is decoded by vLLM's loader as before,
so every refusal stays vLLM's own. The plan checks these records against
vLLM's loader on probe files before it trusts a header.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from PIL import Image, ImageOps, JpegImagePlugin

from mmobs.keys.guard import check_image_bytes
from mmobs.vllm.decode_free_hits.decode_skip import Record, within_pixel_limit
from mmobs.vllm.decode_free_hits.lazy_image import lazy_class
from mmobs.vllm.keys.key_hooks import read_image_id
from mmobs.vllm.shape import ShapeMismatch, vllm_max_pixels

_SOI, _EOI, _SOS = b"\xff\xd8", b"\xff\xd9", b"\xff\xda"
_MODES = frozenset(("L", "RGB", "CMYK"))


class HeaderImages:
    """Decoded-bytes records of complete, single-scan JPEGs, from their header (see the module docstring)."""

    def __init__(self, open_image: Callable[[Any], Image.Image]) -> None:
        self.open_image = open_image

    def record(self, loader: Any, data: bytes) -> Record | None:
        """What vLLM's ``loader`` would make of ``data``, or None where only its decode can tell."""
        if not (data.startswith(_SOI) and data.endswith(_EOI)) or data.count(_SOS) != 1:
            return None
        try:
            check_image_bytes(data, max_pixels=vllm_max_pixels())
            image = self.open_image(io.BytesIO(data))  # as vLLM's loader opens it, its warnings included
        except Exception:  # noqa: BLE001 - BadImageError or Pillow's: the decode path refuses it, in vLLM's words
            return None
        if type(image) is not JpegImagePlugin.JpegImageFile or image.mode not in _MODES:
            return None
        return _record(loader, image)


def _record(loader: Any, image: JpegImagePlugin.JpegImageFile) -> Record | None:
    proxy = Image.new(image.mode, (1, 2))
    proxy.info = dict(image.info)
    # What opening read of the EXIF already: the JPEG plugin reads its DPI through getexif() and swallows what
    # that raises, leaving the EXIF marked read (empty, or as far as it got) for every later getexif().
    proxy._exif = image._exif
    failures: tuple[tuple[BaseException, str | None, str, tuple[int, int]], ...] = ()
    try:
        turned = ImageOps.exif_transpose(proxy)
    except Exception as error:  # noqa: BLE001 - vLLM's normalize_image tolerates it, and so the stand-in replays it
        turned, failures = proxy, ((error.with_traceback(None), image.format, image.mode, image.size),)
    final = loader._convert_image_mode(turned)
    untouched = final is proxy  # the transpose failed and no conversion: vLLM hands on the opened JpegImageFile
    image_class = lazy_class(type(image) if untouched else Image.Image)
    if image_class is None:
        return None
    width, height = image.size
    record = Record(
        image_class,
        final.mode,
        (height, width) if turned.size == (2, 1) else (width, height),
        image.size,
        image.format if untouched else None,
        None
        if final is turned
        else {"image_mode": loader.image_mode, "rgba_background_color": loader.rgba_background_color},
        0.0,
        failures,
        [read_image_id(final)],
    )
    return record if within_pixel_limit(record) else None


def probe_header_records(
    header_images: HeaderImages, load_bytes: Callable[[Any, bytes], Any], loader_class: type
) -> None:
    """Each probe JPEG's header record describes exactly what vLLM's loader returns for it; raises where not."""
    for name, data in _probe_jpegs():
        loaded = load_bytes(loader_class(), data)
        media = loaded.media
        record = header_images.record(loader_class(), data)
        if record is None:
            raise ShapeMismatch(f"no header record for the probe {name}")
        found = (
            record.image_class.stands_for,
            record.mode,
            record.size,
            record.format,
            record.io_config,
            record.image_id_reads[0][0],
        )
        expected = (
            type(media),
            media.mode,
            media.size,
            media.format,
            getattr(loaded, "io_config", None),
            read_image_id(media)[0],
        )
        if found != expected:
            raise ShapeMismatch(f"a header record differs from vLLM's loader on {name}: {found} != {expected}")


def _probe_jpegs() -> list[tuple[str, bytes]]:
    """Small JPEGs: RGB, L, CMYK, turned by their EXIF orientation (6 and 3), and an EXIF block Pillow cannot read."""
    probes = []
    for name, mode, orientation in (
        ("rgb", "RGB", 1),
        ("l", "L", 1),
        ("cmyk", "CMYK", 1),
        ("six", "RGB", 6),
        ("three", "RGB", 3),
    ):
        exif = Image.Exif()
        exif[0x0112] = orientation
        buffer = io.BytesIO()
        Image.new(mode, (6, 4)).save(buffer, "JPEG", exif=exif.tobytes())
        probes.append((f"{name}.jpg", buffer.getvalue()))
    buffer = io.BytesIO()
    Image.new("RGB", (6, 4)).save(buffer, "JPEG", exif=b"Exif\x00\x00II*\x00\xff\xff\xff\x7f")  # an IFD past the end
    probes.append(("bad-exif.jpg", buffer.getvalue()))
    return probes
