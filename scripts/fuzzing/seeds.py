"""The fuzzer's seed corpus: every corpus image, every format in several modes, every EXIF variant in every container."""

from __future__ import annotations

import contextlib
import io
import warnings

from .modules import CONTAINERS, EXIF_FLAG, WHOLE_FILE, M, load_modules


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
