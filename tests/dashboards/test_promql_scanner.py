"""The PromQL selector scanner (``tests/support/promql_scan.py``) the dashboard and rule checks rely on.

It finds every selector of an expression with its matchers, and refuses what it
cannot read rather than skip it.
"""

from __future__ import annotations

import pytest

from tests.dashboards.dashboard_files import (
    RATE_INTERVAL,
)
from tests.support.promql_scan import selectors

GOOD = 'job=~"$job",instance=~"$instance"'


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (f"sum by (job) (rate(a_total{{{GOOD}}}[$__rate_interval]))", [("a_total", "rate", RATE_INTERVAL)]),
        (
            f"histogram_quantile(0.99, sum by (le, x) (rate(h_bucket{{{GOOD}}}[$__rate_interval])))",
            [("h_bucket", "rate", RATE_INTERVAL)],
        ),
        (
            f"sum(a{{{GOOD}}}) / ignoring (k) group_left clamp_min(sum by (j) (b{{{GOOD}}}), 1e-12)",
            [("a", "sum", None), ("b", "sum", None)],
        ),
        ("x unless x offset 5m or vector(0)", [("x", None, None), ("x", None, None)]),
        ('up{job=~"mmobs.*"} == 0', [("up", None, None)]),
        ("absent(m)", [("m", "absent", None)]),
        ('count(count by (f) (i{route="/a}b,c"}))', [("i", "count", None)]),
        ("sum without (instance) (rate(c[5m]))", [("c", "rate", "5m")]),
    ],
)
def test_scanner_finds_every_selector(expr: str, expected: list[tuple[str, str | None, str | None]]) -> None:
    assert [(s.name, s.function, s.range) for s in selectors(expr)] == expected


def test_scanner_reads_matchers() -> None:
    (selector,) = selectors('m{job=~"$job", instance=~"$instance",kind!="a\\"b"}')
    assert selector.matchers == [("job", "=~", "$job"), ("instance", "=~", "$instance"), ("kind", "!=", 'a"b')]


@pytest.mark.parametrize(
    "expr",
    [
        '{__name__="m"}',  # no metric name: the selector must still be found (and then rejected)
        "rat(m[5m])",  # unknown function
        "sum(rate(m[5m])",  # unbalanced
        "m[5m:1m]",  # subquery
        "m # comment",
        'm{job~"x"}',
    ],
)
def test_scanner_is_strict(expr: str) -> None:
    def scan() -> None:
        if any(s.name is None for s in selectors(expr)):
            raise ValueError("selector without a metric name")

    with pytest.raises(ValueError):
        scan()
