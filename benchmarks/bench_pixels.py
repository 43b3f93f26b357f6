"""Section ``pixels``: pixel-path keys of plain PIL images.

1, 4 and 12 MP images in RGB, RGBA, L and P against blake3 alone over the
identical stream and against the straightforward ``np.asarray`` key, with
tracemalloc peaks, and the streamed path by chunk size.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import _harness as harness
import naive
import numpy as np
from _common import Config, MiB, blake3_alone, keyer, mmobs_key, noisy_image, stream_of
from blake3 import blake3
from PIL import Image

import mmobs.keys.pixels

#: The targets: mmobs / blake3 alone over the same stream (RGB is repacked; the others are read in place).
TARGETS = {"RGB": 1.3, "other": 1.05}


def run(cfg: Config, out: harness.Report) -> None:
    out("## 1. Pixel-path keys (plain PIL images)")
    out()
    out(
        '`hash_kwargs("blake3", image=img)` against blake3 alone over the identical framed stream '
        '(built once with `b"".join(iter_item_to_bytes("image", img))`), and against the '
        'straightforward key (`naive.py`: `{"mode", "data": np.asarray(img)}` (+palette) '
        "framed per design.md). Every key was checked equal to blake3 over the stream and to the "
        f"naive key. Times are medians of {cfg.rounds} interleaved rounds, in CPU time (`time.process_time`); "
        "ratios are medians of "
        "per-round ratios to blake3 alone (± half the interquartile range). "
        "Peak = tracemalloc peak above the live memory before the call (Python allocations: "
        "bytes chunks and NumPy arrays)."
    )
    out()
    rows = []
    mem_rows = []
    for mode in ("RGB", "RGBA", "L", "P"):
        for label, width, height in cfg.pixel_sizes:
            image = noisy_image(mode, (width, height))
            stream = stream_of(image)
            expected = blake3(stream).hexdigest()
            keys = {mmobs_key(image), naive.naive_key(image=image)}
            if keys != {expected}:
                raise AssertionError(f"{mode} {label}: keys differ: {keys} vs {expected}")
            path = _pixel_path(image)

            def naive_key(image: Image.Image = image) -> str:
                return naive.naive_key(image=image)

            cases = {
                "blake3 alone": blake3_alone(stream),
                "mmobs": keyer(image),
                "mmobs + default instr.": keyer(image, default=True),
                "np.asarray (naive)": naive_key,
            }
            stats = harness.compare(cases, baseline="blake3 alone", rounds=cfg.rounds, clock=time.process_time)
            ratio = stats["mmobs"].ratio
            rows.append(
                [
                    mode,
                    label,
                    f"{len(stream) / MiB:.1f}",
                    path,
                    harness.fmt_time(stats["blake3 alone"].median),
                    harness.fmt_time(stats["mmobs"].median),
                    harness.fmt_ratio(ratio, stats["mmobs"].spread),
                    harness.fmt_ratio(stats["mmobs + default instr."].ratio),
                    harness.fmt_ratio(stats["np.asarray (naive)"].ratio),
                    harness.verdict(ratio <= TARGETS.get(mode, TARGETS["other"])),
                ]
            )
            peak = harness.peak_extra_bytes(keyer(image))
            mem_rows.append(
                [
                    mode,
                    label,
                    harness.fmt_bytes(len(stream)),
                    harness.fmt_bytes(peak),
                    harness.fmt_bytes(harness.peak_extra_bytes(naive_key)),
                    harness.verdict(peak <= MiB),
                ]
            )
            del image, stream
    out(
        harness.table(
            [
                "mode",
                "size",
                "stream MiB",
                "mmobs path",
                "blake3 alone",
                "mmobs",
                "mmobs / blake3",
                "+ default instr.",
                "np.asarray / blake3",
                f"target RGB <= {TARGETS['RGB']}x, others <= {TARGETS['other']}x",
            ],
            rows,
        )
    )
    out()
    out("Extra peak memory per key (tracemalloc):")
    out()
    out(harness.table(["mode", "size", "stream", "mmobs peak", "np.asarray peak", "target <= 1 MiB"], mem_rows))
    out()
    _chunk_sweep(cfg, out)


def _pixel_path(image: Image.Image) -> str:
    """Which way mmobs reads these pixels (private API: "?" if it changed)."""
    try:
        from mmobs.keys.pixels import _zero_copy_view

        return "zero-copy" if _zero_copy_view(image, np.asarray(image).nbytes) is not None else "streamed"
    except Exception:  # noqa: BLE001 - only a label
        return "?"


def with_chunk_bytes(size: int, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with ``mmobs.keys.pixels.STREAM_CHUNK_BYTES`` set to ``size`` (it is read per call)."""

    def run() -> object:
        previous = mmobs.keys.pixels.STREAM_CHUNK_BYTES
        mmobs.keys.pixels.STREAM_CHUNK_BYTES = size
        try:
            return fn()
        finally:
            mmobs.keys.pixels.STREAM_CHUNK_BYTES = previous

    return run


def pack_only(image: Image.Image) -> Callable[[], None]:
    """Pillow's raw encoder over the whole image, no hashing: what the repack costs alone."""

    def run() -> None:
        encoder = Image._getencoder(image.mode, "raw", image.mode)
        encoder.setimage(image.im, (0, 0, *image.size))
        try:
            while not encoder.encode(mmobs.keys.pixels.STREAM_CHUNK_BYTES)[1]:
                pass
        finally:
            encoder.cleanup()

    return run


def _chunk_sweep(cfg: Config, out: harness.Report) -> None:
    """Where the streamed (RGB, multi-block RGBA) path's time goes, by chunk size."""
    current = mmobs.keys.pixels.STREAM_CHUNK_BYTES
    sizes = sorted({96 * 1024, current, 512 * 1024})
    out(
        f"Streamed path by `STREAM_CHUNK_BYTES` (now {current // 1024} KiB, 96 KiB before), ratio to "
        "blake3 alone over the same stream, with the extra peak per key; `pack only` is Pillow's raw "
        "encoder without hashing (what the RGB repack costs by itself)."
    )
    out()
    rows = []
    for mode, (label, width, height) in (
        ("RGB", cfg.pixel_sizes[1]),
        ("RGB", cfg.pixel_sizes[2]),
        ("RGBA", cfg.pixel_sizes[2]),
    ):
        image = noisy_image(mode, (width, height))
        stream = stream_of(image)
        keys = {size: with_chunk_bytes(size, keyer(image)) for size in sizes}
        cases = {
            "blake3 alone": blake3_alone(stream),
            "pack only": pack_only(image),
            **{str(size): fn for size, fn in keys.items()},
        }
        stats = harness.compare(cases, baseline="blake3 alone", rounds=cfg.rounds, clock=time.process_time)
        rows.append(
            [
                mode,
                label,
                *(
                    f"{stats[str(size)].ratio:.2f}x / {harness.fmt_bytes(harness.peak_extra_bytes(fn))}"
                    for size, fn in keys.items()
                ),
                harness.fmt_ratio(stats["pack only"].ratio),
            ]
        )
        del image, stream
    out(harness.table(["mode", "size", *(f"{s // 1024} KiB" for s in sizes), "pack only"], rows))
    out()
