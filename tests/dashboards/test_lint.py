"""The committed dashboards and alerts pass the field's own linters; deliberately broken copies do not.

``tests/support/dashboard_lint.py`` ports Grafana's dashboard-linter rules and
``tests/support/alert_lint.py`` mixtool's alert rules. Each rule is shown to fire on a
copy of the committed files broken in the one way it checks (the first ones
are exactly what the files had before the mixin: ``editable: true``,
``allValue: ".*"``, templated and unpunctuated summaries, a static
description), so a rule that could never fail would be caught here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import alert_lint, dashboard_lint
from tests.support.alert_lint import lint_alert_document
from tests.support.dashboard_lint import lint_dashboard

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"
ALERTS = ROOT / "dashboards" / "prometheus" / "alerts.yml"
#: Has every panel type, the vLLM row and the model_name variable.
CACHE_KEYS = GRAFANA / "mmobs-cache-keys.json"

Json = dict[str, Any]


def committed_dashboard() -> Json:
    return json.loads(CACHE_KEYS.read_text(encoding="utf-8"))


def committed_alerts() -> Json:
    return yaml.safe_load(ALERTS.read_text(encoding="utf-8"))


def variable(board: Json, name: str) -> Json:
    return next(v for v in board["templating"]["list"] if v["name"] == name)


def first_panel(board: Json, kind: str = "timeseries") -> Json:
    return next(p for p in board["panels"] if p["type"] == kind)


def first_target(board: Json) -> Json:
    return first_panel(board)["targets"][0]


def _set(path: list[str], value: Any) -> Callable[[Json], None]:
    def apply(item: Json) -> None:
        for key in path[:-1]:
            item = item[key]
        item[path[-1]] = value

    return apply


def _expr(transform: Callable[[str], str]) -> Callable[[Json], None]:
    def apply(board: Json) -> None:
        target = first_target(board)
        target["expr"] = transform(target["expr"])

    return apply


#: dashboard-linter rule -> how to break a copy of the cache-keys dashboard so (only) it fires.
DASHBOARD_BREAKAGES: dict[str, Callable[[Json], None]] = {
    "uneditable-dashboard": _set(["editable"], True),
    "template-job-rule": lambda board: variable(board, "job").update(allValue=".*"),
    "template-instance-rule": lambda board: variable(board, "instance").update(allValue=".*"),
    "template-datasource-rule": lambda board: variable(board, "datasource").update(label="Prometheus"),
    "template-label-promql-rule": lambda board: variable(board, "model_name").update(
        query='label_values(vllm:mm_cache_queries_total{job=~"$job", model_name)'
    ),
    "template-on-time-change-reload-rule": lambda board: variable(board, "model_name").update(refresh=1),
    "panel-datasource-rule": lambda board: first_panel(board).update(datasource={"type": "prometheus", "uid": "P1"}),
    "panel-title-description-rule": lambda board: first_panel(board, "stat").update(description=""),
    "panel-units-rule": lambda board: first_panel(board, "table")["fieldConfig"]["defaults"].update(unit="widgets"),
    "panel-no-targets-rule": lambda board: first_panel(board, "stat").update(targets=[]),
    "target-promql-rule": _expr(lambda expr: expr.replace(")", "", 1)),
    "target-rate-interval-rule": _expr(lambda expr: expr.replace("$__rate_interval", "5m")),
    "target-job-rule": _expr(lambda expr: expr.replace('job=~"$job",', "")),
    "target-instance-rule": _expr(lambda expr: expr.replace(',instance=~"$instance"', "")),
    "target-counter-agg-rule": _expr(lambda expr: 'sum(mmobs_media_keys_total{job=~"$job",instance=~"$instance"})'),
}


def _alert(name: str) -> Callable[[Json], Json]:
    def find(document: Json) -> Json:
        return next(rule for group in document["groups"] for rule in group["rules"] if rule["alert"] == name)

    return find


fallback_alert = _alert("MmobsExifFallbackRatioHigh")
absent_alert = _alert("MmobsMetricsAbsent")
target_down_alert = _alert("MmobsTargetDown")

#: mixtool rule -> how to break a copy of the alerts so (only) it fires. The first three are what
#: the files had before the mixin.
ALERT_BREAKAGES: dict[str, Callable[[Json], None]] = {
    "alert-summary-templating": lambda doc: fallback_alert(doc)["annotations"].update(
        summary="EXIF fallback keys {{ $value | humanizePercentage }} of images in job {{ $labels.job }}."
    ),
    "alert-summary-style": lambda doc: target_down_alert(doc)["annotations"].update(summary="mmobs target is down"),
    "alert-description-templating": lambda doc: absent_alert(doc)["annotations"].update(
        description="For 10 minutes Prometheus has had no mmobs_media_keys_total series from any target."
    ),
    "alert-name-camelcase": lambda doc: fallback_alert(doc).update(alert="mmobs_exif_fallback_ratio_high"),
    "alert-severity-rule": lambda doc: fallback_alert(doc)["labels"].update(severity="page"),
    "alert-summary-missing-rule": lambda doc: fallback_alert(doc)["annotations"].pop("summary"),
    "alert-description-missing-rule": lambda doc: fallback_alert(doc)["annotations"].pop("description"),
    "alert-runbook-url": lambda doc: fallback_alert(doc)["annotations"].update(runbook_url="http://wiki/alerts"),
}


def test_every_ported_rule_has_a_breakage_that_shows_it_firing() -> None:
    assert set(DASHBOARD_BREAKAGES) == set(dashboard_lint.RULES)
    assert set(ALERT_BREAKAGES) == set(alert_lint.RULES)


@pytest.mark.parametrize("path", sorted(GRAFANA.glob("*.json")), ids=lambda path: path.name)
def test_committed_dashboards_pass_dashboard_linter_rules(path: Path) -> None:
    findings = lint_dashboard(json.loads(path.read_text(encoding="utf-8")), path.name)
    assert not findings, "\n".join(map(str, findings))


def test_committed_alerts_pass_mixtool_rules() -> None:
    findings = lint_alert_document(committed_alerts())
    assert not findings, "\n".join(map(str, findings))


@pytest.mark.parametrize("rule", sorted(DASHBOARD_BREAKAGES))
def test_dashboard_rule_fires_on_a_broken_copy(rule: str) -> None:
    board = copy.deepcopy(committed_dashboard())
    DASHBOARD_BREAKAGES[rule](board)
    fired = {finding.rule for finding in lint_dashboard(board, "broken copy")}
    assert fired == {rule}, f"breaking for {rule} fired {sorted(fired)}"


@pytest.mark.parametrize("rule", sorted(ALERT_BREAKAGES))
def test_alert_rule_fires_on_a_broken_copy(rule: str) -> None:
    document = copy.deepcopy(committed_alerts())
    ALERT_BREAKAGES[rule](document)
    fired = {finding.rule for finding in lint_alert_document(document)}
    expected = {rule} | ({"alert-runbook-url"} if rule == "alert-name-camelcase" else set())
    assert fired == expected, f"breaking for {rule} fired {sorted(fired)}"


def test_the_pre_mixin_defects_all_fire_together() -> None:
    """Today's files before the mixin, in one copy: editable, '.*' for All, templated summaries."""
    board = copy.deepcopy(committed_dashboard())
    for rule in ("uneditable-dashboard", "template-job-rule", "template-instance-rule"):
        DASHBOARD_BREAKAGES[rule](board)
    assert {f.rule for f in lint_dashboard(board)} == {
        "uneditable-dashboard",
        "template-job-rule",
        "template-instance-rule",
    }
    document = copy.deepcopy(committed_alerts())
    for rule in ("alert-summary-templating", "alert-summary-style", "alert-description-templating"):
        ALERT_BREAKAGES[rule](document)
    assert {f.rule for f in lint_alert_document(document)} == {
        "alert-summary-templating",
        "alert-summary-style",
        "alert-description-templating",
    }
