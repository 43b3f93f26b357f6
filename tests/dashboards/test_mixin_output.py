"""The mixin (``dashboards/mixin``): the committed dashboards and rules are its output.

``dashboards/generate.py`` checks and writes them; the mixin's configuration
refuses what it cannot render, the rule files load back to the mixin's documents,
its metric names are mmobs's, and it renders (and passes ``promtool``) for
another selector, cluster label, runbook URL and window.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dashboards.mixin import MixinConfig, alerts, render_all
from dashboards.mixin import metrics as mixin_metrics
from dashboards.mixin import rules as mixin_rules
from mmobs.observability.metrics import METRIC_NAMES as HASHER_HTTP_NAMES
from mmobs.vllm.cache_drift.cache_metrics import METRIC_NAMES as CACHE_DRIFT_NAMES
from mmobs.vllm.decode_free_hits.decode_metrics import METRIC_NAMES as DECODE_SKIP_NAMES
from mmobs.vllm.engine_items.item_metrics import METRIC_NAMES as ENGINE_ITEM_NAMES
from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES as FRONT_END_NAMES
from mmobs.vllm.render.render_metrics import METRIC_NAMES as RENDER_NAMES
from mmobs.vllm.uuid_checks.uuid_metrics import METRIC_NAMES as UUID_CHECK_NAMES
from mmobs.vllm.video_budget import METRIC_NAMES as VIDEO_BUDGET_NAMES
from tests.dashboards.dashboard_files import (
    ALERTS,
    DASHBOARDS,
    GRAFANA,
    RECORDING_RULES,
    VLLM_METRICS,
    query_panels,
    run_promtool,
)
from tests.support.alert_lint import lint_alert_document
from tests.support.dashboard_lint import lint_dashboard
from tests.support.promql_scan import selectors


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
    assert mixin_metrics.VLLM_ENGINE_ITEM_METRICS == ENGINE_ITEM_NAMES
    assert mixin_metrics.VLLM_RENDER_METRICS == RENDER_NAMES
    assert mixin_metrics.VLLM_VIDEO_BUDGET_METRICS == VIDEO_BUDGET_NAMES
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
