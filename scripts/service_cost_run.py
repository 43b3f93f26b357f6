#!/usr/bin/env python
"""What one request costs ``mmobs serve``, over HTTP, for the worst input of each costly class.

Starts ``mmobs serve`` with its default limits on a loopback port and sends
each input as one request: the full-size costly images of
``scripts/corpus/costly.py`` (when present; a few built here otherwise), a
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
``DIR/scripts/corpus/costly.py`` (``git archive BRANCH scripts | tar -x -C DIR``).
Run it niced on a shared machine::

    nice -n 10 python scripts/service_cost_run.py --loop 300 --json /tmp/cost.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import ServiceProcess, metric_value  # noqa: E402

MiB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
Request = tuple[str, bytes, str]  # (content type, body, what it is)


# -- inputs --------------------------------------------------------------------------------------


def _photo_like(size: tuple[int, int]) -> Any:
    import numpy as np
    from PIL import Image

    w, h = size
    x = np.linspace(0, 255, w, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, h, dtype=np.float32)[:, None]
    noise = np.random.default_rng(0).integers(0, 6, (h, w), dtype=np.uint8)
    r = (x * 0.7 + y * 0.3).astype(np.uint8) + noise
    return Image.fromarray(np.stack([r, (x * 0.2 + y * 0.8).astype(np.uint8), 255 - r], -1))


def _encode(image: Any, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _fallback_images() -> list[tuple[str, Callable[[], bytes]]]:
    """A few classes built here, for trees without ``scripts/corpus/costly.py``."""
    from PIL import Image

    small_jpeg = _encode(Image.new("RGB", (16, 12), (1, 2, 3)), "JPEG")
    small_png = _encode(Image.new("RGB", (16, 12), (1, 2, 3)), "PNG")

    def app1_flood(total: int) -> bytes:
        one = struct.pack(">HH", 0xFFE1, 9) + b"Exif\0\0\0"
        return small_jpeg[:2] + one * (total // len(one)) + small_jpeg[2:]

    def ztxt_flood(total: int) -> bytes:
        chunk = _png_chunk(b"zTXt", b"k\0\0" + zlib.compress(b"\0" * (MiB - 1024), 9))
        return small_png[:33] + chunk * (total // len(chunk)) + small_png[33:]

    def webp_canvas(width: int, height: int) -> bytes:
        frame = _encode(Image.new("RGB", (1, 1)), "WEBP", lossless=True)[12:]  # the VP8L chunk
        vp8x = struct.pack("<I", 0x02) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        anim = struct.pack("<IH", 0, 0)
        anmf = b"\0" * 6 + b"\0\0\0" + b"\0\0\0" + b"\x64\0\0" + b"\0" + frame
        body = b"WEBP" + b"VP8X" + struct.pack("<I", len(vp8x)) + vp8x
        body += b"ANIM" + struct.pack("<I", len(anim)) + anim + b"ANMF" + struct.pack("<I", len(anmf)) + anmf
        return b"RIFF" + struct.pack("<I", len(body)) + body

    return [
        ("JPEG APP1 Exif flood, 4 MiB", lambda: app1_flood(4 * MiB)),
        ("PNG zTXt flood, 30 MiB", lambda: ztxt_flood(30 * MiB)),
        ("WebP animated, 7000x7000 canvas, 1x1 frame", lambda: webp_canvas(7000, 7000)),
    ]


def image_inputs() -> list[tuple[str, Callable[[], bytes]]]:
    try:
        from scripts.corpus.costly import full_size_inputs
    except ImportError:
        plain: list[tuple[str, Callable[[], bytes]]] = [
            ("plain 49 MP JPEG (q90)", lambda: _encode(_photo_like((7000, 7000)), "JPEG", quality=90))
        ]
        return plain + _fallback_images()
    return list(full_size_inputs())


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def request_inputs(photo: bytes) -> list[tuple[str, Callable[[], Request]]]:
    url = "data:image/jpeg;base64," + base64.b64encode(photo).decode()
    return [
        (
            "JSON: 60 MiB of empty lists",
            lambda: ("application/json", b'{"images":[' + b"[]," * (20 * MiB) + b'"x"]}', ""),
        ),
        (
            "JSON: mm_processor_kwargs of 30M zeros",
            lambda: (
                "application/json",
                b'{"images":["' + url.encode() + b'"],"mm_processor_kwargs":{"z":[' + b"0," * (30 * MiB) + b"0]}}",
                "",
            ),
        ),
        (
            "JSON: 60 MiB of escaped surrogates",
            lambda: (
                "application/json",
                b'{"images":["' + url.encode() + b'"],"model_id":"' + b"\\ud83d\\ude00" * (5 * MiB) + b'"}',
                "",
            ),
        ),
        (
            "JSON: 16,000 integers of 4,000 digits",
            lambda: ("application/json", b'{"images":["x"],"n":[' + b",".join([b"9" * 4000] * 16000) + b"]}", ""),
        ),
        (
            "JSON: lone surrogate in model_id",
            lambda: ("application/json", _json({"images": [url], "model_id": "\ud800"}), ""),
        ),
        (
            "JSON: lone surrogate in a processor kwarg",
            lambda: ("application/json", _json({"images": [url], "mm_processor_kwargs": {"\ud800": "\udfff"}}), ""),
        ),
    ]


# -- measuring -------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[float, float]:
    """(own CPU seconds, reaped children's CPU seconds) of ``pid``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def _status(pid: int) -> dict[str, int]:
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                values[name] = int(rest.split()[0]) * 1024
    return values


class Tree:
    """The server process and its decode workers, watched during one request."""

    def __init__(self, server_pid: int) -> None:
        self.server = server_pid

    def workers(self) -> list[int]:
        pids = []
        for child in psutil.Process(self.server).children():
            try:
                if "mmobs.service.decode_worker" in " ".join(child.cmdline()):
                    pids.append(child.pid)
            except psutil.Error:
                pass
        return pids

    def rss(self) -> int:
        total = 0
        for pid in [self.server, *self.workers()]:
            try:
                total += _status(pid)["VmRSS"]
            except OSError:
                pass
        return total


class Watch:
    """Per-process CPU and peak memory from just before a request to just after it.

    CPU and ``VmHWM`` are polled every 10 ms, so a decode worker stopped at its
    budget still reports what it used and reached up to its last 10 ms. A
    worker started during the request (a replacement) is not charged to it:
    its start-up is the server's cost, reported as ``replacements``.
    """

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.start_rss: dict[int, int] = {}
        self.cpu0: dict[int, float] = {}
        self.cpu_last: dict[int, float] = {}
        self.peak: dict[int, int] = {}
        self.replacements: set[int] = set()
        self._stop = threading.Event()

    def __enter__(self) -> Watch:
        for pid in [self.tree.server, *self.tree.workers()]:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as refs:
                    refs.write("5")
                self.start_rss[pid] = _status(pid)["VmRSS"]
                self.cpu0[pid] = self.cpu_last[pid] = _proc_stat(pid)[0]
            except OSError:
                pass
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        for pid in [self.tree.server, *self.tree.workers()]:
            if pid not in self.start_rss:
                self.replacements.add(pid)
                continue
            try:
                self.cpu_last[pid] = _proc_stat(pid)[0]
                self.peak[pid] = max(self.peak.get(pid, 0), _status(pid)["VmHWM"])
            except OSError:
                pass

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        server = self.tree.server
        self.server_cpu = self.cpu_last[server] - self.cpu0[server]
        self.worker_cpu = sum(self.cpu_last[p] - self.cpu0[p] for p in self.cpu0 if p != server)
        self.server_extra = self.peak.get(server, 0) - self.start_rss[server]
        self.worker_extra = max((self.peak[p] - self.start_rss[p] for p in self.peak if p != server), default=0)


async def _send(url: str, content_type: str, body: bytes) -> tuple[int, dict[str, Any], list[float]]:
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=120) as client:
        task = asyncio.ensure_future(
            client.post(url + "/v1/hash", content=body, headers={"content-type": content_type})
        )
        async with httpx.AsyncClient(timeout=30) as probe:
            while not task.done():
                started = time.perf_counter()
                response = await probe.get(url + "/healthz")
                latencies.append(time.perf_counter() - started)
                assert response.status_code == 200
                await asyncio.sleep(0.025)
        response = await task
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {"message": response.text[:100]}
    return response.status_code, error, latencies


def _image_request(data: bytes) -> Request:
    return "application/json", _json({"images": ["data:image/png;base64," + base64.b64encode(data).decode()]}), ""


def _settle(service: ServiceProcess, workers: int = 2) -> None:
    """Wait until every decode worker is up: a replacement's start-up is no request's cost."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if httpx.get(service.url + "/healthz").json().get("decode_workers", 0) >= workers:
            return
        time.sleep(0.05)


def measure(service: ServiceProcess, name: str, request: Request, size: int) -> dict[str, Any]:
    _settle(service)
    tree = Tree(service.process.pid)
    with Watch(tree) as watch:
        status, error, latencies = asyncio.run(_send(service.url, request[0], request[1]))
    latencies.sort()
    return {
        "input": name,
        "bytes": size,
        "status": status,
        "code": error.get("code"),
        "reason": error.get("reason"),
        "server_cpu_s": round(watch.server_cpu, 3),
        "worker_cpu_s": round(watch.worker_cpu, 3),
        "server_extra_mib": round(watch.server_extra / MiB, 1),
        "worker_extra_mib": round(watch.worker_extra / MiB, 1),
        "replacements": len(watch.replacements),
        "healthz_probes": len(latencies),
        "healthz_p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "healthz_p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1)
        if latencies
        else None,
        "healthz_max_ms": round(1000 * latencies[-1], 1) if latencies else None,
    }


def main() -> None:
    if "--corpus-root" in sys.argv:  # before anything imports ``scripts``
        sys.path.insert(0, sys.argv[sys.argv.index("--corpus-root") + 1])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpus-root", help="a tree whose scripts/corpus/costly.py provides the inputs (e.g. another branch's)"
    )
    parser.add_argument("--loop", type=int, default=0, help="then send this many requests cycling through the inputs")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--only", default="", help="only inputs whose name contains this")
    parser.add_argument("--floods", action="store_true", help="measure /healthz during connection floods too")
    parser.add_argument("serve_args", nargs="*", help="extra arguments for mmobs serve (after --)")
    args = parser.parse_args()
    photo = _encode(_photo_like((640, 480)), "JPEG", quality=90)
    inputs: list[tuple[str, Callable[[], Request]]] = [
        (name, (lambda build=build: _image_request(build()))) for name, build in image_inputs()
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
                report["floods"] = _floods(service)
                print(json.dumps(report["floods"]), flush=True)
            if args.loop:
                report["loop"] = _loop(service, inputs, args.loop)
                print(json.dumps(report["loop"]), flush=True)
        finally:
            service.stop()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def _probe(service: ServiceProcess, count: int) -> dict[str, Any]:
    latencies, statuses = [], {}
    for _ in range(count):
        started = time.perf_counter()
        status = httpx.get(service.url + "/healthz", timeout=30).status_code
        latencies.append(time.perf_counter() - started)
        statuses[status] = statuses.get(status, 0) + 1
        time.sleep(0.01)
    latencies.sort()
    return {
        "statuses": statuses,
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * latencies[int(0.99 * len(latencies)) - 1], 1),
        "max_ms": round(1000 * latencies[-1], 1),
    }


def _floods(service: ServiceProcess) -> dict[str, Any]:
    import socket

    result: dict[str, Any] = {"no_flood": _probe(service, 200)}
    idle = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(1024)]
    try:
        result["idle_1024"] = _probe(service, 200)
    finally:
        for sock in idle:
            sock.close()
    head = (b"POST /v1/hash HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n{")  # fmt: skip
    slow = []
    for _ in range(1000):
        sock = socket.create_connection(("127.0.0.1", service.port))
        sock.sendall(head)
        slow.append(sock)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            for sock in slow:
                try:
                    sock.send(b" ")
                except OSError:
                    pass
            stop.wait(1.0)

    dripper = threading.Thread(target=trickle, daemon=True)
    dripper.start()
    try:
        result["slow_body_1000"] = _probe(service, 200)
    finally:
        stop.set()
        dripper.join()
        for sock in slow:
            sock.close()
    result["server_5xx_counted"] = metric_value(service.metrics(), "mmobs_http_requests_total", {"status_class": "5xx"})
    return result


def _loop(service: ServiceProcess, inputs: list[tuple[str, Callable[[], Request]]], count: int) -> dict[str, Any]:
    tree = Tree(service.process.pid)
    built = [build() for _, build in inputs]
    text = service.metrics()
    bad_before, errors_before = (
        metric_value(text, "mmobs_bad_images_total"),
        metric_value(text, "mmobs_http_requests_total", {"status_class": "5xx"}),
    )
    statuses: dict[int, int] = {}
    refusals = 0
    rss: list[int] = []
    with httpx.Client(base_url=service.url, timeout=120) as client:
        for index in range(count):
            content_type, body, _ = built[index % len(built)]
            response = client.post("/v1/hash", content=body, headers={"content-type": content_type})
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            refusals += response.status_code == 400 and response.json()["error"].get("code") == "bad_image"
            if index % len(built) == len(built) - 1:
                rss.append(tree.rss())
    text = service.metrics()
    return {
        "requests": count,
        "statuses": statuses,
        "tree_rss_mib_per_cycle": [round(r / MiB, 1) for r in rss],
        "bad_image_refusals": refusals,
        "bad_images_counted": metric_value(text, "mmobs_bad_images_total") - bad_before,
        "server_5xx_counted": metric_value(text, "mmobs_http_requests_total", {"status_class": "5xx"}) - errors_before,
    }


if __name__ == "__main__":
    main()
