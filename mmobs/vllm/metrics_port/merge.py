"""Several processes' ``mmobs_*`` series summed into one exposition, as prometheus_client's multiprocess mode sums.

Counters and histograms add up across processes. A gauge adds up too (an index's entries, each
process's own), except an ``*_info`` gauge, whose value is 1 wherever it is set: the largest is kept.
``*_created`` samples are dropped, as the multiprocess collector drops them: each process's differs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

#: The series mmobs owns; anything else a process's registry holds (vLLM's own) is not served.
PREFIX = "mmobs_"

_Key = tuple[str, tuple[tuple[str, str], ...]]


def own_series(registry: CollectorRegistry, families: Collection[str]) -> bytes:
    """The ``families`` of ``registry`` (named as on the wire: counters with ``_total``), in the text format
    (what a process adds to the port)."""
    return generate_latest(_Filtered(registry, families)) if families else b""


class _Filtered(Collector):
    def __init__(self, registry: CollectorRegistry, families: Collection[str]) -> None:
        self.registry, self.families = registry, families

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.name.startswith(PREFIX) and (
                family.name in self.families or f"{family.name}_total" in self.families
            ):
                yield family


def merged(texts: Iterable[bytes]) -> list[Metric]:
    """The families of every text, each series summed (the largest kept for ``*_info`` gauges)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_Key, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode("utf-8", "replace")):
            if not family.name.startswith(PREFIX) or family.name.endswith("_created"):
                continue
            families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            into = values.setdefault(family.name, {})
            keep_largest = family.type == "gauge" and family.name.endswith("_info")
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                before = into.get(key)
                if before is None:
                    into[key] = sample.value
                else:
                    into[key] = max(before, sample.value) if keep_largest else before + sample.value
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(families.values())


class MergedCollector(Collector):
    """A collector of whatever :func:`merged` makes of the texts ``gather`` returns at each scrape."""

    def __init__(self, gather: Callable[[], Iterable[bytes]]) -> None:
        self.gather = gather

    def collect(self) -> Iterator[Metric]:
        return iter(merged(self.gather()))
