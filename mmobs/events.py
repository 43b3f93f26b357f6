"""The one small interface between the hashing core and whoever watches it.

The hasher and the image loader never import prometheus_client or structlog.
They describe what happened (an exception swallowed, a media item keyed, a
hash timed, an input refused) as small frozen records and hand them to the
current :class:`HashObserver`. The observability layer (:mod:`mmobs.observability.instrument`)
is one such observer; tests and other integrations can install their own.

The current observer is process-wide (:func:`set_observer`) and can be
overridden for a block of code in the current context only
(:func:`observing`), which is how the fleet fingerprint hashes its reference
inputs without moving the traffic counters.

Until someone chooses an observer, the first event installs the default one,
made by the factory registered with :func:`set_default_observer_factory`. The
package registers mmobs's instrumentation
(:func:`mmobs.observability.instrument.default_instrumentation`) there when it
is imported: a library user gets counters and log events with no set-up, while
this module imports nothing above it (the seam has no arrow back up) and
importing the hashing core stays free of prometheus_client and structlog (they
load on first use). With no factory registered, the first event installs
:data:`NULL_OBSERVER`.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from PIL import Image

    from mmobs.errors import BadImageError

MediaKind = Literal["image", "media_with_bytes", "video"]
KeySource = Literal["image_id", "pixels", "original_bytes", "frames"]
#: How :func:`mmobs.keys.from_bytes.key_image` keyed an image: from the header alone, from the
#: header after decoding because the header could not decide, or by a full decode
#: because the caller asked for one (``verify="decode"``).
KeyPath = Literal["header", "header_decoded", "decode"]

MEDIA_KINDS: tuple[str, ...] = get_args(MediaKind)
KEY_SOURCES: tuple[str, ...] = get_args(KeySource)
KEY_PATHS: tuple[str, ...] = get_args(KeyPath)


@dataclass(frozen=True, slots=True)
class ExifFallback:
    """Reading the EXIF ImageID raised; the key fell back to ``key_source``."""

    kind: MediaKind
    error: BaseException
    key_source: KeySource
    image: Image.Image
    original_bytes: bytes | memoryview | None = None


@dataclass(frozen=True, slots=True)
class TransposeFailure:
    """Applying the EXIF orientation raised; the image was kept as it was."""

    error: BaseException
    image: Image.Image


@dataclass(frozen=True, slots=True)
class MediaKeyed:
    """One media item was serialized into a key.

    ``item_digest`` is the blake3 digest of this item's framed bytes alone. It
    is only computed when the observer asked for it through
    :meth:`HashObserver.wants_item_digest` (the drift tracker samples), so it
    is ``None`` on the common path.
    """

    kind: MediaKind
    key_source: KeySource
    media: Any
    item_digest: str | None = None


@dataclass(frozen=True, slots=True)
class Hashed:
    """One ``hash_kwargs`` call finished: ``nbytes`` serialized in ``seconds``."""

    algorithm: str
    seconds: float
    nbytes: int


@dataclass(frozen=True, slots=True)
class ExifCorruptWarning:
    """Pillow warned ``Corrupt EXIF data`` while reading an image; ``message`` is its text."""

    message: str


@dataclass(frozen=True, slots=True)
class KeyPathChosen:
    """The no-decode key path (:func:`mmobs.keys.from_bytes.key_image`) keyed an image by ``key_path``."""

    key_path: KeyPath


class HashObserver:
    """Receives what the hashing core reports. Every hook is a no-op here.

    Subclass and override the hooks you need. Each event hook takes one frozen
    record (a refusal's record is its :class:`~mmobs.errors.BadImageError`);
    :meth:`wants_item_digest` is a question asked per item before keying it, so
    it takes the item itself. Hooks run on the hashing hot path, inside
    whatever thread hashes, so they must be cheap and must not raise.
    """

    def exif_fallback(self, event: ExifFallback) -> None:
        """The tolerant ImageID read swallowed an exception."""

    def exif_transpose_failed(self, event: TransposeFailure) -> None:
        """``normalize_image`` / ``safe_exif_transpose`` swallowed an exception."""

    def media_keyed(self, event: MediaKeyed) -> None:
        """A media item got its key from ``event.key_source``."""

    def wants_item_digest(self, kind: MediaKind, media: Any) -> bool:
        """Return True to have the item's own digest computed for ``media_keyed``."""
        return False

    def hashed(self, event: Hashed) -> None:
        """One ``hash_kwargs`` call finished."""

    def bad_image(self, error: BadImageError) -> None:
        """The loader refused an input."""

    def exif_corrupt_warning(self, event: ExifCorruptWarning) -> None:
        """Pillow warned ``Corrupt EXIF data`` (seen where warnings are captured: :mod:`mmobs.observability.logs`)."""

    def key_path(self, event: KeyPathChosen) -> None:
        """The no-decode key path keyed an image by ``event.key_path``."""


class RecordingObserver(HashObserver):
    """Remembers the events of one piece of work and forwards them all to ``inner``.

    Used to answer "what happened to *this* image" (its key source, whether
    the EXIF fallback ran and why) while the process-wide observer still
    counts and logs everything.
    """

    def __init__(self, inner: HashObserver | None = None) -> None:
        self.inner = inner if inner is not None else NULL_OBSERVER
        self.fallbacks: list[ExifFallback] = []
        self.transpose_failures: list[TransposeFailure] = []
        self.keyed: list[MediaKeyed] = []
        self.hashed_calls: list[Hashed] = []
        self.bad_images: list[BadImageError] = []
        self.exif_corrupt_warnings: list[ExifCorruptWarning] = []
        self.key_paths: list[KeyPathChosen] = []

    def exif_fallback(self, event: ExifFallback) -> None:
        self.fallbacks.append(event)
        self.inner.exif_fallback(event)

    def exif_transpose_failed(self, event: TransposeFailure) -> None:
        self.transpose_failures.append(event)
        self.inner.exif_transpose_failed(event)

    def wants_item_digest(self, kind: MediaKind, media: Any) -> bool:
        return self.inner.wants_item_digest(kind, media)

    def media_keyed(self, event: MediaKeyed) -> None:
        self.keyed.append(event)
        self.inner.media_keyed(event)

    def hashed(self, event: Hashed) -> None:
        self.hashed_calls.append(event)
        self.inner.hashed(event)

    def bad_image(self, error: BadImageError) -> None:
        self.bad_images.append(error)
        self.inner.bad_image(error)

    def exif_corrupt_warning(self, event: ExifCorruptWarning) -> None:
        self.exif_corrupt_warnings.append(event)
        self.inner.exif_corrupt_warning(event)

    def key_path(self, event: KeyPathChosen) -> None:
        self.key_paths.append(event)
        self.inner.key_path(event)


NULL_OBSERVER = HashObserver()

#: ``None`` until someone chooses: then the default observer, on first use.
_global_observer: HashObserver | None = None
_default_lock = threading.Lock()
_default_factory: Callable[[], HashObserver] | None = None
_context_observer: contextvars.ContextVar[HashObserver | None] = contextvars.ContextVar("mmobs_observer", default=None)


def get_observer() -> HashObserver:
    """The observer in force here: a context override, else the process-wide one."""
    return _context_observer.get() or _global_observer or _install_default()


def set_observer(observer: HashObserver | None) -> HashObserver:
    """Install ``observer`` process-wide (``None`` turns reporting off).

    Returns the observer it replaced, so callers can restore it.
    """
    global _global_observer
    previous = _global_observer or NULL_OBSERVER
    _global_observer = observer if observer is not None else NULL_OBSERVER
    return previous


def set_default_observer_factory(factory: Callable[[], HashObserver] | None) -> None:
    """Register what makes the observer the first event installs when nobody chose one.

    The layer that owns the default observer registers it from above, so this
    seam never imports it; the factory runs once, on first use, under a lock.
    """
    global _default_factory
    _default_factory = factory


def _install_default() -> HashObserver:
    """Make the default observer the process-wide one, once."""
    global _global_observer
    with _default_lock:
        if _global_observer is None:
            _global_observer = _default_factory() if _default_factory is not None else NULL_OBSERVER
        return _global_observer


@contextlib.contextmanager
def observing(observer: HashObserver | None) -> Iterator[HashObserver]:
    """Use ``observer`` (``None``: nobody) for this context only."""
    chosen = observer if observer is not None else NULL_OBSERVER
    token = _context_observer.set(chosen)
    try:
        yield chosen
    finally:
        _context_observer.reset(token)
