"""The dashboard envelope: template variables, links, time settings.

Variables follow dashboard-linter's template rules: a ``datasource`` variable
labelled "Data source"; ``job`` and ``instance`` query variables on it,
multi-select with "All" meaning ``.+`` (so a series without the label is not
matched), refreshed on time-range change. Fields are those of Grafana's
dashboard schema, written out in full (``definition`` is not one of them).
"""

from __future__ import annotations

from typing import Any

from .config import MixinConfig
from .metrics import VARIABLE_METRIC
from .panels import DATASOURCE

Json = dict[str, Any]

SCHEMA_VERSION = 39  # Grafana 10.3/10.4; newer Grafana migrates it on load.
TAG = "mmobs"
#: Grafana's schema gives every variable these fields; they only mean something
#: for interval variables, and are written so the schema round trip is exact.
VARIABLE_SCHEMA_FIELDS: Json = {
    "auto": False,
    "auto_count": 30,
    "auto_min": "10s",
    "id": "00000000-0000-0000-0000-000000000000",
}
REFRESH_ON_TIME_RANGE_CHANGE = 2


def query_variable(name: str, label: str, query: str) -> Json:
    """A multi-select label-values variable whose "All" matches any non-empty value."""
    return {
        **VARIABLE_SCHEMA_FIELDS,
        "allValue": ".+",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": query,
        "refresh": REFRESH_ON_TIME_RANGE_CHANGE,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


def datasource_variable() -> Json:
    """The Prometheus picker; ``current`` starts empty, so Grafana selects the default datasource."""
    return {
        **VARIABLE_SCHEMA_FIELDS,
        "current": {"selected": False, "text": "", "value": ""},
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
        "type": "datasource",
    }


def label_values(metric: str, matchers: list[str], label: str) -> str:
    selector = f"{metric}{{{','.join(matchers)}}}" if matchers else metric
    return f"label_values({selector}, {label})"


def standard_variables(config: MixinConfig) -> list[Json]:
    """datasource, [cluster], job, instance: each narrows the next."""
    variables = [datasource_variable()]
    scope = list(config.selector_matchers)
    if config.cluster_label:
        name = config.cluster_label
        label = name.replace("_", " ").title()
        variables.append(query_variable(name, label, label_values(VARIABLE_METRIC, scope, name)))
        scope.append(f'{name}=~"${name}"')
    variables.append(query_variable("job", "Job", label_values(VARIABLE_METRIC, scope, "job")))
    instances = label_values(VARIABLE_METRIC, [*scope, 'job=~"$job"'], "instance")
    variables.append(query_variable("instance", "Instance", instances))
    return variables


def dashboard(uid: str, title: str, description: str, panels: list[Json], variables: list[Json]) -> Json:
    """A read-only dashboard (provisioned from files; edit the generator, not the UI)."""
    return {
        "annotations": {"list": []},
        "description": description,
        "editable": False,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": True,
                "keepTime": True,
                "tags": [TAG],
                "targetBlank": False,
                "title": "mmobs dashboards",
                "tooltip": "The other mmobs dashboards, with the same variables and time range",
                "type": "dashboards",
                "url": "",
            }
        ],
        "liveNow": False,
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "style": "dark",
        "tags": [TAG],
        "templating": {"list": variables},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {
            "collapse": False,
            "enable": True,
            "hidden": False,
            "refresh_intervals": ["5s", "10s", "30s", "1m", "5m", "15m", "30m", "1h", "2h", "1d"],
            "time_options": ["5m", "15m", "1h", "6h", "12h", "24h", "2d", "7d", "30d"],
        },
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }
