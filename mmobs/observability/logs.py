"""structlog set-up and the helpers that keep log fields bounded and safe.

The library only ever calls ``structlog.get_logger``; it never configures
structlog on import. Applications (and the ``mmobs`` CLI) call
:func:`configure_logging` once at start-up. With it, one stream carries
everything the process logs, in one format:

* mmobs's own events (structlog, written directly: the fast path);
* every stdlib ``logging`` record (uvicorn's server and access logs, asyncio,
  libraries), rendered by structlog's ``ProcessorFormatter`` with the same
  fields, a traceback as a ``traceback`` field instead of extra lines;
* Python warnings, as ``python_warning`` events (Pillow's ``Corrupt EXIF
  data`` warnings are counted too: the same broken metadata the fallback
  handles, seen where it did not raise);
* uncaught exceptions of the main thread and of other threads.

Both writers share structlog's per-stream lock, so lines never interleave
within a process; each line is one ``write``. Events logged during a request
carry its ``request_id`` and ``route`` through :func:`add_request_context`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import traceback
import warnings
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any, Literal, TextIO

import structlog

from mmobs.events import ExifCorruptWarning, get_observer
from mmobs.observability.context import current_request
from mmobs.observability.log_fields import safe_text
from mmobs.observability.stdlib_events import events_route
from mmobs.observability.tracing import add_span_event, current_trace_id

#: Set by the middleware on an exception escaping a request: (request_id, route).
#: The server logs that exception after the request's context is gone.
REQUEST_ATTRIBUTE = "__mmobs_request__"

LogFormat = Literal["json", "console"]

#: Pillow's ``warnings.warn`` text for a short or broken EXIF IFD.
_CORRUPT_EXIF = "Corrupt EXIF data"
_UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


# -- processors -------------------------------------------------------------------


def add_request_context(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """The current request's ``request_id`` and ``route``, and its ``trace_id`` where traced (a structlog processor).

    Put it in your own chain if you configure structlog yourself;
    :func:`configure_logging` does. It reads the request the middleware
    opened when the event is logged, so a request that logs nothing costs
    nothing. An exception the middleware saw escape carries its request too,
    for the server's own "Exception in ASGI application" record.
    """
    stats = current_request.get()
    if stats is not None:
        event_dict.setdefault("request_id", stats.request_id)
        event_dict.setdefault("route", stats.route)
        trace_id = current_trace_id()
        if trace_id is not None:
            event_dict.setdefault("trace_id", trace_id)
    elif "request_id" not in event_dict:
        error = _exception_of(event_dict.get("exc_info"))
        request = getattr(error, REQUEST_ATTRIBUTE, None)
        if isinstance(request, tuple):
            event_dict["request_id"], event_dict["route"] = request
    return event_dict


def _exception_of(exc_info: Any) -> BaseException | None:
    if exc_info is True:
        return sys.exc_info()[1]
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3 and isinstance(exc_info[1], BaseException):
        return exc_info[1]
    return None


def _exception_fields(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """``exc_info`` as fields of the one line: ``exception`` (the class), ``error``, ``traceback``."""
    error = _exception_of(event_dict.pop("exc_info", None))
    if error is not None:
        event_dict["traceback"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        event_dict.setdefault("exception", type(error).__name__)
        event_dict.setdefault("error", safe_text(error))
    return event_dict


def _add_process_id(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """The worker's pid: with several workers, says which one logged.

    (structlog's CallsiteParameterAdder would walk the stack on every event.)
    """
    event_dict["process"] = os.getpid()
    return event_dict


def _foreign_fields(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Fields of a stdlib record: its logger, and uvicorn's access-line parts as fields."""
    args = event_dict.pop("positional_args", ())
    record = event_dict.get("_record")
    if record is not None:
        event_dict["logger"] = record.name
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            client, method, path, http_version, status = args
            event_dict.update(
                client=client, method=method, path=safe_text(path), http_version=http_version, status=status
            )
    return event_dict


def _exception_label_inline(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Keep mmobs's one-word ``exception`` label on the event line in console output.

    structlog's ConsoleRenderer prints an ``exception`` field as a traceback
    below the line; mmobs events use that key for the exception class name
    (matching the metric label), so the console shows it inline instead.
    """
    label = event_dict.get("exception")
    if isinstance(label, str) and "\n" not in label:
        event_dict["exception_type"] = event_dict.pop("exception")
    return event_dict


class _MmobsLogger:
    """``structlog.get_logger("mmobs")`` once anyone configured structlog; mmobs's own console logger until then.

    A library must not configure structlog, and structlog's default console
    renderer prints a field called ``exception`` as a traceback, on lines of
    its own, where mmobs's events carry the exception's *class* (the metric
    label). In an application that never configures structlog (vLLM, running
    the plugin) every fallback would take two lines. So until structlog is
    configured, mmobs's events go through structlog's default chain with that
    one field kept on the line; from then on, through the application's
    configuration, as any structlog user's would.
    """

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if self._inner is not None:
            logger = self._inner
        elif structlog.is_configured():
            logger = _configured_logger()
        else:
            # A host that logs through stdlib (vLLM) may have chosen its logger tree instead.
            logger = events_route() or _unconfigured_logger()
        method = getattr(logger, name)
        return _also_a_span_event(method) if name in _EVENT_METHODS else method


#: The logger methods that log an event (each is a span event too).
_EVENT_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "fatal", "exception", "msg"})


def _also_a_span_event(method: Any) -> Any:
    """``method``, adding its event to the active span (where one records) before logging it."""

    def log(event: str, **fields: Any) -> Any:
        add_span_event(event, fields)
        return method(event, **fields)

    return log


@functools.cache
def _configured_logger() -> Any:
    # A lazy proxy: it binds to the configuration in force when it first logs, as any structlog user's.
    return structlog.get_logger("mmobs")


@functools.cache
def _unconfigured_logger() -> Any:
    return structlog.wrap_logger(
        structlog.PrintLogger(),
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.StackInfoRenderer(),
            structlog.dev.set_exc_info,
            structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
            _exception_label_inline,
            structlog.dev.ConsoleRenderer(colors=bool(getattr(sys.stdout, "isatty", lambda: False)())),
        ],
    )


def mmobs_logger(inner: Any = None) -> Any:
    """The logger mmobs's own events go to (see :class:`_MmobsLogger`), ``inner`` if given.

    Every event logged through it is also an event on the active span, where
    one records (:func:`mmobs.observability.tracing.add_span_event`): a trace
    shows what the log says, without the log.
    """
    return _MmobsLogger(inner)


# -- the stdlib side ------------------------------------------------------------------


class _LineHandler(logging.Handler):
    """Writes each formatted record as one line through structlog's writer (and its per-stream lock)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.writer = structlog.WriteLogger(stream)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.msg(self.format(record))
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


def _route_stdlib(stream: TextIO, level: int, pre_chain: list[Any], renderer: list[Any]) -> None:
    """Send every stdlib record (uvicorn's included) through one ProcessorFormatter to ``stream``."""
    handler = _LineHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
            foreign_pre_chain=pre_chain,
            pass_foreign_args=True,
        )
    )
    handler._mmobs = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for previous in [h for h in root.handlers if getattr(h, "_mmobs", False)]:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _UVICORN_LOGGERS:
        # uvicorn's default config gives its loggers text handlers of their own: ours is the root's.
        # A logger without handlers is left as it is (uvicorn turns its access log off that way).
        uvicorn_logger = logging.getLogger(name)
        if uvicorn_logger.handlers:
            uvicorn_logger.handlers = []
            uvicorn_logger.propagate = True


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` as an event (what ``logging.captureWarnings`` does, with fields)."""
    if file is not None:  # an explicit target (warnings.showwarning(..., file=f)): honour it
        _previous_showwarning(message, category, filename, lineno, file, line)
        return
    text = str(message)
    if issubclass(category, UserWarning) and text.startswith(_CORRUPT_EXIF):
        get_observer().exif_corrupt_warning(ExifCorruptWarning(text))
    structlog.get_logger("py.warnings").warning(
        "python_warning", category=category.__name__, warning=safe_text(text), filename=filename, lineno=lineno
    )


_previous_showwarning = warnings.showwarning


def capture_warnings(enabled: bool = True) -> None:
    """Turn Python warnings into ``python_warning`` events (and back).

    Thread-safe, unlike ``warnings.catch_warnings``: it replaces
    ``warnings.showwarning`` once, process-wide, as ``logging.captureWarnings``
    does. Pillow's ``Corrupt EXIF data`` warning is shown every time (not
    once per code location) so that ``mmobs_exif_corrupt_warnings_total``
    counts each one.
    """
    global _previous_showwarning
    if enabled:
        if warnings.showwarning is not _show_warning:
            _previous_showwarning = warnings.showwarning
            warnings.showwarning = _show_warning
        if not any(f[0] == "always" and f[1] is not None and f[1].pattern == _CORRUPT_EXIF for f in warnings.filters):
            warnings.filterwarnings("always", message=_CORRUPT_EXIF, category=UserWarning)
    elif warnings.showwarning is _show_warning:
        warnings.showwarning = _previous_showwarning


def _log_uncaught(exc_type: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, error, tb)
        return
    structlog.get_logger("mmobs").critical("uncaught_exception", exc_info=(exc_type, error, tb))


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    thread = args.thread.name if args.thread is not None else None
    structlog.get_logger("mmobs").error(
        "uncaught_thread_exception", thread=thread, exc_info=(args.exc_type, args.exc_value, args.exc_traceback)
    )


def configure_logging(
    format: LogFormat = "json",
    level: str | int = "info",
    stream: TextIO | None = None,
    *,
    stdlib: bool = True,
    python_warnings: bool = True,
) -> None:
    """Configure structlog for an application: JSON (one event a line) or console.

    :param format: ``json`` (one object a line, for machines) or ``console`` (for people).
    :param level: the lowest level written (``debug``, ``info``, ``warning``, ``error``).
    :param stream: where to write (``sys.stderr`` by default).
    :param stdlib: also render every stdlib ``logging`` record (uvicorn's, asyncio's...)
        and uncaught exceptions in the same format on the same stream.
    :param python_warnings: also turn Python warnings into events (:func:`capture_warnings`).

    Request context opened by the middleware (``request_id``, ``route``) is
    added to every event by :func:`add_request_context`; context bound with
    ``structlog.contextvars`` is merged too.
    """
    if format not in ("json", "console"):
        raise ValueError(f"log format must be 'json' or 'console', not {format!r}")
    numeric_level = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric_level, int):
        raise ValueError(f"unknown log level {level!r}")
    stream = stream or sys.stderr
    shared: list[Any] = [
        add_request_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_process_id,
    ]
    if format == "json":
        exceptions: list[Any] = [_exception_fields]
        renderer: list[Any] = [structlog.processors.JSONRenderer()]
    else:
        exceptions = [structlog.processors.format_exc_info]
        renderer = [_exception_label_inline, structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, *exceptions, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    if stdlib:
        _route_stdlib(stream, numeric_level, [*shared, _foreign_fields, *exceptions], renderer)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_thread_exception
    if python_warnings:
        capture_warnings()
