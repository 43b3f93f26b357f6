"""An OTLP/HTTP traces receiver on loopback: what a collector would get, decoded with ``opentelemetry-proto``.

The servers under test export to it as they would to a collector (``POST
/v1/traces``, protobuf); each span is kept as a :class:`ReceivedSpan` with its
resource and instrumentation scope, so that a test asserts trace ids, parents,
names, attributes and events exactly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

try:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )
except ImportError:  # the tests that need it skip with the reason
    ExportTraceServiceRequest = ExportTraceServiceResponse = None

__all__ = ["OTLP_TEST_ENV", "OtlpReceiver", "ReceivedSpan", "otlp_proto_available", "require_otlp_proto"]

_MAX_BODY = 16 * 1024 * 1024
#: What a server under test exports with: OTLP/HTTP (vLLM's default is gRPC), batches sent within 50 ms.
OTLP_TEST_ENV = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "50"}


def otlp_proto_available() -> bool:
    return ExportTraceServiceRequest is not None


def require_otlp_proto() -> None:
    if ExportTraceServiceRequest is None:
        pytest.skip("decoding OTLP needs opentelemetry-proto (pip install -e '.[test]')")


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids as hex, as W3C ``traceparent`` writes them)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    scope: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    resource: dict[str, Any]
    start_ns: int
    end_ns: int
    links: list[str] = field(default_factory=list)

    def event(self, name: str) -> dict[str, Any]:
        """The attributes of this span's one event ``name``."""
        found = [attributes for event_name, attributes in self.events if event_name == name]
        assert len(found) == 1, (name, self.events)
        return found[0]


class OtlpReceiver:
    """``POST /v1/traces`` on a loopback port, in a thread; stopped with :meth:`stop`."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != "/v1/traces" or not 0 < length <= _MAX_BODY:
                    self.send_error(404 if self.path != "/v1/traces" else 400)
                    return
                receiver._receive(self.rfile.read(length))
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    def _receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            scope=scope_spans.scope.name,
                            attributes=_attributes(span.attributes),
                            events=[(event.name, _attributes(event.attributes)) for event in span.events],
                            status_code=span.status.code,
                            resource=resource,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            links=[link.span_id.hex() for link in span.links],
                        )
                    )
        with self._lock:
            self.spans.extend(received)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], trace_id: str, timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """The spans of ``trace_id`` once ``predicate`` holds for them (the exporters batch); fails on the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.trace(trace_id)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = [(span.name, span.scope) for span in spans]
                raise AssertionError(f"trace {trace_id} after {timeout} s: {names}")
            time.sleep(0.05)

    def wait_for_span(self, predicate: Callable[[ReceivedSpan], bool], timeout: float = 15.0) -> list[ReceivedSpan]:
        """The spans for which ``predicate`` holds, once there is one."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = [span for span in self.spans if predicate(span)]
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no span as asked after {timeout} s")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
