"""One clean log stream: ``configure_logging`` puts everything a process logs into one format.

In process, on a ``StringIO``: mmobs's events, stdlib records (uvicorn's
loggers among them), tracebacks as a field, Python warnings as events and
Pillow's ``Corrupt EXIF data`` warnings counted, uncaught thread exceptions,
the request context on all of them. ``tests/service/test_log_stream.py`` checks the
same against a real ``mmobs serve``.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from mmobs.events import observing
from mmobs.observability.context import RequestStats, current_request
from mmobs.observability.instrument import Instrumentation
from mmobs.observability.logs import REQUEST_ATTRIBUTE, capture_warnings, configure_logging

CORRUPT_EXIF = "Corrupt EXIF data.  Expecting to read 12 bytes but only got 4. "


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A fresh stream that configure_logging writes to; everything it changed is put back afterwards."""
    out = io.StringIO()
    root = logging.getLogger()
    saved = (root.level, list(root.handlers), sys.excepthook, threading.excepthook, warnings.showwarning)
    saved_uvicorn = {
        name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate)
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
    }
    saved_filters = warnings.filters[:]
    try:
        yield out
    finally:
        structlog.reset_defaults()
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        sys.excepthook, threading.excepthook, warnings.showwarning = saved[2], saved[3], saved[4]
        warnings.filters[:] = saved_filters
        for name, (handlers, propagate) in saved_uvicorn.items():
            logging.getLogger(name).handlers[:] = handlers
            logging.getLogger(name).propagate = propagate


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    """Every line one JSON object; of the warnings, only those this file raised.

    configure_logging makes every warning of the process an event, as it should. Here the process is a test
    worker: another thread (a server an earlier test left running) may warn at any time, and the garbage
    collector may, here, about an earlier test's unclosed resource. Those are not this file's events.
    """
    text = out.getvalue()
    assert text.endswith("\n")
    events = [json.loads(line) for line in text.splitlines()]
    return [e for e in events if e["event"] != "python_warning" or e["filename"] == __file__]


def test_stdlib_records_become_json_lines_with_the_same_fields(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
    structlog.get_logger("mmobs").info("own_event", answer=42)

    started, own = lines(stream)
    assert started["event"] == "Started server process [42]"
    assert (started["level"], started["logger"]) == ("info", "uvicorn.error")
    assert set(own) >= {"event", "level", "timestamp", "process"} and own["answer"] == 42
    assert set(started) >= {"event", "level", "timestamp", "process"}


def test_a_traceback_is_a_field_and_the_exception_names_its_request(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError as error:
        setattr(error, REQUEST_ATTRIBUTE, ("req-9", "/v1/hash"))  # what the middleware does
        logging.getLogger("uvicorn.error").error("Exception in ASGI application\n", exc_info=error)

    (line,) = lines(stream)
    assert line["event"] == "Exception in ASGI application\n"
    assert (line["exception"], line["error"]) == ("RuntimeError", "boom\\nsecond line")
    assert line["traceback"].startswith("Traceback (most recent call last):")
    assert line["traceback"].rstrip().endswith("RuntimeError: boom\nsecond line")
    assert (line["request_id"], line["route"]) == ("req-9", "/v1/hash")


def test_uvicorn_access_lines_are_fields_with_the_request_id(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)
    token = current_request.set(RequestStats("req-1", "/v1/hash"))
    try:
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", "/v1/hash?x=1", "1.1", 200
        )
    finally:
        current_request.reset(token)

    (line,) = lines(stream)
    assert {k: line[k] for k in ("client", "method", "path", "http_version", "status", "request_id", "route")} == {
        "client": "127.0.0.1:5000", "method": "POST", "path": "/v1/hash?x=1", "http_version": "1.1",
        "status": 200, "request_id": "req-1", "route": "/v1/hash",
    }  # fmt: skip


def test_warnings_are_events_and_corrupt_exif_ones_are_counted(stream: io.StringIO) -> None:
    registry = CollectorRegistry()
    # From Python's own filters, whatever other code in this process added (an "ignore" or a "default" in
    # front of configure_logging's "always" would hide a warning): the outcome is then this code's alone.
    with warnings.catch_warnings():
        warnings.resetwarnings()
        configure_logging("json", stream=stream)
        with observing(Instrumentation(registry, hasher_info=False)):
            token = current_request.set(RequestStats("req-w", "/v1/hash"))
            try:
                for _ in range(3):  # the same text from the same line: shown (and counted) every time
                    warnings.warn(CORRUPT_EXIF, UserWarning, stacklevel=1)
                warnings.warn("something else", DeprecationWarning, stacklevel=1)
            finally:
                current_request.reset(token)

    events = lines(stream)  # with the filters reset, ResourceWarnings too: lines() keeps this file's alone
    assert [e["event"] for e in events] == ["python_warning"] * 4
    assert [e["category"] for e in events] == ["UserWarning"] * 3 + ["DeprecationWarning"]
    assert events[0]["warning"] == CORRUPT_EXIF.rstrip() + " " and events[0]["request_id"] == "req-w"
    assert events[0]["filename"] == __file__ and isinstance(events[0]["lineno"], int)
    assert registry.get_sample_value("mmobs_exif_corrupt_warnings_total") == 3.0


def test_capturing_warnings_is_idempotent_and_undone(stream: io.StringIO) -> None:
    before = warnings.showwarning
    capture_warnings()
    capture_warnings()
    assert warnings.showwarning is not before
    assert sum(1 for f in warnings.filters if f[0] == "always" and f[1] and f[1].pattern == "Corrupt EXIF data") == 1
    capture_warnings(False)
    assert warnings.showwarning is before


def test_an_uncaught_thread_exception_is_one_json_line(stream: io.StringIO) -> None:
    configure_logging("json", stream=stream)

    def fail() -> None:
        raise ValueError("in a thread")

    thread = threading.Thread(target=fail, name="worker-1")
    thread.start()
    thread.join()

    (line,) = lines(stream)
    assert (line["event"], line["thread"], line["exception"]) == ("uncaught_thread_exception", "worker-1", "ValueError")
    assert "in a thread" in line["traceback"]


def test_console_stays_readable(stream: io.StringIO) -> None:
    configure_logging("console", stream=stream)
    try:
        raise KeyError("k")
    except KeyError:
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    structlog.get_logger("mmobs").warning("exif_fallback", exception="SyntaxError")

    text = stream.getvalue()
    assert "Exception in ASGI application" in text and "Traceback (most recent call last):" in text
    assert "exif_fallback" in text and "exception_type=SyntaxError" in text
    assert not text.lstrip().startswith("{")


def test_levels_filter_both_sides(stream: io.StringIO) -> None:
    configure_logging("json", "warning", stream=stream)
    logging.getLogger("uvicorn.error").info("not shown")
    structlog.get_logger("mmobs").info("not shown either")
    logging.getLogger("asyncio").warning("shown")
    assert [line["event"] for line in lines(stream)] == ["shown"]
