"""OpenTelemetry, where the process has it: mmobs's spans, its events on them, trace ids in exemplars.

OpenTelemetry is optional, and mmobs never imports it: a process that has
not imported it traces nothing, and every function here returns after one
lookup. Tracing is on once the process has a tracer provider of its own:
vLLM sets one when it starts with ``--otlp-traces-endpoint`` (after the
plugins load), ``mmobs serve --otlp-endpoint`` sets one, an application sets
its own. Until then OpenTelemetry's global provider is a proxy that records
nothing, and no span is made: the spans of one stage are made only under an
active span that records (:func:`span`), so a request that is not traced, or
not sampled, costs a context lookup per stage (``benchmarks/run.py
--sections tracing``).

The tracer is taken on first use (instrumentation scope ``mmobs``), through
OpenTelemetry's proxy, which follows a provider set later. Every span and
event mmobs makes goes under the active span: the request's HTTP server span,
an ASGI instrumentation's or the one :func:`start_server_span` starts where
nobody else did.

Attribute values are numbers, booleans, or strings from closed sets (a
modality, a format, an outcome, a key source), the fields of mmobs's own log
events (already bounded by :func:`~mmobs.observability.log_fields.safe_text`),
never image bytes or URLs.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from types import SimpleNamespace
from typing import Any

from mmobs._version import __version__
from mmobs.errors import refusal_reason

#: The instrumentation scope of every span mmobs makes.
SCOPE = "mmobs"
AttributeValue = str | bool | int | float | list[int] | list[str]
_TRACEPARENT = b"traceparent"
_TRACESTATE = b"tracestate"

#: OpenTelemetry's API, once this process has imported it; ``None`` until then.
_otel: Any = None


def _api() -> Any:
    """OpenTelemetry's API, if the process has imported it (else ``None``).

    mmobs never imports OpenTelemetry itself: a process that traces has
    imported it to set its tracer provider (vLLM, ``mmobs serve
    --otlp-endpoint``, an application), and a span can only be active where
    it has. So a process that does not trace pays neither the import (a
    tenth of a second) nor anything after it but this lookup.
    """
    global _otel
    if _otel is None and "opentelemetry.trace" in sys.modules:
        from opentelemetry import context, trace
        from opentelemetry.trace import ProxyTracerProvider, SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _otel = SimpleNamespace(
            context=context,
            trace=trace,
            inert_providers=(ProxyTracerProvider, trace.NoOpTracerProvider),
            server_kind=SpanKind.SERVER,
            error_status=Status(StatusCode.ERROR),
            w3c=TraceContextTextMapPropagator(),
        )
    return _otel


#: Whether a real provider was seen (for good), and when to look again while none was.
_on = False
_next_look = 0.0
_LOOK_INTERVAL_SECONDS = 1.0


def tracing_on() -> bool:
    """Whether the process has a tracer provider of its own (OpenTelemetry imported, a real provider set).

    Once on, on for good: OpenTelemetry sets the global provider at most once.
    While off, the provider is looked at once a second at most (asking for it
    reads the environment), so a check costs a clock read; a provider set
    later (vLLM's, after the plugins load) is seen within a second.
    """
    global _on, _next_look
    if _on:
        return True
    now = time.monotonic()
    if now >= _next_look:
        _next_look = now + _LOOK_INTERVAL_SECONDS
        otel = _api()
        _on = otel is not None and not isinstance(otel.trace.get_tracer_provider(), otel.inert_providers)
    return _on


@functools.cache
def _tracer() -> Any:
    """mmobs's tracer, made once: taken before a provider is set, OpenTelemetry's proxy follows the one set later."""
    return _otel.trace.get_tracer(SCOPE, __version__)


def _recording_span() -> Any:
    """The active span if it records, else ``None``: at once where the process has no tracer provider."""
    if not (_on or tracing_on()):
        return None
    current = _otel.trace.get_current_span()
    return current if current.is_recording() else None


def recording() -> bool:
    """Whether the active span records: the request in hand is traced (a context lookup at most)."""
    return _recording_span() is not None


def current_trace_id() -> str | None:
    """The active span's trace id (32 hex digits), for exemplars and logs; ``None`` outside a trace."""
    otel = _otel or _api()
    if otel is None:
        return None
    span_context = otel.trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None


def attribute_values(fields: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """``fields`` as span attributes: ``None`` left out, numbers and flags kept, lists of them kept, the rest as text."""
    attributes: dict[str, AttributeValue] = {}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            attributes[name] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(item, int) for item in value):
            attributes[name] = [int(item) for item in value]
        else:
            attributes[name] = str(value)[:256]
    return attributes


def add_span_event(name: str, fields: Mapping[str, Any]) -> None:
    """Add event ``name`` with ``fields`` as its attributes to the active span, if one records."""
    current = _recording_span()
    if current is not None:
        current.add_event(name, attribute_values(fields))


class _NoSpan:
    """What :func:`span` gives where nothing records: a context manager that does nothing, yielding ``None``."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def span(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> AbstractContextManager[Any]:
    """A live span ``name`` under the active span, current for the block (``with span(...) as live``).

    A request that is not traced (tracing off, or not sampled) has no
    recording span: then nothing is made and ``live`` is ``None``, for the
    cost of one context lookup. An exception escaping the block sets the
    span's status to error with ``error.type`` (the semantic conventions'
    attribute) and is re-raised.
    """
    if _recording_span() is None:
        return _NO_SPAN
    return _live_span(name, attributes)


@contextmanager
def _live_span(name: str, attributes: Mapping[str, AttributeValue] | None) -> Iterator[Any]:
    with _tracer().start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as live:
        try:
            yield live
        except BaseException as error:
            mark_error(live, error)
            raise


def set_attribute(name: str, value: AttributeValue) -> None:
    """Set an attribute on the active span, where one records (a size known only at the end of a stage)."""
    current = _recording_span()
    if current is not None:
        current.set_attribute(name, value)


def mark_error(live: Any, error: BaseException | str) -> None:
    """Set ``live``'s status to error, with ``error.type`` naming what failed.

    That is a refusal's reason (from a closed set: a
    :class:`~mmobs.errors.BadImageError`'s, or the one an exception was counted
    as, :func:`~mmobs.errors.refusal_reason`), else the exception's class, or
    ``error`` itself if text.
    """
    label = error if isinstance(error, str) else refusal_reason(error) or type(error).__name__
    live.set_attribute("error.type", label)
    live.set_status(_otel.error_status)


def record_span(
    name: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    error: str | None = None,
) -> None:
    """A span measured elsewhere (a worker process, a stage opened in one function and closed in another).

    Made under the active span, where one records (as :func:`span`).
    """
    if _recording_span() is None:
        return
    finished = _tracer().start_span(name, attributes=attributes, start_time=start_ns)
    if error is not None:
        mark_error(finished, error)
    finished.end(end_time=end_ns)


def now_ns() -> int:
    """The wall clock in nanoseconds, as span timestamps are."""
    return time.time_ns()


class ServerSpan:
    """The HTTP server span :func:`start_server_span` started, current until :meth:`end`."""

    __slots__ = ("_token", "live", "scope")

    def __init__(self, live: Any, token: Any, scope: MutableMapping[str, Any]) -> None:
        self.live, self._token, self.scope = live, token, scope

    @property
    def trace_id(self) -> str:
        return format(self.live.get_span_context().trace_id, "032x")

    def end(self, status: int) -> None:
        """Record the response's status (an error from 500 on, as the conventions say for a server) and end the span."""
        self.live.set_attribute("http.response.status_code", status)
        if status >= 500:
            mark_error(self.live, str(status))
        _otel.context.detach(self._token)
        self.live.end()


def start_server_span(scope: MutableMapping[str, Any], route: str, request_id: str) -> ServerSpan | None:
    """Start the request's HTTP server span, unless tracing is off or one is already active.

    Named and labelled as OpenTelemetry's HTTP conventions say (``{method}
    {route}``, ``http.request.method``, ``http.route``, ``url.path``), it is
    the child of the client's ``traceparent`` and made current. The
    request id is its ``mmobs.request_id``, the field every log event of the
    request carries. The ``traceparent`` the app reads is rewritten to name
    this span, so that the app's own spans (vLLM's ``llm_request``, which it parents on that header)
    land in the same trace under it: a request without a ``traceparent`` still
    gets one trace. Under an ASGI instrumentation, whose span is active here,
    mmobs starts none (never a second HTTP server span).
    """
    if not tracing_on() or _otel.trace.get_current_span().get_span_context().is_valid:
        return None
    otel = _otel
    carrier: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in (_TRACEPARENT, _TRACESTATE):
            carrier[name.decode("latin-1")] = value.decode("latin-1")
    parent = otel.w3c.extract(carrier) if carrier else None
    method = scope.get("method", "GET")
    live = _tracer().start_span(
        f"{method} {route}",
        context=parent,
        kind=otel.server_kind,
        attributes={
            "http.request.method": method,
            "http.route": route,
            "url.path": scope.get("path", "")[:256],
            "mmobs.request_id": request_id,
        },
    )
    active = otel.trace.set_span_in_context(live, parent)
    token = otel.context.attach(active)
    headers: dict[str, str] = {}
    otel.w3c.inject(headers, context=active)
    scope = {**scope, "headers": [*_without_trace_headers(scope["headers"]), *_encoded(headers)]}
    return ServerSpan(live, token, scope)


def _without_trace_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in headers if name not in (_TRACEPARENT, _TRACESTATE)]


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
