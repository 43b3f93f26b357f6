"""``mmobs serve --otlp-endpoint``: each server process exports its spans over OTLP/HTTP.

The one place mmobs sets a tracer provider, and only for its own service: a
library (and the vLLM plugin, whose host sets its own) never does. The
provider is made in each server process when it starts, after uvicorn forked
it, since the batch processor's export thread does not survive a fork. The
service is named ``mmobs`` unless ``OTEL_SERVICE_NAME`` (or
``OTEL_RESOURCE_ATTRIBUTES``) names it, as OpenTelemetry's SDK reads them.
"""

from __future__ import annotations

import importlib.util
from typing import Any
from urllib.parse import urlsplit

#: The packages ``--otlp-endpoint`` needs (the ``otel`` extra).
_PACKAGES = {
    "opentelemetry-api": "opentelemetry.trace",
    "opentelemetry-sdk": "opentelemetry.sdk.trace",
    "opentelemetry-exporter-otlp-proto-http": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
}
MISSING_PACKAGES_HINT = "pip install 'mmobs[otel]'"


def missing_packages() -> list[str]:
    """The distributions ``--otlp-endpoint`` needs that this environment lacks."""
    missing = []
    for distribution, module in _PACKAGES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(distribution)
    return missing


def validate_endpoint(url: str) -> str:
    """``url`` if it is an http(s) URL with a host (an OTLP/HTTP traces endpoint); ``ValueError`` naming the fault otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"an OTLP/HTTP traces endpoint is an http(s) URL, e.g. http://127.0.0.1:4318/v1/traces, not {url!r}"
        )
    return url


def start_otlp_tracing(endpoint: str) -> Any:
    """Set this process's tracer provider: spans batched and exported to ``endpoint`` (OTLP/HTTP, protobuf).

    Returns the provider, whose ``shutdown()`` exports what is left.
    """
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from mmobs._version import __version__

    resource = Resource.create({"service.name": "mmobs", "service.version": __version__})
    resource = resource.merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    return provider
