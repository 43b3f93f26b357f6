"""Refusals of bad images: how they are worded, classified, and counted once.

Every layer that turns client bytes into an image (the loader, the no-decode
keys, the service, the middleware, the vLLM plugin) refuses with
:class:`~mmobs.errors.BadImageError`; what those layers share lives here, so a
refusal reads and counts the same wherever it is made:

* :func:`bad_image_from_pillow` is the one place that classifies Pillow's
  errors (:func:`pillow_error_reason` says whether one means a bad image);
* :func:`report_bad_image` tells the observer once, and marks the error so the
  layers it passes through on its way out do not count it again;
* :data:`reporting_refusals` does that for whatever a block raises::

      with reporting_refusals:
          opened = io.open_header(data)
"""

from __future__ import annotations

from types import TracebackType

from PIL import Image, UnidentifiedImageError

from mmobs.errors import BadImageError, BadImageReason, is_reported, mark_reported
from mmobs.events import get_observer


def empty_image_error() -> BadImageError:
    """The refusal of zero bytes, worded once for every loader that meets them (vLLM's, through the plugin)."""
    return BadImageError("empty", "the image is empty (0 bytes); send the encoded file")


def too_large_error(size: int, limit: int) -> BadImageError:
    """The refusal of an encoded image over the byte limit."""
    return BadImageError("too_large", f"the image is {size} bytes, above the limit of {limit} bytes")


def report_bad_image(error: BadImageError) -> BadImageError:
    """Tell the observer about a refusal once; marked, so nobody counts it twice."""
    if not is_reported(error):
        mark_reported(error)
        get_observer().bad_image(error)
    return error


class _ReportingRefusals:
    """A :class:`BadImageError` leaving the block is reported (once), then propagates.

    Stateless, so the one instance serves every block, nested or concurrent.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:  # never swallows: the refusal propagates
        if isinstance(error, BadImageError):
            report_bad_image(error)


#: ``with reporting_refusals:``: the one way to report a refusal on its way out of a block.
reporting_refusals = _ReportingRefusals()


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
