"""The errors the loader raises, each carrying what a person needs to act on it.

A server that lets ``OSError``, ``SyntaxError`` or ``struct.error`` escape from
image decoding answers 500, and clients retry a request that can never
succeed. Every refusal is therefore a :class:`BadImageError`: a ``ValueError``
(so frameworks that map ``ValueError`` to 400 already do the right thing) whose
``reason`` is one of :data:`BAD_IMAGE_REASONS`, safe to use as a metric label.
"""

from __future__ import annotations

from typing import Literal, get_args

BadImageReason = Literal[
    "empty",
    "too_large",
    "unidentified",
    "unsupported_format",
    "truncated",
    "corrupt",
    "too_many_pixels",
    "too_costly",
    "unsupported_mode",
    "bad_base64",
    "bad_data_url",
    "unsupported_url",
    "fetch_failed",
]

_MEANINGS: dict[BadImageReason, str] = {
    "empty": "the input holds no bytes",
    "too_large": "the encoded input is larger than the configured byte limit",
    "unidentified": "the bytes are not an image format Pillow can identify",
    "unsupported_format": "the image is in a format this server does not open",
    "truncated": "the image data ends before the image does",
    "corrupt": "the image data is damaged and cannot be decoded",
    "too_many_pixels": "width x height exceeds the configured pixel limit",
    "too_costly": (
        "decoding the image would cost far more CPU time or memory than a plain image of its size: its "
        "structure (metadata floods, repeated scans, oversized tiles or canvases) or the service's hard "
        "limits say so; the message names what to change"
    ),
    "unsupported_mode": "the image cannot be converted to the requested mode",
    "bad_base64": "the base64 payload is not valid base64",
    "bad_data_url": "the data: URL is malformed or not base64-encoded",
    "unsupported_url": "the URL scheme or host is not allowed",
    "fetch_failed": "fetching the remote image failed",
}

#: Every reason (the ``BadImageReason`` literal, in its order), with what it means
#: for the person who sent the input.
BAD_IMAGE_REASONS: dict[str, str] = {reason: _MEANINGS[reason] for reason in get_args(BadImageReason)}
if len(_MEANINGS) != len(BAD_IMAGE_REASONS):  # a meaning for a reason the Literal lacks
    raise RuntimeError(f"reasons without a Literal entry: {sorted(set(_MEANINGS) - set(BAD_IMAGE_REASONS))}")


class BadImageError(ValueError):
    """An input that cannot become an image. ``reason`` is a metric-safe label.

    ``param`` optionally names the offending input in the request (for example
    ``images[2]``); the service fills it in, the loader leaves it ``None``.
    Once an observer has counted the refusal it is marked (:func:`mark_reported`),
    so that the layers it passes through (loader, service, middleware) count it once.
    """

    def __init__(self, reason: BadImageReason, message: str, *, param: str | None = None) -> None:
        if reason not in BAD_IMAGE_REASONS:
            raise ValueError(f"unknown BadImageError reason {reason!r}")
        super().__init__(message)
        self.reason: str = reason
        self.message = message
        self.param = param

    def with_param(self, param: str) -> BadImageError:
        """Name the offending input; returns ``self`` for chaining in ``raise``."""
        self.param = param
        return self

    def __repr__(self) -> str:
        return f"BadImageError(reason={self.reason!r}, message={self.message!r}, param={self.param!r})"


#: The one mark of a counted refusal, on mmobs's BadImageError and on a foreign exception (vLLM's) alike.
_REPORTED = "__mmobs_reported__"
_REASON = "__mmobs_refusal_reason__"


def mark_reported(error: BaseException, reason: str | None = None) -> None:
    """Note that an observer has counted ``error`` (as a refusal for ``reason``, if given): whoever meets it
    on its way out does not count it again, and can name the refusal (:func:`refusal_reason`)."""
    setattr(error, _REPORTED, True)
    if reason is not None:
        setattr(error, _REASON, reason)


def refusal_reason(error: BaseException) -> str | None:
    """The reason ``error`` refused an image for: a :class:`BadImageError`'s, or the one it was counted as."""
    if isinstance(error, BadImageError):
        return error.reason
    reason = getattr(error, _REASON, None)
    return reason if isinstance(reason, str) else None


def is_reported(error: BaseException) -> bool:
    """Whether an observer has counted ``error`` already (:func:`mark_reported`)."""
    return getattr(error, _REPORTED, False) is True


class InvalidOptionError(ValueError):
    """A loader option (``image_mode``, ``rgba_background_color``...) is invalid.

    ``param`` names the option, so a service can point the client at it
    without parsing the message.
    """

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message
