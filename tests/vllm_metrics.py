"""vLLM's multimodal cache metrics, read from vLLM's own source, and an exporter that serves them.

The dashboards' vLLM row must match what vLLM 0.33 really exports. Importing
``vllm.v1.metrics.loggers`` pulls in torch and the engine (and more packages
than the CPU install of ``.ci/install-vllm`` carries), so the definitions are
read from the module's source with :mod:`ast`: ``PrometheusStatLogger.__init__``
builds them as ``self._counter_cls(name=..., documentation=..., labelnames=labelnames)``
with ``labelnames = ["model_name", "engine"]``.

Run as a program, this module is the scrape target of ``tests/test_prometheus.py``:
a stand-in for a vLLM server with mmobs keying its media. It registers the
counters with prometheus_client under vLLM's names, labels and help texts
(prometheus_client adds ``_total`` on the wire, as it does for vLLM), keys
images with mmobs (so mmobs's own series come from the same target, as they do
when mmobs runs inside vLLM), counts a cache lookup per image and a hit per
key seen before, and serves ``/metrics``::

    python -m tests.vllm_metrics --port 9400 --model-name some/model
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path

#: Where vLLM defines its Prometheus metrics, relative to the installed package.
LOGGERS = Path("v1/metrics/loggers.py")
LOGGER_CLASS = "PrometheusStatLogger"
MM_CACHE_METRICS = ("vllm:mm_cache_queries", "vllm:mm_cache_hits")
#: What ``_counter_cls`` etc. construct (prometheus_client's types).
_KINDS = {"_counter_cls": "counter", "_gauge_cls": "gauge", "_histogram_cls": "histogram"}


@dataclass(frozen=True)
class MetricDefinition:
    """A metric as vLLM declares it: prometheus_client name (no ``_total``), type, help, labels."""

    name: str
    kind: str
    documentation: str
    labelnames: tuple[str, ...]

    @property
    def exported_name(self) -> str:
        """The sample name on the wire: prometheus_client suffixes counters with ``_total``."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


def vllm_source() -> Path | None:
    """vLLM's ``loggers.py`` if vLLM is installed (found without importing vLLM)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / LOGGERS
    return path if path.is_file() else None


def vllm_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return None


def read_definitions(source: str, names: tuple[str, ...] = MM_CACHE_METRICS) -> dict[str, MetricDefinition]:
    """The metrics called ``names`` as ``PrometheusStatLogger.__init__`` in ``source`` defines them."""
    module = ast.parse(source)
    logger = next(node for node in module.body if isinstance(node, ast.ClassDef) and node.name == LOGGER_CLASS)
    init = next(node for node in logger.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    lists = _list_assignments(init)
    found: dict[str, MetricDefinition] = {}
    for node in ast.walk(init):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        kind = _KINDS.get(node.func.attr)
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        literal = keywords.get("name")
        if kind is None or not (isinstance(literal, ast.Constant) and literal.value in names):
            continue
        name = _constant(literal)
        labels = keywords.get("labelnames")
        if isinstance(labels, ast.Name):
            earlier = [values for line, values in lists.get(labels.id, []) if line < node.lineno]
            if not earlier:
                raise ValueError(f"cannot find the list {labels.id} that {name} is labelled with")
            labelnames = earlier[-1]
        elif isinstance(labels, ast.List):
            labelnames = tuple(_constant(element) for element in labels.elts)
        else:
            raise ValueError(f"cannot read the labels of {name} from vLLM's source")
        found[name] = MetricDefinition(name, kind, _constant(keywords.get("documentation")), labelnames)
    missing = set(names) - set(found)
    if missing:
        raise ValueError(f"vLLM's {LOGGER_CLASS} no longer defines {sorted(missing)}")
    return found


def _list_assignments(function: ast.FunctionDef) -> dict[str, list[tuple[int, tuple[str, ...]]]]:
    """Every ``name = ["a", "b"]`` (a list of string literals) in a function: name -> [(line, values)]."""
    lists: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and len(node.targets) == 1:
            target = node.targets[0]
            strings = all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts)
            if isinstance(target, ast.Name) and strings:
                values = tuple(_constant(element) for element in node.value.elts)
                lists.setdefault(target.id, []).append((node.lineno, values))
    return {name: sorted(found) for name, found in lists.items()}


def _constant(node: ast.expr | None) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ValueError(f"expected a string literal in vLLM's source, found {ast.dump(node) if node else None}")


#: The definitions as vLLM 0.33.0 has them; used only where vLLM is not installed, and
#: checked against vLLM's source by tests/test_vllm_metrics.py wherever it is.
VLLM_0_33 = {
    "vllm:mm_cache_queries": MetricDefinition(
        "vllm:mm_cache_queries",
        "counter",
        "Multi-modal cache queries, in terms of number of queried items.",
        ("model_name", "engine"),
    ),
    "vllm:mm_cache_hits": MetricDefinition(
        "vllm:mm_cache_hits",
        "counter",
        "Multi-modal cache hits, in terms of number of cached items.",
        ("model_name", "engine"),
    ),
}


def definitions() -> tuple[dict[str, MetricDefinition], str]:
    """vLLM's definitions from its source if installed, else the recorded 0.33.0 ones; and which."""
    source = vllm_source()
    if source is None:
        return VLLM_0_33, "recorded vLLM 0.33.0 definitions (vLLM not installed)"
    return read_definitions(source.read_text(encoding="utf-8")), f"vLLM {vllm_version()} source {source}"


def serve(port: int, model_name: str, engines: int, interval: float) -> None:
    """Serve /metrics, then key one image every ``interval`` seconds, counting vLLM cache lookups and hits."""
    from prometheus_client import REGISTRY, Counter, start_http_server

    import mmobs
    from tests import golden

    found, origin = definitions()
    counters = {
        name: Counter(d.name, d.documentation, list(d.labelnames), registry=REGISTRY) for name, d in found.items()
    }
    labels = [{"model_name": model_name, "engine": str(engine)} for engine in range(engines)]
    for label_values in labels:  # vLLM creates every engine's children up front
        for counter in counters.values():
            counter.labels(**label_values)
    start_http_server(port, addr="127.0.0.1", registry=REGISTRY)
    print(f"serving vLLM multimodal cache metrics from {origin} on 127.0.0.1:{port}", flush=True)
    inputs = [golden.input_bytes(name) for name in ("photo.jpg", "rgb.png", "palette.png")]
    seen: set[str] = set()
    index = 0
    while True:  # steady traffic, so every rate() over the series is positive
        image = mmobs.load_data_url(_data_url(inputs[index % len(inputs)]))
        key = mmobs.MultiModalHasher.hash_kwargs("blake3", image=image)
        engine_labels = labels[index % len(labels)]
        counters["vllm:mm_cache_queries"].labels(**engine_labels).inc()
        if key in seen:
            counters["vllm:mm_cache_hits"].labels(**engine_labels).inc()
        seen.add(key)
        index += 1
        time.sleep(interval)


def _data_url(data: bytes) -> str:
    import base64

    return "data:image/png;base64," + base64.b64encode(data).decode()


def main() -> None:
    parser = argparse.ArgumentParser(description="vLLM multimodal cache metrics with mmobs keying the media")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-name", default="mmobs-test/vision-model")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between keyed images")
    args = parser.parse_args()
    serve(args.port, args.model_name, args.engines, args.interval)


if __name__ == "__main__":
    main()
