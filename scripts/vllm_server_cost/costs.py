"""What the API server pays for one request: CPU seconds, peak RSS growth, ``/health`` latency meanwhile."""

from __future__ import annotations

import threading
import time

import httpx
import psutil

from tests.support.vllm_server import VllmServer

from .request import MiB, Outcome, data_url, send


def status_kib(pid: int, key: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key + ":"))


def reset_peak(pid: int) -> None:
    """Reset ``VmHWM`` to the current RSS (writing 5 to ``clear_refs``; needs the process's owner or root)."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def children_cpu(process: psutil.Process) -> float:
    """CPU seconds of the API server's descendants (EngineCore, its workers) alive now."""
    total = 0.0
    for child in process.children(recursive=True):
        try:
            total += cpu_seconds(child)
        except psutil.Error:
            pass
    return total


class HealthProbe:
    """A thread that GETs ``/health`` every ``interval`` seconds and keeps every latency."""

    def __init__(self, url: str, interval: float = 0.05, timeout: float = 60.0) -> None:
        self.url, self.interval, self.timeout = url + "/health", interval, timeout
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(self.url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - started)
                self.failures += not ok
                self._stop.wait(self.interval)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)


def healthy(server: VllmServer, timeout: float = 10.0) -> bool:
    if server.process.poll() is not None:
        return False
    try:
        return httpx.get(server.url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def measure(server: VllmServer, name: str, kind: str, data: bytes, *, timeout: float, max_url: int) -> Outcome:
    """Send ``data`` once to ``server`` and read what its API server paid for it."""
    url = data_url(data)
    outcome = Outcome(name, kind, len(data), len(url))
    if len(url) > max_url:
        outcome.message = f"not sent: its data URL is {len(url) / MiB:.1f} MiB, over --max-data-url-mib"
        return outcome
    (pid,) = server.api_server_pids()
    process = psutil.Process(pid)
    rss0 = status_kib(pid, "VmRSS")
    reset_peak(pid)
    cpu0, engine0 = cpu_seconds(process), children_cpu(process)
    with HealthProbe(server.url) as probe:
        started = time.perf_counter()
        outcome.status, message = send(server, url, timeout)
        outcome.wall = time.perf_counter() - started
    outcome.message = " ".join(message.split())
    try:
        outcome.cpu = cpu_seconds(process) - cpu0
        outcome.engine_cpu = max(children_cpu(process) - engine0, 0.0)
        outcome.extra_mib = (status_kib(pid, "VmHWM") - rss0) / 1024
    except (psutil.Error, OSError):
        outcome.notes.append("the API server was gone when the request ended")
    outcome.health_probes, outcome.health_failures = len(probe.latencies), probe.failures
    outcome.health_worst_ms = max(probe.latencies) * 1000 if probe.latencies else None
    outcome.healthy_after = healthy(server)
    return outcome
