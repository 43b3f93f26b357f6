"""Section ``bytes``: original-bytes keys of ``MediaWithBytes`` (0.5 and 4 MB JPEGs)."""

from __future__ import annotations

from collections.abc import Callable

from _common import Config, MiB, blake3_alone, keyer, mmobs_key, noisy_jpeg, stream_of
from blake3 import blake3

import _harness as harness
from mmobs import DriftTracker, ImageMediaIO, MediaWithBytes, observing
from mmobs.events import get_observer


def run(cfg: Config, out: harness.Report) -> None:
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
        stats = harness.compare(
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
            harness.fmt_time(stats["blake3 alone"].median), harness.fmt_time(stats["mmobs"].median),
            harness.fmt_ratio(ratio, stats["mmobs"].spread), harness.fmt_us(stats["mmobs"].delta),
            harness.fmt_ratio(stats["mmobs + default instr."].ratio),
            harness.fmt_ratio(stats["minimal path"].ratio),
            "yes" if tracker.samples(media) else "no",
            harness.verdict(ratio <= 1.05),
        ])
    out(harness.table(["JPEG", "bytes", "pixels", "blake3 alone", "mmobs", "mmobs / blake3", "added us",
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


