"""The no-decode key path: images/s against the decode path and blake3 alone.

    python benchmarks/key_path.py                 # full run (a few minutes on 2 cores)
    python benchmarks/key_path.py --quick         # smoke run
    python benchmarks/key_path.py --output key_path.md

For JPEGs and PNGs of about 0.3, 2 and 8 MB (photo-like content, made here
from a fixed seed; Pillow writes 64 KiB IDAT chunks, so the 8 MB PNG is also
keyed with the 8 KiB chunks libpng writes, ``PNG-8K``), three ways to get a
key for the same bytes:

* ``blake3``: ``blake3(data).hexdigest()``, the floor: no framing, no header;
* ``no-decode``: ``mmobs.key_for_bytes(data)``, the header and the framed bytes;
* ``decode``: ``hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))``,
  vLLM's path: open, decode, transpose, convert, then the same framed bytes.

In process, all three run in the same shuffled rounds (``_harness.compare``),
timed in this process's CPU time (``time.process_time``: a neighbour's load
preempts wall time far more than it slows the work; every competitor here is
single-threaded): medians, and the median of per-round ratios. Through the service, one real
``mmobs serve`` on loopback answers ``POST /v1/keys`` and ``POST /v1/hash``
with a raw ``image/*`` body over one keep-alive connection per server; a
bare Starlette endpoint that only reads the same body (:func:`body_sink`,
under the same uvicorn) is measured in the same shuffled rounds, as the
floor any endpoint pays to receive those bytes. The default instrumentation
is on (what a router runs). Every key is checked equal across paths first.
A standalone script: ``benchmarks/run.py`` can call :func:`main`.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from blake3 import blake3
from PIL import Image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import _harness as H  # noqa: E402
import _servers as S  # noqa: E402

from mmobs import ImageMediaIO, MultiModalHasher, key_for_bytes  # noqa: E402
from mmobs.keys.guard import DEFAULT_DECODE_LIMITS, check_image_bytes  # noqa: E402
from mmobs.keys.identify import identification_order  # noqa: E402
from mmobs.keys.loader import DEFAULT_MAX_PIXELS  # noqa: E402
from scripts.corpus.costly import png_rechunked  # noqa: E402

SIZES_MB = (0.3, 2.0, 8.0)
FORMATS = ("JPEG", "PNG")
#: The target: no-decode / blake3 alone, 2 MB JPEG and 8 MB PNG, in process.
IN_PROCESS_TARGET = 1.15
#: The target: the loader path's structural checks, as a share of the decode.
CHECKS_SHARE_TARGET = 0.02
TARGET_INPUTS = (("JPEG", 2.0), ("PNG", 8.0), ("PNG-8K", 8.0))
SERVICE_TARGET = 50.0  # /v1/keys over /v1/hash images/s, 0.3 MB JPEG


# -- inputs --------------------------------------------------------------------------


def photo(width: int, height: int, seed: int) -> Image.Image:
    """Photo-like pixels: smooth shapes (a bicubic-upscaled coarse field) plus sensor noise."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (max(2, height // 48), max(2, width // 48), 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    noise = rng.normal(0, 6, (height, width, 3)).astype(np.int16)
    return Image.fromarray(np.clip(smooth + noise, 0, 255).astype(np.uint8))


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


#: JPEG dimensions per size: a 1600x1200 photo for 0.3 MB, a 12 MP phone photo, a 27 MP camera.
JPEG_SIZES = {0.3: (1600, 1200), 2.0: (4032, 3024), 8.0: (6000, 4500)}


def jpeg_of(megabytes: float, seed: int) -> bytes:
    """A JPEG of :data:`JPEG_SIZES` whose quality is searched so it weighs about ``megabytes``."""
    width, height = JPEG_SIZES[megabytes]
    image, target = photo(width, height, seed), int(megabytes * 1_000_000)
    low, high, best = 30, 98, b""
    while low <= high:  # the size grows with the quality
        quality = (low + high) // 2
        data = encode(image, "JPEG", quality=quality)
        if not best or abs(len(data) - target) < abs(len(best) - target):
            best = data
        low, high = (quality + 1, high) if len(data) < target else (low, quality - 1)
    return best


def png_of(megabytes: float, seed: int) -> bytes:
    """A 4:3 RGB PNG whose size is within 10 % of ``megabytes``."""
    target, width = int(megabytes * 1_000_000), 640
    for _ in range(12):
        data = encode(photo(width, width * 3 // 4, seed), "PNG")
        if abs(len(data) - target) <= target // 10:
            return data
        width = max(16, int(width * (target / len(data)) ** 0.5))
    return data


def inputs(quick: bool) -> dict[tuple[str, float], bytes]:
    """The inputs, each the first (by seed) that the drift tracker does not sample.

    The tracker samples 1 image in 20 (by content), and every key of a sampled
    image, on either path, pays one more digest pass over its bytes: that cost
    is the drift tracker's, measured in its own section of ``benchmarks/run.py``.
    """
    from mmobs import default_instrumentation
    from mmobs.keys.writer import EncodedImage

    tracker = default_instrumentation().drift
    sizes = SIZES_MB[:2] if quick else SIZES_MB
    made = {}
    for fmt in FORMATS:
        for megabytes in sizes:
            make = jpeg_of if fmt == "JPEG" else png_of
            seed = int(megabytes * 10)
            data = make(megabytes, seed)
            while tracker is not None and (
                tracker.samples(EncodedImage(data))
                or ((fmt, megabytes) == ("PNG", 8.0) and tracker.samples(EncodedImage(png_rechunked(data))))
            ):
                seed += 1
                data = make(megabytes, seed)
            made[(fmt, megabytes)] = data
    if ("PNG", 8.0) in made:
        made[("PNG-8K", 8.0)] = png_rechunked(made[("PNG", 8.0)])
    seed = 20
    while True:  # a progressive JPEG: its scans are searched for their markers (the one costly JPEG walk left)
        data = encode(photo(*JPEG_SIZES[2.0], seed), "JPEG", quality=85, progressive=True)
        if tracker is None or not tracker.samples(EncodedImage(data)):
            break
        seed += 1
    made[("JPEG-prog", 2.0)] = data
    return made


def describe(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as image:
        chunks = f", {data.count(b'IDAT')} IDAT chunks" if image.format == "PNG" else ""
        kind = " progressive" if image.info.get("progressive") else ""
        return f"{image.format}{kind} {image.width}x{image.height}, {len(data) / 1e6:.2f} MB{chunks}"


def target(fmt: str, megabytes: float, ratio: float) -> str:
    """The in-process verdict of an input that has a target, ``-`` for the others."""
    return H.verdict(ratio <= IN_PROCESS_TARGET) if (fmt, megabytes) in TARGET_INPUTS else "-"


# -- in process ----------------------------------------------------------------------


def decode_key(data: bytes) -> str:
    return MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))


def in_process(report: H.Report, made: dict[tuple[str, float], bytes], rounds: int) -> dict[tuple[str, float], dict]:
    rows, results = [], {}
    for (fmt, megabytes), data in made.items():
        assert key_for_bytes(data) == decode_key(data), (fmt, megabytes)
        cases: dict[str, Callable[[], object]] = {
            "blake3": lambda d=data: blake3(d).hexdigest(),
            "no-decode": lambda d=data: key_for_bytes(d),
            "decode": lambda d=data: decode_key(d),
            "checks": lambda d=data: check_image_bytes(d, DEFAULT_DECODE_LIMITS, max_pixels=DEFAULT_MAX_PIXELS),
        }
        stats = H.compare(cases, baseline="blake3", rounds=rounds, seed=int(megabytes * 10), clock=time.process_time)
        results[(fmt, megabytes)] = stats
        rate = {name: 1 / s.median for name, s in stats.items()}
        share = stats["checks"].median / stats["decode"].median
        rows.append([
            describe(data),
            f"{rate['blake3']:,.0f}",
            f"{rate['no-decode']:,.0f}",
            H.fmt_ratio(stats["no-decode"].ratio, stats["no-decode"].spread),
            f"{stats['no-decode'].delta * 1e6:+.1f} us",
            f"{rate['decode']:,.1f}",
            f"{statistics.median(d / n for d, n in zip(stats['decode'].samples, stats['no-decode'].samples)):,.0f}x",
            target(fmt, megabytes, stats["no-decode"].ratio),
            H.fmt_time(stats["checks"].median),
            f"{share:.3%}",
            H.verdict(share <= CHECKS_SHARE_TARGET),
        ])  # fmt: skip
    report(H.table(
        ["input", "blake3 alone (img/s)", "no-decode (img/s)", "no-decode / blake3 time", "over blake3",
         "decode (img/s)", "no-decode speed-up", f"target <= {IN_PROCESS_TARGET}x", "structural checks",
         "checks / decode", f"target <= {CHECKS_SHARE_TARGET:.0%}"],
        rows,
    ))  # fmt: skip
    report()
    report(
        "`structural checks`: `check_image_bytes` with the loader's default limits, alone (both paths run "
        "it in `open_header`); `checks / decode` is its share of the decode path's time."
    )
    return results


def breakdown(report: H.Report, data: bytes, rounds: int) -> None:
    """Where the no-decode path's time goes over blake3 alone, for one input, step by step."""
    from mmobs import observing
    from mmobs.keys.writer import EncodedImage

    io_ = ImageMediaIO()
    framed_prefix = b"\0" * 36  # the bytes the framing puts before the data (FR("image"), tags, lengths)

    def framed() -> str:
        digest = blake3()
        digest.update(framed_prefix)
        digest.update(data)
        return digest.hexdigest()

    def silent(call: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with observing(None):
                return call()

        return run

    cases: dict[str, Callable[[], object]] = {
        "blake3 alone": lambda: blake3(data).hexdigest(),
        "blake3, prefix then data (two updates, as framed)": framed,
        "hash_kwargs(EncodedImage), no observer": silent(
            lambda: MultiModalHasher.hash_kwargs("blake3", image=EncodedImage(data))),
        "hash_kwargs(EncodedImage), default instrumentation": lambda: MultiModalHasher.hash_kwargs(
            "blake3", image=EncodedImage(data)),
        "open_header alone (Pillow's header parse, limits)": lambda: io_.open_header(data),
        "  of which the structural checks": lambda: check_image_bytes(
            data, DEFAULT_DECODE_LIMITS, max_pixels=DEFAULT_MAX_PIXELS, formats=io_.formats),
        "  of which the identification (formats to try)": lambda: identification_order(io_.formats, data),
        "  of which Image.open over them (Pillow's header parse)": lambda: Image.open(
            io.BytesIO(data), formats=identification_order(io_.formats, data)),
        "key_for_bytes, no observer": silent(lambda: key_for_bytes(data)),
        "key_for_bytes, default instrumentation": lambda: key_for_bytes(data),
    }  # fmt: skip
    stats = H.compare(cases, baseline="blake3 alone", rounds=rounds, seed=7, clock=time.process_time)
    report(H.table(["step", "median", "over blake3 alone (paired)", "ratio"], [
        [name, H.fmt_time(s.median), f"{s.delta * 1e6:+.1f} us", H.fmt_ratio(s.ratio, s.spread)]
        for name, s in stats.items()
    ]))  # fmt: skip


# -- through the service ---------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection; raw image bodies."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection(S.HOST, port, timeout=60)

    def post(self, path: str, data: bytes, content_type: str) -> dict:
        self.connection.request("POST", path, body=data, headers={"content-type": content_type})
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {body[:200]!r}")
        return json.loads(body)


def body_sink() -> Any:
    """A bare Starlette app whose ``POST /sink`` reads the body and answers its length (the HTTP floor)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def sink(request: Request) -> JSONResponse:
        return JSONResponse({"bytes": len(await request.body())})

    async def ready(request: Request) -> JSONResponse:
        return JSONResponse({})

    return Starlette(routes=[Route("/sink", sink, methods=["POST"]), Route("/ready", ready)])


def through_service(
    report: H.Report, made: dict[tuple[str, float], bytes], rounds: int
) -> dict[tuple[str, float], float]:
    argv = [
        sys.executable,
        "-m",
        "mmobs.cli",
        "serve",
        "--port",
        "{port}",
        "--log-level",
        "warning",
        "--max-image-bytes",
        str(32 * 1024 * 1024),
        "--max-body-bytes",
        str(64 * 1024 * 1024),
    ]
    env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    sink_argv = S.uvicorn_argv("key_path:body_sink", app_dir=str(HERE))
    rows, ratios_by_input = [], {}
    with S.servers([("mmobs serve", argv, "/healthz", env), ("sink", sink_argv, "/ready", env)]) as started:
        service, sink = Client(started["mmobs serve"].port), Client(started["sink"].port)
        for (fmt, megabytes), data in made.items():
            content_type = f"image/{fmt.split('-')[0].lower()}"  # JPEG-prog, PNG-8K: the same media types
            keyed = service.post("/v1/keys", data, content_type)["items"][0]
            hashed = service.post("/v1/hash", data, content_type)["items"][0]
            assert keyed["mm_hash"] == hashed["mm_hash"] == key_for_bytes(data), (fmt, megabytes)
            calls: dict[str, Callable[[], object]] = {
                "/v1/keys": lambda d=data, t=content_type: service.post("/v1/keys", d, t),
                "/v1/hash": lambda d=data, t=content_type: service.post("/v1/hash", d, t),
                "sink": lambda d=data, t=content_type: sink.post("/sink", d, t),
            }
            samples = _paired(calls, rounds, seed=int(megabytes * 10))
            median = {name: statistics.median(times) for name, times in samples.items()}
            ratio = statistics.median(h / k for h, k in zip(samples["/v1/hash"], samples["/v1/keys"]))
            ceiling = statistics.median(h / b for h, b in zip(samples["/v1/hash"], samples["sink"]))
            ratios_by_input[(fmt, megabytes)] = ratio
            rows.append(
                [
                    describe(data),
                    f"{1 / median['/v1/keys']:,.0f}",
                    f"{1 / median['/v1/hash']:,.1f}",
                    f"{ratio:,.1f}x",
                    f"{median['/v1/keys'] * 1e3:.2f} ms",
                    f"{median['sink'] * 1e3:.2f} ms",
                    f"{ceiling:,.1f}x",
                ]
            )
    report(
        H.table(
            [
                "input",
                "POST /v1/keys (img/s)",
                "POST /v1/hash (img/s)",
                "keys / hash",
                "keys latency",
                "body-sink latency",
                "hash / sink (ceiling)",
            ],
            rows,
        )
    )
    return ratios_by_input


def _paired(calls: dict[str, Callable[[], object]], rounds: int, seed: int) -> dict[str, list[float]]:
    """Seconds per call of each, sampled in the same shuffled rounds (a sample lasts >= 0.2 s)."""
    repeat = {}
    for name, call in calls.items():
        started = time.perf_counter()
        call()
        repeat[name] = max(1, round(0.2 / max(time.perf_counter() - started, 1e-4)))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            started = time.perf_counter()
            for _ in range(repeat[name]):
                calls[name]()
            samples[name].append((time.perf_counter() - started) / repeat[name])
    return samples


# -- main ---------------------------------------------------------------------------------


def uptime() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.3 and 2 MB only, fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per comparison (default 15, quick 5)")
    parser.add_argument("--output", type=Path, default=None, help="also write the report to this Markdown file")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    report = H.Report()
    report(f"# No-decode key path ({H.now()})")
    report()
    for name, value in H.machine_lines(["benchmarks/key_path.py", *(argv or sys.argv[1:])]):
        report(f"- {name}: {value}")
    report()
    made = inputs(args.quick)
    report("## In process (key_for_bytes vs the decode path vs blake3 alone)")
    report()
    local = in_process(report, made, rounds)
    report()
    report(f"### Where the time goes: {describe(made[('JPEG', 2.0)])}")
    report()
    breakdown(report, made[("JPEG", 2.0)], rounds + 10)
    report()
    report("## Through the service (one mmobs serve on loopback, raw image bodies, one connection)")
    report()
    service = through_service(report, made, max(3, rounds // 2))
    report()
    small = service[("JPEG", 0.3)]
    report("## Targets")
    report()
    report(H.table(["target", "measured", "verdict"], [
        *([f"no-decode <= {IN_PROCESS_TARGET}x blake3 alone in process, {describe(made[key])}",
           f"{local[key]['no-decode'].ratio:.2f}x", H.verdict(local[key]["no-decode"].ratio <= IN_PROCESS_TARGET)]
          for key in TARGET_INPUTS if key in local),
        [f">= {SERVICE_TARGET:.0f}x the decode path's images/s through the service, 0.3 MB JPEG", f"{small:.0f}x",
         H.verdict(small >= SERVICE_TARGET)],
        ["keys that differ from the decode path's (every input, both ways)", "0", H.verdict(True)],
    ]))  # fmt: skip
    report()
    report(f"- load average at the end: {uptime()}")
    if args.output:
        args.output.write_text(report.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
