"""mmobs performance benchmarks: run by hand, not in CI.

    python benchmarks/run.py            # full run (about 5 minutes on 2 cores)
    python benchmarks/run.py --quick    # smoke run (a minute or two)
    python benchmarks/run.py --only pixels,bytes --output results.md

Sections (``--only`` takes any of them, comma-separated):

* ``pixels``: pixel-path keys of plain PIL images (1, 4, 12 MP; RGB, RGBA,
  L, P) against blake3 alone over the identical stream and against the
  straightforward ``np.asarray`` key, with tracemalloc peaks;
* ``bytes``: original-bytes keys (MediaWithBytes, 0.5 and 4 MB JPEGs);
* ``instrumentation``: the observability layer on vs off, the cost of one
  EXIF-fallback event, the drift tracker at its default sample rate;
* ``middleware``: MMObsMiddleware per request in-process at the ASGI level,
  and requests/s through uvicorn + wrk against a bare app and
  starlette_exporter;
* ``service``: ``POST /v1/hash`` images/s through ``mmobs serve`` with 1
  and 2 workers (and with Pillow's block cache off), and where a request's
  time goes.

Every comparison runs its competitors in the same rounds, interleaved in a
shuffled order, and reports medians and the median of per-round ratios (see
``_harness.py``). Servers bind 127.0.0.1 on free ports, every load run is
bounded, and every server is stopped at the end.

Needs: ``pip install -e '.[test]' starlette_exporter orjson`` and
``wrk`` (``apt-get install -y wrk``); sections whose extras are missing say so.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import contextlib
import io
import json
import math
import os
import pstats
import random
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from blake3 import blake3
from PIL import Image, ImageOps

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness as H  # noqa: E402
import _servers as S  # noqa: E402
import naive  # noqa: E402

import mmobs  # noqa: E402
import mmobs.pixels  # noqa: E402
from mmobs import DriftTracker, ImageMediaIO, MediaWithBytes, MultiModalHasher, observing  # noqa: E402
from mmobs.events import RecordingObserver, get_observer, set_observer  # noqa: E402
from mmobs.instrument import Instrumentation, set_hasher_info  # noqa: E402

SECTIONS = ("pixels", "bytes", "instrumentation", "middleware", "service")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Config:
    quick: bool
    rounds: int  # rounds of an in-process comparison
    http_rounds: int
    http_seconds: float
    service_rounds: int
    service_seconds: float
    profile_requests: int
    pixel_sizes: tuple[tuple[str, int, int], ...]


FULL = Config(
    quick=False,
    rounds=41,
    http_rounds=7,
    http_seconds=5.0,
    service_rounds=5,
    service_seconds=8.0,
    profile_requests=60,
    pixel_sizes=(("1 MP", 1024, 1024), ("4 MP", 2048, 2048), ("12 MP", 4000, 3000)),
)
QUICK = Config(
    quick=True,
    rounds=7,
    http_rounds=2,
    http_seconds=2.0,
    service_rounds=1,
    service_seconds=3.0,
    profile_requests=15,
    pixel_sizes=(("1 MP", 1024, 1024), ("4 MP", 2048, 2048), ("12 MP", 4000, 3000)),
)


# -- inputs ------------------------------------------------------------------------


def noisy_image(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """An image whose every byte is pseudo-random (its palette too), already loaded."""
    rng = np.random.default_rng(seed)
    width, height = size
    image = Image.frombytes(mode, size, rng.bytes(width * height * 4))
    if mode == "P":
        image.putpalette(rng.bytes(768))
    image.load()
    return image


def noisy_jpeg(target_bytes: int, seed: int = 0, quality: int = 90) -> bytes:
    """A noise JPEG within 3 % of ``target_bytes`` (noise defeats compression)."""
    rng = np.random.default_rng(seed)
    side = max(16, int(math.sqrt(target_bytes / 1.5)))
    data = b""
    for _ in range(12):
        image = Image.frombytes("RGB", (side, side), rng.bytes(side * side * 3))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        data = buffer.getvalue()
        if abs(len(data) - target_bytes) <= 0.03 * target_bytes:
            break
        side = max(16, int(side * math.sqrt(target_bytes / len(data))))
    return data


#: The TIFF header of the vLLM regression image (vLLM issue #56527).
BAD_TIFF_HEADER = b"XXXX\x00\x00\x00\x08"


def jpeg_with_bad_exif(size: tuple[int, int] = (64, 48)) -> bytes:
    """A small JPEG whose EXIF block has a broken TIFF header (the vLLM regression input)."""
    image = noisy_image("RGB", size, seed=3)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    base = buffer.getvalue()
    payload = b"Exif\x00\x00" + BAD_TIFF_HEADER
    segment = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return base[:2] + segment + base[2:]


def plain_jpeg(size: tuple[int, int] = (64, 48)) -> bytes:
    buffer = io.BytesIO()
    noisy_image("RGB", size, seed=3).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def mmobs_key(obj: Any) -> str:
    with observing(None):
        return MultiModalHasher.hash_kwargs("blake3", image=obj)


def keyer(obj: Any, observer: Any = None, *, default: bool = False) -> Callable[[], str]:
    """``hash_kwargs("blake3", image=obj)`` under ``observer`` (or the process default)."""
    if default:
        return lambda: MultiModalHasher.hash_kwargs("blake3", image=obj)

    def run() -> str:
        with observing(observer):
            return MultiModalHasher.hash_kwargs("blake3", image=obj)

    return run


def stream_of(obj: Any) -> bytes:
    with observing(None):
        return b"".join(MultiModalHasher.iter_item_to_bytes("image", obj))


def blake3_alone(stream: bytes) -> Callable[[], str]:
    return lambda: blake3(stream).hexdigest()


def private_instrumentation(**options: Any) -> Instrumentation:
    from prometheus_client import CollectorRegistry

    instr = Instrumentation(CollectorRegistry(), hasher_info=False, **options)
    set_hasher_info(instr.metrics)  # once, up front: not part of any timed call
    return instr


# -- section 1: pixels -------------------------------------------------------------


def section_pixels(cfg: Config, out: H.Report) -> None:
    out("## 1. Pixel-path keys (plain PIL images)")
    out()
    out("`hash_kwargs(\"blake3\", image=img)` against blake3 alone over the identical framed stream "
        "(built once with `b\"\".join(iter_item_to_bytes(\"image\", img))`), and against the "
        "straightforward key (`naive.py`: `{\"mode\", \"data\": np.asarray(img)}` (+palette) "
        "framed per design.md). Every key was checked equal to blake3 over the stream and to the "
        f"naive key. Times are medians of {cfg.rounds} interleaved rounds; ratios are medians of "
        "per-round ratios to blake3 alone (± half the interquartile range). "
        "Peak = tracemalloc peak above the live memory before the call (Python allocations: "
        "bytes chunks and NumPy arrays).")
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
            naive_key = lambda image=image: naive.naive_key(image=image)
            cases = {
                "blake3 alone": blake3_alone(stream),
                "mmobs": keyer(image),
                "mmobs + default instr.": keyer(image, default=True),
                "np.asarray (naive)": naive_key,
            }
            stats = H.compare(cases, baseline="blake3 alone", rounds=cfg.rounds)
            ratio = stats["mmobs"].ratio
            rows.append([
                mode, label, f"{len(stream) / MiB:.1f}", path,
                H.fmt_time(stats["blake3 alone"].median),
                H.fmt_time(stats["mmobs"].median),
                H.fmt_ratio(ratio, stats["mmobs"].spread),
                H.fmt_ratio(stats["mmobs + default instr."].ratio),
                H.fmt_ratio(stats["np.asarray (naive)"].ratio),
                (H.verdict(ratio <= 1.3) if mode == "RGB" else "-"),
            ])
            peak = H.peak_extra_bytes(keyer(image))
            mem_rows.append([
                mode, label, H.fmt_bytes(len(stream)), H.fmt_bytes(peak),
                H.fmt_bytes(H.peak_extra_bytes(naive_key)), H.verdict(peak <= MiB),
            ])
            del image, stream
    out(H.table(
        ["mode", "size", "stream MiB", "mmobs path", "blake3 alone", "mmobs", "mmobs / blake3",
         "+ default instr.", "np.asarray / blake3", "target RGB <= 1.3x"],
        rows,
    ))
    out()
    out("Extra peak memory per key (tracemalloc):")
    out()
    out(H.table(["mode", "size", "stream", "mmobs peak", "np.asarray peak", "target <= 1 MiB"],
                mem_rows))
    out()
    _chunk_sweep(cfg, out)


def _pixel_path(image: Image.Image) -> str:
    """Which way mmobs reads these pixels (private API: "?" if it changed)."""
    try:
        from mmobs.pixels import _zero_copy_view

        return "zero-copy" if _zero_copy_view(image, np.asarray(image).nbytes) is not None else "streamed"
    except Exception:  # noqa: BLE001 - only a label
        return "?"


def with_chunk_bytes(size: int, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with ``mmobs.pixels.STREAM_CHUNK_BYTES`` set to ``size`` (it is read per call)."""
    def run() -> object:
        previous = mmobs.pixels.STREAM_CHUNK_BYTES
        mmobs.pixels.STREAM_CHUNK_BYTES = size
        try:
            return fn()
        finally:
            mmobs.pixels.STREAM_CHUNK_BYTES = previous

    return run


def pack_only(image: Image.Image) -> Callable[[], None]:
    """Pillow's raw encoder over the whole image, no hashing: what the repack costs alone."""
    def run() -> None:
        encoder = Image._getencoder(image.mode, "raw", image.mode)
        encoder.setimage(image.im, (0, 0, *image.size))
        try:
            while not encoder.encode(mmobs.pixels.STREAM_CHUNK_BYTES)[1]:
                pass
        finally:
            encoder.cleanup()

    return run


def _chunk_sweep(cfg: Config, out: H.Report) -> None:
    """Where the streamed (RGB, multi-block RGBA) path's time goes, by chunk size."""
    current = mmobs.pixels.STREAM_CHUNK_BYTES
    sizes = sorted({96 * 1024, current, 512 * 1024})
    out(f"Streamed path by `STREAM_CHUNK_BYTES` (now {current // 1024} KiB, 96 KiB before), ratio to "
        "blake3 alone over the same stream, with the extra peak per key; `pack only` is Pillow's raw "
        "encoder without hashing (what the RGB repack costs by itself).")
    out()
    rows = []
    for mode, (label, width, height) in (("RGB", cfg.pixel_sizes[1]), ("RGB", cfg.pixel_sizes[2]),
                                         ("RGBA", cfg.pixel_sizes[2])):
        image = noisy_image(mode, (width, height))
        stream = stream_of(image)
        keys = {size: with_chunk_bytes(size, keyer(image)) for size in sizes}
        cases = {"blake3 alone": blake3_alone(stream), "pack only": pack_only(image),
                 **{str(size): fn for size, fn in keys.items()}}
        stats = H.compare(cases, baseline="blake3 alone", rounds=cfg.rounds)
        rows.append([mode, label,
                     *(f"{stats[str(size)].ratio:.2f}x / {H.fmt_bytes(H.peak_extra_bytes(fn))}"
                       for size, fn in keys.items()),
                     H.fmt_ratio(stats["pack only"].ratio)])
        del image, stream
    out(H.table(["mode", "size", *(f"{s // 1024} KiB" for s in sizes), "pack only"], rows))
    out()


# -- section 2: original bytes -----------------------------------------------------


def section_bytes(cfg: Config, out: H.Report) -> None:
    out("## 2. Original-bytes keys (MediaWithBytes)")
    out()
    out("Noise JPEGs loaded with `ImageMediaIO()` (RGB, so `io_config` is None); the key hashes "
        "the original bytes. `mmobs` runs under `observing(None)`; `+ default instr.` is the "
        "instrumentation `import mmobs` installs (its drift tracker samples ~5 % of contents, "
        "deterministically per content: the column says whether this JPEG is one of them).")
    out()
    rows = []
    tracker = DriftTracker()
    for label, target in (("0.5 MB", 512 * 1024), ("4 MB", 4 * MiB)):
        data = noisy_jpeg(target)
        media = ImageMediaIO().load_bytes(data)
        stream = stream_of(media)
        if mmobs_key(media) != blake3(stream).hexdigest():
            raise AssertionError("MediaWithBytes key differs from blake3 over its stream")
        stats = H.compare(
            {
                "blake3 alone": blake3_alone(stream),
                "mmobs": keyer(media),
                "mmobs + default instr.": keyer(media, default=True),
                "minimal path": _minimal_bytes_key(media, stream),
            },
            baseline="blake3 alone",
            rounds=cfg.rounds,
        )
        ratio = stats["mmobs"].ratio
        rows.append([
            label, f"{len(data) / MiB:.2f} MiB", f"{media.media.width}x{media.media.height}",
            H.fmt_time(stats["blake3 alone"].median), H.fmt_time(stats["mmobs"].median),
            H.fmt_ratio(ratio, stats["mmobs"].spread), H.fmt_us(stats["mmobs"].delta),
            H.fmt_ratio(stats["mmobs + default instr."].ratio),
            H.fmt_ratio(stats["minimal path"].ratio),
            "yes" if tracker.samples(media) else "no",
            H.verdict(ratio <= 1.05),
        ])
    out(H.table(["JPEG", "bytes", "pixels", "blake3 alone", "mmobs", "mmobs / blake3", "added us",
                 "+ default instr. / blake3", "minimal path / blake3", "drift-sampled",
                 "target <= 1.05x"], rows))
    out()
    out("`minimal path`: the least any Python implementation of this key does, hand-inlined as a "
        "reference (read the EXIF ImageID, two `update` calls, report `media_keyed` and `hashed` to "
        "the observer): what is left between it and blake3 alone is the price of the EXIF read "
        "and the GIL round trip, not of mmobs's structure.")
    out()


def _minimal_bytes_key(media: MediaWithBytes, stream: bytes) -> Callable[[], str]:
    from mmobs.events import MediaKeyed
    from mmobs.hashing import IMAGE_ID_TAG

    original = media.original_bytes
    header = stream[: len(stream) - len(original)]
    if stream[len(header):] != original:
        raise AssertionError("the stream does not end with the original bytes")

    def run() -> str:
        with observing(None):
            observer = get_observer()
            if media.media.getexif().get(IMAGE_ID_TAG) is not None:
                raise AssertionError("this input has an ImageID")
            digest = blake3()
            digest.update(header)
            digest.update(original)
            key = digest.hexdigest()
            observer.media_keyed(MediaKeyed("media_with_bytes", "original_bytes", media, None))
            observer.hashed("blake3", 0.0, len(stream))
            return key

    if run() != blake3(stream).hexdigest():
        raise AssertionError("minimal path key differs")
    return run


# -- section 3: instrumentation ----------------------------------------------------


def _content_variant(data: bytes, tracker: DriftTracker, sampled: bool) -> bytes:
    """``data`` plus trailing bytes (ignored by JPEG decoders) that the tracker does/doesn't sample."""
    for n in range(10_000):
        candidate = data + n.to_bytes(4, "little")
        if tracker.samples(MediaWithBytes(None, candidate)) == sampled:
            return candidate
    raise RuntimeError("no content variant found")


def section_instrumentation(cfg: Config, out: H.Report) -> None:
    out("## 3. Instrumentation overhead")
    out()
    # 3a: observability on vs off ------------------------------------------------------
    from mmobs.events import MediaKeyed

    instr = private_instrumentation()
    rows = []
    for label, obj in (
        ("1 MP RGB image (pixels, streamed)", noisy_image("RGB", (1024, 1024))),
        ("1 MP L image (pixels, zero-copy)", noisy_image("L", (1024, 1024))),
    ):
        event = MediaKeyed("image", "pixels", obj, None)

        def hooks(obj: Any = obj, event: MediaKeyed = event) -> None:
            # What the hasher calls on the observer for one plain-image key.
            instr.wants_item_digest("image", obj)
            instr.media_keyed(event)
            instr.hashed("blake3", 0.001, 3_000_000)

        stats = H.compare(
            {"off": keyer(obj, None), "on": keyer(obj, instr), "hooks alone": hooks},
            baseline="off", rounds=cfg.rounds * 3,
        )
        ratio = stats["on"].ratio
        implied = 1 + stats["hooks alone"].median / stats["off"].median
        rows.append([label, H.fmt_time(stats["off"].median), H.fmt_time(stats["on"].median),
                     H.fmt_ratio(ratio, stats["on"].spread), H.fmt_us(stats["on"].delta),
                     H.fmt_us(stats["hooks alone"].median), f"{implied:.4f}x",
                     H.verdict(implied <= 1.02 and ratio <= 1.02 + stats["on"].spread / 2)])
    out("### 3a. Observability layer subscribed vs not")
    out()
    out("`observing(Instrumentation(CollectorRegistry()))` (counters, histogram, default drift "
        "tracker; nothing is logged on this path) vs `observing(None)`, end to end; and the "
        "observer hooks one key calls (`wants_item_digest`, `media_keyed`, `hashed`) timed alone, "
        "which resolves what the end-to-end ratio cannot (its noise is larger than the cost). "
        "Verdict: the hooks' share within 2 % and the end-to-end ratio within 1.02x plus its noise.")
    out()
    out(H.table(["key", "off", "on", "on / off", "added us (end to end)", "hooks alone us",
                 "implied on / off", "target <= 1.02x"], rows))
    out()
    _fallback_cost(cfg, out)
    _drift_cost(cfg, out)


def _fallback_cost(cfg: Config, out: H.Report) -> None:
    out("### 3b. One EXIF-fallback event (counter + JSON log line to a file)")
    out()
    log_dir = tempfile.mkdtemp(prefix="mmobs-bench-log-")
    log_file = open(os.path.join(log_dir, "events.jsonl"), "w", encoding="utf-8")  # noqa: SIM115
    try:
        mmobs.configure_logging("json", stream=log_file)
        instr = private_instrumentation(drift=None)
        bad, good = jpeg_with_bad_exif(), plain_jpeg()
        loader = ImageMediaIO()
        # Check the input really takes the fallback (on a fresh object, as Pillow requires).
        recorder = RecordingObserver()
        with observing(recorder):
            MultiModalHasher.hash_kwargs("blake3", image=loader.load_bytes(bad))
            MultiModalHasher.hash_kwargs("blake3", image=loader.load_bytes(good))
        if len(recorder.fallbacks) != 1:
            raise AssertionError(f"expected exactly one fallback, got {len(recorder.fallbacks)}")
        event = recorder.fallbacks[0]
        instr.exif_fallback(event)  # binds the lazy logger

        def load_and_key(data: bytes, observer: Any, plain: bool) -> Callable[[], str]:
            def run() -> str:
                media = loader.load_bytes(data)
                with observing(observer):
                    return MultiModalHasher.hash_kwargs("blake3", image=media.media if plain else media)
            return run

        rows = []
        for kind, plain in (("MediaWithBytes", False), ("plain image", True)):
            stats = H.compare(
                {
                    "bad, off": load_and_key(bad, None, plain),
                    "bad, on": load_and_key(bad, instr, plain),
                    "good, off": load_and_key(good, None, plain),
                    "good, on": load_and_key(good, instr, plain),
                },
                baseline="bad, off",
                rounds=cfg.rounds * 2,
            )
            bad_delta = stats["bad, on"].delta
            good_delta = _paired_delta(stats["good, on"], stats["good, off"])
            share = bad_delta - good_delta
            rows.append([f"load + key a 64x48 JPEG ({kind})", H.fmt_us(stats["bad, off"].median),
                         H.fmt_us(stats["bad, on"].median), H.fmt_us(bad_delta),
                         H.fmt_us(good_delta), H.fmt_us(share), H.verdict(share <= 50e-6)])
        out("Measured two ways. (1) Load and key the vLLM regression JPEG (broken TIFF header; a "
            "fresh object per call, so the fallback really runs every time, checked), with the "
            "instrumentation vs `observing(None)`; the same for a JPEG without EXIF, so the "
            "fallback's own share is the difference of the two deltas. (2) `instr.exif_fallback"
            "(event)` called directly with the recorded event, split into its parts. Logging: "
            "`mmobs.configure_logging(\"json\", stream=open(file, \"w\"))`.")
        out()
        out(H.table(["(1) end to end", "off us", "on us", "added us", "added us without EXIF",
                     "fallback's share us", "target <= 50 us"], rows))
        out()
        counter = instr.metrics.fallback_child[(event.kind, "SyntaxError")]
        log = instr.log

        def log_line() -> None:
            log.warning("exif_fallback", kind=event.kind, exception="SyntaxError",
                        error="not a TIFF file", key_source=event.key_source, content_digest=None,
                        pillow="13", format="JPEG", mode="RGB", size=[64, 48])

        stats = H.compare(
            {
                "instr.exif_fallback(event)": lambda: instr.exif_fallback(event),
                "counter .inc() only": counter.inc,
                "log line only": log_line,
            },
            baseline="instr.exif_fallback(event)",
            rounds=cfg.rounds,
        )
        out(H.table(
            ["(2) direct call", "us per call", "vs exif_fallback", "target <= 50 us"],
            [[name, H.fmt_us(s.median), H.fmt_ratio(s.ratio),
              H.verdict(s.median <= 50e-6) if "exif_fallback" in name else "-"]
             for name, s in stats.items()],
        ))
        out()
        out("(1) runs in the middle of real work (decode, hashing), so caches are cold and it costs "
            "more than the tight loop of (2).")
        out()
        out(f"(`event.kind` = {event.kind}; the event for a MediaWithBytes also digests the original "
            "bytes for `content_digest`: 64x48 here, so that part is small; it grows with the file.)")
        out()
    finally:
        log_file.close()
        with contextlib.suppress(OSError):
            for name in os.listdir(log_dir):
                os.unlink(os.path.join(log_dir, name))
            os.rmdir(log_dir)
        import structlog

        structlog.reset_defaults()


def _paired_delta(a: H.Stats, b: H.Stats) -> float:
    """Median per-round difference between two competitors of one comparison."""
    return statistics.median(x - y for x, y in zip(a.samples, b.samples))


def _drift_cost(cfg: Config, out: H.Report) -> None:
    out("### 3c. Drift tracker at its default sample rate (MediaWithBytes keys)")
    out()
    tracker = DriftTracker()
    rate = tracker.sample_rate
    no_drift = private_instrumentation(drift=None)
    with_drift = private_instrumentation(drift=tracker)
    rows = []
    for label, target in (("0.5 MB", 512 * 1024), ("4 MB", 4 * MiB)):
        data = noisy_jpeg(target, seed=7)
        image = ImageMediaIO().load_bytes(data).media
        unsampled = MediaWithBytes(image, _content_variant(data, tracker, sampled=False))
        sampled = MediaWithBytes(image, _content_variant(data, tracker, sampled=True))
        stats = H.compare(
            {
                "drift=None": keyer(unsampled, no_drift),
                "unsampled": keyer(unsampled, with_drift),
                "drift=None, sampled content": keyer(sampled, no_drift),
                "sampled": keyer(sampled, with_drift),
                "probe alone": lambda media=unsampled: tracker.samples(media),
            },
            baseline="drift=None",
            rounds=cfg.rounds,
        )
        base = stats["drift=None"].median
        un = stats["unsampled"].delta
        sa = _paired_delta(stats["sampled"], stats["drift=None, sampled content"])
        expected = (1 - rate) * un + rate * sa
        rows.append([label, H.fmt_time(base), H.fmt_us(stats["probe alone"].median), H.fmt_us(un),
                     H.fmt_us(sa), f"{H.fmt_us(expected)} ({expected / base:+.1%})"])
    out(f"`Instrumentation(drift=DriftTracker())` vs `drift=None`, on a content the tracker skips "
        f"(it pays the probe: blake3 of the first and last 4 KiB and the length) and on one it samples "
        f"(the item's digest is teed off the key stream; keyed by its original bytes, that digest "
        f"identifies the content, so no second pass). Expected = (1 - {rate}) x unsampled + "
        f"{rate} x sampled. The unsampled cost is smaller than the noise of a whole key, hence the "
        "probe (`tracker.samples(media)`) timed alone.")
    out()
    out(H.table(["JPEG", "key (drift=None)", "probe alone us", "added us, unsampled",
                 "added us, sampled", f"expected at rate {rate}"], rows))
    out()


# -- section 4: middleware ---------------------------------------------------------


def _asgi_scope(path: str = "/ping") -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000),
    }


def _middleware_breakdown(cfg: Config, out: H.Report, apps: Any) -> None:
    """The per-request pieces of MMObsMiddleware, each timed alone (hot)."""
    import structlog
    from starlette.datastructures import MutableHeaders

    from mmobs.context import RequestStats, current_request
    from mmobs.middleware import MMObsMiddleware

    app = apps.bare()
    middleware = MMObsMiddleware(app)
    scope = {**_asgi_scope(), "app": app}
    middleware.resolve_route(scope)
    response_headers = [(b"content-length", b"4"), (b"content-type", b"text/plain; charset=utf-8")]
    stats_obj = RequestStats("0" * 32, "/ping")

    def mutable_headers() -> None:
        message = {"type": "http.response.start", "status": 200, "headers": response_headers}
        message["headers"] = list(message.get("headers", ()))
        headers = MutableHeaders(scope=message)
        if "x-request-id" not in headers:
            headers.append("x-request-id", "0" * 32)

    def raw_headers() -> None:
        message = {"type": "http.response.start", "status": 200, "headers": response_headers}
        raw = list(message.get("headers", ()))
        if not any(name.lower() == b"x-request-id" for name, _ in raw):
            raw.append((b"x-request-id", b"0" * 32))
        message["headers"] = raw

    def contexts() -> None:
        token = current_request.set(RequestStats("0" * 32, "/ping"))
        log_tokens = structlog.contextvars.bind_contextvars(request_id="0" * 32, route="/ping")
        structlog.contextvars.reset_contextvars(**log_tokens)
        current_request.reset(token)

    cases = {
        "request id (fresh: os.urandom(16).hex())": lambda: middleware._request_id(scope),
        "route template (cached)": lambda: middleware.resolve_route(scope),
        "RequestStats + contextvars + structlog bind/reset": contexts,
        "response header via MutableHeaders": mutable_headers,
        "_record (counter and histogram children cached)":
            lambda: middleware._record("/ping", "GET", 200, 0.001, stats_obj),
        "(not in mmobs) response header on the raw list": raw_headers,
    }
    stats = H.compare(cases, baseline="route template (cached)", rounds=cfg.rounds)
    out("Where MMObsMiddleware's per-request time goes: its pieces timed alone, hot (so they add up "
        "to less than the added time above, which also pays for the wrapped `send` and a colder "
        "cache):")
    out()
    out(H.table(["piece", "us"], [[name, H.fmt_us(s.median)] for name, s in stats.items()]))
    out()


def section_middleware(cfg: Config, out: H.Report) -> None:
    import apps

    out("## 4. Middleware overhead")
    out()
    have_exporter = True
    try:
        import starlette_exporter  # noqa: F401
    except ImportError:
        have_exporter = False
    factories = {k: v for k, v in apps.FACTORIES.items() if have_exporter or k != "starlette_exporter"}
    # 4a: in-process ------------------------------------------------------------------
    batch = 200
    scope = _asgi_scope()
    loop = asyncio.new_event_loop()
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def requests(app: Any, n: int) -> None:
        for _ in range(n):
            await app(dict(scope), receive, send)

    built = {name: factory() for name, factory in factories.items()}
    for app in built.values():
        loop.run_until_complete(requests(app, 5))
    if set(statuses) != {200}:
        raise AssertionError(f"unexpected statuses {set(statuses)}")
    stats = H.compare(
        {name: (lambda app=app: loop.run_until_complete(requests(app, batch))) for name, app in built.items()},
        baseline="bare",
        rounds=cfg.rounds,
    )
    loop.close()
    rows = []
    for name, s in stats.items():
        added = s.delta / batch
        target = H.verdict(added <= 15e-6) if name == "mmobs" else "-"
        rows.append([name, H.fmt_us(s.median / batch), H.fmt_us(added) if name != "bare" else "-",
                     H.fmt_ratio(s.ratio), target])
    out("### 4a. In-process, at the ASGI level")
    out()
    out(f"The app called directly (`await app(scope, receive, send)`, a minimal GET scope, {batch} "
        "requests per sample, one event loop), Starlette with one `GET /ping` route (`apps.py`), bare "
        "vs wrapped. Added = median per-round difference to the bare app.")
    out()
    out(H.table(["app", "us per request", "added us", "vs bare", "target mmobs <= 15 us"], rows))
    out()
    _middleware_breakdown(cfg, out, apps)
    # 4b: over HTTP -------------------------------------------------------------------
    out("### 4b. Requests/s through uvicorn on loopback (wrk)")
    out()
    if S.shutil.which("wrk") is None:
        out("wrk is not installed (`apt-get install -y wrk`): skipped.")
        out()
        return
    connections = 16
    specs = [(name, S.uvicorn_argv(f"apps:{factory.__name__}", app_dir=str(HERE)), "/ping")
             for name, factory in factories.items()]
    results: dict[str, list[S.WrkResult]] = {spec[0]: [] for spec in specs}
    rng = random.Random(4)
    with S.servers(specs) as running:
        for server in running.values():  # warm-up
            S.wrk(server.url + "/ping", duration=1, connections=connections)
        for _ in range(cfg.http_rounds):
            order = list(running)
            rng.shuffle(order)
            for name in order:
                results[name].append(S.wrk(running[name].url + "/ping", duration=cfg.http_seconds,
                                           connections=connections))
    rows = []
    bare = results["bare"]
    for name, runs in results.items():
        ratios = [r.requests_per_second / b.requests_per_second for r, b in zip(runs, bare)]
        ratio = statistics.median(ratios)
        bad = sum(r.non_2xx + r.errors for r in runs)
        if name == "mmobs":
            target = H.verdict(ratio >= 0.95)
        elif name == "starlette_exporter" and "mmobs" in results:
            mm = statistics.median(
                m.requests_per_second / e.requests_per_second for m, e in zip(results["mmobs"], runs)
            )
            target = f"mmobs / exporter = {mm:.2f}x ({'mmobs cheaper' if mm > 1 else 'MISSED'})"
        else:
            target = "-"
        rows.append([
            name, f"{statistics.median(r.requests_per_second for r in runs):,.0f}",
            f"{ratio:.3f}x", H.fmt_time(statistics.median(r.latency_p50 for r in runs)),
            H.fmt_time(statistics.median(r.latency_p99 for r in runs)), str(bad), target,
        ])
    out(f"One uvicorn process per app (1 worker, asyncio loop, h11 unless httptools is installed, "
        f"access log off), all on 127.0.0.1; `wrk -t1 -c{connections} -d{cfg.http_seconds:g}s` "
        f"against `GET /ping`, {cfg.http_rounds} rounds with the apps in a shuffled order each round. "
        "Ratios are medians of per-round ratios to the bare app. On 2 cores the server and wrk share "
        "the machine, so the absolute numbers are low; the ratios are the result.")
    out()
    out(H.table(["app", "requests/s", "vs bare", "p50 latency", "p99 latency", "errors/non-2xx",
                 "target"], rows))
    out()


# -- section 5: the reference service ----------------------------------------------


def _service_body(data: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
    return json.dumps({"images": [url]}).encode()


def section_service(cfg: Config, out: H.Report) -> None:
    out("## 5. Reference service: `POST /v1/hash`")
    out()
    data = noisy_jpeg(512 * 1024, seed=11)
    body = _service_body(data)
    expected = mmobs_key(ImageMediaIO().load_bytes(data))
    width, height = Image.open(io.BytesIO(data)).size
    out(f"One 0.5 MB noise JPEG ({len(data) / MiB:.2f} MiB, {width}x{height}) as a base64 data URL in "
        f"`{{\"images\": [url]}}` ({len(body) / MiB:.2f} MiB of JSON).")
    out()
    _service_throughput(cfg, out, body, expected)
    _service_profile(cfg, out, body, data)


def _service_throughput(cfg: Config, out: H.Report, body: bytes, expected: str) -> None:
    out("### 5a. Throughput through `mmobs serve`")
    out()
    if S.shutil.which("wrk") is None:
        out("wrk is not installed (`apt-get install -y wrk`): skipped.")
        out()
        return
    connections = 4
    cli = [sys.executable, "-m", "mmobs.cli", "serve", "--host", S.HOST, "--port", "{port}"]
    specs = [("--workers 1", [*cli, "--workers", "1"], "/healthz", {}),
             ("--workers 2", [*cli, "--workers", "2"], "/healthz", {}),
             ("--workers 1, block cache off", [*cli, "--workers", "1"], "/healthz",
              {"PILLOW_BLOCKS_MAX": "0"})]
    with tempfile.TemporaryDirectory(prefix="mmobs-bench-svc-") as tmp:
        body_path = os.path.join(tmp, "body.json")
        Path(body_path).write_bytes(body)
        script = S.post_script(body_path, tmp)
        with S.servers(specs) as running:
            for server in running.values():
                _check_service(server, body, expected)
                S.wrk(server.url + "/v1/hash", duration=1, connections=connections, script=script)
            runs = _service_rounds(cfg, running, script, connections)
    one = runs["--workers 1"]
    rows = []
    for name, samples in runs.items():
        rows.append([
            name, f"{statistics.median(r.requests_per_second for r, _, _ in samples):.1f}",
            f"{statistics.median(r.requests_per_second / b.requests_per_second for (r, _, _), (b, _, _) in zip(samples, one)):.2f}x",
            H.fmt_time(statistics.median(r.latency_p50 for r, _, _ in samples)),
            H.fmt_time(statistics.median(r.latency_p99 for r, _, _ in samples)),
            f"{statistics.median(c for _, c, _ in samples):.2f}",
            H.fmt_time(statistics.median(c / r.requests_per_second for r, c, _ in samples)),
            ", ".join(str(b) for _, _, b in samples),
            str(sum(r.non_2xx + r.errors for r, _, _ in samples)),
        ])
    out(f"`mmobs serve --workers N` on 127.0.0.1; `wrk -t1 -c{connections} -d{round(cfg.service_seconds)}s "
        f"-s post.lua`, {cfg.service_rounds} interleaved rounds; one image per request, so images/s = "
        "requests/s. Each server's answer was checked against the in-process key first. `mmobs serve` "
        "turns Pillow's block cache on (`set_blocks_max(8)`) unless `PILLOW_BLOCKS_MAX` is set; "
        "`block cache off` sets it to 0, as before that change.")
    out()
    out(H.table(["server", "images/s", "vs 1 worker", "p50 latency", "p99 latency",
                 "server CPU (cores)", "CPU per image", "processes working, per round",
                 "errors/non-2xx"], rows))
    out()
    out("`server CPU`: CPU seconds all the server's processes used per second of load (psutil, "
        "median over rounds); `CPU per image`: that divided by images/s; `processes working`: how "
        "many of them used more than 0.1 core, in each round. wrk opens its connections at once and "
        "keeps them alive; uvicorn's workers share one listening socket and the first to wake "
        "usually accepts them all, so most rounds one worker serves everything while the other idles.")
    out()


def _check_service(server: S.Server, body: bytes, expected: str) -> None:
    request = urllib.request.Request(server.url + "/v1/hash", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    if answer["items"][0]["mm_hash"] != expected:
        raise AssertionError(f"{server.name}: the service's key differs from mmobs's")


def _service_rounds(cfg: Config, running: dict[str, S.Server], script: str,
                    connections: int) -> dict[str, list[tuple[S.WrkResult, float, int]]]:
    """Per server and round: the wrk result, the cores it used, how many processes worked."""
    runs: dict[str, list[tuple[S.WrkResult, float, int]]] = {name: [] for name in running}
    rng = random.Random(5)
    for _ in range(cfg.service_rounds):
        order = list(running)
        rng.shuffle(order)
        for name in order:
            before = S.cpu_seconds(running[name])
            started = time.monotonic()
            result = S.wrk(running[name].url + "/v1/hash", script=script,
                           duration=cfg.service_seconds, connections=connections)
            after = S.cpu_seconds(running[name])
            elapsed = time.monotonic() - started
            per_process = [(after[pid] - before.get(pid, 0.0)) / elapsed for pid in after]
            runs[name].append((result, sum(per_process), sum(1 for c in per_process if c > 0.1)))
    return runs


_CATEGORIES = (
    ("JSON (parse request, render response)", ("json/", "_json", "orjson", "(render")),
    ("base64", ("base64", "a2b_base64", "binascii", "(_decode_base64", "(parse_data_url")),
    ("JPEG decode (Image.open + load)", ("pil/imagefile.py", "jpegimageplugin", "'imagingdecoder'",
                                         "pil/image.py(open", "image_io.py(_decode", "image_io.py(_open")),
    ("EXIF transpose (a full pixel copy)", ("imageops.py", "'imagingcore' objects>", "pil/image.py(copy",
                                            "(safe_exif_transpose", "(normalize_image")),
    ("hashing (blake3, framing; incl. drift probe)", ("blake3", "mmobs/hashing", "mmobs/pixels",
                                                      "mmobs/drift", "getexif", "tiffimageplugin")),
    ("metrics and events", ("prometheus_client", "mmobs/instrument", "mmobs/metrics", "mmobs/events",
                            "mmobs/context")),
    ("logging (structlog)", ("structlog",)),
    ("request body, routing, middleware, ASGI", ("starlette", "anyio", "asyncio", "mmobs/middleware",
                                                  "mmobs/service", "mmobs/routing", "mmobs/media",
                                                  "mmobs/image_io", "run.py", "bytes.join")),
)


def _categorize(stats: pstats.Stats) -> dict[str, float]:
    totals: dict[str, float] = {name: 0.0 for name, _ in _CATEGORIES}
    totals["other"] = 0.0
    for (filename, _line, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}({func}".lower().replace("\\", "/")
        for name, needles in _CATEGORIES:
            if any(n in where for n in needles):
                totals[name] += tottime
                break
        else:
            totals["other"] += tottime
    return totals


def _short(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line}({func})"


@contextlib.contextmanager
def _inline_service(body: bytes) -> Any:
    """One ``POST /v1/hash`` through ``create_app()`` in-process, its decoding run inline (no decode workers)."""
    from mmobs.decode_pool import InlineDecoder
    from mmobs.service import ServiceConfig, create_app

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise AssertionError(f"unexpected status {message['status']}")

    app = create_app(ServiceConfig(decode_workers=0))
    app.state.service.decoder = InlineDecoder(threaded=False)  # so one profiler sees it all
    scope = {**_asgi_scope("/v1/hash"), "method": "POST",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    loop = asyncio.new_event_loop()
    try:
        yield lambda: loop.run_until_complete(app(dict(scope), receive, send))
    finally:
        loop.close()


def _service_profile(cfg: Config, out: H.Report, body: bytes, data: bytes) -> None:
    out("### 5b. Where a request's time goes (in-process)")
    out()
    with _inline_service(body) as request:
        for _ in range(3):
            request()
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for _ in range(cfg.profile_requests):
            request()
        profiler.disable()
        profiled = (time.perf_counter() - started) / cfg.profile_requests
        wall = H.compare({"request": request}, baseline="request", rounds=cfg.rounds)["request"].median
    profile_stats = pstats.Stats(profiler)
    totals = _categorize(profile_stats)
    top = sorted(profile_stats.stats.items(), key=lambda kv: -kv[1][2])[:10]  # type: ignore[attr-defined]
    total = sum(totals.values())
    rows = [[name, f"{seconds / cfg.profile_requests * 1e3:.2f}", f"{seconds / total:.0%}"]
            for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])]
    out(f"cProfile over {cfg.profile_requests} requests through the ASGI app (`create_app()`, "
        "middleware included; the hashing thread run inline so one profiler sees it all), "
        "own time grouped by what the code does. cProfile slows Python-heavy code more than C "
        f"calls: {profiled * 1e3:.1f} ms a request profiled vs {wall * 1e3:.1f} ms unprofiled "
        "(median), so read the split, and the stage timings below, not the totals.")
    out()
    out(H.table(["where", "ms per request (profiled)", "share"], rows))
    out()
    out("The ten functions with the most own time:")
    out()
    out(H.table(["function", "calls per request", "ms per request (profiled)"], [
        [f"`{_short(key)}`", f"{value[1] / cfg.profile_requests:g}",
         f"{value[2] / cfg.profile_requests * 1e3:.2f}"]
        for key, value in top
    ]))
    out()
    _stage_timings(cfg, out, body, data, wall)


def _stage_timings(cfg: Config, out: H.Report, body: bytes, data: bytes, request_time: float) -> None:
    from mmobs.image_io import _decode_base64, b64decode

    payload = json.loads(body)["images"][0].split(",", 1)[1]
    loaded = Image.open(io.BytesIO(data))
    loaded.load()
    media = ImageMediaIO().load_bytes(data)
    cases: dict[str, Callable[[], object]] = {
        "json.loads(body)": lambda: json.loads(body),
        f"base64 (mmobs: {b64decode.__module__.split('.')[0]}, validate=True)": lambda: _decode_base64(payload, 64 * MiB),
        "JPEG decode (Image.open + load)": lambda: Image.open(io.BytesIO(data)).load(),
        "ImageOps.exif_transpose copy (no orientation)": lambda: ImageOps.exif_transpose(loaded),
        "ImageMediaIO().load_bytes (all of the above but JSON/base64)": lambda: ImageMediaIO().load_bytes(data),
        "key: hash_kwargs (instrumented)": keyer(media, private_instrumentation()),
        "(without the serve extra) stdlib base64.b64decode": lambda: base64.b64decode(payload, validate=True),
    }
    with contextlib.suppress(ImportError):
        import orjson

        cases["(not adopted) orjson.loads(body)"] = lambda: orjson.loads(body)
    stats = H.compare(cases, baseline="json.loads(body)", rounds=cfg.rounds)
    out(f"Stages timed side by side (not profiled), as a share of one whole request in-process "
        f"({H.fmt_time(request_time)}); the last rows are what mmobs does not use:")
    out()
    out(H.table(["stage", "time", "share of a request"],
                [[name, H.fmt_time(st.median), f"{st.median / request_time:.1%}"] for name, st in stats.items()]))
    out()


# -- main --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (a minute or two)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections to run (default: all of {', '.join(SECTIONS)})")
    parser.add_argument("--output", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}")
    cfg = QUICK if args.quick else FULL
    out = H.Report()
    started = time.monotonic()
    out(f"# mmobs benchmarks ({'quick' if cfg.quick else 'full'} run, {H.now()})")
    out()
    out(H.table(["", ""], [[k, f"`{v}`" if k == "command" else v]
                           for k, v in H.machine_lines(sys.argv if argv is None else ["benchmarks/run.py", *argv])]))
    out()
    default_observer = get_observer()
    runners = {
        "pixels": section_pixels,
        "bytes": section_bytes,
        "instrumentation": section_instrumentation,
        "middleware": section_middleware,
        "service": section_service,
    }
    for name in SECTIONS:
        if name in chosen:
            section_started = time.monotonic()
            runners[name](cfg, out)
            set_observer(default_observer)  # a section must not leak an observer into the next
            print(f"[{name}: {time.monotonic() - section_started:.0f} s]", file=sys.stderr, flush=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out(f"Finished in {time.monotonic() - started:.0f} s; load average at the end: {load}.")
    if args.output:
        Path(args.output).write_text(out.text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
