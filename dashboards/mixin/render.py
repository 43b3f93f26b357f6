"""Everything the mixin writes: relative path -> exact file text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import alerts, cache_keys, exif_fallbacks, rules
from .config import MixinConfig

DASHBOARDS: dict[str, Callable[[MixinConfig], dict[str, Any]]] = {
    "grafana/mmobs-exif-fallbacks.json": exif_fallbacks.build,
    "grafana/mmobs-cache-keys.json": cache_keys.build,
}
RECORDING_RULES = "prometheus/recording-rules.yml"
ALERTS = "prometheus/alerts.yml"


def dashboard_json(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def render_all(config: MixinConfig | None = None) -> dict[str, str]:
    """Path relative to ``dashboards/`` -> the text that file must contain."""
    config = config or MixinConfig()
    files = {path: dashboard_json(build(config)) for path, build in DASHBOARDS.items()}
    files[RECORDING_RULES] = rules.render(config)
    files[ALERTS] = alerts.render(config)
    return files
