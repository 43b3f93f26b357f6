"""``dashboards/mixin.libsonnet`` evaluated by jsonnet's own evaluator.

Vendored as a monitoring mixin, it must give exactly the dashboards, rules and
alerts the files hold (and CI tests); its ``_config.selector`` must reach every
expression that reads a raw mmobs series, and its thresholds the alerts that
quote them, as the Python mixin renders them.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.mixin import alerts, render_all, rules
from dashboards.mixin.config import AlertThresholds, MixinConfig
from dashboards.mixin.jsonnet import camel, threshold_templates

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"


def evaluate(snippet: str, root: Path = DASHBOARDS) -> Any:
    import _jsonnet  # the jsonnet package's evaluator (the C++ one, as a wheel)

    return json.loads(_jsonnet.evaluate_snippet("test", snippet, jpathdir=[str(root)]))


def test_the_mixin_evaluates_to_the_files() -> None:
    mixin = evaluate("local m = import 'mixin.libsonnet'; [m.grafanaDashboards, m.prometheusRules, m.prometheusAlerts]")
    dashboards, recording, alerting = mixin
    assert dashboards == {path.name: json.loads(path.read_text()) for path in (DASHBOARDS / "grafana").glob("*.json")}
    assert recording == yaml.safe_load((DASHBOARDS / "prometheus" / "recording-rules.yml").read_text())
    assert alerting == yaml.safe_load((DASHBOARDS / "prometheus" / "alerts.yml").read_text())


def test_the_selector_in_config_reaches_every_raw_series() -> None:
    overridden = evaluate(
        "local m = (import 'mixin.libsonnet') + { _config+:: { selector: 'job=\"vllm\",namespace=\"ai\"' } };"
        "[m.prometheusRules, m.prometheusAlerts]"
    )
    exprs = [rule["expr"] for document in overridden for group in document["groups"] for rule in group["rules"]]
    assert not [expr for expr in exprs if 'job=~"mmobs.*"' in expr]
    defaults = [
        rule["expr"]
        for name in ("recording-rules.yml", "alerts.yml")
        for group in yaml.safe_load((DASHBOARDS / "prometheus" / name).read_text())["groups"]
        for rule in group["rules"]
    ]
    assert [e.replace('job=~"mmobs.*"', 'job="vllm",namespace="ai"') for e in defaults] == exprs
    assert sum('job="vllm",namespace="ai"' in expr for expr in exprs) >= 20


#: Every threshold moved, to values whose text differs from the defaults' in each form (0.025 is "2.5%").
OVERRIDES = AlertThresholds(
    exif_fallback_ratio=0.1,
    cache_key_drift_ratio=0.025,
    vllm_poisoned_entry_share=0.75,
    vllm_front_end_ttft_share=0.333,
)


def test_thresholds_in_config_render_the_alerts_as_the_python_mixin_does() -> None:
    """The jsonnet ``_config`` and :class:`MixinConfig` give the same rules and alerts for the same choices."""
    selector = 'job="vllm",namespace="ai"'
    config = ", ".join(f"{camel(f.name)}: {getattr(OVERRIDES, f.name)}" for f in fields(OVERRIDES))
    recording, alerting = evaluate(
        f"local m = (import 'mixin.libsonnet') + {{ _config+:: {{ selector: '{selector}', {config} }} }};"
        "[m.prometheusRules, m.prometheusAlerts]"
    )
    python = MixinConfig(selector=selector, thresholds=OVERRIDES)
    assert recording == rules.document(python)
    assert alerting == alerts.document(python)
    fallback = next(rule for rule in alerting["groups"][0]["rules"] if rule["alert"] == "MmobsExifFallbackRatioHigh")
    assert "ratio_rate5m > 0.1\n" in fallback["expr"]
    assert fallback["annotations"]["summary"] == "EXIF fallbacks replace the ImageID key of more than 10% of images."


def test_every_threshold_reaches_its_alert() -> None:
    """Each bound of :class:`AlertThresholds` is a ``_config`` field that some alert's expression reads."""
    templates = threshold_templates(MixinConfig())
    for bound in fields(AlertThresholds):
        assert sum(f"%({camel(bound.name)})s" in t["expr"] for t in templates.values()) == 1, bound.name


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be a fraction between 0 and 1"),
        (1.5, "must be a fraction between 0 and 1"),
        ("0.1", "must be a fraction between 0 and 1"),
        (0.12345, "must have at most 4 significant digits"),
    ],
)
def test_a_threshold_off_its_range_is_refused(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"exif_fallback_ratio {message}"):
        AlertThresholds(exif_fallback_ratio=value)  # type: ignore[arg-type]


def test_a_mixin_rendered_for_another_config_starts_from_that_config(tmp_path: Path) -> None:
    """``generate.py --out`` with other choices writes a mixin whose ``_config`` defaults are those choices."""
    other = MixinConfig(
        selector='job="vllm", namespace!="dev"', cluster_label="cluster", rate_window="2m", thresholds=OVERRIDES
    )
    for name, text in render_all(other).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    as_rendered = evaluate("local m = import 'mixin.libsonnet'; [m.prometheusRules, m.prometheusAlerts]", tmp_path)
    assert as_rendered == [rules.document(other), alerts.document(other)]
    moved = evaluate(
        "local m = (import 'mixin.libsonnet') + { _config+:: { selector: 'job=\"x\"', exifFallbackRatio: 0.2 } };"
        "m.prometheusAlerts",
        tmp_path,
    )
    again = replace(other, selector='job="x"', thresholds=replace(OVERRIDES, exif_fallback_ratio=0.2))
    assert moved == alerts.document(again)
