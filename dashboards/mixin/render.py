"""Everything the mixin writes: relative path -> exact file text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import alerts, cache_keys, exif_fallbacks, grafana_alerts, jsonnet, kubernetes, rules
from .config import MixinConfig

DASHBOARDS: dict[str, Callable[[MixinConfig], dict[str, Any]]] = {
    "grafana/mmobs-exif-fallbacks.json": exif_fallbacks.build,
    "grafana/mmobs-cache-keys.json": cache_keys.build,
}
RECORDING_RULES = "prometheus/recording-rules.yml"
ALERTS = "prometheus/alerts.yml"
GRAFANA_ALERTS = "provisioning/alerting/mmobs-alerts.yml"
GRAFANA_ALERTS_API = "alerting/grafana-alert-rules.json"


def dashboard_json(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def render_all(config: MixinConfig | None = None) -> dict[str, str]:
    """Path relative to ``dashboards/`` -> the text that file must contain."""
    config = config or MixinConfig()
    boards = {path: build(config) for path, build in DASHBOARDS.items()}
    files = {path: dashboard_json(board) for path, board in boards.items()}
    files[RECORDING_RULES] = rules.render(config)
    files[ALERTS] = alerts.render(config)
    files[GRAFANA_ALERTS] = grafana_alerts.render(config, list(boards.values()))
    files[GRAFANA_ALERTS_API] = grafana_alerts.render_api(config, list(boards.values()))
    files[kubernetes.PROMETHEUS_RULES] = kubernetes.prometheus_rule(config)
    files[kubernetes.MONITORS] = kubernetes.monitors()
    files[kubernetes.KUSTOMIZATION] = kubernetes.kustomization(list(DASHBOARDS), GRAFANA_ALERTS)
    files[jsonnet.MIXIN] = jsonnet.libsonnet(config, list(DASHBOARDS), RECORDING_RULES, ALERTS)
    return files
