"""Section ``tracing``: what mmobs's OpenTelemetry spans cost, with tracing off and on.

In process, CPU time per call, competitors interleaved in the same rounds:

* **without tracing code**: mmobs's tracing gates answer "no" without looking
  (``tracing_on`` a constant, ``span`` the shared no-op): what these paths
  cost before spans were added;
* **tracing off**: the code as it ships, OpenTelemetry installed and no
  tracer provider set (vLLM without ``--otlp-traces-endpoint``, ``mmobs serve``
  without ``--otlp-endpoint``);
* **tracing on**: an SDK tracer provider with a batch processor whose exporter
  drops the spans (what a process pays before the network), the request's
  server span active.

The paths: one request through ``MMObsMiddleware(server_spans=True)`` around an
app that answers at once (the server span, its context, the rewritten
``traceparent``), and the plugin's key and loader hooks around a stage that
does nothing (one ``mmobs.image.key`` or ``mmobs.image.load`` span each), so
that a hash's or a decode's own time does not hide a microsecond.

Tracing on sets the process's global tracer provider, which cannot be unset:
this section runs last.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import _harness as harness
from _common import Config, plain_jpeg


def run(cfg: Config, out: harness.Report) -> None:
    out("## OpenTelemetry spans: tracing off and on, against the code without them")
    out()
    try:
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        out("OpenTelemetry's SDK is not installed (`pip install -e '.[test]'`): skipped.")
        out()
        return
    from mmobs.asgi import middleware as middleware_module
    from mmobs.observability import tracing
    from mmobs.vllm import loader_hooks
    from mmobs.vllm.keys import key_hooks

    if tracing.tracing_on():
        out("A tracer provider is already set in this process: the section must run first after start-up. Skipped.")
        out()
        return
    started = time.monotonic()
    request = _request_runner(middleware_module.MMObsMiddleware(_answer_at_once, server_spans=True))
    key = key_hooks.hash_kwargs(lambda cls, algorithm, **kwargs: "key")
    loaded = object()
    load = loader_hooks.load_bytes(lambda loader, data: loaded, guard=False)
    jpeg = plain_jpeg((64, 48))
    paths: dict[str, Callable[[], object]] = {
        "one request (middleware, server span)": request,
        "one key (the key hook's span)": lambda: key(None, "blake3", image=jpeg),
        "one load (the loader hook's span)": lambda: load(None, jpeg),
    }
    real = (middleware_module.tracing_on, tracing.span)

    def without() -> None:
        middleware_module.tracing_on = lambda: False  # type: ignore[assignment]
        tracing.span = lambda name, attributes=None: tracing._NO_SPAN  # type: ignore[assignment]

    def shipped() -> None:
        middleware_module.tracing_on, tracing.span = real  # type: ignore[assignment]

    rounds = cfg.rounds * 3
    off = _compare(paths, "tracing off", without, shipped, rounds)

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    assert tracing.tracing_on() or _wait_for_tracing(tracing)
    try:
        # The request: no span active before it, so the middleware starts the server span.
        request_path = next(iter(paths))
        on = _compare({request_path: paths[request_path]}, "tracing on", without, shipped, rounds)
        # The per-image hooks: under the request's server span, as the middleware leaves it active.
        parent = trace.get_tracer("bench").start_span("POST /v1/chat/completions")
        token = otel_context.attach(trace.set_span_in_context(parent))
        try:
            hooks = {label: call for label, call in paths.items() if label != request_path}
            on.update(_compare(hooks, "tracing on", without, shipped, rounds))
        finally:
            otel_context.detach(token)
            parent.end()
    finally:
        shipped()
        provider.shutdown()
    rows = []
    for label in paths:
        base, shipped_off, traced = (
            off[label]["without tracing code"],
            off[label]["tracing off"],
            on[label]["tracing on"],
        )
        rows.append(
            [
                label,
                harness.fmt_time(base.median),
                harness.fmt_time(shipped_off.median),
                harness.fmt_ratio(shipped_off.ratio, shipped_off.spread),
                harness.fmt_time(shipped_off.delta),
                harness.fmt_time(traced.median),
                harness.fmt_time(traced.delta),
            ]
        )
    headers = ["path", "without tracing code", "tracing off", "off / without", "off: added", "tracing on", "on: added"]
    out(harness.table(headers, rows))
    out()
    out(
        "CPU time per call (`time.process_time`), medians of interleaved rounds; ratios are the median of "
        "per-round ratios (spread: their interquartile range). Tracing on is measured against the code "
        "without tracing in rounds of its own."
    )
    out()
    out(f"({time.monotonic() - started:.0f} s)")
    out()


def _compare(
    paths: dict[str, Callable[[], object]],
    name: str,
    without: Callable[[], None],
    shipped: Callable[[], None],
    rounds: int,
) -> dict[str, dict[str, harness.Stats]]:
    results = {}
    for label, call in paths.items():
        results[label] = harness.compare(
            {"without tracing code": call, name: call},
            baseline="without tracing code",
            rounds=rounds,
            setups={"without tracing code": without, name: shipped},
            clock=time.process_time,
        )
    shipped()
    return results


def _wait_for_tracing(tracing: Any) -> bool:
    """``tracing_on`` looks at the provider once a second while off."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        if tracing.tracing_on():
            return True
        time.sleep(0.05)
    return False


async def _answer_at_once(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _request_runner(app: Any) -> Callable[[], None]:
    """One POST through ``app`` on a private event loop, as a server would call it."""
    loop = asyncio.new_event_loop()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-length", b"0"), (b"traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")],
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 8000),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    def run_one() -> None:
        loop.run_until_complete(app(dict(scope), receive, send))

    return run_one
