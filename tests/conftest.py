"""Shared pytest fixtures. Keep each group in its own commented section."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mmobs.events import RecordingObserver, observing


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once, with a message saying where the golden vectors go, when they are not there."""
    from tests.golden import missing_message

    message = missing_message()
    if message is not None:
        pytest.exit(message, returncode=pytest.ExitCode.USAGE_ERROR)


# =============================================================================
# Core (test_hashing.py, test_image_io.py, test_golden.py): recording observer
# =============================================================================


class EventRecorder(RecordingObserver):
    """mmobs's RecordingObserver (forwarding to nobody), optionally asking for item digests."""

    def __init__(self, *, item_digests: bool = False) -> None:
        super().__init__()
        self.item_digests = item_digests

    def wants_item_digest(self, kind: str, media: Any) -> bool:
        return self.item_digests


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
