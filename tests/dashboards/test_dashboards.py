"""The Grafana dashboards, recording rules and alerts under ``dashboards/``, rendered by the mixin.

Checks that the committed files are the mixin's output, the conventions in the
design notes (datasource variable, job/instance filters on every selector,
``$__rate_interval``, units, descriptions, stable uids, rule and alert naming,
runbooks), that every metric a query reads is one mmobs (or vLLM) exports, that
the rules read only the configured jobs, and runs ``promtool check`` (with
``--lint=all``) and ``promtool test`` on the rules. The ported dashboard-linter
and mixtool rules are in ``tests/dashboards/test_lint.py``, the Grafana schema round trip
in ``tests/dashboards/test_dashboard_schema.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from dashboards.mixin import MixinConfig, alerts, render_all
from dashboards.mixin import metrics as mixin_metrics
from dashboards.mixin import rules as mixin_rules
from mmobs.observability.metrics import METRIC_NAMES as HASHER_HTTP_NAMES
from mmobs.vllm.cache_drift.cache_metrics import METRIC_NAMES as CACHE_DRIFT_NAMES
from mmobs.vllm.decode_free_hits.decode_metrics import METRIC_NAMES as DECODE_SKIP_NAMES
from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES as FRONT_END_NAMES
from mmobs.vllm.uuid_checks.uuid_metrics import METRIC_NAMES as UUID_CHECK_NAMES
from tests.support import require_binary
from tests.support.alert_lint import lint_alert_document
from tests.support.dashboard_lint import lint_dashboard
from tests.support.promql_scan import COUNTER_FUNCTIONS, family, selectors

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
GRAFANA = DASHBOARDS / "grafana"
PROMETHEUS = DASHBOARDS / "prometheus"
RULE_TESTS = PROMETHEUS / "tests"
RUNBOOKS = ROOT / "docs" / "runbooks"
RECORDING_RULES = PROMETHEUS / "recording-rules.yml"
ALERTS = PROMETHEUS / "alerts.yml"
RULE_FILES = (RECORDING_RULES, ALERTS)

#: Dashboard file -> uid. Links and bookmarks use these: never change them.
EXPECTED_UIDS = {
    "mmobs-cache-keys.json": "mmobs-cache-keys",
    "mmobs-exif-fallbacks.json": "mmobs-exif-fallbacks",
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Series Prometheus itself provides that the rules may read.
BUILTIN_METRICS = frozenset({"up"})
#: vLLM's multimodal cache counters and its time to first token (checked against vLLM's source in
#: test_vllm_metrics.py, and as a real Prometheus stores them from a real server in test_prometheus.py).
VLLM_METRICS = frozenset(
    {"vllm:mm_cache_queries_total", "vllm:mm_cache_hits_total", "vllm:time_to_first_token_seconds"}
)
#: mmobs's metrics: the hasher's and the middleware's, and the vLLM plugin's.
METRIC_NAMES = HASHER_HTTP_NAMES | CACHE_DRIFT_NAMES | DECODE_SKIP_NAMES | UUID_CHECK_NAMES | FRONT_END_NAMES
RUNBOOK_URL = "https://github.com/mmobs/mmobs/blob/main/docs/runbooks/{}.md"
SEVERITIES = frozenset({"critical", "warning", "info"})
RATE_INTERVAL = "$__rate_interval"
DEFAULT_SELECTOR = ("job", "=~", "mmobs.*")


# -- promtool -------------------------------------------------------------------


def run_promtool(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [require_binary("promtool"), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"promtool {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result


# -- loading ------------------------------------------------------------------------


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(GRAFANA.glob("*.json"))}


def all_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    flat = []
    for panel in board["panels"]:
        flat.append(panel)
        flat.extend(panel.get("panels", []))
    return flat


def query_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in all_panels(board) if panel["type"] != "row"]


def dashboard_targets() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, panel, target) for every target of every panel."""
    return [
        (f"{name} panel {panel['id']} {panel['title']!r} {target.get('refId')}", panel, target)
        for name, board in dashboards().items()
        for panel in query_panels(board)
        for target in panel.get("targets", [])
    ]


def rules(path: Path) -> list[dict[str, Any]]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def recording_names() -> set[str]:
    return {rule["record"] for rule in rules(RECORDING_RULES)}


def alert_rules() -> list[dict[str, Any]]:
    return [rule for rule in rules(ALERTS) if "alert" in rule]


def rule_tests() -> list[dict[str, Any]]:
    paths = sorted(RULE_TESTS.glob("*.yml"))
    assert paths, "no promtool rule tests"
    return [test for p in paths for test in yaml.safe_load(p.read_text(encoding="utf-8"))["tests"]]


# -- the scanner itself ---------------------------------------------------------------


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


# -- the mixin: committed files are its output ---------------------------------------------


def test_checked_in_files_are_the_mixin_output() -> None:
    expected = render_all()
    assert set(expected) == {
        *(f"grafana/{p.name}" for p in GRAFANA.glob("*.json")),
        "prometheus/recording-rules.yml",
        "prometheus/alerts.yml",
        "provisioning/alerting/mmobs-alerts.yml",
        "alerting/grafana-alert-rules.json",
        "kustomization.yaml",
        "kubernetes/prometheus-rules.yaml",
        "kubernetes/monitors.yaml",
        "mixin.libsonnet",
    }
    for name, text in expected.items():
        assert (DASHBOARDS / name).read_text(encoding="utf-8") == text, (
            f"{name} is out of date: run python dashboards/generate.py"
        )


def test_generate_script_checks_and_writes(tmp_path: Path) -> None:
    script = [sys.executable, str(DASHBOARDS / "generate.py")]
    check = subprocess.run([*script, "--check"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    stale = subprocess.run([*script, "--check", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "out of date" in stale.stderr
    written = subprocess.run([*script, "--out", str(tmp_path), "--rate-window", "2m"], capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert "job:mmobs_exif_fallback:rate2m" in (tmp_path / "prometheus/recording-rules.yml").read_text()
    bad = subprocess.run([*script, "--out", str(tmp_path), "--rate-window", "soon"], capture_output=True, text=True)
    assert bad.returncode == 2 and "rate_window" in bad.stderr


@pytest.mark.parametrize(
    "options",
    [
        {"selector": "job=mmobs"},
        {"selector": 'job=~"mmobs.*",'},
        {"cluster_label": "my-cluster"},
        {"cluster_label": "job"},
        {"runbook_url_pattern": "https://example.com/runbooks"},
        {"rate_window": "5 minutes"},
    ],
)
def test_mixin_config_rejects_what_it_cannot_render(options: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        MixinConfig(**options)


def test_rule_files_load_back_to_the_mixin_documents() -> None:
    """The small YAML writer: PyYAML reads exactly the document the mixin built."""
    config = MixinConfig()
    assert yaml.safe_load(RECORDING_RULES.read_text(encoding="utf-8")) == mixin_rules.document(config)
    assert yaml.safe_load(ALERTS.read_text(encoding="utf-8")) == alerts.document(config)


def test_mixin_metric_names_are_mmobs_metric_names() -> None:
    assert mixin_metrics.MMOBS_METRICS == HASHER_HTTP_NAMES
    assert mixin_metrics.VLLM_CACHE_DRIFT_METRICS == CACHE_DRIFT_NAMES
    assert mixin_metrics.VLLM_DECODE_SKIP_METRICS == DECODE_SKIP_NAMES
    assert mixin_metrics.VLLM_UUID_CHECK_METRICS == UUID_CHECK_NAMES
    assert mixin_metrics.VLLM_FRONT_END_METRICS == FRONT_END_NAMES
    assert mixin_metrics.VLLM_METRICS == VLLM_METRICS


OTHER = MixinConfig(
    selector='job="vllm", namespace!="dev"',
    cluster_label="cluster",
    runbook_url_pattern="https://runbooks.example.com/mmobs/{alert}",
    rate_window="2m",
)


def test_mixin_renders_for_another_selector_cluster_runbook_and_window(tmp_path: Path) -> None:
    files = render_all(OTHER)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    for name in ("grafana/mmobs-cache-keys.json", "grafana/mmobs-exif-fallbacks.json"):
        board = json.loads(files[name])
        assert lint_dashboard(board, name) == []
        variables = [v["name"] for v in board["templating"]["list"]]
        assert variables[:4] == ["datasource", "cluster", "job", "instance"], variables
        assert board["templating"]["list"][2]["query"] == (
            'label_values(mmobs_media_keys_total{job="vllm",namespace!="dev",cluster=~"$cluster"}, job)'
        )
        for panel in query_panels(board):
            for target in panel["targets"]:
                for selector in selectors(target["expr"]):
                    assert ("cluster", "=~", "$cluster") in selector.matchers, (name, target["expr"])
    alert_document = yaml.safe_load(files["prometheus/alerts.yml"])
    assert lint_alert_document(alert_document) == []
    for group in alert_document["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"] == f"https://runbooks.example.com/mmobs/{rule['alert']}"
    recorded = yaml.safe_load(files["prometheus/recording-rules.yml"])
    for group in recorded["groups"]:
        for rule in group["rules"]:
            assert rule["record"].startswith("cluster_job"), rule["record"]
            assert rule["record"].endswith("rate2m") or rule["record"].endswith("fingerprint"), rule["record"]
            for selector in selectors(rule["expr"]):
                assert ("job", "=", "vllm") in selector.matchers and ("namespace", "!=", "dev") in selector.matchers
                assert selector.range in (None, "2m")


@pytest.mark.prometheus
def test_mixin_rendered_for_another_config_passes_promtool(tmp_path: Path) -> None:
    for name, text in render_all(OTHER).items():
        if name.startswith("prometheus/"):
            (tmp_path / Path(name).name).write_text(text, encoding="utf-8")
    run_promtool("check", "rules", "--lint=all", "--lint-fatal", *sorted(tmp_path.glob("*.yml")))


# -- dashboards: files, uids, variables, panels ---------------------------------------------


def test_every_dashboard_parses_and_has_the_expected_uid() -> None:
    boards = dashboards()
    assert set(boards) == set(EXPECTED_UIDS)
    for name, board in boards.items():
        assert board["uid"] == EXPECTED_UIDS[name], name
        assert board["title"].startswith("mmobs / ")
        assert board["schemaVersion"] >= 36, "Grafana 10+ dashboards"
        assert board.get("id") is None, "a dashboard id is instance-specific; never write one"
        assert board["editable"] is False, "provisioned from files: edit the mixin, not the UI"
    assert len({b["uid"] for b in boards.values()}) == len(boards)


def test_no_inputs_and_no_hard_coded_datasource() -> None:
    for name, board in dashboards().items():
        assert "__inputs" not in board, name
        assert "__requires" not in board, name
        text = (GRAFANA / name).read_text(encoding="utf-8")
        assert "${DS_" not in text, name
        # Every datasource reference anywhere in the file is the variable.
        for match in re.finditer(r'"datasource": (\{[^{}]*\})', text):
            assert json.loads(match.group(1)) == DATASOURCE, f"{name}: {match.group(0)}"


def test_template_variables() -> None:
    expected = {
        "mmobs-exif-fallbacks.json": ["datasource", "job", "instance"],
        "mmobs-cache-keys.json": ["datasource", "job", "instance", "model_name"],
    }
    for name, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert list(variables) == expected[name], name
        ds = variables["datasource"]
        assert ds["type"] == "datasource" and ds["query"] == "prometheus", name
        assert set(ds["current"]) >= {"text", "value"}, name
        for var in expected[name][1:]:
            v = variables[var]
            assert v["type"] == "query", (name, var)
            assert v["datasource"] == DATASOURCE, (name, var)
            assert v["multi"] is True and v["includeAll"] is True, (name, var)
            assert v["allValue"] == ".+", (name, var)
            assert v["refresh"] == 2, (name, var)
            assert "definition" not in v, (name, var)
            match = re.fullmatch(r"label_values\(([\w:]*)(\{.*\})?, (\w+)\)", v["query"])
            assert match and match.group(3) == var, (name, v["query"])
            (selector,) = selectors(match.group(1) + (match.group(2) or ""))
            assert selector.name in METRIC_NAMES | VLLM_METRICS, (name, v["query"])
        assert variables["job"]["query"] == 'label_values(mmobs_media_keys_total{job=~"mmobs.*"}, job)', name
        assert 'job=~"$job"' in variables["instance"]["query"], name
    model = {v["name"]: v for v in dashboards()["mmobs-cache-keys.json"]["templating"]["list"]}["model_name"]
    assert model["query"] == 'label_values(vllm:mm_cache_queries_total{job=~"$job",instance=~"$instance"}, model_name)'


def test_every_panel_has_datasource_description_unit_and_targets() -> None:
    for name, board in dashboards().items():
        ids = [p["id"] for p in all_panels(board)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        for panel in query_panels(board):
            where = f"{name} panel {panel['id']} {panel.get('title')!r}"
            assert panel["type"] in {"timeseries", "stat", "table", "bargauge", "gauge"}, where
            assert panel["datasource"] == DATASOURCE, where
            description = panel.get("description", "")
            assert isinstance(description, str) and len(description) >= 80, f"{where}: describe what to do"
            unit = panel["fieldConfig"]["defaults"].get("unit")
            assert isinstance(unit, str) and unit, f"{where}: no unit"
            assert panel["targets"], f"{where}: no targets"
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), where
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, where
                assert target["expr"].strip(), where
        titles = [p["title"] for p in query_panels(board)]
        assert len(titles) == len(set(titles)), f"{name}: duplicate panel titles"


def test_vllm_row_sits_on_the_cache_keys_dashboard() -> None:
    board = dashboards()["mmobs-cache-keys.json"]
    panels = board["panels"]
    rows = [i for i, p in enumerate(panels) if p["type"] == "row"]
    assert [panels[i]["title"] for i in rows] == ["vLLM multimodal cache", "Multimodal front end"]
    row_index = rows[0]
    row = panels[row_index]
    assert row["collapsed"] is False and panels[rows[1]]["collapsed"] is False
    below = [p for p in panels[row_index + 1 :] if p["type"] != "row"]
    assert all(p["gridPos"]["y"] > row["gridPos"]["y"] for p in below)
    assert all(p["gridPos"]["y"] < row["gridPos"]["y"] for p in panels[:row_index])
    read = {family(s.name or "") for p in below for t in p["targets"] for s in selectors(t["expr"])}
    assert read >= VLLM_METRICS, "vLLM's cache counters"
    assert {"mmobs_exif_fallback_total", "mmobs_media_keys_total", "mmobs_hash_duration_seconds"} <= read
    for panel in below:
        for target in panel["targets"]:
            for selector in selectors(target["expr"]):
                if selector.name in VLLM_METRICS:
                    assert ("model_name", "=~", "$model_name") in selector.matchers, target["expr"]


def test_panels_do_not_overlap() -> None:
    for name, board in dashboards().items():
        cells: dict[tuple[int, int], int] = {}
        for panel in all_panels(board):
            g = panel["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24, (name, panel["id"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, f"{name}: panels {cells[(x, y)]} and {panel['id']} overlap"
                    cells[(x, y)] = panel["id"]


def test_every_selector_filters_on_job_and_instance() -> None:
    for where, _, target in dashboard_targets():
        found = selectors(target["expr"])
        assert found, f"{where}: no metric selector in {target['expr']!r}"
        for selector in found:
            assert selector.name, f"{where}: selector without a metric name"
            assert selector.has("job", "=~", "$job"), f'{where}: {selector.name} lacks job=~"$job"'
            assert selector.has("instance", "=~", "$instance"), f'{where}: {selector.name} lacks instance=~"$instance"'


def test_every_rate_and_increase_uses_rate_interval() -> None:
    for where, _, target in dashboard_targets():
        expr = target["expr"]
        for selector in selectors(expr):
            if selector.function in COUNTER_FUNCTIONS:
                assert selector.range == RATE_INTERVAL, f"{where}: {selector.function}({selector.name}[...])"
            if selector.range is not None:
                assert selector.function in {"rate", "increase"}, f"{where}: range outside rate/increase"
                assert selector.range == RATE_INTERVAL, f"{where}: [{selector.range}]"
        # Belt and braces, independent of the scanner.
        calls = len(re.findall(r"\b(?:rate|increase)\(", expr))
        assert calls == expr.count(f"[{RATE_INTERVAL}]"), where
        assert "irate(" not in expr, where
        assert "$__interval" not in expr and "$__range" not in expr, where


def test_dashboard_metrics_exist() -> None:
    for where, _, target in dashboard_targets():
        for selector in selectors(target["expr"]):
            assert family(selector.name or "") in METRIC_NAMES | VLLM_METRICS, f"{where}: unknown {selector.name}"


def test_dashboards_cover_every_metric() -> None:
    used = {family(s.name or "") for _, _, t in dashboard_targets() for s in selectors(t["expr"])}
    assert used == set(METRIC_NAMES) | VLLM_METRICS, f"not on any dashboard: {sorted(set(METRIC_NAMES) - used)}"


# -- rules and alerts ---------------------------------------------------------------------


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


# -- queries.py -----------------------------------------------------------------------------


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


def test_the_readme_alert_table_is_the_alert_definitions() -> None:
    """dashboards/README.md's alert table: every alert of the mixin, in its order, with its runbook, hold and severity."""
    text = (ROOT / "dashboards" / "README.md").read_text(encoding="utf-8")
    row = r"^\| \[(Mmobs\w+)\]\(\.\./docs/runbooks/(Mmobs\w+)\.md\) \| [^|]+ \| (\w+) \| (\w+) \|$"
    listed = re.findall(row, text, flags=re.MULTILINE)
    defined = [(a.name, a.name, a.hold or "0m", a.severity) for a in alerts.build(MixinConfig())]
    assert listed == defined
