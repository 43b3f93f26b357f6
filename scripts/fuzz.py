#!/usr/bin/env python
"""Fuzz the image loader and the hasher: load, then key, never anything but BadImageError.

Each execution takes one input, loads it with ``ImageMediaIO().load_bytes``
and, if it loaded, keys it twice: ``MultiModalHasher.hash_kwargs("blake3",
image=media)`` (the service's key, from the original bytes) and the same for
``media.media`` as a plain image (the key from the pixels). It also loads the
input keeping its decoded mode (``image_mode=None``) and keys those pixels,
which reaches the hasher's pixel code with every mode a decoder can produce.

Properties checked on every execution (a violation is a *finding*):

* ``load_bytes`` raises nothing but :class:`~mmobs.errors.BadImageError`, with a
  reason from the closed set, reported to the observer exactly once;
* hashing a loaded image raises nothing;
* every swallowed exception is counted: the exceptions that left Pillow's EXIF
  reading while keying (a spy on ``getexif`` and ``Exif.__getitem__``), the
  fallbacks the service would report (a
  :class:`~mmobs.events.RecordingObserver`), the ``ExifFallback`` events a
  counting observer (a ``HashObserver`` subclass) received and the movement of
  ``mmobs_exif_fallback_total`` in a private
  :class:`~mmobs.instrument.Instrumentation` registry are the same number, at
  most one per key;
* the media key is the original-bytes key (a decoded image never carries a
  ``uuid.UUID`` ImageID), so a fallback cannot change it, and the pixel key
  equals the key of ``np.asarray(image)`` (vLLM's definition).

Inputs are whole files of every format (JPEG, PNG, WebP, GIF, TIFF, BMP) and
EXIF payloads wrapped on the fly into JPEG APP1, PNG eXIf (RGB and grayscale),
WebP EXIF chunks and PNG "Raw profile type exif" text. The first byte of an
input says which: below 0x80 the rest is a whole file; otherwise the rest is a
TIFF structure and ``byte & 0x7f`` picks its container (see ``CONTAINERS``).

Two engines:

* ``random`` (the default when atheris is missing, and the CI slice): a
  deterministic mutator seeded by ``--seed``: byte flips, interesting values,
  insertions, deletions, duplications, truncations, splices, and EXIF-structure
  aware mutations (IFD offsets and entry counts, entry tags, types, counts and
  value offsets, next-IFD links), with PNG CRCs repaired half the time. Inputs
  that reach a new outcome join the pool.
* ``atheris`` (coverage-guided, libFuzzer): Pillow's Python plugins and mmobs are
  instrumented; the seeds come from ``scripts/make_corpus.py``; a custom
  mutator mixes libFuzzer's mutations with the structure-aware ones.

Usage::

    python scripts/fuzz.py --engine random --seed 1 --runs 200000
    python scripts/fuzz.py --engine atheris --max-time 1800 --workdir /tmp/mmobs-fuzz

A finding is written to ``--workdir``/findings (the input and its traceback) and
printed; reproduce it with ``python scripts/fuzz.py --reproduce FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import random
import signal
import struct
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

#: Pixel limit while fuzzing: big enough for every seed, small enough that a
#: mutated header cannot make one execution allocate hundreds of megabytes.
FUZZ_MAX_PIXELS = 4_000_000
FUZZ_MAX_BYTES = 1024 * 1024
WHOLE_FILE = 0x00
EXIF_FLAG = 0x80
#: Containers for EXIF-payload inputs, chosen by ``first_byte & 0x7f`` modulo their number.
CONTAINERS = ("jpeg", "png", "png-gray", "webp", "png-raw-profile", "jpeg-gray")
INTERESTING_8 = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x2A, 0x2B)
INTERESTING_16 = (0x0000, 0x0001, 0x0002, 0x0003, 0x0007, 0x000C, 0x7FFF, 0x8000, 0xFFFF, 0x0112, 0x8769, 0x8825, 0x800D)
INTERESTING_32 = (0, 1, 8, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFF00, 0x10000, 0x3FFFFFFF)
TAGS = (0x0112, 0x800D, 0x8769, 0x8825, 0xA005, 0x927C, 0x010E, 0x0131, 0x011A, 0x0100, 0x0101, 0x0111, 0x0117, 0x0103, 0x0106, 0x0115, 0x0102, 0x0140, 0x014A, 0x02BC, 0x8773, 0x83BB)  # fmt: skip


# =============================================================================
# Modules (imported late, so atheris can instrument them)
# =============================================================================


class _Modules:
    """mmobs, Pillow and the corpus generator, imported once by :func:`load_modules`."""

    loaded = False


M = _Modules()


def load_modules(instrument: bool = False) -> None:
    if M.loaded:
        return
    context: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if instrument:
        import atheris

        context = atheris.instrument_imports(include=["PIL", "mmobs"])
    with context:
        import numpy as np
        from blake3 import blake3
        from PIL import Image
        from prometheus_client import CollectorRegistry

        Image.init()  # import every plugin now (inside the instrumentation)
        import mmobs  # noqa: F401 - installs the default observer, replaced below
        from mmobs.errors import BAD_IMAGE_REASONS, BadImageError
        from mmobs.events import (
            ExifFallback,
            HashObserver,
            RecordingObserver,
            TransposeFailure,
            observing,
        )
        from mmobs.hashing import MultiModalHasher
        from mmobs.image_io import ImageMediaIO
        from mmobs.instrument import Instrumentation
        from mmobs.metrics import exception_label
    import make_corpus
    from tests.reference import FR, ref_item, ref_pixel_key, stream_key

    M.FR, M.ref_item, M.ref_pixel_key, M.stream_key = FR, ref_item, ref_pixel_key, stream_key
    M.np, M.blake3, M.Image, M.CollectorRegistry = np, blake3, Image, CollectorRegistry
    M.BAD_IMAGE_REASONS, M.BadImageError = BAD_IMAGE_REASONS, BadImageError
    M.ExifFallback, M.HashObserver, M.RecordingObserver = ExifFallback, HashObserver, RecordingObserver
    M.TransposeFailure, M.observing = TransposeFailure, observing
    M.MultiModalHasher, M.ImageMediaIO, M.Instrumentation = MultiModalHasher, ImageMediaIO, Instrumentation
    M.exception_label, M.make_corpus = exception_label, make_corpus
    M.loaded = True


# =============================================================================
# Containers: wrap a TIFF structure as the EXIF block of an image
# =============================================================================


class Wrapper:
    """Fast wrappers around precomputed base images (no encoder runs per input)."""

    def __init__(self) -> None:
        mc = M.make_corpus
        self.jpeg = mc.base_image("JPEG", size=(8, 8))
        self.jpeg_gray = mc.encode(mc.noisy((8, 8), seed=2, mode="L"), "JPEG")
        self.png = mc.base_image("PNG", size=(8, 8))
        self.png_gray = mc.encode(mc.noisy((8, 8), seed=2, mode="L"), "PNG")
        self.webp_frame = [c for c in mc.riff_chunks(mc.base_image("WEBP", size=(8, 8))) if c[0] in (b"VP8L", b"VP8 ")]
        self.ihdr_end = len(mc.PNG_SIGNATURE) + 8 + 13 + 4

    def wrap(self, container: str, tiff: bytes) -> bytes:
        mc = M.make_corpus
        if container in ("jpeg", "jpeg-gray"):
            base = self.jpeg if container == "jpeg" else self.jpeg_gray
            payload = (b"Exif\x00\x00" + tiff)[: 65533]
            return base[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + base[2:]
        if container in ("png", "png-gray"):
            base = self.png if container == "png" else self.png_gray
            return base[: self.ihdr_end] + mc.png_chunk(b"eXIf", tiff) + base[self.ihdr_end :]
        if container == "png-raw-profile":
            blob = b"Exif\x00\x00" + tiff
            text = b"\nexif\n" + b"%8d\n" % len(blob) + blob.hex().encode() + b"\n"
            chunk = mc.png_chunk(b"tEXt", b"Raw profile type exif\x00" + text)
            return self.png_gray[: self.ihdr_end] + chunk + self.png_gray[self.ihdr_end :]
        if container == "webp":
            width = height = 8
            vp8x = struct.pack("<I", 0x08) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
            return mc.riff([(b"VP8X", vp8x), *self.webp_frame, (b"EXIF", tiff)])
        raise ValueError(container)


_WRAPPER: Wrapper | None = None


def materialize(data: bytes) -> tuple[str, bytes]:
    """(what the input is, the bytes given to the loader) for a fuzz input."""
    global _WRAPPER
    if not data:
        return "file", b""
    selector, payload = data[0], data[1:]
    if selector < EXIF_FLAG:
        return "file", payload
    if _WRAPPER is None:
        _WRAPPER = Wrapper()
    container = CONTAINERS[(selector & 0x7F) % len(CONTAINERS)]
    return container, _WRAPPER.wrap(container, payload)


# =============================================================================
# The harness: one execution, every property
# =============================================================================


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

            def hashed(self, algorithm: str, seconds: float, nbytes: int) -> None:
                self.inner.hashed(algorithm, seconds, nbytes)

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
        if len(raised) != fallbacks or any(a is not b.error for a, b in zip(raised, recorder.fallbacks)):
            raise PropertyViolation(
                f"Pillow's EXIF reading raised {len(raised)} time(s) while keying "
                f"({[type(error).__name__ for error in raised]}), but {fallbacks} fallback(s) were reported"
            )
        delivered = counting.fallbacks - events_before
        counted = self._counted_fallbacks() - counted_before
        if not (fallbacks == delivered == counted):
            raise PropertyViolation(
                f"fallbacks reported {fallbacks}, delivered {delivered}, counted {counted:g}"
            )
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


# =============================================================================
# Seeds
# =============================================================================


def seed_inputs() -> list[bytes]:
    """Every image of the corpus, every format in several modes, every EXIF variant in every container."""
    load_modules()
    if not _SEEDS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated writers (IM), near-bombs in the corpus
            _SEEDS.extend(_build_seeds())
    return list(_SEEDS)


_SEEDS: list[bytes] = []


def _build_seeds() -> list[bytes]:
    mc = M.make_corpus
    seeds: list[bytes] = []
    for case in mc.build_corpus():
        if case.kind == "image" and len(case.payload) <= 64 * 1024:
            seeds.append(bytes([WHOLE_FILE]) + case.payload)
    for fmt in ("JPEG", "PNG", "WEBP", "GIF", "TIFF", "BMP"):
        for mode in ("RGB", "L", "RGBA", "P", "1", "CMYK", "I;16", "LA", "F", "I"):
            with contextlib.suppress(Exception):
                image = mc.noisy((6, 5), seed=len(seeds), mode="RGB")
                image = image.quantize(16) if mode == "P" else image.convert(mode)
                seeds.append(bytes([WHOLE_FILE]) + mc.encode(image, fmt))
    # Every other format this Pillow reads and writes: the loader accepts them all.
    image = mc.noisy((7, 5), seed=11)
    for fmt in ("AVIF", "DDS", "ICO", "IM", "JPEG2000", "MPO", "PCX", "PPM", "QOI", "SGI", "SPIDER", "TGA"):
        for mode in ("RGB", "L", "RGBA"):
            with contextlib.suppress(Exception):
                buffer = io.BytesIO()
                image.convert(mode).save(buffer, fmt)
                seeds.append(bytes([WHOLE_FILE]) + buffer.getvalue())
    frames = [mc.noisy((6, 4), seed=s) for s in range(3)]
    for fmt, params in (("GIF", {}), ("WEBP", {"lossless": True}), ("PNG", {}), ("TIFF", {})):
        with contextlib.suppress(Exception):
            buffer = io.BytesIO()
            frames[0].save(buffer, fmt, save_all=True, append_images=frames[1:], **params)  # animated / multi-page
            seeds.append(bytes([WHOLE_FILE]) + buffer.getvalue())
    tiffs = [tiff for tiff, _ in mc.EXIF_VARIANTS.values()]
    tiffs.append(mc.tiff_bytes([mc.entry(0x0112, 3, 6), mc.entry(0x800D, 2, "id"), mc.raw_entry(0x8769, 4, 1, 26)]))
    for index, tiff in enumerate(tiffs):
        for container in range(len(CONTAINERS)):
            if (index + container) % 2 == 0 or tiff[:4] == b"XXXX":
                seeds.append(bytes([EXIF_FLAG | container]) + tiff)
    unique = list(dict.fromkeys(seeds))
    return unique


# =============================================================================
# Mutations
# =============================================================================


def _find_tiff_headers(data: bytes | bytearray) -> list[int]:
    found = []
    for marker in (b"II*\x00", b"MM\x00*"):
        at = data.find(marker)
        while at != -1 and len(found) < 8:
            found.append(at)
            at = data.find(marker, at + 1)
    return found


def _tiff_mutation(data: bytearray, rng: random.Random) -> bool:
    """Rewrite one field of a TIFF structure found in ``data``, in place."""
    starts = _find_tiff_headers(data)
    if not starts:
        return False
    base = rng.choice(starts)
    endian = "<" if data[base : base + 2] == b"II" else ">"
    span = len(data) - base

    def u16(at: int) -> int | None:
        return struct.unpack_from(endian + "H", data, at)[0] if 0 <= at <= len(data) - 2 else None

    def put16(at: int, value: int) -> None:
        if 0 <= at <= len(data) - 2:
            struct.pack_into(endian + "H", data, at, value & 0xFFFF)

    def put32(at: int, value: int) -> None:
        if 0 <= at <= len(data) - 4:
            struct.pack_into(endian + "L", data, at, value & 0xFFFFFFFF)

    def offset_value() -> int:
        choice = rng.randrange(6)
        return (0, 8, span, span - 2, rng.randrange(max(1, span)), rng.choice(INTERESTING_32))[choice]

    ifd_field = base + 4
    ifd = struct.unpack_from(endian + "L", data, ifd_field)[0] if ifd_field + 4 <= len(data) else 0
    count = u16(base + ifd)
    action = rng.randrange(10)
    if action == 0 or count is None:
        put32(ifd_field, offset_value())  # IFD0 offset
        return True
    entries_at = base + ifd + 2
    if action == 1:
        put16(base + ifd, rng.choice((0, 1, count + 1, count - 1, 0xFFFF, rng.randrange(0x10000))))  # entry count
        return True
    if action == 2:
        put32(entries_at + 12 * count, rng.choice((ifd, 0, offset_value())))  # next-IFD link (loops included)
        return True
    if count == 0:
        put16(base + ifd, 1)
        count = 1
    entry = entries_at + 12 * rng.randrange(min(count, 64))
    if action == 3:
        put16(entry, rng.choice(TAGS) if rng.random() < 0.8 else rng.randrange(0x10000))  # tag
    elif action == 4:
        put16(entry + 2, rng.choice((0, 1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 13, 16, 17, 99, 0xFFFF)))  # type
    elif action == 5:
        put32(entry + 4, rng.choice((0, 1, 2, 4, 16, 37, 0xFFFF, 0x3FFFFFFF, 0xFFFFFFFF, rng.randrange(256))))  # count
    elif action == 6:
        put32(entry + 8, offset_value())  # value or value offset
    elif action == 7:
        # A sub-IFD pointer (Exif, GPS, Interop) to somewhere, often back to IFD0.
        put16(entry, rng.choice((0x8769, 0x8825, 0xA005)))
        put16(entry + 2, rng.choice((4, 13, 3, 2)))
        put32(entry + 4, 1)
        put32(entry + 8, rng.choice((ifd, offset_value())))
    elif action == 8:
        # An ImageID of some type: the one tag the hasher reads.
        put16(entry, 0x800D)
        put16(entry + 2, rng.choice((1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 16)))
        put32(entry + 4, rng.choice((1, 2, 4, 16, 36, 37)))
        put32(entry + 8, offset_value())
    else:
        data[base : base + 4] = rng.choice((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+", b"IM*\x00"))
    return True


def _fix_png_crcs(data: bytearray) -> None:
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return
    at = 8
    while at + 12 <= len(data):
        length = struct.unpack_from(">I", data, at)[0]
        end = at + 8 + length
        if end + 4 > len(data):
            return
        struct.pack_into(">I", data, end, zlib.crc32(data[at + 4 : end]) & 0xFFFFFFFF)
        at = end + 4


def mutate(data: bytes, rng: random.Random, pool: list[bytes] | None = None, max_len: int = 1 << 16) -> bytes:
    """One to four stacked mutations of a fuzz input (its selector byte mostly kept)."""
    if not data:
        return bytes([rng.randrange(256)])
    selector, body = data[0], bytearray(data[1:])
    for _ in range(1 + min(3, int(rng.expovariate(1.0)))):
        size = len(body)
        action = rng.randrange(16)
        if action <= 4 and _tiff_mutation(body, rng):
            continue
        if size == 0:
            body += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
            continue
        at = rng.randrange(size)
        if action == 5:
            body[at] ^= 1 << rng.randrange(8)
        elif action == 6:
            body[at] = rng.choice(INTERESTING_8)
        elif action == 7 and size >= 2:
            at = rng.randrange(size - 1)
            struct.pack_into(rng.choice("<>") + "H", body, at, rng.choice(INTERESTING_16))
        elif action == 8 and size >= 4:
            at = rng.randrange(size - 3)
            struct.pack_into(rng.choice("<>") + "L", body, at, rng.choice(INTERESTING_32))
        elif action == 9:
            body[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        elif action == 10:
            del body[at : at + rng.randrange(1, 64)]
        elif action == 11:
            length = rng.randrange(1, 64)
            body[rng.randrange(size) : rng.randrange(size)] = body[at : at + length]
        elif action == 12:
            del body[rng.randrange(size) :]  # truncation
        elif action == 13 and pool:
            other = rng.choice(pool)[1:]
            if other:
                cut = rng.randrange(len(other))
                body = body[:at] + bytearray(other[cut:]) if rng.random() < 0.5 else bytearray(other[:cut]) + body[at:]
        elif action == 14:
            body[at : at + 1] = bytes([rng.randrange(256)])
        else:
            selector = rng.randrange(256) if rng.random() < 0.1 else selector
    if rng.random() < 0.5:
        _fix_png_crcs(body)
    return (bytes([selector]) + bytes(body))[:max_len]


# =============================================================================
# Engines
# =============================================================================


class _Timeout(BaseException):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def record_finding(stats: Stats, data: bytes, error: BaseException, findings_dir: Path | None) -> dict[str, Any]:
    kind, encoded = materialize(data)
    text = "".join(traceback.format_exception(error))
    digest = hashlib.sha1(data).hexdigest()[:16]
    finding = {
        "input_sha1": digest,
        "kind": kind,
        "exception": type(error).__qualname__,
        "message": str(error)[:500],
        "traceback": text,
        "signature": _signature(error),
    }
    stats.findings.append(finding)
    if findings_dir is not None:
        findings_dir.mkdir(parents=True, exist_ok=True)
        (findings_dir / f"finding-{digest}.input").write_bytes(data)
        (findings_dir / f"finding-{digest}.image").write_bytes(encoded)
        (findings_dir / f"finding-{digest}.txt").write_text(text)
    return finding


def _signature(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(error).__qualname__}@{where}"


def run_random(
    seed: int,
    runs: int | None = None,
    max_time: float | None = None,
    *,
    findings_dir: Path | None = None,
    report_every: float = 0.0,
    timeout: float = 10.0,
    harness: Harness | None = None,
    max_pool: int = 4000,
    stop_on_finding: bool = False,
    stats_file: Path | None = None,
) -> Stats:
    """The deterministic mutator: the same seed and runs give the same inputs."""
    harness = harness or Harness()
    stats = harness.stats
    rng = random.Random(seed)
    pool = seed_inputs()
    seeds = len(pool)
    seen_outcomes: set[str] = set()
    signatures: set[str] = set()
    deadline = time.monotonic() + max_time if max_time else None
    last_report = time.monotonic()
    previous = signal.signal(signal.SIGALRM, _on_alarm) if timeout else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            index = 0
            while (runs is None or index < runs) and (deadline is None or time.monotonic() < deadline):
                # Every seed once, as it is; then mutants of the pool.
                data = pool[index] if index < seeds else mutate(rng.choice(pool), rng, pool)
                index += 1
                try:
                    if timeout:
                        signal.setitimer(signal.ITIMER_REAL, timeout)
                    outcome = harness.run(data)
                except _Timeout as error:
                    outcome = "timeout"
                    _note(stats, data, error, findings_dir, signatures, f"timeout after {timeout} s")
                except Exception as error:  # noqa: BLE001 - every escape is a finding
                    outcome = "finding"
                    _note(stats, data, error, findings_dir, signatures, None)
                    if stop_on_finding:
                        break
                finally:
                    if timeout:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                if outcome not in seen_outcomes:
                    seen_outcomes.add(outcome)
                    if len(pool) < max_pool:
                        pool.append(data)
                elif len(pool) < max_pool and rng.random() < 0.002:
                    pool.append(data)  # keep some diversity
                if report_every and time.monotonic() - last_report >= report_every:
                    last_report = time.monotonic()
                    _report(stats, len(pool), stats_file)
    finally:
        if previous is not None:
            signal.signal(signal.SIGALRM, previous)
    return stats


def _note(stats: Stats, data: bytes, error: BaseException, findings_dir: Path | None, signatures: set[str], label: str | None) -> None:
    signature = label or _signature(error)
    finding = record_finding(stats, data, error, findings_dir)
    if signature not in signatures:
        signatures.add(signature)
        print(f"\n*** finding {finding['input_sha1']} ({finding['kind']}): {signature}\n{finding['traceback']}", flush=True)


def _report(stats: Stats, pool: int | None, stats_file: Path | None) -> None:
    summary = stats.as_dict()
    if pool is not None:
        summary["pool"] = pool
    print(
        f"[{summary['seconds']:>7}s] execs={summary['executions']} ({summary['exec_per_second']}/s) "
        f"loaded={summary['loaded']} fallback_items={summary['fallback_items']} "
        f"fallbacks={summary['fallback_exceptions']} findings={summary['findings']}",
        flush=True,
    )
    if stats_file is not None:
        stats_file.write_text(json.dumps(summary, indent=1) + "\n")


def run_atheris(args: argparse.Namespace) -> None:
    import atheris

    load_modules(instrument=True)
    harness = Harness(max_pixels=args.max_pixels)
    stats = harness.stats
    workdir = Path(args.workdir)
    corpus_dir = workdir / "atheris-corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    for data in seed_inputs():
        (corpus_dir / f"seed-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)
    findings_dir = workdir / "findings"
    stats_file = workdir / "atheris-stats.json"
    last_report = [time.monotonic()]
    warnings.simplefilter("ignore")

    def test_one_input(data: bytes) -> None:
        try:
            harness.run(data)
        except Exception as error:
            record_finding(stats, data, error, findings_dir)
            _report(stats, None, stats_file)
            raise
        if time.monotonic() - last_report[0] >= args.report_every:
            last_report[0] = time.monotonic()
            _report(stats, None, stats_file)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return mutate(data, rng, None, max_size)
        return atheris.Mutate(data, max_size)

    libfuzzer_args = [
        sys.argv[0],
        str(corpus_dir),
        f"-max_len={args.max_len}",
        f"-timeout={int(args.timeout)}",
        f"-rss_limit_mb={args.rss_limit_mb}",
        f"-artifact_prefix={findings_dir}/",
        f"-seed={args.seed}",
        "-print_final_stats=1",
        # libtiff writes every complaint to stderr (millions of lines); findings are saved as files.
        "-close_fd_mask=2",
    ]
    if args.runs:
        libfuzzer_args.append(f"-runs={args.runs}")
    if args.max_time:
        libfuzzer_args.append(f"-max_total_time={int(args.max_time)}")
    findings_dir.mkdir(parents=True, exist_ok=True)
    atheris.Setup(libfuzzer_args, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


def reproduce(path: Path) -> int:
    """Run one saved input (a fuzz input, or with --image, an image file) and print what happens."""
    harness = Harness()
    data = path.read_bytes()
    try:
        outcome = harness.run(data)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    print(f"{path}: {outcome}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("auto", "random", "atheris"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=None, help="stop after this many executions")
    parser.add_argument("--max-time", type=float, default=None, help="stop after this many seconds")
    parser.add_argument(
        "--workdir",
        default=str(Path(tempfile.gettempdir()) / "mmobs-fuzz"),
        help="findings, atheris corpus and stats go here (default: a mmobs-fuzz folder in the temp directory)",
    )
    parser.add_argument("--report-every", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one execution may take")
    parser.add_argument("--max-pixels", type=int, default=FUZZ_MAX_PIXELS)
    parser.add_argument("--max-len", type=int, default=20000, help="atheris: largest input")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--reproduce", type=Path, default=None, help="run one saved fuzz input and exit")
    parser.add_argument("--image", action="store_true", help="with --reproduce: the file is an image, not a fuzz input")
    args = parser.parse_args(argv)
    # Pillow logs what it skips in damaged files ("More samples per pixel..."): millions of lines.
    logging.getLogger("PIL").setLevel(logging.CRITICAL)

    if args.reproduce is not None:
        if args.image:
            load_modules()
            path = Path(args.workdir) / "reproduce.input"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes([WHOLE_FILE]) + args.reproduce.read_bytes())
            return reproduce(path)
        return reproduce(args.reproduce)

    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401
        except ImportError:
            engine = "random"
        else:
            engine = "atheris"
    if engine == "atheris":
        run_atheris(args)  # does not return
        return 0
    if args.runs is None and args.max_time is None:
        args.runs = 100_000
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    stats = run_random(
        args.seed,
        args.runs,
        args.max_time,
        findings_dir=workdir / "findings",
        report_every=args.report_every,
        timeout=args.timeout,
        harness=Harness(max_pixels=args.max_pixels),
        stats_file=workdir / f"random-seed{args.seed}-stats.json",
    )
    summary = stats.as_dict()
    summary["engine"], summary["seed"] = "random", args.seed
    (workdir / f"random-seed{args.seed}-stats.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    signatures = Counter(finding["signature"] for finding in stats.findings)
    for signature, count in signatures.items():
        print(f"finding: {signature} x{count}")
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
