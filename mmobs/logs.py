"""structlog set-up and the helpers that keep log fields bounded and safe.

The library only ever calls ``structlog.get_logger``; it never configures
structlog on import. Applications (and the ``mmobs`` CLI) call
:func:`configure_logging` once at start-up.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Literal, TextIO

import structlog

__all__ = ["MAX_FIELD_CHARS", "LogFormat", "configure_logging", "safe_text"]

#: Longest text (an exception message, a header) that goes into a log field.
MAX_FIELD_CHARS = 200

LogFormat = Literal["json", "console"]


def safe_text(value: object, limit: int = MAX_FIELD_CHARS) -> str:
    """``str(value)`` with control characters escaped and the length bounded.

    Exception messages from image decoders can carry raw bytes from the file
    (newlines included); escaping them keeps one event on one line and stops
    log injection.
    """
    text = str(value)
    if len(text) > limit * 4:
        text = text[: limit * 4]
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return text


def _add_process_id(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """The worker's pid: with several workers, says which one logged.

    (structlog's CallsiteParameterAdder would walk the stack on every event.)
    """
    event_dict["process"] = os.getpid()
    return event_dict


def _exception_label_inline(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Keep mmobs's one-word ``exception`` label on the event line in console output.

    structlog's ConsoleRenderer prints an ``exception`` field as a traceback
    below the line; mmobs events use that key for the exception class name
    (matching the metric label), so the console shows it inline instead.
    """
    label = event_dict.get("exception")
    if isinstance(label, str) and "\n" not in label:
        event_dict["exception_type"] = event_dict.pop("exception")
    return event_dict


def configure_logging(
    format: LogFormat = "json",
    level: str | int = "info",
    stream: TextIO | None = None,
) -> None:
    """Configure structlog for an application: JSON (one event a line) or console.

    Request context bound by the middleware (``request_id``, ``route``) is
    merged into every event through ``structlog.contextvars``.
    """
    if format not in ("json", "console"):
        raise ValueError(f"log format must be 'json' or 'console', not {format!r}")
    numeric_level = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric_level, int):
        raise ValueError(f"unknown log level {level!r}")
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_process_id,
        structlog.processors.format_exc_info,
    ]
    if format == "json":
        processors.append(structlog.processors.JSONRenderer())
    else:
        processors += [_exception_label_inline, structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.WriteLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=True,
    )
