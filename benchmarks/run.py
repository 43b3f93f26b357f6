"""mmobs performance benchmarks: run by hand, not in CI.

    python benchmarks/run.py                                  # full run (about 10 minutes on 2 cores)
    python benchmarks/run.py --quick                          # smoke run (a minute or two)
    python benchmarks/run.py --sections bytes middleware --output results.md

Sections, one module each (``--sections`` takes any of them; ``--only a,b`` is the older spelling):

* ``pixels`` (``bench_pixels.py``): pixel-path keys of plain PIL images (1, 4,
  12 MP; RGB, RGBA, L, P) against blake3 alone over the identical stream and
  against the straightforward ``np.asarray`` key, with tracemalloc peaks;
* ``bytes`` (``bench_bytes.py``): original-bytes keys (MediaWithBytes, 0.5 and
  4 MB JPEGs) against blake3 alone and against the minimal two-update path;
* ``instrumentation`` (``bench_instrumentation.py``): the observability layer
  on vs off, the cost of one EXIF-fallback event, the drift tracker;
* ``middleware`` (``bench_middleware.py``): MMObsMiddleware and the usual
  alternatives per request in process (CPU time) and through uvicorn + wrk;
* ``service`` (``bench_service.py``): ``POST /v1/hash`` images/s through
  ``mmobs serve`` with 1 and 2 workers, and where a request's time goes;
* ``vllm-server`` (``bench_vllm_server.py``): a real ``vllm serve`` with and
  without mmobs, side by side: latency, requests/s, API-server CPU per request
  (needs ``.ci/install-vllm-server``; about 8 more minutes);
* ``vllm-decode-free`` (``bench_vllm_decode_free.py``): the same two servers
  on re-sent images (all cached, and multi-turn chats): API-server CPU and
  latency with decode-free cache hits against vLLM alone (about 6 minutes);
* ``vllm-video`` (``bench_vllm_video.py``): the same two servers on re-sent
  720p video clips (10 s and 60 s): API-server CPU of a first and a re-sent
  turn with decode-free hits against vLLM alone (about 8 minutes);
* ``vllm-uuid-check`` (``bench_vllm_uuid_check.py``): vLLM 0.33's
  ``get_mm_hashes`` in process, with and without a client uuid, checked and
  not, beside the no-decode key of the same bytes (needs ``.ci/install-vllm``);
* ``vllm-front-end`` (``bench_vllm_front_end.py``): the front end's stage
  timing on and off, per observation, through vLLM 0.33's own loader,
  connector and processor in process (needs ``.ci/install-vllm``);
* ``tracing`` (``bench_tracing.py``): mmobs's OpenTelemetry spans with tracing
  off and on, against the code without them: one request through the
  middleware, one key and one load through the plugin's hooks.

Every comparison runs its competitors in the same rounds, interleaved in a
shuffled order, and reports medians and the median of per-round ratios (see
``_harness.py``). Servers bind 127.0.0.1 on free ports, every load run is
bounded, and every server is stopped at the end. The mmobs measured is this
checkout's (``_common.py`` puts it first on the path).

Needs: ``pip install -e '.[test,bench]'`` and ``wrk`` (``apt-get install -y wrk``);
sections whose extras are missing say so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as harness
from _common import FULL, QUICK, Config

from mmobs.events import get_observer, set_observer

SECTIONS = (
    "pixels",
    "bytes",
    "instrumentation",
    "middleware",
    "service",
    "vllm-server",
    "vllm-decode-free",
    "vllm-video",
    "vllm-uuid-check",
    "vllm-front-end",
    "tracing",  # last: tracing on sets the process's tracer provider for good
)


def _runner(section: str) -> Callable[[Config, harness.Report], None]:
    """The section's ``run``, imported only when chosen (each pulls in what it needs)."""
    module = __import__(f"bench_{section.replace('-', '_')}")
    return module.run  # type: ignore[no-any-return]


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    names = [name for spec in (args.sections or []) + [args.only or ""] for name in spec.split(",") if name.strip()]
    names = [name.strip() for name in names] or list(SECTIONS)
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s): {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    return [name for name in SECTIONS if name in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (a minute or two)")
    parser.add_argument(
        "--sections",
        nargs="+",
        metavar="SECTION",
        help=f"sections to run, space- or comma-separated (default: all of {', '.join(SECTIONS)})",
    )
    parser.add_argument("--only", help="the same as --sections, comma-separated (older spelling)")
    parser.add_argument("--output", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    chosen = _chosen(parser, args)
    cfg = QUICK if args.quick else FULL
    out = harness.Report()
    started = time.monotonic()
    out(f"# mmobs benchmarks ({'quick' if cfg.quick else 'full'} run, {harness.now()})")
    out()
    command = sys.argv if argv is None else ["benchmarks/run.py", *argv]
    out(harness.machine_table(command))
    out()
    default_observer = get_observer()
    for name in chosen:
        section_started = time.monotonic()
        _runner(name)(cfg, out)
        set_observer(default_observer)  # a section must not leak an observer into the next
        print(f"[{name}: {time.monotonic() - section_started:.0f} s]", file=sys.stderr, flush=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out(f"Finished in {time.monotonic() - started:.0f} s; load average at the end: {load}.")
    if args.output:
        Path(args.output).write_text(out.text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
