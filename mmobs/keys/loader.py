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
reason from a closed set (:func:`bad_image_from_pillow` is the one place that
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

import binascii
import os
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any

from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from mmobs.errors import BadImageError, BadImageReason, InvalidOptionError
from mmobs.events import TransposeFailure, get_observer
from mmobs.keys.formats import DEFAULT_FORMATS
from mmobs.keys.guard import DEFAULT_DECODE_LIMITS, DecodeLimits, check_image_bytes
from mmobs.keys.identify import identification_order
from mmobs.keys.media import MediaWithBytes
from mmobs.keys.pixel_limit import PixelLimitExceeded, pixel_limit

b64decode: Callable[..., bytes]
try:  # 3-4x faster on large payloads, same strict semantics (the "serve" extra)
    from pybase64 import b64decode
except ImportError:  # pragma: no cover - exercised where pybase64 is absent
    from base64 import b64decode

__all__ = [
    "DEFAULT_FORMATS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PIXELS",
    "ImageMediaIO",
    "bad_image_from_pillow",
    "data_url_bytes",
    "empty_image_error",
    "has_transparency",
    "load_data_url",
    "normalize_image",
    "parse_data_url",
    "pillow_error_reason",
    "report_bad_image",
    "safe_exif_transpose",
]

#: 50 megapixels: above any camera a client sends, far below a pixel bomb.
DEFAULT_MAX_PIXELS = 50_000_000
#: 32 MiB of encoded bytes per image.
DEFAULT_MAX_BYTES = 32 * 1024 * 1024

_ALL_MODES: frozenset[str] = frozenset(getattr(Image, "MODES", ())) or frozenset(
    ("1", "CMYK", "F", "HSV", "I", "I;16", "I;16B", "I;16L", "I;16N", "L", "LA", "La",
     "LAB", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "YCbCr")
)  # fmt: skip
_DATA_URL_MEDIA_TYPES = ("", "application/octet-stream")


def empty_image_error() -> BadImageError:
    """The refusal of zero bytes, worded once for every loader that meets them (vLLM's, through the plugin)."""
    return BadImageError("empty", "the image is empty (0 bytes); send the encoded file")


def report_bad_image(error: BadImageError) -> BadImageError:
    """Tell the observer about a refusal once; marked, so nobody counts it twice."""
    if not error.reported:
        error.reported = True
        get_observer().bad_image(error)
    return error


def pillow_error_reason(error: BaseException) -> BadImageReason | None:
    """The reason a Pillow error means the image is bad, or None if it does not say so.

    ``None`` leaves the decision to the caller: the loader, which knows the
    error came from decoding client bytes, calls it ``corrupt``; a middleware
    that catches whatever an application raised lets it through as a 500.
    """
    if isinstance(error, UnidentifiedImageError):
        return "unidentified"
    if isinstance(error, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return "too_many_pixels"
    if isinstance(error, EOFError) or "truncated" in str(error).lower():
        return "truncated"
    return None


def bad_image_from_pillow(error: BaseException, where: str) -> BadImageError:
    """The :class:`BadImageError` for an exception Pillow raised while reading client bytes.

    ``where`` says what was being read, for the message ("header", "JPEG data").
    """
    reason = pillow_error_reason(error) or "corrupt"
    text = f"{type(error).__name__}: {str(error)[:200] or 'no details'}"
    messages: dict[str, str] = {
        "unidentified": f"the bytes are not a recognised image format ({text})",
        "too_many_pixels": f"the image declares too many pixels ({text})",
        "truncated": f"the {where} ends early: {text}",
        "corrupt": f"the {where} is damaged and cannot be decoded: {text}",
    }
    return BadImageError(reason, messages[reason])


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
    ) -> None:
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
            f"decode_limits={self.decode_limits!r})"
        )

    # -- entry points ---------------------------------------------------------

    def load_bytes(self, data: bytes | bytearray | memoryview) -> MediaWithBytes[Image.Image]:
        """Decode encoded image bytes; ``BadImageError`` if they are not an image."""
        data = bytes(data)
        try:
            opened = self.open_header(data)
        except BadImageError as error:
            report_bad_image(error)
            raise
        return self.decode(opened, data)

    def load_base64(self, media_type: str, data: str | bytes) -> MediaWithBytes[Image.Image]:
        """Decode a base64 payload (``media_type`` is informational, as in vLLM)."""
        try:
            raw = _decode_base64(data, self.max_bytes)
        except BadImageError as error:
            report_bad_image(error)
            raise
        return self.load_bytes(raw)

    def load_file(self, path: str | os.PathLike[str]) -> MediaWithBytes[Image.Image]:
        """Decode an image file. A missing or unreadable file raises ``OSError``."""
        size = os.stat(path).st_size
        if size > self.max_bytes:
            raise report_bad_image(_too_large(size, self.max_bytes))
        with open(path, "rb") as handle:
            return self.load_bytes(handle.read(self.max_bytes + 1))

    # -- the pipeline ---------------------------------------------------------

    def open_header(self, data: bytes) -> ImageFile.ImageFile:
        """Open ``data`` and apply every limit its header decides; decode no pixel.

        The checks of :meth:`load_bytes` that need no pixels: not empty, at
        most ``max_bytes``, a structure within ``decode_limits``, a format in
        ``formats``, a parsable header, at most ``max_pixels``. Raises :class:`BadImageError` without reporting it
        (the caller reports it once: :func:`report_bad_image`). The no-decode
        key path (:mod:`mmobs.keys.from_bytes`) shares it, so both paths refuse alike.
        """
        if not data:
            raise empty_image_error()
        if len(data) > self.max_bytes:
            raise _too_large(len(data), self.max_bytes)
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
        transparency, keep the very object when the mode already matches,
        convert otherwise; ``image_mode=None`` never converts.
        """
        target = self.image_mode
        if target is None:
            return False
        return (target == "RGB" and transparent) or mode != target

    @property
    def io_config(self) -> dict[str, Any]:
        """The ``io_config`` a converted image carries (and its key includes)."""
        return {"image_mode": self.image_mode, "rgba_background_color": self.rgba_background_color}

    def decode(self, opened: ImageFile.ImageFile, data: bytes) -> MediaWithBytes[Image.Image]:
        """Decode the image :meth:`open_header` opened from ``data``: its pixels, EXIF transpose and mode.

        The second half of :meth:`load_bytes`, for a caller that read the
        header first (the no-decode keys, when the header cannot decide): the
        bytes are neither checked nor opened again. Refusals are reported
        (:func:`report_bad_image`) and raised as ``BadImageError``.
        """
        try:
            with pixel_limit(self.max_pixels):
                return self._decode_opened(opened, data)
        except BadImageError as error:
            report_bad_image(error)
            raise

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
    is the service's decision, see :mod:`mmobs.service.app`).
    """
    io = io or ImageMediaIO()
    try:
        media_type, payload = parse_data_url(url)
    except BadImageError as error:
        report_bad_image(error)
        raise
    return io.load_base64(media_type, payload)


def data_url_bytes(url: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The encoded image in a base64 ``data:`` URL, not decoded as an image.

    For callers that key or route by the bytes (:mod:`mmobs.keys.from_bytes`); refusals
    are :class:`BadImageError` as in :func:`load_data_url`, reported once.
    """
    try:
        return _decode_base64(parse_data_url(url)[1], max_bytes)
    except BadImageError as error:
        report_bad_image(error)
        raise


def parse_data_url(url: str) -> tuple[str, str]:
    """Split a base64 ``data:`` URL into (media type, payload)."""
    if not isinstance(url, str):
        raise BadImageError("bad_data_url", f"an image URL must be a string, not {type(url).__name__}")
    scheme, colon, _ = url[:16].partition(":")
    if not colon or scheme.lower() != "data":
        shown = scheme[:10] + ":" if colon else "no scheme"
        raise BadImageError(
            "unsupported_url",
            f"only data: URLs with base64 image payloads are accepted here ({shown} given)",
        )
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise BadImageError("bad_data_url", "the data: URL has no ',' before its payload")
    if len(header) > 256:
        raise BadImageError("bad_data_url", "the data: URL header is longer than 256 characters")
    media_type, *params = header.split(";")
    media_type = media_type.strip().lower()
    if "base64" not in (p.strip().lower() for p in params):
        raise BadImageError("bad_data_url", "the data: URL is not base64-encoded; use data:image/<type>;base64,...")
    if not (media_type.startswith("image/") or media_type in _DATA_URL_MEDIA_TYPES):
        raise BadImageError("bad_data_url", f"the data: URL media type must be image/*, not {media_type[:40]!r}")
    return media_type, payload


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
    if formats is DEFAULT_FORMATS:
        return tuple(f for f in formats if f in Image.OPEN)
    if isinstance(formats, str) or not all(isinstance(f, str) for f in formats):
        raise InvalidOptionError("formats", f"formats must be a sequence of Pillow format names, not {formats!r}")
    unknown = [f for f in formats if f.upper() not in Image.OPEN]
    if unknown or not formats:
        raise InvalidOptionError(
            "formats", f"unknown image formats {unknown!r}; this Pillow opens {', '.join(sorted(Image.OPEN))}"
        )
    return tuple(f.upper() for f in formats)


def _too_large(size: int, limit: int) -> BadImageError:
    return BadImageError("too_large", f"the image is {size} bytes, above the limit of {limit} bytes")


def _decode_base64(data: str | bytes, max_bytes: int) -> bytes:
    if isinstance(data, str):
        try:
            data = data.encode("ascii")
        except UnicodeEncodeError:
            raise BadImageError("bad_base64", "the base64 payload has non-ASCII characters") from None
    if len(data) // 4 * 3 > max_bytes + 3:
        raise _too_large(len(data) // 4 * 3, max_bytes)
    try:
        return b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        pass
    # MIME-style payloads wrap lines; accept them, but nothing else off-alphabet.
    stripped = data.translate(None, b" \t\r\n")
    try:
        return b64decode(stripped, validate=True)
    except (binascii.Error, ValueError) as error:
        raise BadImageError("bad_base64", f"the payload is not valid base64: {error}") from None


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
