"""mmobs's events through stdlib logging (``mmobs.observability.stdlib_events``), as the vLLM plugin routes them.

In process, with a stdlib logger tree shaped as vLLM's (``vllm`` with its own
handler, ``propagate=False``): one record per event, its message readable by a
text formatter, its fields keys of :class:`JSONFormatter`'s object, the request
context on it. ``tests/vllm/test_vllm_server.py`` checks the same in a real
``vllm serve``, with vLLM's formatter and a ``VLLM_LOGGING_CONFIG_PATH`` config.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
import structlog
from prometheus_client import CollectorRegistry

from mmobs import ImageMediaIO, MultiModalHasher
from mmobs.events import observing
from mmobs.observability.context import RequestStats, current_request
from mmobs.observability.instrument import Instrumentation
from mmobs.observability.stdlib_events import JSONFormatter, log_events_to_stdlib
from tests.support import golden

TEXT_FORMAT = "%(levelname)s [%(filename)s:%(lineno)d] %(message)s"


@pytest.fixture
def vllm_tree() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """A ``vllm`` logger writing text to one stream and JSON to another; mmobs's events routed to ``vllm.mmobs``."""
    saved_structlog = structlog.get_config()
    structlog.reset_defaults()  # the route is for hosts that never configure structlog
    text, as_json = io.StringIO(), io.StringIO()
    logger = logging.getLogger("vllm")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    text_handler, json_handler = logging.StreamHandler(text), logging.StreamHandler(as_json)
    text_handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    json_handler.setFormatter(JSONFormatter())
    logger.handlers = [text_handler, json_handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    log_events_to_stdlib("vllm.mmobs")
    try:
        yield text, as_json
    finally:
        log_events_to_stdlib(None)
        logger.handlers, logger.level, logger.propagate = saved
        structlog.configure(**saved_structlog)


def test_a_fallback_is_one_record_for_text_and_json_formatters(vllm_tree: tuple[io.StringIO, io.StringIO]) -> None:
    text, as_json = vllm_tree
    instrumentation = Instrumentation(CollectorRegistry(), hasher_info=False)
    token = current_request.set(RequestStats("req-7", "/v1/chat/completions"))
    try:
        with observing(instrumentation):
            media = ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg"))
            MultiModalHasher.hash_kwargs("blake3", image=media)
    finally:
        current_request.reset(token)
    (line,) = text.getvalue().splitlines()
    assert line.startswith("WARNING [instrument.py:")  # the line in mmobs that logged, not the adapter
    assert ' exif_fallback kind=media_with_bytes exception=SyntaxError error="not a TIFF file' in line
    assert line.endswith("request_id=req-7 route=/v1/chat/completions")
    (record,) = map(json.loads, as_json.getvalue().splitlines())
    assert (record["event"], record["level"], record["logger"]) == ("exif_fallback", "warning", "vllm.mmobs")
    assert (record["kind"], record["exception"], record["key_source"]) == (
        "media_with_bytes",
        "SyntaxError",
        "original_bytes",
    )
    assert (record["request_id"], record["route"], record["size"]) == ("req-7", "/v1/chat/completions", [64, 48])
    assert record["file"] == "instrument.py" and isinstance(record["process"], int)


def test_field_names_a_log_record_owns_are_kept_apart(vllm_tree: tuple[io.StringIO, io.StringIO]) -> None:
    """A field called like a LogRecord attribute would raise in ``makeRecord`` or overwrite the record's own."""
    text, as_json = vllm_tree
    from mmobs.observability.logs import mmobs_logger

    mmobs_logger().info("odd_event", message="hello world", module="m", name='quote "x"', count=3)
    assert text.getvalue().strip().endswith('odd_event message="hello world" module=m name="quote \\"x\\"" count=3')
    (record,) = map(json.loads, as_json.getvalue().splitlines())
    assert record["logger"] == "vllm.mmobs"
    assert (record["message_"], record["module_"], record["name_"], record["count"]) == (
        "hello world",
        "m",
        'quote "x"',
        3,
    )


def test_levels_below_the_hosts_are_not_even_formatted(vllm_tree: tuple[io.StringIO, io.StringIO]) -> None:
    text, _ = vllm_tree
    from mmobs.observability.logs import mmobs_logger

    mmobs_logger().debug("quiet", detail=object())
    assert text.getvalue() == ""


def test_a_foreign_record_is_an_event_of_its_message() -> None:
    record = logging.makeLogRecord(
        {"name": "vllm.engine", "msg": "Received request %s", "args": ("chatcmpl-1",), "levelname": "INFO"}
    )
    rendered = json.loads(JSONFormatter().format(record))
    assert (rendered["event"], rendered["logger"], rendered["level"]) == (
        "Received request chatcmpl-1",
        "vllm.engine",
        "info",
    )


def test_without_the_route_events_go_to_mmobss_console_logger(capsys: pytest.CaptureFixture[str]) -> None:
    from mmobs.observability.logs import mmobs_logger

    saved_structlog = structlog.get_config()
    structlog.reset_defaults()
    try:
        log_events_to_stdlib(None)
        mmobs_logger().warning("console_event", kind="image")
    finally:
        structlog.configure(**saved_structlog)
    assert "console_event" in capsys.readouterr().out


# -- read back: mmobs.observability.log_reader -------------------------------------------------------

#: vLLM's text format (``vllm.logging_utils``): process, pid, level, month-day time, file and line.
VLLM_TEXT_FORMAT = "(APIServer pid=%(process)d) %(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
AWKWARD_FIELDS = {
    "text": "two words",
    "empty": "",
    "looks_true": "true",
    "looks_number": "12",
    "quoted": 'say "hi"',
    "backslash": "b'XX\\x00'",
    "newline": "one\ntwo",
    "unicode": "é",
    "none": None,
    "flag": True,
    "count": 3,
    "ratio": 0.5,
    "size": [64, 48],
}


def test_text_and_json_lines_read_back_as_the_same_event() -> None:
    """What an event logged, read back from vLLM's text line and from the JSON line alike."""
    from mmobs.observability.log_reader import read_events
    from mmobs.observability.logs import mmobs_logger

    saved_structlog = structlog.get_config()
    structlog.reset_defaults()
    text, as_json = io.StringIO(), io.StringIO()
    logger = logging.getLogger("vllm")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    text_handler, json_handler = logging.StreamHandler(text), logging.StreamHandler(as_json)
    text_handler.setFormatter(logging.Formatter(VLLM_TEXT_FORMAT, datefmt="%m-%d %H:%M:%S"))
    json_handler.setFormatter(JSONFormatter())
    logger.handlers, logger.propagate = [text_handler, json_handler], False
    logger.setLevel(logging.INFO)
    log_events_to_stdlib("vllm.mmobs")
    try:
        mmobs_logger().warning("odd_event", **AWKWARD_FIELDS)
        logging.getLogger("vllm.engine").info("Received request %s: k=v", "chatcmpl-1")
    finally:
        log_events_to_stdlib(None)
        logger.handlers, logger.level, logger.propagate = saved
        structlog.configure(**saved_structlog)
    from_text = list(read_events([*text.getvalue().splitlines(), "INFO:     Started server process [1]"]))
    from_json = list(read_events(as_json.getvalue().splitlines()))
    assert (
        [e["event"] for e in from_text]
        == [e["event"] for e in from_json]
        == [
            "odd_event",
            "Received request chatcmpl-1: k=v",
        ]
    )
    for event in (from_text[0], from_json[0]):
        assert {name: event[name] for name in AWKWARD_FIELDS} == AWKWARD_FIELDS
        assert (event["level"], event["file"]) == ("warning", "test_stdlib_events.py")
    assert from_text[0]["process_name"] == "APIServer" and from_text[0]["process"] == from_json[0]["process"]
    assert re.fullmatch(r"\d\d-\d\d \d\d:\d\d:\d\d", from_text[0]["timestamp"])


def test_lines_that_are_no_record_are_left_out() -> None:
    from mmobs.observability.log_reader import parse_line

    for line in ("", "Traceback (most recent call last):", "[1, 2]", "{not json", "INFO:     Waiting for application"):
        assert parse_line(line) is None, line
    # vLLM's own JSON formatter renders the record's attributes: its message becomes the event.
    assert parse_line('{"message": "Started", "levelname": "INFO"}') == {"event": "Started", "levelname": "INFO"}
    assert parse_line('{"event": "exif_fallback", "mmobs_fields": ["kind"], "kind": "image"}') == {
        "event": "exif_fallback",
        "kind": "image",
    }
