"""The harness: one execution, every property (see ``scripts/fuzz.py``)."""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .containers import materialize
from .modules import FUZZ_MAX_BYTES, FUZZ_MAX_PIXELS, M, load_modules


class PropertyViolation(AssertionError):
    """The loader or the hasher broke a promise on this input."""


class _NullLogger:
    def _ignore(self, *args: object, **kwargs: object) -> None:
        return None

    info = warning = error = debug = _ignore


_COUNTING_CLASS: Any = None


def counting_observer(inner: Any) -> Any:
    """A :class:`~mmobs.events.HashObserver` that counts what the hashing core
    delivers, then forwards it to ``inner`` (an Instrumentation).

    The class is built on first use because mmobs is imported late (see
    :func:`load_modules`).
    """
    global _COUNTING_CLASS
    if _COUNTING_CLASS is None:

        class CountingObserver(M.HashObserver):
            def __init__(self, inner: Any) -> None:
                self.inner = inner
                self.fallbacks = 0
                self.transpose_failures = 0
                self.bad_images = 0
                self.keyed = 0

            def exif_fallback(self, event: Any) -> None:
                self.fallbacks += 1
                self.inner.exif_fallback(event)

            def exif_transpose_failed(self, event: Any) -> None:
                self.transpose_failures += 1
                self.inner.exif_transpose_failed(event)

            def media_keyed(self, event: Any) -> None:
                self.keyed += 1
                self.inner.media_keyed(event)

            def hashed(self, event: Any) -> None:
                self.inner.hashed(event)

            def bad_image(self, error: Any) -> None:
                self.bad_images += 1
                self.inner.bad_image(error)

        _COUNTING_CLASS = CountingObserver
    return _COUNTING_CLASS(inner)


@dataclass
class Stats:
    executions: int = 0
    loaded: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    fallback_items: int = 0
    fallback_types: Counter[str] = field(default_factory=Counter)
    transpose_types: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    unlabelled: Counter[str] = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    slowest: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        return {
            "executions": self.executions,
            "seconds": round(elapsed, 1),
            "exec_per_second": round(self.executions / elapsed, 1) if elapsed else None,
            "loaded": self.loaded,
            "refused": dict(self.refused.most_common()),
            "fallback_items": self.fallback_items,
            "fallback_exceptions": dict(self.fallback_types.most_common()),
            "transpose_exceptions": dict(self.transpose_types.most_common()),
            "unlabelled_exceptions": dict(self.unlabelled.most_common()),
            "decoded_modes": dict(self.modes.most_common()),
            "input_kinds": dict(self.kinds.most_common()),
            "slowest_execution_seconds": round(self.slowest, 3),
            "findings": len(self.findings),
        }


class Harness:
    """Runs one input through load-then-hash and checks every property."""

    def __init__(self, max_pixels: int = FUZZ_MAX_PIXELS, max_bytes: int = FUZZ_MAX_BYTES) -> None:
        load_modules()
        self.rgb = M.ImageMediaIO(max_pixels=max_pixels, max_bytes=max_bytes)
        self.native = M.ImageMediaIO(image_mode=None, max_pixels=max_pixels, max_bytes=max_bytes)
        self.instrumentation = M.Instrumentation(
            M.CollectorRegistry(), logger=_NullLogger(), drift=None, hasher_info=False
        )
        self.counting = counting_observer(self.instrumentation)
        self.stats = Stats()

    # -- counters -------------------------------------------------------------

    def _counted_fallbacks(self) -> float:
        return sum(
            sample.value
            for family in self.instrumentation.metrics.exif_fallbacks.collect()
            for sample in family.samples
            if sample.name == "mmobs_exif_fallback_total"
        )

    # -- one execution --------------------------------------------------------

    def run(self, data: bytes) -> str:
        """Check every property on ``data`` (a fuzz input); return a short outcome label."""
        kind, encoded = materialize(data)
        self.stats.executions += 1
        self.stats.kinds[kind] += 1
        started = time.perf_counter()
        try:
            return self._run(encoded)
        finally:
            self.stats.slowest = max(self.stats.slowest, time.perf_counter() - started)

    def _run(self, encoded: bytes) -> str:
        media = self._load(self.rgb, encoded)
        if isinstance(media, str):
            return media
        self.stats.loaded += 1
        outcome = self._check_keys(media, "rgb")
        native = self._load(self.native, encoded)
        if isinstance(native, str):  # the same bytes loaded a moment ago
            raise PropertyViolation(f"loaded with image_mode='RGB' but refused with image_mode=None: {native}")
        self.stats.modes[native.media.mode] += 1
        self._check_keys(native, "native")
        return f"{outcome}:{native.media.mode}"

    def _load(self, loader: Any, encoded: bytes) -> Any:
        counting = self.counting
        before = counting.bad_images
        recorder = M.RecordingObserver(counting)
        with M.observing(recorder):
            try:
                media = loader.load_bytes(encoded)
            except M.BadImageError as error:
                if error.reason not in M.BAD_IMAGE_REASONS:
                    raise PropertyViolation(f"unknown reason {error.reason!r}") from error
                if len(recorder.bad_images) != 1 or counting.bad_images - before != 1:
                    raise PropertyViolation(f"refusal reported {len(recorder.bad_images)} times") from error
                self.stats.refused[error.reason] += 1
                return f"refused:{error.reason}"
            # Any other exception propagates: that is the finding.
        if recorder.bad_images:
            raise PropertyViolation("an image that loaded was also reported as refused")
        for event in recorder.transpose_failures:
            self.stats.transpose_types[M.exception_label(type(event.error))] += 1
        return media

    def _check_keys(self, media: Any, label: str) -> str:
        counting = self.counting
        events_before = counting.fallbacks
        counted_before = self._counted_fallbacks()
        recorder = M.RecordingObserver(counting)
        with M.observing(recorder), exif_spy() as raised:
            key = M.MultiModalHasher.hash_kwargs("blake3", image=media)
            media_fallbacks = len(recorder.fallbacks)
            plain = M.MultiModalHasher.hash_kwargs("blake3", image=media.media)
        fallbacks = len(recorder.fallbacks)
        if len(raised) != fallbacks or any(a is not b.error for a, b in zip(raised, recorder.fallbacks, strict=True)):
            raise PropertyViolation(
                f"Pillow's EXIF reading raised {len(raised)} time(s) while keying "
                f"({[type(error).__name__ for error in raised]}), but {fallbacks} fallback(s) were reported"
            )
        delivered = counting.fallbacks - events_before
        counted = self._counted_fallbacks() - counted_before
        if not (fallbacks == delivered == counted):
            raise PropertyViolation(f"fallbacks reported {fallbacks}, delivered {delivered}, counted {counted:g}")
        if media_fallbacks > 1 or fallbacks - media_fallbacks > 1:
            raise PropertyViolation(f"more than one fallback per key: {media_fallbacks}, {fallbacks}")
        sources = [event.key_source for event in recorder.keyed]
        if sources != ["original_bytes", "pixels"]:
            raise PropertyViolation(f"unexpected key sources {sources}")
        for event in recorder.fallbacks:
            name = M.exception_label(type(event.error))
            self.stats.fallback_types[name] += 1
            if name == "other":
                self.stats.unlabelled[type(event.error).__qualname__] += 1
        if key != original_bytes_key(media):
            raise PropertyViolation("the media key is not the original-bytes key")
        if plain != asarray_key(media.media):
            raise PropertyViolation(f"the pixel key of a {media.media.mode} image differs from np.asarray's")
        if label == "rgb":
            self.stats.fallback_items += bool(media_fallbacks)
        return "fallback" if media_fallbacks else "keyed"


def _subclasses(cls: type) -> Iterator[type]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


@contextlib.contextmanager
def exif_spy() -> Iterator[list[BaseException]]:
    """Collect every exception that leaves Pillow's EXIF reading while the block runs.

    Wraps ``getexif`` (on ``Image.Image`` and every plugin class overriding
    it) and ``Exif.__getitem__`` (a tag's value is decoded when it is read;
    ``KeyError`` is how a missing tag answers, not a failure). Only the
    outermost call counts, so a plugin's ``getexif`` calling ``super()`` is
    one read. The hasher's ImageID read is the only EXIF reader while keying,
    so the exceptions collected there are exactly the ones it swallowed.
    """
    raised: list[BaseException] = []
    depth = [0]
    patched: list[tuple[type, str, Any]] = []

    def wrap(function: Any, missing_is_normal: bool) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            try:
                return function(*args, **kwargs)
            except KeyError:
                if depth[0] == 1 and not missing_is_normal:
                    raised.append(sys.exc_info()[1])  # type: ignore[arg-type]
                raise
            except Exception as error:
                if depth[0] == 1:
                    raised.append(error)
                raise
            finally:
                depth[0] -= 1

        return spy

    for cls in _subclasses(M.Image.Image):
        if "getexif" in vars(cls):
            patched.append((cls, "getexif", vars(cls)["getexif"]))
    patched.append((M.Image.Exif, "__getitem__", vars(M.Image.Exif)["__getitem__"]))
    for cls, name, function in patched:
        setattr(cls, name, wrap(function, missing_is_normal=name == "__getitem__"))
    try:
        yield raised
    finally:
        for cls, name, function in patched:
            setattr(cls, name, function)


def original_bytes_key(media: Any) -> str:
    """``hash_kwargs("blake3", image=media)`` when the key comes from the original bytes."""
    value: object = media.original_bytes
    if media.io_config:
        value = {"io_config": media.io_config, "data": media.original_bytes}
    return M.stream_key(M.FR(b"image") + b"\x03" + b"".join(M.ref_item("image", value)))


def asarray_key(image: Any) -> str:
    """vLLM's pixel key: the item ``image`` of ``{mode, data: np.asarray(image)[, palette...]}``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bytearray palette is keyed through pickle, with a warning
        return M.ref_pixel_key("image", image)
