"""The observability layer's log events: safe fields, request context, rate limits, structlog left alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import structlog
from structlog.testing import LogCapture, capture_logs

from mmobs import ImageMediaIO, MultiModalHasher
from mmobs.events import observing
from mmobs.observability.instrument import Instrumentation
from mmobs.observability.log_fields import MAX_FIELD_CHARS, safe_text
from tests.observability.golden_inputs import BAD_HEADER_JPEG, fresh_bad_png
from tests.support import golden, value


def test_safe_text_escapes_and_truncates():
    assert safe_text("line1\nline2\r\x00") == "line1\\nline2\\r\\x00"
    long = safe_text("x" * 10_000)
    assert len(long) == MAX_FIELD_CHARS and long.endswith("\u2026")
    assert safe_text(b"\xff\xfe") == "b'\\xff\\xfe'"


def test_request_context_reaches_hashing_events(registry, instr):
    capture = LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        structlog.contextvars.bind_contextvars(request_id="req-42", route="/v1/hash")
        MultiModalHasher.hash_kwargs("blake3", image=fresh_bad_png())
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
    (event,) = [e for e in capture.entries if e["event"] == "exif_fallback"]
    assert event["request_id"] == "req-42" and event["route"] == "/v1/hash"


def test_log_rate_limit_limits_logs_not_counts(registry):
    limited = Instrumentation(registry, log_interval_seconds=3600, hasher_info=False)
    with observing(limited), capture_logs() as logs:
        for _ in range(4):
            MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(BAD_HEADER_JPEG))
    assert value(registry, "mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError") == 4
    assert len([e for e in logs if e["event"] == "exif_fallback"]) == 1


def test_importing_mmobs_does_not_configure_structlog():
    code = "import structlog, mmobs; print(structlog.is_configured())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_default_set_up_counts_into_global_registry():
    code = textwrap.dedent(
        f"""
        import prometheus_client, mmobs
        media = mmobs.ImageMediaIO().load_bytes(open({str(golden.GOLDEN_DIR / "inputs" / "bad-exif-header.jpg")!r}, 'rb').read())
        mmobs.MultiModalHasher.hash_kwargs("blake3", image=media)
        print(prometheus_client.REGISTRY.get_sample_value(
            "mmobs_exif_fallback_total", {{"kind": "media_with_bytes", "exception": "SyntaxError"}}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "1.0"
    assert "exif_fallback" in result.stdout


def test_observer_can_be_turned_off(registry, instr):
    with observing(None):
        MultiModalHasher.hash_kwargs("blake3", image=fresh_bad_png())
    assert value(registry, "mmobs_exif_fallback_total", kind="image", exception="SyntaxError") == 0


_UNCONFIGURED_PROBE = """
from mmobs import ImageMediaIO, MultiModalHasher
from tests.support import golden
media = ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg"))
MultiModalHasher.hash_kwargs("blake3", image=media)
"""


def test_events_keep_one_line_where_nobody_configured_structlog():
    """In an application that never configures structlog (vLLM), a fallback is one console line.

    structlog's default renderer would print the ``exception`` field as a
    traceback below the line; mmobs keeps its label inline instead.
    """
    result = subprocess.run(
        [sys.executable, "-c", _UNCONFIGURED_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    (line,) = result.stdout.splitlines()
    assert "exif_fallback" in line and "exception_type=SyntaxError" in line and "kind=media_with_bytes" in line
