"""The recording rules and alerts under ``dashboards/prometheus``.

Every metric a rule reads exists, the rules read only the configured jobs,
recording rules and alerts follow the naming conventions, the required alerts
exist with a runbook each (and runbooks name only rules that exist), every alert
is tested firing and quiet and every recording rule with values, and
``dashboards/README.md``'s alert table is the alert definitions.
"""

from __future__ import annotations

import re

from dashboards.mixin import MixinConfig, alerts
from tests.dashboards.dashboard_files import (
    BUILTIN_METRICS,
    DEFAULT_SELECTOR,
    METRIC_NAMES,
    RECORDING_RULES,
    ROOT,
    RULE_FILES,
    RUNBOOK_URL,
    RUNBOOKS,
    SEVERITIES,
    VLLM_METRICS,
    alert_rules,
    recording_names,
    rule_tests,
    rules,
)
from tests.support.promql_scan import family, selectors


def test_rule_metrics_exist() -> None:
    known = set(METRIC_NAMES) | recording_names() | BUILTIN_METRICS | VLLM_METRICS
    for path in RULE_FILES:
        for rule in rules(path):
            for selector in selectors(rule["expr"]):
                assert selector.name, f"{path.name} {rule}: selector without a metric name"
                assert family(selector.name) in known, f"{path.name}: unknown metric {selector.name}"


def test_rules_and_alerts_read_only_the_selected_jobs() -> None:
    """Every raw series a rule or alert reads carries the mixin's selector (job=~"mmobs.*")."""
    for path in RULE_FILES:
        for rule in rules(path):
            for selector in selectors(rule["expr"]):
                if selector.name not in recording_names():
                    assert DEFAULT_SELECTOR in selector.matchers, f"{path.name}: {selector.name} in {rule['expr']!r}"


def _source_metric(part: str) -> bool:
    return part in METRIC_NAMES or f"{part}_total" in METRIC_NAMES


def test_recording_rule_names() -> None:
    """level:metric:operations, with the source metric's own name (Prometheus's naming convention)."""
    names = [rule["record"] for rule in rules(RECORDING_RULES)]
    assert len(names) == len(set(names))
    assert "job:mmobs_exif_fallback:rate5m" in names
    assert "job:mmobs_exif_fallback_per_media_keys:ratio_rate5m" in names
    for rule in rules(RECORDING_RULES):
        name = rule["record"]
        match = re.fullmatch(r"([a-z]+(?:_[a-z]+)*):(mmobs_[a-z0-9_]+):([a-z0-9_]+)", name)
        assert match, f"{name} is not level:metric:operations"
        level, metric, operations = match.groups()
        assert level.startswith("job"), name
        assert not metric.endswith("_total"), f"{name}: drop _total after rate()"
        numerator, _, denominator = metric.partition("_per_")
        assert _source_metric(numerator), f"{name}: {numerator} renames its source metric"
        if denominator:
            assert _source_metric(f"mmobs_{denominator}"), f"{name}: {denominator} is not a source metric"
            assert operations.startswith("ratio_"), name
        used = {family(s.name or "").removesuffix("_total") for s in selectors(rule["expr"])}
        assert numerator in used, f"{name} does not read {numerator}"
        assert operations.endswith("rate5m") or operations.startswith("count"), name
        # The level names the labels the rule keeps: its (first, outermost) by (...) clause.
        grouping = re.search(r"\bby\s*\(([^)]*)\)", rule["expr"])
        assert grouping, f"{name}: no by (...) clause"
        kept = [label.strip() for label in grouping.group(1).split(",") if label.strip() != "le"]
        assert level == "_".join(kept), f"{name}: level should be {'_'.join(kept)}"


def test_alerts_are_well_formed() -> None:
    alerts_found = alert_rules()
    assert len(alerts_found) >= 5
    names = [alert["alert"] for alert in alerts_found]
    assert len(names) == len(set(names)), "one rule per alert name"
    for alert in alerts_found:
        name = alert["alert"]
        assert re.fullmatch(r"Mmobs(?:[A-Z][a-z0-9]*)+", name), f"{name} is not CamelCase"
        assert alert["labels"]["severity"] in SEVERITIES, name
        annotations = alert["annotations"]
        assert set(annotations) >= {"summary", "description", "runbook_url"}, name
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"] == RUNBOOK_URL.format(name), name


def test_required_alerts_exist() -> None:
    exprs = {alert["alert"]: alert["expr"] for alert in alert_rules()}
    uses = {name: {s.name for s in selectors(expr)} for name, expr in exprs.items()}

    def alert_reading(*metrics: str) -> list[str]:
        return [name for name, used in uses.items() if used & set(metrics)]

    assert alert_reading("job:mmobs_exif_fallback_per_media_keys:ratio_rate5m"), "an EXIF fallback ratio alert"
    assert alert_reading("job:mmobs_cache_key_drift_per_cache_key_drift_samples:ratio_rate5m"), "a drift alert"
    assert alert_reading("job:mmobs_hasher_info:count_distinct_fingerprint"), "a fleet fingerprint alert"
    assert alert_reading("job_status_class:mmobs_http_image_requests:rate5m"), "a 5xx-on-image-requests alert"
    assert any(re.match(r"\s*absent\(", expr) for expr in exprs.values()), "a metrics-absent alert"


def test_every_alert_has_a_runbook() -> None:
    names = {alert["alert"] for alert in alert_rules()}
    runbooks = {p.stem for p in RUNBOOKS.glob("*.md")}
    assert runbooks == names, f"missing {names - runbooks}, orphaned {runbooks - names}"
    for name in names:
        text = (RUNBOOKS / f"{name}.md").read_text(encoding="utf-8")
        assert text.startswith(f"# {name}\n"), name
        for heading in ("## What it means", "## How to investigate", "## How to fix"):
            assert heading in text, f"{name}: no {heading!r}"


def test_runbooks_name_only_rules_that_exist() -> None:
    """A renamed recording rule must be renamed in the runbooks too."""
    recorded = recording_names()
    for path in sorted(RUNBOOKS.glob("*.md")):
        for name in re.findall(r"\b[a-z_]+:mmobs_[a-z0-9_]+:[a-z0-9_]+\b", path.read_text(encoding="utf-8")):
            assert name in recorded, f"{path.name} names {name}, which is not a recording rule"


def test_every_alert_is_tested_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in rule_tests():
        for case in test.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {alert["alert"] for alert in alert_rules()}
    assert names <= firing, f"never tested firing: {names - firing}"
    assert names <= quiet, f"never tested quiet: {names - quiet}"


def test_every_recording_rule_is_tested_with_values() -> None:
    tested = {
        case["expr"].strip()
        for test in rule_tests()
        for case in test.get("promql_expr_test", [])
        if case.get("exp_samples")
    }
    untested = recording_names() - tested
    assert not untested, f"recording rules without a promql_expr_test: {sorted(untested)}"


def test_the_readme_alert_table_is_the_alert_definitions() -> None:
    """dashboards/README.md's alert table: every alert of the mixin, in its order, with its runbook, hold and severity."""
    text = (ROOT / "dashboards" / "README.md").read_text(encoding="utf-8")
    row = r"^\| \[(Mmobs\w+)\]\(\.\./docs/runbooks/(Mmobs\w+)\.md\) \| [^|]+ \| (\w+) \| (\w+) \|$"
    listed = re.findall(row, text, flags=re.MULTILINE)
    defined = [(a.name, a.name, a.hold or "0m", a.severity) for a in alerts.build(MixinConfig())]
    assert listed == defined
