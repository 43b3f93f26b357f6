"""vLLM's multimodal cache drift, before and after mmobs's healing, on real ``vllm serve`` processes.

Part 1, the failures (``--limit-mm-per-prompt '{"image": 4}' --mm-processor-cache-gb 0.0003``),
one server at a time, each configuration given the same traffic:

* ``plugin off``: ``MMOBS_VLLM_PLUGIN=0`` (vLLM alone, mmobs's middleware still on);
* ``count only``: ``MMOBS_VLLM_MM_CACHE_HEAL=0`` (mmobs counts, changes nothing);
* ``healing``: the default.

Each gets the three steps that drift the caches (a text too long with its image, then the same image twice),
then ``--runs`` load runs of 6 clients x 72 chat completions of four 224x224 images (of 16),
and one of 8 clients x 144 with every third request streamed. Reported: statuses, failures per
run, mmobs's drift counters, and vLLM's own ``vllm:mm_cache_hits/queries`` per run.

Part 3 (``--wrappers-only`` runs it alone, no server): the wrappers' own cost per call, each
around a do-nothing stand-in of the vLLM function it wraps (timeit, best of 7).

Part 2, the cost where nothing drifts (vLLM's default cache): a ``count only`` and a
``healing`` server side by side, sequential chat completions of one small image (half of
them repeats, so hits and misses), alternating between the two servers request by request;
reported: median latency of each and the ratio.

    python benchmarks/bench_vllm_cache_drift.py            # about 12 minutes on 2 cores
    python benchmarks/bench_vllm_cache_drift.py --runs 1 --requests 100
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from PIL import Image  # noqa: E402

from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, make_model, server_venv  # noqa: E402

SMALL_CACHE = ("--limit-mm-per-prompt", '{"image": 4}', "--mm-processor-cache-gb", "0.0003")
CONFIGS: dict[str, dict[str, str]] = {
    "plugin off": {"MMOBS_VLLM_PLUGIN": "0"},
    "count only": {"MMOBS_VLLM_MM_CACHE_HEAL": "0"},
    "healing": {},
}


def png(size: int, seed: int) -> str:
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (size, size), rng.randbytes(size * size * 3))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat(server: VllmServer, urls: list[str], text: str = "Describe.", stream: bool = False) -> tuple[int, str]:
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": text})
    payload = {
        "model": server.model,
        "max_tokens": 2,
        "stream": stream,
        "messages": [{"role": "user", "content": content}],
    }
    try:
        response = httpx.post(server.url + "/v1/chat/completions", json=payload, timeout=120)
    except httpx.HTTPError as error:
        return -1, repr(error)
    if stream and '"error"' in response.text:
        return 599, response.text[:200]
    return response.status_code, response.text[:200]


def prompt_tokens(server: VllmServer, content: Any) -> int:
    payload = {"model": server.model, "max_tokens": 1, "messages": [{"role": "user", "content": content}]}
    return int(
        httpx.post(server.url + "/v1/chat/completions", json=payload, timeout=120).json()["usage"]["prompt_tokens"]
    )


def three_steps(server: VllmServer) -> list[int]:
    with_image = prompt_tokens(
        server, [{"type": "image_url", "image_url": {"url": png(224, 1)}}, {"type": "text", "text": "x"}]
    )
    text = "x" + " word" * ((1026 - with_image) // 5 + 1)
    x = png(224, 2)
    return [chat(server, [x], text)[0], chat(server, [x])[0], chat(server, [x])[0]]


def counters(server: VllmServer) -> dict[str, float]:
    found: dict[str, float] = {}
    for key, value in {**server.samples("mmobs_vllm_mm_cache_"), **server.samples("vllm:mm_cache_")}.items():
        if "_created" in key[0]:
            continue
        name = key[0] + "".join(f"{{{v}}}" for k, v in key[1] if k == "outcome")
        found[name] = found.get(name, 0.0) + value
    return found


def load(server: VllmServer, clients: int, requests: int, seed: int, stream_every: int = 0) -> Counter[int]:
    rng = random.Random(seed)
    pool = [png(224, 2100 + i) for i in range(16)]
    jobs = [[pool[rng.randrange(16)] for _ in range(4)] for _ in range(requests)]

    def send(index: int) -> int:
        return chat(server, jobs[index], stream=bool(stream_every) and index % stream_every == 0)[0]

    with ThreadPoolExecutor(clients) as executor:
        return Counter(executor.map(send, range(requests)))


def part_one(venv: Path, model: Path, directory: Path, runs: int, only: str | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, env in CONFIGS.items():
        if only is not None and name != only:
            continue
        server = VllmServer(venv, model, directory / name.replace(" ", "-"), args=[*MMOBS_FLAGS, *SMALL_CACHE], env=env)
        try:
            server.wait_for_warm_up()
            entry: dict[str, Any] = {"three steps": three_steps(server), "runs": []}
            for run in range(runs + 1):
                before = counters(server)
                clients, requests, stream_every = (6, 72, 0) if run < runs else (8, 144, 3)
                started = time.perf_counter()
                statuses = load(server, clients, requests, seed=21 + run, stream_every=stream_every)
                after = counters(server)
                entry["runs"].append({
                    "load": f"{clients}x{requests}" + (" (1/3 streamed)" if stream_every else ""),
                    "seconds": round(time.perf_counter() - started, 1),
                    "statuses": dict(sorted(statuses.items())),
                    "failed": sum(n for s, n in statuses.items() if s != 200),
                    "moved": {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)},
                })  # fmt: skip
            results[name] = entry
            print(name, json.dumps(entry, indent=1), flush=True)
        finally:
            server.stop()
    return results


def part_two(venv: Path, model: Path, directory: Path, requests: int) -> dict[str, Any]:
    servers = {
        name: VllmServer(venv, model, directory / f"hot-{name.replace(' ', '-')}", args=MMOBS_FLAGS, env=CONFIGS[name])
        for name in ("count only", "healing")
    }
    try:
        for server in servers.values():
            server.wait_for_warm_up()
        urls = [png(112, 5000 + i) for i in range(requests // 2)]
        order = [urls[i // 2] if i % 2 else urls[random.Random(i).randrange(len(urls))] for i in range(requests)]
        latencies: dict[str, list[float]] = {name: [] for name in servers}
        cache_before = {name: counters(server) for name, server in servers.items()}
        for url in [urls[0], urls[1]] * 5:  # warm both
            for server in servers.values():
                chat(server, [url])
        for index, url in enumerate(order):
            names = list(servers) if index % 2 else list(reversed(servers))
            for name in names:
                started = time.perf_counter()
                status, _ = chat(servers[name], [url])
                latencies[name].append(time.perf_counter() - started)
                assert status == 200
        medians = {name: statistics.median(values) * 1000 for name, values in latencies.items()}
        result = {
            "requests per server": requests,
            "median ms": {name: round(value, 2) for name, value in medians.items()},
            "healing / count only": round(medians["healing"] / medians["count only"], 3),
            "cache moved": {
                name: {
                    k: v - cache_before[name].get(k, 0) for k, v in counters(server).items() if k.startswith("vllm:")
                }
                for name, server in servers.items()
            },
        }
        print("hot path", json.dumps(result, indent=1), flush=True)
        return result
    finally:
        for server in servers.values():
            server.stop()


def part_three() -> dict[str, float]:
    """Nanoseconds per call that each wrapper adds (what a drift-free request pays: per item, per output)."""
    import asyncio
    import timeit

    from mmobs.vllm.cache_drift import cache_heal, cache_hooks
    from mmobs.vllm.cache_drift.cache_attempt import Attempt, current_attempt
    from mmobs.vllm.cache_drift.cache_metrics import CacheDriftMetrics
    from mmobs.vllm.cache_drift.drift import DriftBook

    book = DriftBook(CacheDriftMetrics(registry=__import__("prometheus_client").CollectorRegistry()), logger=object())

    class Cache:
        entries = frozenset({"a"})

        def is_cached_item(self, mm_hash: str) -> bool:
            return mm_hash in self.entries

    def update(self: Any, item: Any, mm_hash: str) -> Any:
        return item

    def lookup(self: Any, hashes: list[str]) -> list[bool]:
        return [h in self.entries for h in hashes]

    class Output:
        mm_cache_miss_hashes = None
        request_id = "r"

    def process(self: Any, outputs: Any, *args: Any) -> Any:
        return outputs

    cache, outputs, processor = Cache(), [Output()] * 4, type("P", (), {"request_states": {}})()
    wrapped_update = cache_hooks._get_and_update_item(update, book, None)
    wrapped_lookup = cache_hooks._is_cached(lookup)
    wrapped_process = cache_hooks._process_outputs(process, book, cache_hooks._LastEngine(), True)
    current_attempt.set(Attempt())
    cases = {
        "get_and_update_item (new item, in a request)": (
            lambda: update(cache, 1, "b"),
            lambda: wrapped_update(cache, 1, "b"),
        ),
        "is_cached (4 hashes)": (lambda: lookup(cache, ["a"] * 4), lambda: wrapped_lookup(cache, ["a"] * 4)),
        "process_outputs (4 outputs)": (
            lambda: process(processor, outputs),
            lambda: wrapped_process(processor, outputs),
        ),
    }
    result = {}
    for name, (plain, wrapped) in cases.items():
        base = min(timeit.repeat(plain, number=20000, repeat=7)) / 20000
        cost = min(timeit.repeat(wrapped, number=20000, repeat=7)) / 20000
        result[name] = round((cost - base) * 1e9, 1)

    async def outputs_of(*args: Any, **kwargs: Any) -> Any:
        for index in range(64):
            yield index

    healing = cache_heal.healing_generate(outputs_of, book)

    async def drain(make: Any) -> None:
        async for _ in make():
            pass

    async def timed(make: Any) -> float:
        started = time.perf_counter()
        for _ in range(500):
            await drain(make)
        return (time.perf_counter() - started) / (500 * 64)

    async def generate_cost() -> float:
        plain = min([await timed(lambda: outputs_of(None, None, "r")) for _ in range(5)])
        layered = min([await timed(lambda: healing(None, None, None, "r")) for _ in range(5)])
        return (layered - plain) * 1e9

    result["generate (per output)"] = round(asyncio.run(generate_cost()), 1)
    print("wrappers, ns added per call", json.dumps(result, indent=1), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="6x72 load runs per configuration (then one 8x144)")
    parser.add_argument("--requests", type=int, default=300, help="requests per server in part 2")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--wrappers-only", action="store_true", help="part 3 alone (no server)")
    parser.add_argument("--failures-only", action="store_true", help="part 1 alone")
    parser.add_argument("--config", choices=list(CONFIGS), help="part 1 for this configuration only")
    args = parser.parse_args(argv)
    if args.wrappers_only:
        part_three()
        return 0
    venv = server_venv()
    if venv is None:
        print("no vLLM server environment (.ci/install-vllm-server builds it)", file=sys.stderr)
        return 2
    print("uptime:", os.popen("uptime").read().strip(), flush=True)
    with tempfile.TemporaryDirectory(prefix="mmobs-drift-bench-") as tmp:
        directory = Path(tmp)
        model = make_model(venv, directory / "model")
        results: dict[str, Any] = {"failures": part_one(venv, model, directory, args.runs, args.config)}
        if not args.failures_only:
            results["hot path"] = part_two(venv, model, directory, args.requests)
            results["wrappers"] = part_three()
    print("uptime:", os.popen("uptime").read().strip(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
