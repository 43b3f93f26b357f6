"""What section ``vllm-server`` sends and measures: the request kinds, one sample, and the rounds of samples."""

from __future__ import annotations

import io
import itertools
import math
import queue
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import openai
from _vllm_targets import CONCURRENCY, Settings, Target, chat
from PIL import Image

from tests.support import golden


def _jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


_SMALL_BASE = np.random.default_rng(20).integers(0, 256, (48, 64, 3), dtype=np.uint8)
_fresh_counter = itertools.count(1)


def small_jpeg(counter: int) -> bytes:
    """A 64x48 noise JPEG whose top 8 rows spell ``counter`` in 32 black or white 4x4 blocks.

    Blocks that coarse survive JPEG's quantisation, so every counter below 2**32 gives other
    decoded pixels and other bytes (a counter in a few low pixel bits would not).
    """
    pixels = _SMALL_BASE.copy()
    for bit in range(32):
        row, column = divmod(bit, 16)
        pixels[row * 4 : row * 4 + 4, column * 4 : column * 4 + 4] = 255 if counter >> bit & 1 else 0
    return _jpeg(pixels)


def photo_jpeg(seed: int = 0) -> bytes:
    """A 640x480 photo-like JPEG: a smooth colour gradient plus Gaussian noise, the same bytes for a seed."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:480, 0:640].astype(np.float32)
    gradient = np.stack([x / 640 * 255, y / 480 * 255, (x + y) / 1120 * 255], axis=-1)
    noisy = gradient + rng.normal(0, 12, gradient.shape)
    return _jpeg(np.clip(noisy, 0, 255).astype(np.uint8))


@dataclass(frozen=True)
class Kind:
    """One kind of request: its label, and the images of ``n`` requests (fresh ones every call if so)."""

    name: str
    label: str
    payloads: Callable[[int], list[bytes]]
    fallbacks_each: int = 0  # EXIF fallbacks mmobs counts per request


def _same(data: bytes) -> Callable[[int], list[bytes]]:
    return lambda n: [data] * n


def kinds() -> list[Kind]:
    """The four request kinds, in the table's order (the malformed-EXIF JPEG only where the golden inputs are)."""
    found = [
        Kind(
            "fresh",
            "small image, first seen (cache miss)",
            lambda n: [small_jpeg(next(_fresh_counter)) for _ in range(n)],
        ),
        Kind("seen", "small image, seen again (cache hit)", _same(small_jpeg(0))),
    ]
    if golden.missing_message() is None:
        found.append(
            Kind("bad-exif", "bad-exif-header.jpg (fallback)", _same(golden.input_bytes("bad-exif-header.jpg")), 1)
        )
    found.append(Kind("photo", "640x480 photo-like JPEG", _same(photo_jpeg())))
    return found


@dataclass
class Sample:
    """One server's requests of one (kind, clients) cell in one round."""

    latencies: list[float]
    wall: float
    cpu: float
    errors: int

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) if self.latencies else math.nan

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / self.requests if self.requests else math.nan

    @property
    def rate(self) -> float:
        return self.requests / self.wall if self.wall > 0 else math.nan


def run_sample(target: Target, kind: Kind, payloads: list[bytes], concurrency: int, seconds: float) -> Sample:
    """``payloads`` sent by ``concurrency`` threads at once, until sent or ``seconds`` have passed.

    The API server's CPU clock is read just before the threads are released and just after the
    last one finishes; the latencies are those of the 200s, the rest are counted as errors.
    """
    work: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    for data in payloads:
        work.put(data)
    latencies: list[float] = []
    errors: list[float] = []
    gate = threading.Barrier(concurrency + 1)
    deadline = [math.inf]

    def client_loop(client: openai.OpenAI) -> None:
        gate.wait()
        while time.monotonic() < deadline[0]:
            try:
                data = work.get_nowait()
            except queue.Empty:
                return
            started = time.perf_counter()
            ok = chat(client, target.server.model, data)
            elapsed = time.perf_counter() - started
            if ok:
                latencies.append(elapsed)
            else:
                errors.append(elapsed)

    threads = [threading.Thread(target=client_loop, args=(c,), daemon=True) for c in target.clients[:concurrency]]
    for thread in threads:
        thread.start()
    cpu_before = target.cpu()
    deadline[0] = time.monotonic() + seconds
    started = time.perf_counter()
    gate.wait()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    cpu = target.cpu() - cpu_before
    target.sent[kind.name] = target.sent.get(kind.name, 0) + len(latencies)
    return Sample(latencies, wall, cpu, len(errors))


def warm_up(targets: Sequence[Target], all_kinds: Sequence[Kind]) -> None:
    """Every client of every server sends each kind once (connections, first-request set-up); not timed."""
    for target in targets:
        for kind in all_kinds:
            for client in target.clients:
                if chat(client, target.server.model, kind.payloads(1)[0]):
                    target.sent[kind.name] = target.sent.get(kind.name, 0) + 1


# -- the rounds ---------------------------------------------------------------------------------

Cell = tuple[str, int]  # (kind name, clients)


def measure(
    targets: dict[str, Target], all_kinds: Sequence[Kind], settings: Settings, seed: int = 20
) -> tuple[dict[Cell, dict[str, list[Sample]]], int]:
    """Every cell's samples per server, over the rounds that fit in the budget; and how many rounds ran."""
    rng = random.Random(seed)
    cells = [(kind, clients) for clients in CONCURRENCY for kind in all_kinds]
    results: dict[Cell, dict[str, list[Sample]]] = {(k.name, c): {name: [] for name in targets} for k, c in cells}
    started = time.monotonic()
    done = 0
    for done in range(1, settings.rounds + 1):
        rng.shuffle(cells)
        for kind, clients in cells:
            order = list(targets)
            rng.shuffle(order)
            for name in order:
                payloads = kind.payloads(settings.requests[clients])
                sample = run_sample(targets[name], kind, payloads, clients, settings.sample_seconds)
                results[(kind.name, clients)][name].append(sample)
        elapsed = time.monotonic() - started
        print(f"[vllm-server: round {done}/{settings.rounds}, {elapsed:.0f} s]", file=sys.stderr, flush=True)
        if elapsed > settings.budget_seconds:
            break
    return results, done
