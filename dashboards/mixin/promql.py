"""PromQL builders shared by the dashboards and the rules.

A :class:`QueryStyle` says what every selector carries and which range every
``rate()`` uses. Dashboards filter by their template variables and use
``$__rate_interval`` (dashboard-linter's target-job/instance and
target-rate-interval rules); recording rules and alerts filter by the
configured selector and use the configured rate window. Build every query with
these methods and never write a selector by hand, so both hold everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .config import MixinConfig

#: Guards a ratio's denominator. The numerators are subsets of their
#: denominators, so this only turns 0/0 (no traffic) into 0 instead of NaN.
EPSILON = "1e-12"
RATE_INTERVAL = "$__rate_interval"


@dataclass(frozen=True)
class QueryStyle:
    """How one family of queries selects series and aggregates.

    ``matchers`` are added to every selector, ``window`` is the range of every
    ``rate()``, and ``keep`` are the labels every aggregation keeps in front of
    its own ``by`` labels (for rules: the cluster label and ``job``).
    """

    matchers: tuple[str, ...]
    window: str
    keep: tuple[str, ...] = ()

    @classmethod
    def for_dashboards(cls, config: MixinConfig) -> QueryStyle:
        cluster = (f'{config.cluster_label}=~"${config.cluster_label}"',) if config.cluster_label else ()
        return cls((*cluster, 'job=~"$job"', 'instance=~"$instance"'), RATE_INTERVAL)

    @classmethod
    def for_rules(cls, config: MixinConfig) -> QueryStyle:
        return cls(config.selector_matchers, config.rate_window, config.rule_labels)

    def select(self, metric: str, *matchers: str) -> str:
        """``metric{<style matchers>, <matchers>}``."""
        labels = (*self.matchers, *matchers)
        return f"{metric}{{{','.join(labels)}}}" if labels else metric

    def rate(self, metric: str, *matchers: str, function: str = "rate") -> str:
        """``rate`` (or ``increase``) of a selector over the style's window."""
        return f"{function}({self.select(metric, *matchers)}[{self.window}])"

    def grouping(self, by: Sequence[str] = ()) -> tuple[str, ...]:
        """The labels an aggregation keeps: the style's own, then ``by``."""
        return (*self.keep, *(label for label in by if label not in self.keep))

    def aggregate(self, function: str, inner: str, by: Sequence[str] = ()) -> str:
        labels = self.grouping(by)
        grouping = f" by ({', '.join(labels)})" if labels else ""
        return f"{function}{grouping} ({inner})"

    def sum_rate(self, metric: str, *matchers: str, by: Sequence[str] = ()) -> str:
        return self.aggregate("sum", self.rate(metric, *matchers), by)

    def ratio(self, numerator: str, denominator: str) -> str:
        """numerator / denominator, 0 instead of NaN without traffic; matched on the kept labels."""
        matching = f" on ({', '.join(self.keep)})" if self.keep else ""
        return f"{numerator}\n/{matching}\n{clamp(denominator)}"

    def quantile(self, q: str, histogram: str, by: Sequence[str] = ()) -> str:
        """``histogram_quantile`` over the per-``le`` rate of a histogram's buckets."""
        return f"histogram_quantile({q}, {self.sum_rate(histogram + '_bucket', by=(*by, 'le'))})"


def clamp(denominator: str) -> str:
    return f"clamp_min({denominator}, {EPSILON})"
