"""Section ``bytes``: original-bytes keys of ``MediaWithBytes`` (0.5 and 4 MB JPEGs)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import _harness as harness
from _common import Config, MiB, blake3_alone, keyer, noisy_jpeg, stream_of
from blake3 import blake3

from mmobs import ImageMediaIO, MediaWithBytes


def run(cfg: Config, out: harness.Report) -> None:
    out("## 2. Original-bytes keys (MediaWithBytes)")
    out()
    out(
        "Noise JPEGs loaded with `ImageMediaIO()` (RGB, so `io_config` is None): the key is blake3 over a "
        "36-byte framing header, then the original bytes. Competitors, in CPU time "
        f"(`time.process_time`), {cfg.rounds * 3} interleaved rounds, every key checked equal:"
    )
    out()
    out("* `blake3 alone`: one call over the whole stream, already joined (a copy no real key has);")
    out(
        "* `minimal path`: `update(header)`, then `update(original_bytes)`: what a straightforward framed key "
        "(vLLM's included) feeds, with nothing else;"
    )
    out(
        "* `aligned split`: `update(header + the first 16 KiB - 36 bytes)`, then the rest (a memoryview): "
        "the same stream, split where blake3 keeps its full SIMD width (see below); what mmobs feeds;"
    )
    out('* `mmobs, reporting off`: `hash_kwargs("blake3", image=media)` after `mmobs.set_observer(None)`;')
    out(
        "* `mmobs + default instr.`: the same with the instrumentation `import mmobs` installs (counters, "
        "histogram, the drift tracker's sampling probe; the column says whether this JPEG is one of the "
        "~5 % of contents it samples, which costs a second digest of the item)."
    )
    out()
    from mmobs.events import get_observer, set_observer
    from mmobs.observability.instrument import default_instrumentation

    default = default_instrumentation()
    rows = []
    for label, target in (("0.5 MB", 512 * 1024), ("4 MB", 4 * MiB)):
        data = noisy_jpeg(target)
        media = ImageMediaIO().load_bytes(data)
        stream = stream_of(media)
        expected = blake3(stream).hexdigest()
        cases = {
            "blake3 alone": blake3_alone(stream),
            "minimal path": _minimal_path(media, stream),
            "aligned split": _aligned_split(media, stream),
            "mmobs, reporting off": keyer(media, default=True),
            "mmobs + default instr.": keyer(media, default=True),
        }
        previous = get_observer()
        set_observer(None)
        if {fn() for fn in cases.values()} != {expected}:
            raise AssertionError("the MediaWithBytes keys differ from blake3 over the stream")
        setups = {name: (lambda: set_observer(None)) for name in cases}
        setups["mmobs + default instr."] = lambda: set_observer(default)
        try:
            stats = harness.compare(
                cases, baseline="blake3 alone", rounds=cfg.rounds * 3, setups=setups, clock=time.process_time
            )
        finally:
            set_observer(previous)
        minimal = stats["minimal path"].samples

        def vs_minimal(name: str, stats: dict[str, harness.Stats] = stats, minimal: list[float] = minimal) -> str:
            return harness.fmt_ratio(statistics.median(a / b for a, b in zip(stats[name].samples, minimal)))

        off, instrumented = stats["mmobs, reporting off"].ratio, stats["mmobs + default instr."].ratio
        rows.append(
            [
                label,
                f"{len(data) / MiB:.2f} MiB",
                harness.fmt_time(stats["blake3 alone"].median),
                harness.fmt_ratio(stats["minimal path"].ratio),
                harness.fmt_ratio(stats["aligned split"].ratio),
                harness.fmt_ratio(off, stats["mmobs, reporting off"].spread),
                vs_minimal("mmobs, reporting off"),
                harness.fmt_us(stats["mmobs, reporting off"].delta),
                harness.fmt_ratio(instrumented, stats["mmobs + default instr."].spread),
                vs_minimal("mmobs + default instr."),
                "yes" if default.drift is not None and default.drift.samples(media) else "no",
                f"{harness.verdict(off <= 1.05)} / {harness.verdict(instrumented <= 1.10)}",
            ]
        )
    out(
        harness.table(
            [
                "JPEG",
                "bytes",
                "blake3 alone",
                "minimal path / blake3",
                "aligned split / blake3",
                "mmobs off / blake3",
                "mmobs off / minimal",
                "mmobs off, added us",
                "+ default instr. / blake3",
                "+ default instr. / minimal",
                "drift-sampled",
                "target <= 1.05x off / <= 1.10x instr.",
            ],
            rows,
        )
    )
    out()
    out(
        "Ratios are medians of per-round ratios (± half the interquartile range). Why `minimal path` costs more "
        "than `blake3 alone`: blake3 hashes 16 chunks of 1 KiB at once, but only over subtrees that start where "
        "the stream position is a multiple of their size. Fed after a 36-byte header, the large update starts "
        "one chunk in, so its first 15 KiB go 1, 2, 4, 8 chunks at a time: a fixed ~7 us, whatever the size. "
        "Joining the header with just enough of the data to reach 16 KiB (`aligned split`, a 16 KiB copy) "
        "puts the rest on the grid."
    )
    out()


def _minimal_path(media: MediaWithBytes, stream: bytes) -> Callable[[], str]:
    original = media.original_bytes
    header = stream[: len(stream) - len(original)]
    if stream[len(header) :] != original:
        raise AssertionError("the stream does not end with the original bytes")

    def run() -> str:
        digest = blake3()
        digest.update(header)
        digest.update(original)
        return digest.hexdigest()

    return run


def _aligned_split(media: MediaWithBytes, stream: bytes) -> Callable[[], str]:
    original = media.original_bytes
    header = stream[: len(stream) - len(original)]
    view = memoryview(original)
    cut = 16 * 1024 - len(header)

    def run() -> str:
        digest = blake3()
        digest.update(header + view[:cut])
        digest.update(view[cut:])
        return digest.hexdigest()

    return run
