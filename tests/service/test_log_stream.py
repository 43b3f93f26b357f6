"""``mmobs serve --log-format json`` under the whole corpus: one clean log stream.

A real service (1 worker, then 2) gets every corpus case over HTTP, each
request tagged with its own ``X-Request-ID``. Its whole output (stderr, and
stdout, which stays empty) must then be:

* one JSON object per line, uvicorn's records, warnings and tracebacks included;
* ``request_id`` (and ``route``) on every line logged for a request; the only
  lines without one are the server's life cycle and requests the HTTP parser
  refused before any app saw them (no request id exists for those: the
  answer carries none either);
* exactly one canonical ``http_request`` line per request that reached the
  app, agreeing with the response (status, request id) and with the events
  logged for it (fallbacks, the bad-image reason).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.test_corpus import CASES, make_corpus, send
from tests.support import ServiceProcess, metric_value

#: Life-cycle lines of uvicorn (no request involved), by message.
LIFECYCLE = re.compile(
    r"(Started server process|Waiting for application (startup|shutdown)|Application (startup|shutdown) complete"
    r"|Uvicorn running on|Shutting down|Finished server process|Started parent process|Waiting for child process"
    r"|Stopping parent process|Child process \[\d+\] died|Received SIG\w+, exiting|Terminated child process)"
)
#: What h11 answers itself, before the app (and so before any request id), to a request it cannot parse.
REFUSED_BY_THE_PARSER = "Invalid HTTP request received."
REQUEST_EVENTS = {
    "http_request", "exif_fallback", "exif_transpose_failed", "bad_image", "cache_key_drift",
    "bad_image_after_response_started",
}  # fmt: skip
CANONICAL_FIELDS = {
    "request_id", "route", "method", "path", "status", "duration_s", "ttfb_s", "request_bytes", "response_bytes",
    "images", "exif_fallbacks", "bad_images", "bad_image_reason", "client", "level", "timestamp", "process",
}  # fmt: skip


@dataclasses.dataclass
class Exchange:
    case: Any
    request_id: str | None  # None: the case sends an X-Request-ID of its own
    response: httpx.Response | None


def _tagged(case: Any, request_id: str) -> Any:
    """The case with ``X-Request-ID: request_id`` added to what goes over a raw socket."""
    if case.transport in ("socket", "trickle", "cut"):
        return dataclasses.replace(case, headers=(*case.headers, ("X-Request-ID", request_id)))
    return case


@dataclasses.dataclass
class Served:
    lines: list[str]
    exchanges: list[Exchange]
    metrics: str
    workers: int

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]


@pytest.fixture(scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workers = request.param
    service = ServiceProcess(
        tmp_path_factory.mktemp(f"log-stream-{workers}"),
        *make_corpus.SERVE_ARGS, "--log-level", "info", "--log-format", "json", "--workers", str(workers),
    )  # fmt: skip
    exchanges: list[Exchange] = []
    try:
        with httpx.Client(base_url=service.url, timeout=60) as client:
            for index, case in enumerate(CASES):
                own = any(name.lower() == "x-request-id" for name, _ in case.headers)
                request_id = None if own else f"corpus-{workers}-{index:04d}"
                client.headers.pop("X-Request-ID", None)
                if request_id:
                    client.headers["X-Request-ID"] = request_id
                try:
                    response = send(client, _tagged(case, request_id) if request_id else case, service.port)
                except (httpx.HTTPError, OSError):
                    response = None  # a transport the server cut: the log must still be clean
                exchanges.append(Exchange(case, request_id, response))
        metrics = service.metrics()
    finally:
        service.stop()
    yield Served(service.logs().splitlines(), exchanges, metrics, workers)


def test_every_line_is_one_json_object(served: Served) -> None:
    lines = served.lines
    assert len(lines) > len(CASES)
    bad = []
    for number, line in enumerate(lines, 1):
        try:
            assert isinstance(json.loads(line), dict)
        except (ValueError, AssertionError):
            bad.append(f"{number}: {line[:200]}")
    assert not bad, "lines that are not one JSON object:\n" + "\n".join(bad[:20])


def test_every_line_about_a_request_names_it(served: Served) -> None:
    events = served.events()
    unnamed = [
        e for e in events
        if "request_id" not in e
        and not (e.get("logger") == "uvicorn.error" and LIFECYCLE.match(e["event"]))
        and not (e.get("logger") == "uvicorn.error" and e["event"] == REFUSED_BY_THE_PARSER)
        and e["event"] != "multiprocess_metrics"
    ]  # fmt: skip
    assert unnamed == [], unnamed[:5]
    for event in events:
        if event["event"] in REQUEST_EVENTS or event.get("logger") == "uvicorn.access" or "traceback" in event:
            assert event.get("request_id") and event.get("route"), event
    assert not [e for e in events if "traceback" in e], "a request ended in a traceback"
    assert not [e for e in events if e.get("logger") == "uvicorn.access"], "uvicorn's access log was not asked for"


def test_one_canonical_line_per_request(served: Served) -> None:
    exchanges, events = served.exchanges, served.events()
    canonical = [e for e in events if e["event"] == "http_request"]
    per_id = Counter(e["request_id"] for e in canonical)
    assert [rid for rid, n in per_id.items() if n != 1] == []
    by_id = {e["request_id"]: e for e in canonical}
    answered = 0
    for exchange in exchanges:
        response = exchange.response
        echoed = response.headers.get("x-request-id") if response is not None else None
        if echoed is None:
            # Refused by the HTTP parser before the app (or the answer never came): no line may claim it.
            assert exchange.request_id is None or exchange.request_id not in by_id or response is None, (
                exchange.case.name
            )
            continue
        answered += 1
        if exchange.request_id is not None:
            assert echoed == exchange.request_id, exchange.case.name
        line = by_id[echoed]
        assert set(line) >= CANONICAL_FIELDS, (exchange.case.name, sorted(CANONICAL_FIELDS - set(line)))
        assert line["status"] == response.status_code, exchange.case.name
        assert line["level"] == ("error" if response.status_code >= 500 else "info")
        if exchange.case.ok:
            assert (line["images"], line["exif_fallbacks"] > 0) == (1, exchange.case.fallback), exchange.case.name
        if exchange.case.code == "bad_image":
            assert line["bad_image_reason"] == exchange.case.reason, exchange.case.name
    assert answered >= 0.9 * len(exchanges)
    tagged = {x.request_id for x in exchanges if x.request_id}
    assert set(by_id) <= tagged | {x.response.headers.get("x-request-id") for x in exchanges if x.response is not None}


def test_fallback_and_bad_image_events_carry_their_requests_id(served: Served) -> None:
    exchanges, events = served.exchanges, served.events()
    fallbacks = Counter(e["request_id"] for e in events if e["event"] == "exif_fallback")
    for exchange in exchanges:
        if exchange.case.ok and exchange.case.fallback and exchange.request_id:
            assert fallbacks[exchange.request_id] >= 1, exchange.case.name
    canonical = {e["request_id"]: e for e in events if e["event"] == "http_request"}
    for request_id, count in fallbacks.items():
        assert canonical[request_id]["exif_fallbacks"] == count


def test_warnings_are_events_and_corrupt_exif_ones_are_counted(served: Served) -> None:
    warned = [e for e in served.events() if e["event"] == "python_warning"]
    corrupt = [e for e in warned if e["warning"].startswith("Corrupt EXIF data")]
    assert corrupt, "the corpus has broken EXIF that Pillow warns about"
    assert all(e["request_id"] and e["route"] == "/v1/hash" for e in warned)
    assert all(e["category"] == "UserWarning" for e in corrupt)
    assert metric_value(served.metrics, "mmobs_exif_corrupt_warnings_total") == len(corrupt)


def test_every_worker_logged(served: Served) -> None:
    processes = {event["process"] for event in served.events()}
    assert len(processes) == (1 if served.workers == 1 else 3)  # with workers, the supervisor logs too


def test_uvicorns_access_lines_when_asked_for_are_json_with_the_request_id(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, "--workers", "2", "--access-log", "--no-request-log")
    try:
        for n in range(4):
            httpx.post(service.url + "/v1/hash", json={"images": ["data:,x"]}, headers={"X-Request-ID": f"a-{n}"})
    finally:
        service.stop()
    events = [json.loads(line) for line in service.logs().splitlines()]
    access = [e for e in events if e.get("logger") == "uvicorn.access" and e["path"] != "/healthz"]  # not the probe
    assert sorted(e["request_id"] for e in access) == ["a-0", "a-1", "a-2", "a-3"]
    assert {(e["method"], e["path"], e["status"], e["route"]) for e in access} == {
        ("POST", "/v1/hash", 400, "/v1/hash")
    }
    assert not [e for e in events if e["event"] == "http_request"]


def test_console_format_is_for_people(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, "--log-format", "console")
    try:
        httpx.post(service.url + "/v1/hash", json={"images": ["data:image/png;base64,AAAA"]}, timeout=30)
    finally:
        service.stop()
    text = service.logs()
    assert "Application startup complete." in text and "http_request" in text and "bad_image" in text
    assert not any(line.lstrip().startswith("{") for line in text.splitlines())
