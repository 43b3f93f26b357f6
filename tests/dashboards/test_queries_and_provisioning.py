"""``dashboards/queries.py``, the Grafana provisioning, the Prometheus configuration, and ``promtool`` on the rules.

``queries.py`` lists every dashboard target and rule, and its substituted queries
are valid PromQL; the provisioning and ``prometheus.yml`` point where they should;
``promtool check`` (with ``--lint=all``), ``promtool test`` and ``promtool check
config`` pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.dashboards.dashboard_files import (
    DASHBOARDS,
    PROMETHEUS,
    RECORDING_RULES,
    RULE_FILES,
    RULE_TESTS,
    alert_rules,
    dashboard_targets,
    load_module,
    rules,
    run_promtool,
)


def test_queries_module_lists_every_dashboard_target_and_rule() -> None:
    queries = load_module("mmobs_dashboard_queries", DASHBOARDS / "queries.py")
    listed = queries.all_queries()
    targets = [t["expr"] for _, _, t in dashboard_targets()]
    recorded = [rule["expr"].strip() for rule in rules(RECORDING_RULES)]
    assert sorted(expr for _, expr in listed) == sorted(targets + recorded)
    assert all(isinstance(source, str) and source for source, _ in listed)
    alerts_listed = [rule["expr"].strip() for rule in alert_rules()]
    assert [expr for _, expr in queries.alert_queries()] == alerts_listed
    for _, expr in listed:
        assert "$" not in queries.substitute(expr)
    assert queries.substitute('m{job=~"$job",model_name=~"${model_name}"}[$__rate_interval]', job="a") == (
        'm{job=~"a",model_name=~".*"}[1m]'
    )


@pytest.mark.prometheus
def test_substituted_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """What the live integration test will send: every query with the variables replaced."""
    queries = load_module("mmobs_dashboard_queries", DASHBOARDS / "queries.py")
    group = {
        "name": "dashboard-queries",
        "rules": [
            {"record": f"mmobs_test:query_{i}:value", "expr": queries.substitute(expr)}
            for i, (_, expr) in enumerate(queries.all_queries())
        ],
    }
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [group]}), encoding="utf-8")
    run_promtool("check", "rules", path)


# -- provisioning and Prometheus configuration ---------------------------------------------


def test_grafana_provisioning() -> None:
    datasources = yaml.safe_load((DASHBOARDS / "provisioning/datasources/mmobs-prometheus.yml").read_text())
    (ds,) = datasources["datasources"]
    assert ds["type"] == "prometheus" and ds["uid"] == "prometheus"
    assert ds["url"] == "http://localhost:9090"
    providers = yaml.safe_load((DASHBOARDS / "provisioning/dashboards/mmobs.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"].endswith("/dashboards/grafana")


def test_prometheus_config_scrapes_mmobs_and_loads_the_rules() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for sc in jobs["mmobs"]["static_configs"] for t in sc["targets"]]
    assert targets == ["127.0.0.1:8000"]
    assert {(PROMETHEUS / f).resolve() for f in config["rule_files"]} == {p.resolve() for p in RULE_FILES}


@pytest.mark.prometheus
def test_promtool_check_rules_with_every_lint() -> None:
    result = run_promtool("check", "rules", "--lint=all", "--lint-fatal", *RULE_FILES)
    assert "SUCCESS" in result.stdout


@pytest.mark.prometheus
def test_promtool_test_rules() -> None:
    tests = sorted(RULE_TESTS.glob("*.yml"))
    result = run_promtool("test", "rules", *tests)
    assert "FAILED" not in result.stdout + result.stderr


@pytest.mark.prometheus
def test_promtool_check_config() -> None:
    run_promtool("check", "config", PROMETHEUS / "prometheus.yml")
