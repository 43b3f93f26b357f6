"""What the dashboard test modules share: the files under ``dashboards/``, read, and ``promtool``.

The paths of the rendered dashboards, rules, rule tests and runbooks, the
conventions the modules check against (uids, datasource, severities, the default
selector), the metric names mmobs (and vLLM) export, loaders for the dashboards'
panels and targets and the rule files' rules, and :func:`run_promtool`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from mmobs.observability.metrics import METRIC_NAMES as HASHER_HTTP_NAMES
from mmobs.vllm.cache_drift.cache_metrics import METRIC_NAMES as CACHE_DRIFT_NAMES
from mmobs.vllm.decode_free_hits.decode_metrics import METRIC_NAMES as DECODE_SKIP_NAMES
from mmobs.vllm.engine_items.item_metrics import METRIC_NAMES as ENGINE_ITEM_NAMES
from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES as FRONT_END_NAMES
from mmobs.vllm.render.render_metrics import METRIC_NAMES as RENDER_NAMES
from mmobs.vllm.uuid_checks.uuid_metrics import METRIC_NAMES as UUID_CHECK_NAMES
from mmobs.vllm.video_budget import METRIC_NAMES as VIDEO_BUDGET_NAMES
from tests.support import require_binary

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
METRIC_NAMES = (
    HASHER_HTTP_NAMES
    | CACHE_DRIFT_NAMES
    | DECODE_SKIP_NAMES
    | UUID_CHECK_NAMES
    | FRONT_END_NAMES
    | ENGINE_ITEM_NAMES
    | RENDER_NAMES
    | VIDEO_BUDGET_NAMES
)
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
