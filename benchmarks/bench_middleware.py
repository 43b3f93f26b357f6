"""Section ``middleware``: what a request costs with each middleware, in process and through uvicorn.

The competitors (``apps.py``) are the same trivial JSON endpoint bare and
behind: a no-op pure-ASGI wrapper, asgi-correlation-id, MMObsMiddleware,
starlette_exporter and prometheus-fastapi-instrumentator. In process they are
timed in CPU time (``time.process_time``), interleaved, in the same rounds;
through uvicorn each runs in its own server process and wrk loads them in a
shuffled order each round, with the server's CPU time per request read from
the kernel (``psutil``) next to requests/s.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import random
import statistics
import time
from typing import Any

import _harness as harness
import _servers as servers
import apps
import structlog
from _common import HERE, Config, asgi_scope

#: Requests per in-process sample (one event loop, the app awaited directly).
BATCH = 200
TARGET_ADDED_US = 10.0
TARGET_HTTP_RATIO = 0.95
#: The target: through uvicorn, mmobs ahead of this lightest peer beyond the noise of the run.
PEER = "correlation_id"


def _available() -> tuple[dict[str, Any], list[str]]:
    """The factories whose package is installed, and a note for each one skipped."""
    factories, missing = {}, []
    for name, factory in apps.FACTORIES.items():
        package = apps.PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            missing.append(f"{name} (`pip install '.[bench]'`)")
        else:
            factories[name] = factory
    return factories, missing


def run(cfg: Config, out: harness.Report) -> None:
    out("## 4. Middleware overhead")
    out()
    factories, missing = _available()
    if missing:
        out(f"Not installed, skipped: {', '.join(missing)}.")
        out()
    _in_process(cfg, out, factories)
    _breakdown(cfg, out)
    _over_http(cfg, out, factories)


# -- 4a: in process ----------------------------------------------------------------------


def _mmobs_with_access_log() -> Any:
    """MMObsMiddleware with its canonical line on (``mmobs serve``'s default), written as JSON to /dev/null."""
    from starlette.middleware import Middleware

    from mmobs.asgi.middleware import MMObsMiddleware

    return apps._app([Middleware(MMObsMiddleware, access_log=True)])


def _in_process(cfg: Config, out: harness.Report, factories: dict[str, Any]) -> None:
    import mmobs

    scope = asgi_scope()
    loop = asyncio.new_event_loop()
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def requests(app: Any, n: int) -> None:
        for _ in range(n):
            await app(dict(scope), receive, send)

    # Left open: loggers cached on first use keep writing to it after this section.
    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    mmobs.configure_logging("json", stream=devnull)
    try:
        built = {name: factory() for name, factory in factories.items()}
        built["mmobs + access log"] = _mmobs_with_access_log()
        for app in built.values():
            loop.run_until_complete(requests(app, 5))
        if set(statuses) != {200}:
            raise AssertionError(f"unexpected statuses {set(statuses)}")
        stats = harness.compare(
            {name: (lambda app=app: loop.run_until_complete(requests(app, BATCH))) for name, app in built.items()},
            baseline="bare",
            rounds=cfg.rounds * 2,
            clock=time.process_time,
        )
    finally:
        loop.close()
        structlog.reset_defaults()
        for handler in [h for h in logging.getLogger().handlers if getattr(h, "_mmobs", False)]:
            logging.getLogger().removeHandler(handler)
    rows = []
    for name, s in stats.items():
        added = s.delta / BATCH
        target = harness.verdict(added <= TARGET_ADDED_US * 1e-6) if name == "mmobs" else "-"
        rows.append(
            [
                name,
                harness.fmt_us(s.median / BATCH),
                harness.fmt_us(added) if name != "bare" else "-",
                harness.fmt_ratio(s.ratio),
                target,
            ]
        )
    out("### 4a. In process, CPU time")
    out()
    out(
        f"The app awaited directly (`await app(scope, receive, send)`, a GET scope with three headers, {BATCH} "
        f"requests per sample, one event loop), {cfg.rounds * 2} interleaved rounds, CPU time of this process "
        "(`time.process_time`). Added = median per-round difference to the bare app. `mmobs + access log` "
        "also writes its canonical `http_request` line (`mmobs serve`'s default) as JSON to /dev/null."
    )
    out()
    out(
        harness.table(["app", "us per request", "added us", "vs bare", f"target mmobs <= {TARGET_ADDED_US:g} us"], rows)
    )
    out()


# -- 4b: the pieces ----------------------------------------------------------------------


def _breakdown(cfg: Config, out: harness.Report) -> None:
    """The per-request pieces of MMObsMiddleware, each timed alone (hot)."""
    from mmobs.asgi.middleware import MMObsMiddleware
    from mmobs.observability.context import RequestStats, current_request

    app = apps.bare()
    middleware = MMObsMiddleware(app)
    scope = {**asgi_scope(), "app": app}
    middleware._warm(scope)
    middleware._target(scope)
    series = middleware._series_for("/ping", "GET")
    response_headers = [(b"content-length", b"15"), (b"content-type", b"application/json")]
    id_header = (b"x-request-id", b"0" * 32)
    id_var, route_var = middleware._id_var, middleware._route_var

    def context() -> None:
        token = current_request.set(RequestStats("0" * 32, "/ping"))
        id_token, route_token = id_var.set("0" * 32), route_var.set("/ping")
        route_var.reset(route_token)
        id_var.reset(id_token)
        current_request.reset(token)

    def header() -> None:
        message = {"type": "http.response.start", "status": 200, "headers": response_headers}
        headers = message.get("headers", ())
        for name, _ in headers:
            if name.lower() == id_header[0]:
                break
        else:
            message["headers"] = [*headers, id_header]

    def metrics() -> None:
        series.start()
        series.finish(2, 0.0004, 0.0003, 0, 15, False, False, "0" * 32)

    cases = {
        "request id (128 random bits, hex) and body size, from the headers": lambda: middleware._read_headers(scope),
        "route template and series (cached by method and path)": lambda: (
            middleware._targets.get((scope["method"], scope["path"])) or middleware._target(scope)
        ),
        "RequestStats and structlog's request_id/route, set and reset": context,
        "response header appended to the raw list": header,
        "metrics: start (lock-free) + finish (one lock; flushed on scrape)": metrics,
    }
    stats = harness.compare(
        cases, baseline="response header appended to the raw list", rounds=cfg.rounds, clock=time.process_time
    )
    out("### 4b. Where MMObsMiddleware's time goes")
    out()
    out(
        "Its pieces timed alone, hot (so they add up to less than the added time above, which also pays for "
        "the wrapped `send` and `receive`, the objects of a request and colder caches):"
    )
    out()
    out(harness.table(["piece", "us"], [[name, harness.fmt_us(s.median)] for name, s in stats.items()]))
    out()


# -- 4c: through uvicorn -------------------------------------------------------------------


def _over_http(cfg: Config, out: harness.Report, factories: dict[str, Any]) -> None:
    out("### 4c. Through uvicorn on loopback (wrk)")
    out()
    if servers.shutil.which("wrk") is None:
        out("wrk is not installed (`apt-get install -y wrk`): skipped.")
        out()
        return
    connections = 16
    specs = [(name, servers.uvicorn_argv(f"apps:{name}", app_dir=str(HERE)), "/ping") for name in factories]
    runs: dict[str, list[tuple[servers.WrkResult, float]]] = {name: [] for name in factories}
    rng = random.Random(4)
    with servers.servers(specs) as running:
        for server in running.values():  # warm-up
            servers.wrk(server.url + "/ping", duration=1, connections=connections)
        for _ in range(cfg.http_rounds):
            order = list(running)
            rng.shuffle(order)
            for name in order:
                before = sum(servers.cpu_seconds(running[name]).values())
                result = servers.wrk(running[name].url + "/ping", duration=cfg.http_seconds, connections=connections)
                cpu = sum(servers.cpu_seconds(running[name]).values()) - before
                runs[name].append((result, cpu / max(result.requests, 1)))
    bare = runs["bare"]
    rows = []
    for name, samples in runs.items():
        ratio = statistics.median(
            r.requests_per_second / b.requests_per_second for (r, _), (b, _) in zip(samples, bare)
        )
        cpu_ratio = statistics.median(b_cpu / cpu for (_, cpu), (_, b_cpu) in zip(samples, bare))
        added = statistics.median(cpu - b_cpu for (_, cpu), (_, b_cpu) in zip(samples, bare))
        rows.append(
            [
                name,
                f"{statistics.median(r.requests_per_second for r, _ in samples):,.0f}",
                f"{ratio:.3f}x",
                harness.fmt_us(statistics.median(cpu for _, cpu in samples)),
                harness.fmt_us(added) if name != "bare" else "-",
                f"{cpu_ratio:.3f}x",
                harness.fmt_time(statistics.median(r.latency_p99 for r, _ in samples)),
                str(sum(r.non_2xx + r.errors for r, _ in samples)),
                harness.verdict(ratio >= TARGET_HTTP_RATIO and cpu_ratio >= TARGET_HTTP_RATIO)
                if name == "mmobs"
                else "-",
            ]
        )
    ahead = _against_peer(runs) if PEER in runs and "mmobs" in runs else None
    out(
        f"One uvicorn process per app (1 worker, asyncio loop, h11 unless httptools is installed, access log "
        f"off), all on 127.0.0.1; `wrk -t1 -c{connections} -d{cfg.http_seconds:g}s` against `GET /ping`, "
        f"{cfg.http_rounds} rounds with the apps in a shuffled order each round. `vs bare` is the median of "
        "per-round ratios of requests/s; `server CPU` is the server process's user + system CPU time per "
        "request in the same run (psutil), and `CPU vs bare` the median per-round ratio bare / app of it: the "
        "requests/s ratio a server that owned its core would see. wrk shares the two cores with the server "
        "(and this machine with other work), so the absolute rates are low and the requests/s ratios noisy."
    )
    out()
    out(
        harness.table(
            [
                "app",
                "requests/s",
                "vs bare",
                "server CPU us / request",
                "added CPU us",
                "CPU vs bare",
                "p99 latency",
                "errors/non-2xx",
                f"target mmobs >= {TARGET_HTTP_RATIO}x",
            ],
            rows,
        )
    )
    out()
    if ahead is not None:
        out(
            f"mmobs against {PEER} (target: ahead beyond the noise of the run), paired by round: the median "
            "of the per-round ratios, with their quartiles; ahead beyond the noise means the lower quartile is "
            "above 1 for both."
        )
        out()
        out(harness.table(["measure", "mmobs / peer (median)", "quartiles", "target: ahead beyond noise"], ahead))
        out()


def _against_peer(runs: dict[str, list[tuple[Any, float]]]) -> list[list[str]]:
    """Rows of mmobs / peer requests/s and peer / mmobs CPU per request, paired by round, with verdicts."""
    pairs = list(zip(runs["mmobs"], runs[PEER]))
    measures = {
        "requests/s (mmobs / peer)": [m.requests_per_second / p.requests_per_second for (m, _), (p, _) in pairs],
        "server CPU per request (peer / mmobs)": [p_cpu / m_cpu for (_, m_cpu), (_, p_cpu) in pairs],
    }
    rows = []
    for name, ratios in measures.items():
        low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else (ratios[0], 0.0, ratios[0])
        rows.append([name, f"{statistics.median(ratios):.3f}x", f"{low:.3f} - {high:.3f}", harness.verdict(low > 1)])
    return rows
