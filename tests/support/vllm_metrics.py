"""vLLM's multimodal cache metrics, read from vLLM's own source.

The dashboards' vLLM row must match what vLLM really exports. Importing
``vllm.v1.metrics.loggers`` pulls in torch and the engine (and more packages
than the CPU install of ``.ci/install-vllm`` carries), so the definitions are
read from the module's source with :mod:`ast`: ``PrometheusStatLogger.__init__``
builds them as ``self._counter_cls(name=..., documentation=..., labelnames=labelnames)``
with ``labelnames = ["model_name", "engine"]``. ``tests/dashboards/test_prometheus.py``
checks what a real ``vllm serve`` exports, as a real Prometheus stores it,
against these definitions.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

#: Where vLLM defines its Prometheus metrics, relative to the installed package.
LOGGERS = Path("v1/metrics/loggers.py")
LOGGER_CLASS = "PrometheusStatLogger"
#: What the dashboards and alerts read of vLLM's: its multimodal cache counters and its time to first token.
MM_CACHE_METRICS = ("vllm:mm_cache_queries", "vllm:mm_cache_hits", "vllm:time_to_first_token_seconds")
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
#: checked against vLLM's source by tests/vllm/test_vllm_metrics.py wherever it is.
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
    "vllm:time_to_first_token_seconds": MetricDefinition(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        ("model_name", "engine"),
    ),
}


def definitions() -> tuple[dict[str, MetricDefinition], str]:
    """vLLM's definitions from its source if installed, else the recorded 0.33.0 ones; and which."""
    source = vllm_source()
    if source is None:
        return VLLM_0_33, "recorded vLLM 0.33.0 definitions (vLLM not installed)"
    return read_definitions(source.read_text(encoding="utf-8")), f"vLLM {vllm_version()} source {source}"
