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
* everywhere else (other threads, other tasks, other code) the wrapper hands
  its arguments, whatever they are, to the check it replaced, and returns what
  that returns: Pillow behaves exactly as it would without mmobs.

The wrapper passes the arguments through rather than naming them because the
check's signature is Pillow's to change: Pillow 13.0 added a keyword-only
``error_only``, and Pillow calls the check from every plugin's ``open`` and
swallows a ``TypeError`` there, so a wrapper that passed that keyword to an
older Pillow made every ``Image.open`` in the process fail as "cannot identify
image file". ``tests/keys/test_pillow_isolation.py`` holds this, and
``tests/keys/test_pillow_range.py`` runs it under each Pillow of the declared range.

A context variable is per thread and per asyncio task, so concurrent loaders
with different limits never see each other's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from PIL import Image

from mmobs.keys.guard._common import pixel_limit_error

_LIMIT: ContextVar[int | None] = ContextVar("mmobs_pixel_limit", default=None)
_MARK = "__mmobs_pixel_limit__"


class PixelLimitExceeded(Image.DecompressionBombError):
    """A size Pillow met while decoding is above the ``max_pixels`` of the mmobs loader."""

    def __init__(self, size: tuple[int, int], limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(pixel_limit_error(size[0], size[1], limit).message)


def _limited(pillow_check: Callable[..., Any]) -> Callable[..., Any]:
    """Pillow's ``pillow_check``, except inside :func:`pixel_limit`, where the context's limit applies."""

    @functools.wraps(pillow_check)
    def check(size: tuple[int, int], *args: Any, **kwargs: Any) -> Any:
        limit = _LIMIT.get()
        if limit is None:
            return pillow_check(size, *args, **kwargs)
        width, height = max(1, size[0]), max(1, size[1])
        if width * height > limit:
            raise PixelLimitExceeded((width, height), limit)
        return None

    setattr(check, _MARK, True)
    return check


def install() -> None:
    """Put the wrapper in place of Pillow's check (idempotent)."""
    current = Image._decompression_bomb_check
    if not getattr(current, _MARK, False):
        Image._decompression_bomb_check = _limited(current)


@contextmanager
def pixel_limit(limit: int) -> Iterator[None]:
    """Within this block (this thread or task only), Pillow's size checks apply ``limit`` instead of its own."""
    token = _LIMIT.set(limit)
    try:
        yield
    finally:
        _LIMIT.reset(token)


install()
