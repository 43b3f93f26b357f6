"""Shared pytest fixtures. Keep each group in its own commented section."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mmobs.events import ExifFallback, HashObserver, MediaKeyed, TransposeFailure, observing

# =============================================================================
# Core (test_hashing.py, test_image_io.py, test_golden.py): recording observer
# =============================================================================


class EventRecorder(HashObserver):
    """Keeps every event the hashing core and the loader report, in order."""

    def __init__(self, *, item_digests: bool = False) -> None:
        self.item_digests = item_digests
        self.exif_fallbacks: list[ExifFallback] = []
        self.transpose_failures: list[TransposeFailure] = []
        self.keyed: list[MediaKeyed] = []
        self.hashed_calls: list[tuple[str, float, int]] = []
        self.bad_images: list[Any] = []

    def exif_fallback(self, event: ExifFallback) -> None:
        self.exif_fallbacks.append(event)

    def exif_transpose_failed(self, event: TransposeFailure) -> None:
        self.transpose_failures.append(event)

    def media_keyed(self, event: MediaKeyed) -> None:
        self.keyed.append(event)

    def wants_item_digest(self, kind: str, media: Any) -> bool:
        return self.item_digests

    def hashed(self, algorithm: str, seconds: float, nbytes: int) -> None:
        self.hashed_calls.append((algorithm, seconds, nbytes))

    def bad_image(self, error: Any) -> None:
        self.bad_images.append(error)


@pytest.fixture
def record() -> Callable[..., contextlib.AbstractContextManager[EventRecorder]]:
    """``with record() as rec:`` installs a fresh EventRecorder for the block.

    It goes through ``mmobs.events.observing``, so only events reported inside
    the block (in this context) are recorded.
    """

    @contextlib.contextmanager
    def _record(**options: Any) -> Iterator[EventRecorder]:
        recorder = EventRecorder(**options)
        with observing(recorder):
            yield recorder

    return _record


@pytest.fixture
def silent_observer() -> Iterator[None]:
    """Route events to nobody for the test, so it never moves the global metrics."""
    with observing(None):
        yield
