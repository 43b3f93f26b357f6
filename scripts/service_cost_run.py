#!/usr/bin/env python
"""What one request costs ``mmobs serve``, over HTTP, for the worst input of each costly class.

Starts ``mmobs serve`` with its default limits on a loopback port and sends
each input as one request: the full-size costly images of
``scripts/corpus/costly/`` (when present; a few built here otherwise), a
plain 49 MP JPEG, and the request-level classes (a 60 MiB JSON body of empty
lists, 30 million zeros in ``mm_processor_kwargs``, a large body of escaped
surrogates, lone surrogates in options). For every request it reports:

* the status, error code and reason;
* CPU seconds spent by the server process and by the decode workers (read
  from ``/proc`` every 10 ms, so a worker stopped at its budget is counted up
  to its last 10 ms; a replacement worker's start-up is not the request's);
* the peak extra memory of each: ``VmHWM`` (reset through ``clear_refs``
  before the request, polled every 10 ms during it, so a worker stopped at its
  budget still reports what it reached) minus ``VmRSS`` before the request;
* ``/healthz`` latency (p50, p99, max) from probes every 25 ms while the
  request is in flight.

With ``--floods`` it also measures ``/healthz`` (200 probes, each on a new
connection) while 1,024 idle connections are open, and while 1,000
connections send a request's headers and then trickle its body.

With ``--loop N`` it then sends N requests cycling through every input and
reports the process tree's RSS at the start and the end, the 5xx count and
whether ``mmobs_bad_images_total`` moved by exactly the ``bad_image``
refusals. ``--corpus-root DIR`` takes the costly inputs from
``DIR/scripts/corpus/costly`` (``git archive BRANCH scripts | tar -x -C DIR``).
Its parts are in ``scripts/service_cost/`` (inputs, measurements, floods and
the loop). Run it niced on a shared machine::

    nice -n 10 python scripts/service_cost_run.py --loop 300 --json /tmp/cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import ServiceProcess  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from service_cost.floods import floods, loop  # noqa: E402
from service_cost.inputs import Request, encode, image_inputs, image_request, photo_like, request_inputs  # noqa: E402
from service_cost.measure import measure  # noqa: E402


def main() -> None:
    if "--corpus-root" in sys.argv:  # before anything imports ``scripts``
        sys.path.insert(0, sys.argv[sys.argv.index("--corpus-root") + 1])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpus-root", help="a tree whose scripts/corpus/costly provides the inputs (e.g. another branch's)"
    )
    parser.add_argument("--loop", type=int, default=0, help="then send this many requests cycling through the inputs")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--only", default="", help="only inputs whose name contains this")
    parser.add_argument("--floods", action="store_true", help="measure /healthz during connection floods too")
    parser.add_argument("serve_args", nargs="*", help="extra arguments for mmobs serve (after --)")
    args = parser.parse_args()
    photo = encode(photo_like((640, 480)), "JPEG", quality=90)
    inputs: list[tuple[str, Callable[[], Request]]] = [
        (name, (lambda build=build: image_request(build()))) for name, build in image_inputs()
    ] + request_inputs(photo)
    inputs = [(name, build) for name, build in inputs if args.only in name]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(Path(tmp), "--log-level", "warning", *args.serve_args)
        try:
            for _ in range(100):
                if httpx.get(service.url + "/healthz").json().get("decode_workers"):
                    break
                time.sleep(0.1)
            for name, build in inputs:
                request = build()
                result = measure(service, name, request, len(request[1]))
                results.append(result)
                print(json.dumps(result), flush=True)
            report: dict[str, Any] = {"requests": results, "load": os.getloadavg()}
            if args.floods:
                report["floods"] = floods(service)
                print(json.dumps(report["floods"]), flush=True)
            if args.loop:
                report["loop"] = loop(service, inputs, args.loop)
                print(json.dumps(report["loop"]), flush=True)
        finally:
            service.stop()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
