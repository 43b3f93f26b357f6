"""One pixel limit: mmobs's ``max_pixels`` replaces Pillow's bomb check while mmobs decodes.

Pillow guards every decode with ``Image._decompression_bomb_check``, against
the process-wide ``Image.MAX_IMAGE_PIXELS`` (about 89.5 MP): above it a
``DecompressionBombWarning`` is printed, above twice it a
``DecompressionBombError`` is raised with Pillow's own text. A loader with its
own limit therefore had two: ``ImageMediaIO(max_pixels=500_000_000)`` still
refused a 400 MP image, and a 100 MP image printed a raw warning.

The ways around it that Pillow offers are process-wide: setting
``MAX_IMAGE_PIXELS`` changes the limit for every other user of Pillow in the
process (vLLM included) and races between threads, and filtering the warning
with ``warnings.catch_warnings`` is not thread-safe before Python 3.14.
Instead, :func:`install` wraps the check function once, at import (module
imports are serialised, so this does not race), and the wrapper reads the limit
from a ``contextvars.ContextVar``:

* inside :func:`pixel_limit` (how ``ImageMediaIO`` decodes), Pillow's sizes
  are held to mmobs's limit, and a size above it raises
  :class:`PixelLimitExceeded` (a ``DecompressionBombError``) carrying mmobs's
  message; Pillow never warns;
* everywhere else (other threads, other tasks, other code) the wrapper calls
  Pillow's original check unchanged.

A context variable is per thread and per asyncio task, so concurrent loaders
with different limits never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from PIL import Image

from mmobs.keys.guard._common import pixel_limit_error

__all__ = ["PixelLimitExceeded", "install", "pixel_limit"]

_LIMIT: ContextVar[int | None] = ContextVar("mmobs_pixel_limit", default=None)


class PixelLimitExceeded(Image.DecompressionBombError):
    """A size Pillow met while decoding is above the ``max_pixels`` of the mmobs loader."""

    def __init__(self, size: tuple[int, int], limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(pixel_limit_error(size[0], size[1], limit).message)


def _check(size: tuple[int, int], *, error_only: bool = False) -> None:
    limit = _LIMIT.get()
    if limit is None:
        _pillow_check(size, error_only=error_only)
        return
    width, height = max(1, size[0]), max(1, size[1])
    if width * height > limit:
        raise PixelLimitExceeded((width, height), limit)


_check.__mmobs_pixel_limit__ = True  # type: ignore[attr-defined]
_pillow_check = Image._decompression_bomb_check


def install() -> None:
    """Put the wrapper in place of Pillow's check (idempotent)."""
    global _pillow_check
    current = Image._decompression_bomb_check
    if not getattr(current, "__mmobs_pixel_limit__", False):
        _pillow_check = current
        Image._decompression_bomb_check = _check


@contextmanager
def pixel_limit(limit: int) -> Iterator[None]:
    """Within this block (this thread or task only), Pillow's size checks apply ``limit`` instead of its own."""
    token = _LIMIT.set(limit)
    try:
        yield
    finally:
        _LIMIT.reset(token)


install()
