"""Decode images the way vLLM's ``ImageMediaIO`` does, refusing bad input cleanly.

Loading semantics (vLLM 0.33's ``ImageMediaIO.load_bytes``, with the decode
moved before the EXIF transpose so that a decode error is refused rather than
swallowed with the transpose's): open the bytes, check the pixel count,
``load()``, apply the EXIF orientation while tolerating any exception from it,
convert to ``image_mode`` (going to RGB, an image with transparency, meaning
mode RGBA, LA or PA or a ``transparency`` entry in ``info``, is converted to
RGBA and composited onto ``rgba_background_color`` through its alpha band;
other conversions use ``convert``), and return a :class:`MediaWithBytes`
whose ``io_config`` is set only when the conversion produced a new image
object.

Everything that cannot become an image raises :class:`BadImageError` with a
reason from a closed set (:func:`~mmobs.keys.refusals.bad_image_from_pillow` is the one place that
classifies Pillow's errors); no ``OSError``, ``SyntaxError``, ``struct.error``
or ``DecompressionBombError`` escapes. Pixel bombs are refused from the header,
before Pillow allocates the pixel buffer. A ``MemoryError`` is the server's
shortage, not the client's fault, so it propagates.

Before Pillow sees the bytes, :func:`mmobs.keys.guard.check_image_bytes` walks the
container's structure against the loader's :class:`~mmobs.keys.guard.DecodeLimits`
(metadata floods, repeated scans, oversized tiles and canvases refused as
``too_costly``): Pillow parses JPEG and PNG metadata and allocates WebP
canvases already in ``Image.open``, so a check after opening would come too
late. ``max_pixels`` is the only pixel limit: while the loader decodes,
Pillow's own bomb check applies it instead of ``Image.MAX_IMAGE_PIXELS``
(:mod:`mmobs.keys.pixel_limit`), so no Pillow limit or warning gets in its way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from io import BytesIO
from typing import Any

from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from mmobs.errors import BadImageError, InvalidOptionError
from mmobs.events import TransposeFailure, get_observer
from mmobs.keys.data_url import DEFAULT_MAX_BYTES, decode_base64, parse_data_url
from mmobs.keys.formats import DEFAULT_FORMATS
from mmobs.keys.guard import DEFAULT_DECODE_LIMITS, DecodeLimits, check_image_bytes
from mmobs.keys.identify import identification_order
from mmobs.keys.media import MediaWithBytes
from mmobs.keys.pixel_limit import PixelLimitExceeded, pixel_limit
from mmobs.keys.refusals import (
    bad_image_from_pillow,
    empty_image_error,
    report_bad_image,
    reporting_refusals,
    too_large_error,
)
from mmobs.releases import key_format

#: 50 megapixels: above any camera a client sends, far below a pixel bomb.
DEFAULT_MAX_PIXELS = 50_000_000

#: Every mode a Pillow image can be in (from Pillow 11 on, ``Image.MODES`` lists them all).
_ALL_MODES: frozenset[str] = frozenset(Image.MODES)


def has_transparency(image: Image.Image) -> bool:
    """Whether converting to RGB composites onto the background (vLLM's rule)."""
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info


def safe_exif_transpose(image: Image.Image, *, in_place: bool = False) -> Image.Image | None:
    """``ImageOps.exif_transpose`` that never raises on a malformed EXIF block.

    Use it wherever a model processor would call ``exif_transpose`` directly.
    Decoding errors from ``load()`` still propagate (they are not EXIF
    problems); any exception from reading the EXIF or applying the
    orientation is reported and the image is returned unchanged (``None`` when
    ``in_place``, as ``ImageOps`` does).
    """
    image.load()
    try:
        if in_place:
            ImageOps.exif_transpose(image, in_place=True)
            return None
        return ImageOps.exif_transpose(image)
    except Exception as error:  # noqa: BLE001 - tolerated by design, and reported
        get_observer().exif_transpose_failed(TransposeFailure(error, image))
        return None if in_place else image


def normalize_image(image: Image.Image) -> Image.Image:
    """Apply the EXIF orientation and load the pixels; never raises on bad EXIF.

    The result may be a new image object. Its ``format`` is carried over from
    ``image`` so that logs can still name it.
    """
    normalized = safe_exif_transpose(image)
    assert normalized is not None
    if normalized is not image:
        normalized.format = image.format
    normalized.load()
    return normalized


class ImageMediaIO:
    """Load images into :class:`MediaWithBytes`, keyed as vLLM keys them.

    ``image_mode=None`` keeps the decoded mode. ``max_pixels`` and
    ``max_bytes`` bound what one image may cost; both are checked before the
    pixel buffer is allocated, and ``max_pixels`` is the only pixel limit
    (above or below Pillow's ``MAX_IMAGE_PIXELS``). ``decode_limits`` bounds
    what the file's structure may cost before Pillow decodes it (see
    :class:`~mmobs.keys.guard.DecodeLimits`); ``None`` turns those checks off.
    ``vllm_version`` names the release whose conversion rule (and so whose
    ``io_config``) to follow (:mod:`mmobs.releases`; the newest for ``None``);
    what is refused is the newest release's in every case.
    """

    def __init__(
        self,
        image_mode: str | None = "RGB",
        rgba_background_color: Sequence[int] = (255, 255, 255),
        *,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        formats: Sequence[str] | None = DEFAULT_FORMATS,
        decode_limits: DecodeLimits | None = DEFAULT_DECODE_LIMITS,
        vllm_version: str | None = None,
    ) -> None:
        self.key_format = key_format(vllm_version)
        self.vllm_version = vllm_version
        if image_mode is not None and (not isinstance(image_mode, str) or image_mode not in _ALL_MODES):
            raise InvalidOptionError(
                "image_mode", f"unknown image_mode {image_mode!r}; use one of {', '.join(sorted(_ALL_MODES))}"
            )
        self.image_mode = image_mode
        self.rgba_background_color = _validate_color(rgba_background_color)
        for name, limit in (("max_pixels", max_pixels), ("max_bytes", max_bytes)):
            if type(limit) is not int or limit < 1:
                raise InvalidOptionError(name, f"{name} must be a positive integer, not {limit!r}")
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        self.formats = _validate_formats(formats)
        if decode_limits is not None and not isinstance(decode_limits, DecodeLimits):
            raise InvalidOptionError(
                "decode_limits", f"decode_limits must be a mmobs.keys.guard.DecodeLimits or None, not {decode_limits!r}"
            )
        self.decode_limits = decode_limits

    def __repr__(self) -> str:
        return (
            f"ImageMediaIO(image_mode={self.image_mode!r}, "
            f"rgba_background_color={self.rgba_background_color!r}, "
            f"max_pixels={self.max_pixels}, max_bytes={self.max_bytes}, formats={self.formats!r}, "
            f"decode_limits={self.decode_limits!r}"
            + ("" if self.vllm_version is None else f", vllm_version={self.vllm_version!r}")
            + ")"
        )

    # -- entry points ---------------------------------------------------------

    def load_bytes(self, data: bytes | bytearray | memoryview) -> MediaWithBytes[Image.Image]:
        """Decode encoded image bytes; ``BadImageError`` if they are not an image."""
        data = bytes(data)
        with reporting_refusals:
            opened = self.open_header(data)
        return self.decode(opened, data)

    def load_base64(self, media_type: str, data: str | bytes) -> MediaWithBytes[Image.Image]:
        """Decode a base64 payload (``media_type`` is informational, as in vLLM)."""
        with reporting_refusals:
            raw = decode_base64(data, self.max_bytes)
        return self.load_bytes(raw)

    def load_file(self, path: str | os.PathLike[str]) -> MediaWithBytes[Image.Image]:
        """Decode an image file. A missing or unreadable file raises ``OSError``."""
        size = os.stat(path).st_size
        if size > self.max_bytes:
            raise report_bad_image(too_large_error(size, self.max_bytes))
        with open(path, "rb") as handle:
            return self.load_bytes(handle.read(self.max_bytes + 1))

    # -- the pipeline ---------------------------------------------------------

    def open_header(self, data: bytes) -> ImageFile.ImageFile:
        """Open ``data`` and apply every limit its header decides; decode no pixel.

        The checks of :meth:`load_bytes` that need no pixels: not empty, at
        most ``max_bytes``, a structure within ``decode_limits``, a format in
        ``formats``, a parsable header, at most ``max_pixels``. Raises :class:`BadImageError` without reporting it
        (the caller reports it once: :mod:`mmobs.keys.refusals`). The no-decode
        key path (:mod:`mmobs.keys.from_bytes`) shares it, so both paths refuse alike.
        """
        if not data:
            raise empty_image_error()
        if len(data) > self.max_bytes:
            raise too_large_error(len(data), self.max_bytes)
        if self.decode_limits is not None:
            check_image_bytes(data, self.decode_limits, max_pixels=self.max_pixels, formats=self.formats)
        with pixel_limit(self.max_pixels):
            opened = _open(data, self.formats)
        width, height = opened.size
        if width * height > self.max_pixels:
            raise BadImageError(
                "too_many_pixels",
                f"the image is {width}x{height} = {width * height} pixels, above the limit of "
                f"{self.max_pixels}; resize it before sending",
            )
        return opened

    def converts(self, mode: str, transparent: bool) -> bool:
        """Whether loading an image of ``mode`` (with transparency or not) makes a new image.

        vLLM's ``convert_image_mode`` rule, and so whether ``io_config`` joins
        the key: composite onto the background when going to RGB with
        transparency (from 0.33 on, even when the mode already matches), keep
        the very object when the mode already matches, convert otherwise;
        ``image_mode=None`` never converts.
        """
        return self.key_format.converts(self.image_mode, mode, transparent)

    @property
    def io_config(self) -> dict[str, Any]:
        """The ``io_config`` a converted image carries (and its key includes)."""
        return {"image_mode": self.image_mode, "rgba_background_color": self.rgba_background_color}

    def decode(self, opened: ImageFile.ImageFile, data: bytes) -> MediaWithBytes[Image.Image]:
        """Decode the image :meth:`open_header` opened from ``data``: its pixels, EXIF transpose and mode.

        The second half of :meth:`load_bytes`, for a caller that read the
        header first (the no-decode keys, when the header cannot decide): the
        bytes are neither checked nor opened again. Refusals are reported
        (:mod:`mmobs.keys.refusals`) and raised as ``BadImageError``.
        """
        with reporting_refusals, pixel_limit(self.max_pixels):
            return self._decode_opened(opened, data)

    def _decode_opened(self, opened: ImageFile.ImageFile, data: bytes) -> MediaWithBytes[Image.Image]:
        metadata_error = _decode(opened)
        if metadata_error is None:
            image = normalize_image(opened)
        else:  # as in vLLM, whose EXIF transpose swallows this very error: counted, no transpose
            get_observer().exif_transpose_failed(TransposeFailure(metadata_error, opened))
            image = opened
        if image is not opened:  # the transpose returned a copy: free the decoded original before converting
            opened.close()
        converted = self._convert(image)
        io_config = None
        if converted is not image:
            converted.format = opened.format
            io_config = self.io_config
        return MediaWithBytes(converted, data, io_config)

    def _convert(self, image: Image.Image) -> Image.Image:
        mode = self.image_mode
        transparent = has_transparency(image)
        if mode is None or not self.converts(image.mode, transparent):
            return image
        try:
            if mode == "RGB" and transparent:
                rgba = image if image.mode == "RGBA" else image.convert("RGBA")
                composited = Image.new("RGB", image.size, self.rgba_background_color)
                composited.paste(rgba, mask=rgba.getchannel("A"))
                return composited
            return image.convert(mode)
        except MemoryError:
            raise
        except Exception as error:
            raise BadImageError(
                "unsupported_mode",
                f"cannot convert a {image.mode} image to {mode}: {error}",
            ) from error


def load_data_url(url: str, io: ImageMediaIO | None = None) -> MediaWithBytes[Image.Image]:
    """Load a ``data:image/...;base64,...`` URL.

    Other schemes are refused as ``unsupported_url`` (fetching remote images
    is the service's decision, see :mod:`mmobs.service.request_image`).
    """
    io = io or ImageMediaIO()
    with reporting_refusals:
        media_type, payload = parse_data_url(url)
    return io.load_base64(media_type, payload)


# -- helpers ------------------------------------------------------------------


def _validate_color(color: Any) -> tuple[int, int, int]:
    if (
        isinstance(color, (str, bytes))
        or not isinstance(color, Sequence)
        or len(color) != 3
        or not all(type(c) is int and 0 <= c <= 255 for c in color)
    ):
        raise InvalidOptionError(
            "rgba_background_color", f"rgba_background_color must be three integers in 0..255, not {color!r}"
        )
    return (color[0], color[1], color[2])


def _validate_formats(formats: Sequence[str] | None) -> tuple[str, ...] | None:
    if formats is None:
        return None
    Image.init()
    if tuple(formats) == DEFAULT_FORMATS:  # equal, not only the same object: a worker's config is a copy
        return tuple(f for f in formats if f in Image.OPEN)  # AVIF where this Pillow build has it
    if isinstance(formats, str) or not all(isinstance(f, str) for f in formats):
        raise InvalidOptionError("formats", f"formats must be a sequence of Pillow format names, not {formats!r}")
    unknown = [f for f in formats if f.upper() not in Image.OPEN]
    if unknown or not formats:
        raise InvalidOptionError(
            "formats", f"unknown image formats {unknown!r}; this Pillow opens {', '.join(sorted(Image.OPEN))}"
        )
    return tuple(f.upper() for f in formats)


def _open(data: bytes, formats: tuple[str, ...] | None) -> ImageFile.ImageFile:
    """Parse the header only. Pillow reads no pixels here.

    The file is identified in vLLM's format order first (see
    :data:`~mmobs.keys.formats.VLLM_FORMATS` and :mod:`mmobs.keys.identify`), then
    refused if its format is not one of ``formats``: a polyglot gets vLLM's
    reading or a refusal, never a reading of its own.
    """
    accepted = ", ".join(formats) if formats else "any format Pillow reads"
    try:
        image = Image.open(BytesIO(data), formats=identification_order(formats, data))
    except UnidentifiedImageError:
        raise BadImageError("unidentified", f"the bytes are not an image in an accepted format ({accepted})") from None
    except PixelLimitExceeded as error:
        raise BadImageError("too_many_pixels", str(error)) from None
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - SyntaxError, struct.error, ValueError, bomb warnings...
        raise bad_image_from_pillow(error, "image header") from None
    found = "JPEG" if image.format == "MPO" else image.format
    if formats is not None and found not in formats:
        raise BadImageError(
            "unsupported_format",
            f"the bytes are a {image.format} image, a format this server does not open; send one of {accepted}",
        )
    return image


def _decode(image: Image.Image) -> Exception | None:
    """Decode the pixels. Return, rather than raise, an error Pillow raised only once they were decoded.

    Plugins read some metadata in ``load_end``, the hook that runs after the
    last pixel is decoded: TIFF parses its EXIF and XMP there, and a malformed
    XMP tag raises ``TypeError`` with every pixel in place. That is bad
    metadata, not a bad image: vLLM's loader serves these pixels (its EXIF
    transpose, which loads, swallows the error), and so does mmobs. An error
    from the decoding itself is a refusal.
    """
    try:
        image.load()
    except PixelLimitExceeded as error:  # a size met while decoding (a TIFF tile, a GIF frame)
        raise BadImageError("too_many_pixels", str(error)) from None
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - OSError, SyntaxError, struct.error...
        if _raised_after_decoding(error):
            return error
        raise bad_image_from_pillow(error, f"{image.format or 'image'} data") from None
    return None


def _raised_after_decoding(error: BaseException) -> bool:
    """Whether Pillow raised ``error`` from an image plugin's ``load_end`` hook."""
    frame = error.__traceback__
    while frame is not None:
        code = frame.tb_frame
        if code.f_code.co_name == "load_end" and str(code.f_globals.get("__name__", "")).startswith("PIL."):
            return True
        frame = frame.tb_next
    return False
