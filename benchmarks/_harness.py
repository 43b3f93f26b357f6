"""Measurement helpers shared by the benchmark sections.

The machine these numbers come from is small (2 cores), shared and noisy, so
every comparison here is made the same way:

* all competitors of one comparison run in the same process, in the same
  rounds, in a shuffled order each round (a seeded RNG, so a run is
  repeatable), with the garbage collector off while a sample is taken;
* each sample repeats a call often enough to last at least ``MIN_SAMPLE``
  seconds, so timer resolution never matters;
* the result of a competitor is its **median** time, and its ratio to the
  baseline is the **median of the per-round ratios** (each round's ratio
  compares samples taken a few milliseconds apart, so a load spike that hits
  one round hits both sides of that ratio).

Nothing here claims an absolute speed: the tables report medians and ratios
measured side by side in one run.
"""

from __future__ import annotations

import gc
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

#: Shortest sample: a call shorter than this is repeated within one sample.
MIN_SAMPLE = 0.002


@dataclass
class Stats:
    """The samples of one competitor (seconds per call) and its paired ratios."""

    name: str
    samples: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def ratio(self) -> float:
        """Median of the per-round ratios to the baseline."""
        return statistics.median(self.ratios) if self.ratios else math.nan

    @property
    def delta(self) -> float:
        """Median of the per-round differences to the baseline, in seconds."""
        return statistics.median(self.deltas) if self.deltas else math.nan

    @property
    def spread(self) -> float:
        """Interquartile range of the per-round ratios (how noisy this ratio was)."""
        if len(self.ratios) < 4:
            return math.nan
        q = statistics.quantiles(self.ratios, n=4)
        return q[2] - q[0]


def _calibrate(fn: Callable[[], object], min_sample: float, clock: Callable[[], float]) -> int:
    """How many calls make one sample last ``min_sample`` seconds (after a first, untimed call: lazy set-up)."""
    fn()
    started = clock()
    fn()
    once = clock() - started
    if once >= min_sample:
        return 1
    # A second, warmer call is a better estimate for fast functions.
    started = clock()
    fn()
    once = max(clock() - started, 1e-7)
    return max(1, math.ceil(min_sample / once))


def compare(
    cases: dict[str, Callable[[], object]],
    *,
    baseline: str,
    rounds: int,
    seed: int = 1,
    min_sample: float = MIN_SAMPLE,
    setups: dict[str, Callable[[], object]] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Stats]:
    """Time every case in the same rounds, shuffled, and pair each with ``baseline``.

    ``setups[name]`` runs (untimed) before every sample of that case, for
    cases that need a process setting of their own. ``clock`` is wall time by
    default; ``time.process_time`` measures the CPU this process spent, which
    a neighbour's load disturbs less (it still slows caches and memory).
    Returns one :class:`Stats` per case, in the order given.
    """
    rng = random.Random(seed)
    names = list(cases)
    setups = setups or {}
    repeat = {}
    for name in names:
        if name in setups:
            setups[name]()
        repeat[name] = _calibrate(cases[name], min_sample, clock)
    for name in names:  # warm-up round
        if name in setups:
            setups[name]()
        cases[name]()
    stats = {name: Stats(name) for name in names}
    gc.collect()
    for _ in range(rounds):
        order = names[:]
        rng.shuffle(order)
        this_round: dict[str, float] = {}
        for name in order:
            fn, n = cases[name], repeat[name]
            if name in setups:
                setups[name]()
            gc.disable()
            try:
                started = clock()
                for _ in range(n):
                    fn()
                elapsed = (clock() - started) / n
            finally:
                gc.enable()
            this_round[name] = elapsed
            stats[name].samples.append(elapsed)
        base = this_round[baseline]
        for name in names:
            stats[name].ratios.append(this_round[name] / base)
            stats[name].deltas.append(this_round[name] - base)
    return stats


def peak_extra_bytes(fn: Callable[[], object]) -> int:
    """Peak traced memory during one call of ``fn``, above what was live before it.

    tracemalloc sees Python allocations: bytes chunks, bytearrays and NumPy
    arrays (NumPy reports its data buffers to tracemalloc). Pillow's own pixel
    memory is not traced, and is the same for every competitor anyway.
    """
    fn()  # warm caches, lazy imports, first-use allocations
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return max(0, peak - before)


# -- formatting ------------------------------------------------------------------


def paired_ratio(without: Sequence[float], with_: Sequence[float]) -> tuple[float, float]:
    """The median of per-round ratios ``with_ / without`` and half their interquartile range (NaN below two rounds)."""
    ratios = sorted(w / o for o, w in zip(without, with_, strict=True) if o > 0)
    if len(ratios) < 2:
        return (ratios[0] if ratios else float("nan")), float("nan")
    quartiles = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), (quartiles[2] - quartiles[0]) / 2


def fmt_time(seconds: float) -> str:
    """Seconds as us / ms with three significant figures."""
    if math.isnan(seconds):
        return "-"
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if abs(seconds) < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_us(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1e6:.1f}"


def fmt_ratio(ratio: float, spread: float = math.nan) -> str:
    if math.isnan(ratio):
        return "-"
    if math.isnan(spread):
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x (±{spread / 2:.2f})"


def fmt_bytes(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "MISSED")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, column widths padded so it also reads well in a terminal."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


class Report:
    """Collects what a run prints so it can also be saved (``--output``)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.parts.append(text)

    def text(self) -> str:
        return "\n".join(self.parts) + "\n"


# -- the machine -----------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _wrk_version() -> str:
    try:
        out = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def _memory() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def machine_lines(argv: Sequence[str]) -> list[tuple[str, str]]:
    """What the numbers were measured on, and how to measure them again."""
    import blake3
    import numpy
    import PIL

    import mmobs

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("command", " ".join(["python", *argv])),
        ("cpu", f"{_cpu_model()}, {os.cpu_count()} logical cores ({affinity} usable), {_memory()}"),
        ("system", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("load average at start", load),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        (
            "libraries",
            f"mmobs {mmobs.__version__}, Pillow {PIL.__version__}, numpy {numpy.__version__}, "
            f"blake3 {blake3.__version__}",
        ),
        (
            "serving",
            ", ".join(
                f"{name} {_version(name)}"
                for name in (
                    "starlette",
                    "uvicorn",
                    "prometheus-client",
                    "structlog",
                    "starlette-exporter",
                    "asgi-correlation-id",
                    "prometheus-fastapi-instrumentator",
                    "uvloop",
                    "httptools",
                    "orjson",
                    "pybase64",
                )
            ),
        ),
        ("load generator", _wrk_version()),
    ]


def machine_table(argv: Sequence[str], wanted: Sequence[str] | None = None) -> str:
    """:func:`machine_lines` as a Markdown table (the command in backticks), only the ``wanted`` rows if given."""
    rows = [[k, f"`{v}`" if k == "command" else v] for k, v in machine_lines(argv) if wanted is None or k in wanted]
    return table(["", ""], rows)


#: The machine rows the running-server benchmarks print (the rest says little about two servers side by side).
SERVER_MACHINE_ROWS = ("command", "cpu", "system", "load average at start", "python")


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")


def python_cmd() -> list[str]:
    return [sys.executable]
