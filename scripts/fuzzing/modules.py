"""Constants of the fuzz inputs, and mmobs/Pillow imported late so that atheris can instrument them."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
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
INTERESTING_16 = (
    0x0000,
    0x0001,
    0x0002,
    0x0003,
    0x0007,
    0x000C,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x0112,
    0x8769,
    0x8825,
    0x800D,
)
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
        from mmobs.keys.hashing import MultiModalHasher
        from mmobs.keys.loader import ImageMediaIO
        from mmobs.observability.instrument import Instrumentation
        from mmobs.observability.metrics import exception_label
    import make_corpus

    from tests.support.reference import FR, ref_item, ref_pixel_key, stream_key

    M.FR, M.ref_item, M.ref_pixel_key, M.stream_key = FR, ref_item, ref_pixel_key, stream_key
    M.np, M.blake3, M.Image, M.CollectorRegistry = np, blake3, Image, CollectorRegistry
    M.BAD_IMAGE_REASONS, M.BadImageError = BAD_IMAGE_REASONS, BadImageError
    M.ExifFallback, M.HashObserver, M.RecordingObserver = ExifFallback, HashObserver, RecordingObserver
    M.TransposeFailure, M.observing = TransposeFailure, observing
    M.MultiModalHasher, M.ImageMediaIO, M.Instrumentation = MultiModalHasher, ImageMediaIO, Instrumentation
    M.exception_label, M.make_corpus = exception_label, make_corpus
    M.loaded = True
