"""What one request costs ``mmobs serve``: CPU and peak memory per process, and ``/healthz`` latency meanwhile."""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from typing import Any

import httpx
import psutil

from tests.support import ServiceProcess

from .inputs import MiB, Request

CLK_TCK = os.sysconf("SC_CLK_TCK")


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
