"""The Grafana-managed alert rules: the same alerts as ``alerts.yml``, proven without a Grafana server.

Static checks: the provisioning file and the HTTP API bodies are the mixin's,
every rule survives grafana-foundation-sdk's ``alerting`` models unchanged
(the typed Prometheus and expression models registered, so an unknown field is
lost and shows), the rules are the Prometheus alerts (names, ``for``,
severity, annotations, lints), their panel links resolve, the mixin's config
reaches them, and the generator refuses an alert definition without its
Grafana choices.

Against a real Prometheus: the series of every test group of
``dashboards/prometheus/tests/alerts.test.yml`` are written into a Prometheus
(its remote-write receiver, so promtool's staleness markers come along), each
group six hours after the previous one. Each rule's own query runs over every
group at every minute up to the group's last evaluation; Grafana's reduce,
threshold and ``for`` (``tests/support/grafana_eval.py``) turn the answers into the
firing instances per minute. Those are then handed to promtool as the expected
alerts of every alert at every minute, and ``promtool test rules`` must pass on
the Prometheus alerts over the same fixtures: the Grafana rules fire exactly
when the Prometheus alerts do. Skips without Prometheus, fails instead under
``MMOBS_REQUIRE_PROMETHEUS=1``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from grafana_foundation_sdk.cog import runtime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import expr, prometheus
from grafana_foundation_sdk.models.alerting import Rule

from dashboards.mixin import MixinConfig, alerts, grafana_alerts, render_all
from dashboards.mixin.render import GRAFANA_ALERTS, GRAFANA_ALERTS_API
from tests.dashboards.test_dashboard_schema import differences
from tests.support import ManagedProcess, free_port, grafana_eval, promtool_series, remote_write, require_binary
from tests.support.alert_lint import lint_alert
from tests.support.markdown import fenced_blocks, section
from tests.support.promql_scan import selectors

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
PROVISIONING = DASHBOARDS / GRAFANA_ALERTS
API = DASHBOARDS / GRAFANA_ALERTS_API
PROMETHEUS_RULES = DASHBOARDS / "prometheus"
ALERT_TESTS = PROMETHEUS_RULES / "tests" / "alerts.test.yml"
#: Between two test groups' series in the one Prometheus: far beyond any range, offset or lookback.
GROUP_SPACING = 6 * 3600

runtime.register_dataquery_variant(prometheus.variant_config())
runtime.register_dataquery_variant(expr.variant_config())


def provisioned_rules() -> list[dict[str, Any]]:
    (group,) = yaml.safe_load(PROVISIONING.read_text(encoding="utf-8"))["groups"]
    return group["rules"]


def prometheus_alerts() -> list[dict[str, Any]]:
    (group,) = yaml.safe_load((PROMETHEUS_RULES / "alerts.yml").read_text(encoding="utf-8"))["groups"]
    return group["rules"]


def round_trip(rule: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(Rule.from_json(rule), cls=JSONEncoder))


# -- the files --------------------------------------------------------------------------


def test_provisioning_file_is_one_rule_group_in_a_folder() -> None:
    document = yaml.safe_load(PROVISIONING.read_text(encoding="utf-8"))
    boards = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((DASHBOARDS / "grafana").glob("*.json"))]
    assert document == grafana_alerts.document(MixinConfig(), boards)
    assert document["apiVersion"] == 1
    (group,) = document["groups"]
    assert {key: group[key] for key in ("orgId", "name", "folder", "interval")} == {
        "orgId": 1,
        "name": "mmobs.alerts",
        "folder": "mmobs alerts",
        "interval": "1m",
    }


def test_api_bodies_are_the_provisioned_rules() -> None:
    bodies = json.loads(API.read_text(encoding="utf-8"))
    assert bodies == [grafana_alerts.api_rule(rule) for rule in provisioned_rules()]
    for body in bodies:
        assert (body["folderUID"], body["ruleGroup"], body["orgID"]) == ("mmobs-alerts", "mmobs.alerts", 1)
        assert "dashboardUid" not in body and "panelId" not in body  # the API reads the annotations


@pytest.mark.parametrize("body", json.loads(API.read_text(encoding="utf-8")), ids=lambda body: body["title"])
def test_rule_survives_the_sdk_alerting_models_unchanged(body: dict[str, Any]) -> None:
    parsed = Rule.from_json(body)
    models = [type(query.model).__name__ for query in parsed.data]
    assert models == ["Dataquery", "TypeReduce", "TypeThreshold"], "typed models, not the untyped fallback"
    assert differences(body, round_trip(body)) == []


def test_the_round_trip_shows_what_the_models_do_not_know() -> None:
    body = copy.deepcopy(json.loads(API.read_text(encoding="utf-8"))[0])
    body["data"][0]["model"]["intervalMs"] = 1000  # Grafana's UI adds it; the Prometheus model has no such field
    body["data"][1]["model"]["mode"] = "dropNN"  # belongs in settings
    body["keepFiringFor"] = "5m"  # Grafana 11's, not in the 10.x models
    found = differences(body, round_trip(body))
    assert found == ["lost /data[0]/model/intervalMs", "lost /data[1]/model/mode", "lost /keepFiringFor"], found


def test_rules_are_the_prometheus_alerts() -> None:
    rules, prom = provisioned_rules(), prometheus_alerts()
    assert [rule["title"] for rule in rules] == [alert["alert"] for alert in prom]
    for rule, alert in zip(rules, prom):
        assert rule["uid"] == grafana_alerts.rule_uid(alert["alert"])
        assert rule["for"] == alert.get("for", "0s")
        assert rule["labels"] == alert["labels"]
        for key in ("summary", "runbook_url"):
            assert rule["annotations"][key] == alert["annotations"][key]
        grafana_description = alert["annotations"]["description"].replace("$value", "$values.B.Value")
        if "$externalURL" in alert["annotations"]["description"]:
            assert rule["title"] == "MmobsMetricsAbsent"
            assert "{{ externalURL }}" in rule["annotations"]["description"]
        else:
            assert rule["annotations"]["description"] == grafana_description
        assert "$value " not in rule["annotations"]["description"]
        assert rule["isPaused"] is False
        assert rule["execErrState"] in alerts.EXEC_ERR_STATES and rule["noDataState"] in alerts.NO_DATA_STATES


def test_every_rule_links_the_panel_that_shows_it() -> None:
    boards = {
        board["uid"]: board for board in map(json.loads, map(Path.read_text, (DASHBOARDS / "grafana").glob("*.json")))
    }
    for rule in provisioned_rules():
        annotations = rule["annotations"]
        assert (rule["dashboardUid"], str(rule["panelId"])) == (
            annotations["__dashboardUid__"],
            annotations["__panelId__"],
        )
        panels = {panel["id"]: panel for panel in boards[rule["dashboardUid"]]["panels"]}
        assert panels[rule["panelId"]]["targets"], rule["title"]


def test_each_rules_states_are_explained_above_it() -> None:
    text = PROVISIONING.read_text(encoding="utf-8")
    for rule in provisioned_rules():
        line = f"# {rule['title']}: noDataState {rule['noDataState']}, execErrState {rule['execErrState']}."
        assert line in text
    assert "MmobsMetricsAbsent: noDataState OK, execErrState Alerting." in text


def test_mixtool_lints_hold_for_the_grafana_rules() -> None:
    for rule in provisioned_rules():
        assert lint_alert({"alert": rule["title"], **rule}) == [], rule["title"]
    broken = copy.deepcopy(provisioned_rules()[0])
    del broken["annotations"]["runbook_url"]
    broken["labels"]["severity"] = "page"
    findings = {finding.rule for finding in lint_alert({"alert": broken["title"], **broken})}
    assert findings == {"alert-runbook-url", "alert-severity-rule"}


def test_the_data_source_is_the_provisioned_one() -> None:
    datasources = yaml.safe_load((DASHBOARDS / "provisioning/datasources/mmobs-prometheus.yml").read_text())
    (datasource,) = datasources["datasources"]
    for rule in provisioned_rules():
        query = rule["data"][0]
        assert query["datasourceUid"] == query["model"]["datasource"]["uid"] == datasource["uid"]
        assert query["model"]["datasource"]["type"] == datasource["type"]


def test_the_mixin_config_changes_both_outputs_together() -> None:
    config = MixinConfig(selector='job="vllm", namespace!="dev"', rate_window="2m", datasource_uid="mimir-eu")
    files = render_all(config)
    (prom,) = yaml.safe_load(files["prometheus/alerts.yml"])["groups"]
    (group,) = yaml.safe_load(files[GRAFANA_ALERTS])["groups"]
    assert [rule["title"] for rule in group["rules"]] == [alert["alert"] for alert in prom["rules"]]
    for rule in group["rules"]:
        query = rule["data"][0]
        assert query["datasourceUid"] == "mimir-eu"
        found = selectors(query["model"]["expr"])
        assert found, rule["title"]
        for selector in found:
            assert ("job", "=", "vllm") in selector.matchers and ("namespace", "!=", "dev") in selector.matchers
            assert selector.range in (None, "2m")
            name = (selector.name or "").removeprefix("vllm:")  # vLLM's own names have a colon; rules' have two
            assert ":" not in name, "Grafana rules read raw series, never recording rules"
    assert json.loads(files[GRAFANA_ALERTS_API]) == [grafana_alerts.api_rule(rule) for rule in group["rules"]]


def test_readme_installs_them_both_ways_and_leaves_routing_to_the_operator() -> None:
    text = section((DASHBOARDS / "README.md").read_text(encoding="utf-8"), "## Grafana-managed alerting")
    blocks = fenced_blocks(text)
    (shell,) = [block.text for block in blocks if block.language == "sh"]
    assert "/api/folders" in shell and '"uid": "mmobs-alerts"' in shell
    assert f"dashboards/{GRAFANA_ALERTS_API}" in shell and "/api/v1/provisioning/alert-rules" in shell
    examples = [yaml.safe_load(block.text) for block in blocks if block.language == "yaml"]
    assert [sorted(example) for example in examples] == [["apiVersion", "contactPoints"], ["apiVersion", "policies"]]
    (contact_point,) = examples[0]["contactPoints"]
    (policy,) = examples[1]["policies"]
    assert policy["routes"][0]["receiver"] == contact_point["name"]
    assert ["grafana_folder", "=", grafana_alerts.FOLDER] in policy["routes"][0]["object_matchers"]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| Mmobs")}
    for rule in provisioned_rules():
        assert f" | {rule['noDataState']} | {rule['execErrState']} | " in rows[rule["title"]], rule["title"]


# -- what the generator refuses ---------------------------------------------------------


def _render_with(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    original = alerts.build

    def build(config: MixinConfig, *, inline: bool = False) -> list[alerts.Alert]:
        return [
            change(alert) if alert.name == "MmobsCacheKeyDrift" else alert for alert in original(config, inline=inline)
        ]

    monkeypatch.setattr(alerts, "build", build)
    render_all()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda alert: dataclasses.replace(alert, grafana=None), "MmobsCacheKeyDrift has no GrafanaChoices"),
        (lambda alert: dataclasses.replace(alert, expr=alert.promql), "MmobsCacheKeyDrift: expr is bare PromQL"),
        (
            lambda alert: dataclasses.replace(
                alert, grafana=dataclasses.replace(alert.grafana, panel=("mmobs-cache-keys", "Drift"))
            ),
            "0 panels titled 'Drift'",
        ),
        (
            lambda alert: dataclasses.replace(alert, description="at {{ $externalURL }}"),
            "MmobsCacheKeyDrift: its description uses what Grafana lacks",
        ),
    ],
    ids=["no-grafana-choices", "bare-promql", "unknown-panel", "prometheus-only-template"],
)
def test_generator_refuses_an_alert_definition_lacking_a_grafana_choice(
    monkeypatch: pytest.MonkeyPatch, change: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _render_with(monkeypatch, change)


def test_grafana_choices_accept_only_grafana_10_states() -> None:
    with pytest.raises(ValueError, match="no_data"):
        alerts.GrafanaChoices("KeepLast", "Error", "why", ("mmobs-cache-keys", "Media keys"))
    with pytest.raises(ValueError, match="exec_err"):
        alerts.GrafanaChoices("OK", "Pending", "why", ("mmobs-cache-keys", "Media keys"))
    with pytest.raises(ValueError, match="gated"):
        alerts.gated(alerts.down("up"), "on (job)", "x", "1")


# -- the Grafana evaluation mirror --------------------------------------------------------


def test_grafana_mirror_keeps_a_missing_instance_for_two_intervals() -> None:
    """Grafana's own semantics, which the mixin's queries avoid relying on: a vanished firing series stays firing once."""
    rule = grafana_eval.Rule("R", "q", "last", "gt", 0.5, 120, "OK")
    key = (("job", "a"),)
    results = {t: {key: 1.0} for t in range(0, 301, 60)}
    results[360] = {(("job", "b"),): 0.0}
    fired = grafana_eval.firing(rule, results, list(range(0, 481, 60)), 60)
    assert [bool(fired[t]) for t in range(0, 481, 60)] == [False, False, True, True, True, True, True, False, False]


# -- against a real Prometheus ----------------------------------------------------------


@dataclasses.dataclass
class FixtureRun:
    """Per alert-test group: its test, its time base, and each rule's firing instances per minute."""

    tests: list[dict[str, Any]]
    firing: list[dict[str, dict[int, set[grafana_eval.Labels]]]]


class Prometheus(ManagedProcess):
    """A Prometheus that only receives remote writes (no scrapes, no rules), in a temporary directory."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text("global:\n  evaluation_interval: 1m\n")
        command = [
            require_binary("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-remote-write-receiver",
            "--storage.tsdb.retention.time=30d",
        ]
        super().__init__("prometheus", command, tmp / "prometheus.log")
        self.wait_until(lambda: httpx.get(self.url + "/-/ready", timeout=1).status_code == 200)

    def query_range(self, promql: str, start: int, end: int) -> dict[int, dict[grafana_eval.Labels, float]]:
        """Each minute's series, as an instant query at that minute would return them, relative to ``start``."""
        response = httpx.get(
            self.url + "/api/v1/query_range",
            params={"query": promql, "start": start, "end": end, "step": 60},
            timeout=30,
        )
        payload = response.json()
        assert payload["status"] == "success", (promql, payload)
        out: dict[int, dict[grafana_eval.Labels, float]] = {}
        for series in payload["data"]["result"]:
            for timestamp, value in series["values"]:
                out.setdefault(int(timestamp) - start, {})[grafana_eval.instance(series["metric"])] = float(value)
        return out


def minutes(duration: str) -> int:
    return grafana_eval.seconds(duration) // 60


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureRun]:
    require_binary("prometheus")
    require_binary("promtool")
    tmp = tmp_path_factory.mktemp("grafana-alerts")
    tests = yaml.safe_load(ALERT_TESTS.read_text(encoding="utf-8"))["tests"]
    rules = [grafana_eval.Rule.from_provisioning(rule) for rule in provisioned_rules()]
    server = Prometheus(tmp)
    try:
        results = []
        for index, test in enumerate(tests):
            base, step = index * GROUP_SPACING, grafana_eval.seconds(test["interval"])
            written = []
            for series in test["input_series"]:
                parsed = promtool_series.parse(series["series"], series["values"])
                samples = [
                    ((base + i * step) * 1000, None if value == promtool_series.STALE else value)
                    for i, value in parsed.samples
                ]
                written.append((parsed.labels, samples))
            remote_write.push(server.url, written)
            last = max(minutes(case["eval_time"]) for case in test["alert_rule_test"])
            times = list(range(0, last * 60 + 1, 60))
            results.append(
                {
                    rule.title: grafana_eval.firing(
                        rule, server.query_range(rule.query, base, base + times[-1]), times, 60
                    )
                    for rule in rules
                }
            )
        yield FixtureRun(tests, results)
    finally:
        server.stop()


def expected_alerts(firing: set[grafana_eval.Labels], severity: str) -> list[dict[str, Any]]:
    return [{"exp_labels": {**dict(labels), "severity": severity}} for labels in sorted(firing)]


@pytest.mark.prometheus
def test_grafana_rules_fire_exactly_when_the_prometheus_alerts_fire(fixture_run: FixtureRun, tmp_path: Path) -> None:
    """promtool checks the Prometheus alerts against what the Grafana rules did, every minute of every fixture."""
    severity = {alert["alert"]: alert["labels"]["severity"] for alert in prometheus_alerts()}
    stripped = yaml.safe_load((PROMETHEUS_RULES / "alerts.yml").read_text(encoding="utf-8"))
    for rule in stripped["groups"][0]["rules"]:
        del rule["annotations"]  # they do not decide when an alert fires; alerts.test.yml checks them
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(stripped), encoding="utf-8")
    original = yaml.safe_load(ALERT_TESTS.read_text(encoding="utf-8"))
    cases = 0
    tests = []
    for test, firing in zip(fixture_run.tests, fixture_run.firing):
        checks = [
            {"alertname": name, "eval_time": f"{t // 60}m", "exp_alerts": expected_alerts(instances, severity[name])}
            for name, by_time in firing.items()
            for t, instances in sorted(by_time.items())
        ]
        cases += len(checks)
        tests.append({**{k: test[k] for k in ("name", "interval", "input_series")}, "alert_rule_test": checks})
    (tmp_path / "every-minute.test.yml").write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(PROMETHEUS_RULES / "recording-rules.yml"), str(tmp_path / "alerts.yml")],
                "evaluation_interval": original["evaluation_interval"],
                "group_eval_order": original["group_eval_order"],
                "tests": tests,
            }
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(tmp_path / "every-minute.test.yml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout[-6000:] + result.stderr[-2000:]
    assert cases == len(prometheus_alerts()) * sum(len(next(iter(f.values()))) for f in fixture_run.firing)


@pytest.mark.prometheus
def test_grafana_rules_agree_with_the_committed_promtool_expectations(fixture_run: FixtureRun) -> None:
    for test, firing in zip(fixture_run.tests, fixture_run.firing):
        for case in test["alert_rule_test"]:
            got = firing[case["alertname"]][minutes(case["eval_time"]) * 60]
            expected = {
                tuple(sorted((k, v) for k, v in alert["exp_labels"].items() if k != "severity"))
                for alert in case.get("exp_alerts") or []
            }
            assert got == expected, (test["name"], case["alertname"], case["eval_time"])


@pytest.mark.prometheus
def test_every_rule_both_fires_and_stays_quiet_on_the_fixtures(fixture_run: FixtureRun) -> None:
    for rule in provisioned_rules():
        states = [bool(i) for firing in fixture_run.firing for i in firing[rule["title"]].values()]
        assert any(states) and not all(states), rule["title"]
