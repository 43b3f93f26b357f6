#!/usr/bin/env python
"""What importing mmobs costs a process, and what it pulls in.

mmobs's plugin loads inside every vLLM process, so importing the hashing core
must cost no more than the libraries it needs (NumPy, Pillow, blake3) and must
not load prometheus_client, structlog or Starlette. Each row is the median
wall time of a fresh interpreter running one import, minus an empty
interpreter's, interleaved over ``--rounds`` rounds; the last column says
which of the heavy packages the import loaded.

    python benchmarks/import_time.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("prometheus_client", "structlog", "starlette")
IMPORTS = {
    "numpy, PIL.Image, blake3 (what the core needs)": "import numpy, PIL.Image, blake3",
    "mmobs.keys.hashing": "import mmobs.keys.hashing",
    "mmobs.keys.hashing + mmobs.keys.loader": "import mmobs.keys.hashing, mmobs.keys.loader",
    "mmobs.vllm (the plugin's entry point)": "import mmobs.vllm",
    "mmobs.observability.instrument (metrics and logs)": "import mmobs.observability.instrument",
    "mmobs.MMObsMiddleware": "import mmobs; mmobs.MMObsMiddleware",
}


def _run(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - started


def _loaded(code: str) -> str:
    probe = f"{code}\nimport sys\nprint(','.join(n for n in {HEAVY!r} if n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {name: [] for name in ("empty", *IMPORTS)}
    for _ in range(args.rounds):
        samples["empty"].append(_run("pass"))
        for name, code in IMPORTS.items():
            samples[name].append(_run(code))
    empty = statistics.median(samples["empty"])
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}; load {os.getloadavg()}; {args.rounds} rounds, interleaved")
    print("| import | median ms (minus an empty interpreter) | heavy packages loaded |")
    print("|---|---:|---|")
    for name, code in IMPORTS.items():
        print(f"| `{name}` | {1000 * (statistics.median(samples[name]) - empty):.0f} | {_loaded(code)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
