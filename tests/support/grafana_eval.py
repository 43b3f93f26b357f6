"""How Grafana evaluates a provisioned alert rule, for checking the rules against Prometheus's alerts.

No Grafana server installs here, so the tests mirror what Grafana does with a
rule's query results, from Grafana's source (``pkg/expr`` and
``pkg/services/ngalert/state``, Grafana 10 and 11):

* **reduce** ``last`` (strict mode) of each series: for an instant query, its one value;
* **threshold** ``gt``/``lt`` on that value (a NaN is never above or below);
* **no data**: a query without series gives one result without labels, in the
  state ``noDataState`` says (``OK``: Normal; ``Alerting``: as an alerting result);
* **for**: an alerting result moves a Normal instance to Pending (``StartsAt`` =
  the evaluation time), or straight to Alerting when ``for`` is 0; a Pending
  instance turns Alerting once ``evaluation time - StartsAt >= for``; a normal
  result makes any instance Normal (``resultAlerting``/``resultNormal`` in
  ``state.go``). Prometheus does the same: ``ActiveAt``, then firing once
  ``ts - ActiveAt >= for``;
* **missing series**: an instance without a result keeps its state until it has
  been missing for two evaluation intervals, then is deleted and, if it was
  firing, resolved (``stateIsStale``: ``lastEval + 2 * interval <= evaluatedAt``).
  Here Grafana differs from Prometheus, which drops a pending alert and resolves
  a firing one at the first evaluation without it; the mixin's queries keep
  every instance's series while it is quiet, so only a series that vanishes
  altogether (a job that is no longer scraped) resolves one interval later.

Instances are keyed by their labels without ``__name__`` (Grafana drops
``__*__`` labels from alerts, Prometheus drops the name).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

Labels = tuple[tuple[str, str], ...]
_DURATION = re.compile(r"(\d+)([smh])")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def seconds(duration: str) -> int:
    parts = _DURATION.findall(duration)
    if "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"cannot read duration {duration!r}")
    return sum(int(n) * _SECONDS[u] for n, u in parts)


def instance(labels: dict[str, str]) -> Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


@dataclass(frozen=True)
class Rule:
    """What of a provisioned rule decides when it fires."""

    title: str
    query: str
    reducer: str
    op: str
    bound: float
    hold: int
    no_data: str

    @classmethod
    def from_provisioning(cls, rule: dict[str, Any]) -> Rule:
        by_ref = {query["refId"]: query for query in rule["data"]}
        threshold = by_ref[rule["condition"]]["model"]
        assert threshold["type"] == "threshold", threshold
        reduce = by_ref[threshold["expression"]]["model"]
        assert reduce["type"] == "reduce" and "settings" not in reduce, reduce  # strict mode
        query = by_ref[reduce["expression"]]
        assert query["model"]["instant"] is True, query
        (condition,) = threshold["conditions"]
        (bound,) = condition["evaluator"]["params"]
        return cls(
            rule["title"],
            query["model"]["expr"],
            reduce["reducer"],
            condition["evaluator"]["type"],
            float(bound),
            seconds(rule["for"]),
            rule["noDataState"],
        )

    def alerting(self, value: float) -> bool:
        if self.reducer != "last":
            raise ValueError(f"{self.title}: only the reducer 'last' is mirrored, not {self.reducer!r}")
        if math.isnan(value):
            return False
        if self.op == "gt":
            return value > self.bound
        if self.op == "lt":
            return value < self.bound
        raise ValueError(f"{self.title}: threshold {self.op!r} is not mirrored")


@dataclass
class State:
    state: str  # Normal, Pending, Alerting
    starts_at: int
    last_eval: int


def firing(
    rule: Rule, results: dict[int, dict[Labels, float]], times: list[int], interval: int
) -> dict[int, set[Labels]]:
    """The firing instances after each evaluation at ``times`` (seconds), given each evaluation's query results."""
    states: dict[Labels, State] = {}
    out: dict[int, set[Labels]] = {}
    for t in times:
        evaluated = {key: rule.alerting(value) for key, value in results.get(t, {}).items()}
        if not evaluated:
            if rule.no_data not in ("OK", "Alerting"):
                raise ValueError(f"{rule.title}: noDataState {rule.no_data!r} is not mirrored")
            evaluated = {(): rule.no_data == "Alerting"}
        for key, alerting in evaluated.items():
            state = states.setdefault(key, State("Normal", t, t))
            state.last_eval = t
            if not alerting:
                if state.state != "Normal":
                    state.state, state.starts_at = "Normal", t
            elif state.state == "Pending":
                if t - state.starts_at >= rule.hold:
                    state.state, state.starts_at = "Alerting", t
            elif state.state == "Normal":
                state.state, state.starts_at = ("Pending" if rule.hold > 0 else "Alerting"), t
        for key in [key for key, state in states.items() if state.last_eval + 2 * interval <= t]:
            del states[key]
        out[t] = {key for key, state in states.items() if state.state == "Alerting"}
    return out
