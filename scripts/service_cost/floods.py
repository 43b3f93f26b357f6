"""``/healthz`` under connection floods (idle connections, trickled bodies), and a loop over every input."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.support import ServiceProcess, metric_value

from .inputs import MiB, Request
from .measure import Tree


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


def floods(service: ServiceProcess) -> dict[str, Any]:
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


def loop(service: ServiceProcess, inputs: list[tuple[str, Callable[[], Request]]], count: int) -> dict[str, Any]:
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
