"""The full-sized reliability run behind ``docs/reliability.md``.

Starts ``mmobs serve --workers 2`` on a loopback port, then:

1. sends ``--requests`` requests from ``--concurrency`` clients, every
   ``--fallback-every``-th carrying the vLLM regression JPEG (malformed EXIF)
   and every ``--refused-every``-th that JPEG followed by a non-image (refused,
   its fallback still counted: the counting rule of docs/library.md), recording the RSS of the
   workers and their decode workers and the number of exported series after
   the first thousand requests and at the end, and checks the summed fallback
   counter equals exactly the fallbacks sent;
2. SIGKILLs one worker in the middle of a second load and checks that no count
   recorded before the kill is lost and that the service keeps answering.

Usage::

    python scripts/reliability_run.py --requests 6000 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.loadgen import run_load
from tests.support import ServiceProcess


def counter(text: str, name: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("mmobs_"))


def workers(process: ServiceProcess) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(process.process.pid).children()
        if "resource_tracker" not in " ".join(child.cmdline())
    ]


def rss_mb(process: ServiceProcess) -> float:
    """RSS of the workers and their decode workers."""
    total = 0
    for worker in workers(process):
        for proc in [worker, *worker.children()]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
    return round(total / 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fallback-every", type=int, default=4)
    parser.add_argument("--refused-every", type=int, default=10)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(Path(tmp), "--workers", "2")
        try:
            while len(workers(service)) < 2:
                time.sleep(0.1)
            service.metrics()  # the first scrape creates the /metrics route's own series
            report: dict[str, object] = {"workers": 2, "concurrency": args.concurrency}
            bad_before = counter(service.metrics(), "mmobs_bad_images_total")
            first = asyncio.run(
                run_load(
                    service.url,
                    requests=1000,
                    concurrency=args.concurrency,
                    fallback_every=args.fallback_every,
                    refused_every=args.refused_every,
                )
            )
            text = service.metrics()
            report["after_first_1000"] = {"rss_mb": rss_mb(service), "series": series(text), **first.summary()}
            rest = asyncio.run(
                run_load(
                    service.url,
                    requests=args.requests - 1000,
                    concurrency=args.concurrency,
                    fallback_every=args.fallback_every,
                    refused_every=args.refused_every,
                )
            )
            text = service.metrics()
            sent_fallbacks = first.fallback_sent + rest.fallback_sent
            report["at_end"] = {"rss_mb": rss_mb(service), "series": series(text), **rest.summary()}
            report["load"] = {
                "requests": first.sent + rest.sent,
                "server_errors": first.server_errors + rest.server_errors,
                "transport_errors": first.transport_errors + rest.transport_errors,
                "refused_sent": first.refused_sent + rest.refused_sent,
                "refusals_counted": counter(text, "mmobs_bad_images_total") - bad_before,
                "fallbacks_sent": sent_fallbacks,
                "fallbacks_answered_200": first.fallback_answered + rest.fallback_answered,
                "fallback_counter": counter(text, "mmobs_exif_fallback_total"),
                "counts_lost": sent_fallbacks - counter(text, "mmobs_exif_fallback_total"),
            }

            before_kill = counter(text, "mmobs_exif_fallback_total")

            async def load_and_kill() -> tuple[object, int]:
                task = asyncio.create_task(
                    run_load(service.url, requests=2000, concurrency=args.concurrency, fallback_every=1)
                )
                await asyncio.sleep(2.0)
                victim = workers(service)[0].pid
                os.kill(victim, signal.SIGKILL)
                return await task, victim

            killed, victim = asyncio.run(load_and_kill())
            after_kill = counter(service.metrics(), "mmobs_exif_fallback_total")
            answered = sum(httpx.get(service.url + "/healthz").status_code == 200 for _ in range(20))
            report["worker_kill"] = {
                "victim_pid": victim,
                "counter_before_kill": before_kill,
                "counter_after": after_kill,
                "answered_fallbacks_during_kill_load": killed.fallback_answered,  # type: ignore[attr-defined]
                "transport_errors": killed.transport_errors,  # type: ignore[attr-defined]
                "server_errors": killed.server_errors,  # type: ignore[attr-defined]
                "counts_lost": max(0.0, before_kill + killed.fallback_answered - after_kill),  # type: ignore[attr-defined]
                "healthz_ok_after": f"{answered}/20",
                "workers_after": len(workers(service)),
            }
            print(json.dumps(report, indent=2))
        finally:
            service.stop()


if __name__ == "__main__":
    main()
