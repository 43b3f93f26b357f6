"""mmobs's events through stdlib :mod:`logging`, for hosts whose log stream is stdlib's (vLLM).

A host like vLLM configures stdlib logging (its handler, its format with the
process prefix, level and time; or the user's ``VLLM_LOGGING_CONFIG_PATH``)
and never configures structlog. There, mmobs's events should be lines of that
stream, not a second stream in a format of their own. :func:`log_events_to_stdlib`
sends them to a stdlib logger under the host's tree while structlog is
unconfigured (an application that configures structlog still gets them through
structlog). Each event becomes one record that serves both kinds of formatter:

* its message is the event name and its fields, ``key=value`` (logfmt), so a
  text formatter (vLLM's ``%(message)s``) shows everything on one line;
* its fields are attributes of the record too, with ``event`` and
  ``mmobs_fields`` (their names), so a JSON formatter renders them as keys:
  :class:`JSONFormatter`.

The current request's ``request_id`` and ``route`` are added as in
:func:`mmobs.observability.logs.add_request_context`.
"""

from __future__ import annotations

import json
import logging
import traceback
from datetime import UTC, datetime
from typing import Any

from mmobs.observability.context import current_request
from mmobs.observability.log_fields import safe_text
from mmobs.observability.tracing import current_trace_id

#: Public: the formatter a logging config names (``mmobs vllm-logging-config`` writes one); the rest is
#: mmobs's own.
__all__ = ["JSONFormatter"]

#: Attributes every LogRecord has (and ``message``/``asctime``, which formatting adds): a field of
#: that name is renamed with a trailing underscore, never allowed to overwrite the record's own.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


_route: StdlibEventLogger | None = None


def log_events_to_stdlib(name: str | None) -> None:
    """Send mmobs's events to the stdlib logger ``name`` while structlog is unconfigured (``None``: don't)."""
    global _route
    _route = StdlibEventLogger(logging.getLogger(name)) if name is not None else None


def events_route() -> StdlibEventLogger | None:
    """The stdlib logger chosen by :func:`log_events_to_stdlib`, if any (read by :mod:`mmobs.observability.logs`)."""
    return _route


_JSON_STARTS = frozenset('-0123456789tfnNI[{"')


def _logfmt_value(value: Any) -> str:
    """A field's value for a text line: bare where that reads back unchanged, else a JSON string.

    Non-strings are compact JSON (``null``, ``true``, ``[64,48]``); one that holds a quote or a
    space (a list of texts) is written as a JSON string of that JSON. A string is quoted when it is
    empty, holds a space, ``=``, a quote, a backslash or an unprintable character, or would read
    back as something else (``"true"``, ``"12"``), so :mod:`mmobs.observability.log_reader` gets
    back what was logged.
    """
    if not isinstance(value, str):
        text = json.dumps(value, default=str, separators=(",", ":"))
        return text if text.isprintable() and not any(ch in text for ch in ' "') else json.dumps(text)
    if value == "" or not value.isprintable() or any(ch in value for ch in ' ="\\') or _reads_as_json(value):
        return json.dumps(value)
    return value


def _reads_as_json(text: str) -> bool:
    if text[0] not in _JSON_STARTS:
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class StdlibEventLogger:
    """The structlog-like logger (``warning(event, **fields)``...) of mmobs's events, on a stdlib logger."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, fields)

    def critical(self, event: str, **fields: Any) -> None:
        self._log(logging.CRITICAL, event, fields)

    def _log(self, level: int, event: str, fields: dict[str, Any]) -> None:
        if not self.logger.isEnabledFor(level):
            return
        request = current_request.get()
        if request is not None:
            fields.setdefault("request_id", request.request_id)
            fields.setdefault("route", request.route)
            trace_id = current_trace_id()
            if trace_id is not None:
                fields.setdefault("trace_id", trace_id)
        extra: dict[str, Any] = {
            (f"{key}_" if key in _RECORD_ATTRIBUTES else key): value for key, value in fields.items()
        }
        names = tuple(extra)
        extra.update(event=event, mmobs_fields=names)
        message = " ".join([event, *(f"{key}={_logfmt_value(value)}" for key, value in fields.items())])
        # stacklevel 4: the record names the line in mmobs that logged, not this adapter nor
        # mmobs_logger's wrapper (which adds the event to the active span) that called it.
        self.logger.log(level, "%s", message, extra=extra, stacklevel=4)


class JSONFormatter(logging.Formatter):
    """One JSON object a line for any stdlib record, mmobs's events with their fields as keys.

    For a logging config (vLLM's ``VLLM_LOGGING_CONFIG_PATH`` included)::

        "formatters": {"json": {"()": "mmobs.observability.stdlib_events.JSONFormatter"}}

    Keys: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``event`` (an mmobs
    event's name, else the record's message), ``process``, ``process_name`` (vLLM's
    ``APIServer``/``EngineCore``... where vLLM names it), ``file`` and ``line``, then
    the event's fields; an exception as ``exception``, ``error`` and ``traceback``.
    """

    def format(self, record: logging.LogRecord) -> str:
        names = getattr(record, "mmobs_fields", ())
        document: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) if names else record.getMessage(),
            "process": record.process,
            "process_name": getattr(record, "vllm_process_name", record.processName),
            "file": record.filename,
            "line": record.lineno,
        }
        document.update((name, getattr(record, name, None)) for name in names)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            document.setdefault("exception", type(error).__name__)
            document.setdefault("error", safe_text(error))
            document["traceback"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return json.dumps(document, default=str, ensure_ascii=False)
