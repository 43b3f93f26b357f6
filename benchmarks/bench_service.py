"""Section ``service``: ``POST /v1/hash`` through ``mmobs serve``, and where a request's time goes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _harness as harness
import _servers as servers
from _common import Config, MiB, asgi_scope, keyer, mmobs_key, noisy_jpeg, private_instrumentation
from PIL import Image, ImageOps

from mmobs import ImageMediaIO


def _service_body(data: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
    return json.dumps({"images": [url]}).encode()


def run(cfg: Config, out: harness.Report) -> None:
    out("## 5. Reference service: `POST /v1/hash`")
    out()
    data = noisy_jpeg(512 * 1024, seed=11)
    body = _service_body(data)
    expected = mmobs_key(ImageMediaIO().load_bytes(data))
    width, height = Image.open(io.BytesIO(data)).size
    out(
        f"One 0.5 MB noise JPEG ({len(data) / MiB:.2f} MiB, {width}x{height}) as a base64 data URL in "
        f'`{{"images": [url]}}` ({len(body) / MiB:.2f} MiB of JSON).'
    )
    out()
    _service_throughput(cfg, out, body, expected)
    _service_profile(cfg, out, body, data)


def _service_throughput(cfg: Config, out: harness.Report, body: bytes, expected: str) -> None:
    out("### 5a. Throughput through `mmobs serve`")
    out()
    if servers.shutil.which("wrk") is None:
        out("wrk is not installed (`apt-get install -y wrk`): skipped.")
        out()
        return
    connections = 4
    cli = [sys.executable, "-m", "mmobs.cli", "serve", "--host", servers.HOST, "--port", "{port}"]
    specs = [
        ("--workers 1", [*cli, "--workers", "1"], "/healthz", {}),
        ("--workers 2", [*cli, "--workers", "2"], "/healthz", {}),
        ("--workers 1, block cache off", [*cli, "--workers", "1"], "/healthz", {"PILLOW_BLOCKS_MAX": "0"}),
    ]
    with tempfile.TemporaryDirectory(prefix="mmobs-bench-svc-") as tmp:
        body_path = os.path.join(tmp, "body.json")
        Path(body_path).write_bytes(body)
        script = servers.post_script(body_path, tmp)
        with servers.servers(specs) as running:
            for server in running.values():
                _check_service(server, body, expected)
                servers.wrk(server.url + "/v1/hash", duration=1, connections=connections, script=script)
            runs = _service_rounds(cfg, running, script, connections)
    one = runs["--workers 1"]
    rows = []
    for name, samples in runs.items():
        rows.append(
            [
                name,
                f"{statistics.median(r.requests_per_second for r, _, _ in samples):.1f}",
                f"{statistics.median(r.requests_per_second / b.requests_per_second for (r, _, _), (b, _, _) in zip(samples, one)):.2f}x",
                harness.fmt_time(statistics.median(r.latency_p50 for r, _, _ in samples)),
                harness.fmt_time(statistics.median(r.latency_p99 for r, _, _ in samples)),
                f"{statistics.median(c for _, c, _ in samples):.2f}",
                harness.fmt_time(statistics.median(c / r.requests_per_second for r, c, _ in samples)),
                ", ".join(str(b) for _, _, b in samples),
                str(sum(r.non_2xx + r.errors for r, _, _ in samples)),
            ]
        )
    out(
        f"`mmobs serve --workers N` on 127.0.0.1; `wrk -t1 -c{connections} -d{round(cfg.service_seconds)}s "
        f"-s post.lua`, {cfg.service_rounds} interleaved rounds; one image per request, so images/s = "
        "requests/s. Each server's answer was checked against the in-process key first. `mmobs serve` "
        "turns Pillow's block cache on (`set_blocks_max(8)`) unless `PILLOW_BLOCKS_MAX` is set; "
        "`block cache off` sets it to 0, as before that change."
    )
    out()
    out(
        harness.table(
            [
                "server",
                "images/s",
                "vs 1 worker",
                "p50 latency",
                "p99 latency",
                "server CPU (cores)",
                "CPU per image",
                "processes working, per round",
                "errors/non-2xx",
            ],
            rows,
        )
    )
    out()
    out(
        "`server CPU`: CPU seconds all the server's processes used per second of load (psutil, "
        "median over rounds); `CPU per image`: that divided by images/s; `processes working`: how "
        "many of them used more than 0.1 core, in each round. wrk opens its connections at once and "
        "keeps them alive; uvicorn's workers share one listening socket and the first to wake "
        "usually accepts them all, so most rounds one worker serves everything while the other idles."
    )
    out()


def _check_service(server: servers.Server, body: bytes, expected: str) -> None:
    request = urllib.request.Request(server.url + "/v1/hash", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    if answer["items"][0]["mm_hash"] != expected:
        raise AssertionError(f"{server.name}: the service's key differs from mmobs's")


def _service_rounds(
    cfg: Config, running: dict[str, servers.Server], script: str, connections: int
) -> dict[str, list[tuple[servers.WrkResult, float, int]]]:
    """Per server and round: the wrk result, the cores it used, how many processes worked."""
    runs: dict[str, list[tuple[servers.WrkResult, float, int]]] = {name: [] for name in running}
    rng = random.Random(5)
    for _ in range(cfg.service_rounds):
        order = list(running)
        rng.shuffle(order)
        for name in order:
            before = servers.cpu_seconds(running[name])
            started = time.monotonic()
            result = servers.wrk(
                running[name].url + "/v1/hash", script=script, duration=cfg.service_seconds, connections=connections
            )
            after = servers.cpu_seconds(running[name])
            elapsed = time.monotonic() - started
            per_process = [(after[pid] - before.get(pid, 0.0)) / elapsed for pid in after]
            runs[name].append((result, sum(per_process), sum(1 for c in per_process if c > 0.1)))
    return runs


_CATEGORIES = (
    ("JSON (parse request, render response)", ("json/", "_json", "orjson", "(render")),
    ("base64", ("base64", "a2b_base64", "binascii", "(decode_base64", "(parse_data_url")),
    (
        "JPEG decode (Image.open + load)",
        (
            "pil/imagefile.py",
            "jpegimageplugin",
            "'imagingdecoder'",
            "pil/image.py(open",
            "loader.py(_decode",
            "loader.py(_open",
        ),
    ),
    (
        "EXIF transpose (a full pixel copy)",
        ("imageops.py", "'imagingcore' objects>", "pil/image.py(copy", "(safe_exif_transpose", "(normalize_image"),
    ),
    (
        "hashing (blake3, framing; incl. drift probe)",
        (
            "blake3",
            "mmobs/keys/hashing",
            "mmobs/keys/pixels",
            "mmobs/observability/drift",
            "getexif",
            "tiffimageplugin",
        ),
    ),
    (
        "metrics and events",
        (
            "prometheus_client",
            "mmobs/observability/instrument",
            "mmobs/observability/metrics",
            "mmobs/events",
            "mmobs/observability/context",
        ),
    ),
    ("logging (structlog)", ("structlog",)),
    (
        "request body, routing, middleware, ASGI",
        (
            "starlette",
            "anyio",
            "asyncio",
            "mmobs/asgi/middleware",
            "mmobs/service",
            "mmobs/asgi/routing",
            "mmobs/keys/media",
            "mmobs/keys/loader",
            "run.py",
            "bytes.join",
        ),
    ),
)


def _categorize(stats: pstats.Stats) -> dict[str, float]:
    totals: dict[str, float] = {name: 0.0 for name, _ in _CATEGORIES}
    totals["other"] = 0.0
    for (filename, _line, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}({func}".lower().replace("\\", "/")
        for name, needles in _CATEGORIES:
            if any(n in where for n in needles):
                totals[name] += tottime
                break
        else:
            totals["other"] += tottime
    return totals


def _short(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line}({func})"


@contextlib.contextmanager
def _inline_service(body: bytes) -> Any:
    """One ``POST /v1/hash`` through ``create_app()`` in-process, its decoding run inline (no decode workers)."""
    from mmobs.service.app import create_app
    from mmobs.service.config import ServiceConfig
    from mmobs.service.decode_pool import InlineDecoder

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise AssertionError(f"unexpected status {message['status']}")

    app = create_app(ServiceConfig(decode_workers=0))
    app.state.service.decoder = InlineDecoder(threaded=False)  # so one profiler sees it all
    scope = {
        **asgi_scope("/v1/hash"),
        "method": "POST",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    loop = asyncio.new_event_loop()
    try:
        yield lambda: loop.run_until_complete(app(dict(scope), receive, send))
    finally:
        loop.close()


def _service_profile(cfg: Config, out: harness.Report, body: bytes, data: bytes) -> None:
    out("### 5b. Where a request's time goes (in-process)")
    out()
    with _inline_service(body) as request:
        for _ in range(3):
            request()
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for _ in range(cfg.profile_requests):
            request()
        profiler.disable()
        profiled = (time.perf_counter() - started) / cfg.profile_requests
        wall = harness.compare({"request": request}, baseline="request", rounds=cfg.rounds)["request"].median
    profile_stats = pstats.Stats(profiler)
    totals = _categorize(profile_stats)
    top = sorted(profile_stats.stats.items(), key=lambda kv: -kv[1][2])[:10]  # type: ignore[attr-defined]
    total = sum(totals.values())
    rows = [
        [name, f"{seconds / cfg.profile_requests * 1e3:.2f}", f"{seconds / total:.0%}"]
        for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])
    ]
    out(
        f"cProfile over {cfg.profile_requests} requests through the ASGI app (`create_app()`, "
        "middleware included; the hashing thread run inline so one profiler sees it all), "
        "own time grouped by what the code does. cProfile slows Python-heavy code more than C "
        f"calls: {profiled * 1e3:.1f} ms a request profiled vs {wall * 1e3:.1f} ms unprofiled "
        "(median), so read the split, and the stage timings below, not the totals."
    )
    out()
    out(harness.table(["where", "ms per request (profiled)", "share"], rows))
    out()
    out("The ten functions with the most own time:")
    out()
    out(
        harness.table(
            ["function", "calls per request", "ms per request (profiled)"],
            [
                [
                    f"`{_short(key)}`",
                    f"{value[1] / cfg.profile_requests:g}",
                    f"{value[2] / cfg.profile_requests * 1e3:.2f}",
                ]
                for key, value in top
            ],
        )
    )
    out()
    _stage_timings(cfg, out, body, data, wall)


def _stage_timings(cfg: Config, out: harness.Report, body: bytes, data: bytes, request_time: float) -> None:
    from mmobs.keys.data_url import b64decode, decode_base64

    payload = json.loads(body)["images"][0].split(",", 1)[1]
    loaded = Image.open(io.BytesIO(data))
    loaded.load()
    media = ImageMediaIO().load_bytes(data)
    cases: dict[str, Callable[[], object]] = {
        "json.loads(body)": lambda: json.loads(body),
        f"base64 (mmobs: {b64decode.__module__.split('.')[0]}, validate=True)": lambda: decode_base64(
            payload, 64 * MiB
        ),
        "JPEG decode (Image.open + load)": lambda: Image.open(io.BytesIO(data)).load(),
        "ImageOps.exif_transpose copy (no orientation)": lambda: ImageOps.exif_transpose(loaded),
        "ImageMediaIO().load_bytes (all of the above but JSON/base64)": lambda: ImageMediaIO().load_bytes(data),
        "key: hash_kwargs (instrumented)": keyer(media, private_instrumentation()),
        "(without the serve extra) stdlib base64.b64decode": lambda: base64.b64decode(payload, validate=True),
    }
    with contextlib.suppress(ImportError):
        import orjson

        cases["(not adopted) orjson.loads(body)"] = lambda: orjson.loads(body)
    stats = harness.compare(cases, baseline="json.loads(body)", rounds=cfg.rounds)
    out(
        f"Stages timed side by side (not profiled), as a share of one whole request in-process "
        f"({harness.fmt_time(request_time)}); the last rows are what mmobs does not use:"
    )
    out()
    out(
        harness.table(
            ["stage", "time", "share of a request"],
            [[name, harness.fmt_time(st.median), f"{st.median / request_time:.1%}"] for name, st in stats.items()],
        )
    )
    out()
