"""Grafana panel JSON: targets, stat, time series, table and row panels, and their layout.

Every panel reads the ``${datasource}`` variable (on the panel and on every
target, dashboard-linter's panel-datasource-rule), has a unit and a description
(panel-units-rule, panel-title-description-rule), and writes each field that
Grafana's dashboard schema requires, so the grafana-foundation-sdk round trip
is the identity (``tests/dashboards/test_dashboard_schema.py``).
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]

DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
#: Fields Grafana's schema requires on every panel; written out so nothing is
#: implied by a default (the schema round trip would add them otherwise).
PANEL_SCHEMA_FIELDS: Json = {"repeatDirection": "h", "transparent": False}


def target(expr: str, ref: str = "A", legend: str = "", *, table: bool = False, exemplar: bool = False) -> Json:
    """One Prometheus query; ``table`` makes it an instant query in table format, ``exemplar`` shows its exemplars."""
    query: Json = {"datasource": DATASOURCE, "editorMode": "code", "expr": expr, "refId": ref}
    if table:
        query.update({"format": "table", "instant": True, "range": False, "legendFormat": "__auto"})
    else:
        query.update({"instant": False, "range": True, "legendFormat": legend or "__auto"})
    if exemplar:
        query["exemplar"] = True
    return query


def quantile_targets(expr_for: Any, label: str) -> list[Json]:
    """p50, p95 and p99 targets; ``expr_for(q)`` builds the query for quantile ``q``."""
    return [
        target(expr_for(q), ref, f"{name} {{{{{label}}}}}")
        for ref, q, name in (("A", "0.5", "p50"), ("B", "0.95", "p95"), ("C", "0.99", "p99"))
    ]


def thresholds(*steps: tuple[float | None, str]) -> Json:
    """Absolute thresholds: (from value, colour) pairs, the first from None."""
    return {"mode": "absolute", "steps": [{"color": colour, "value": value} for value, colour in steps]}


GREEN = thresholds((None, "green"))


def _panel(kind: str, title: str, description: str, field_defaults: Json, options: Json, targets: list[Json]) -> Json:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": field_defaults, "overrides": []},
        "options": options,
        "targets": targets,
        "transformations": [],
        **PANEL_SCHEMA_FIELDS,
    }


def timeseries(
    title: str,
    description: str,
    unit: str,
    targets: list[Json],
    *,
    stack: bool = False,
    max_value: float | None = None,
    steps: Json | None = None,
) -> Json:
    """A time series; ``steps`` draws threshold lines (an alert threshold, say)."""
    defaults: Json = {
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": "line",
            "fillOpacity": 20 if stack else 5,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stack else "none"},
            "thresholdsStyle": {"mode": "line" if steps else "off"},
        },
        "min": 0,
        "thresholds": steps or GREEN,
        "unit": unit,
    }
    if max_value is not None:
        defaults["max"] = max_value
    options = {
        "legend": {
            "calcs": ["mean", "max", "lastNotNull"],
            "displayMode": "table",
            "placement": "bottom",
            "showLegend": True,
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return _panel("timeseries", title, description, defaults, options, targets)


def stat(
    title: str,
    description: str,
    unit: str,
    expr: str,
    steps: Json,
    *,
    calc: str = "lastNotNull",
    decimals: int | None = None,
) -> Json:
    """A single number coloured by ``steps``; ``calc`` reduces the series (``max`` for "any over range")."""
    defaults: Json = {"color": {"mode": "thresholds"}, "mappings": [], "thresholds": steps, "unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {
        "colorMode": "background",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {"calcs": [calc], "fields": "", "values": False},
        "textMode": "auto",
    }
    return _panel("stat", title, description, defaults, options, [target(expr)])


def table(title: str, description: str, unit: str, expr: str, *, rename: dict[str, str], order: list[str]) -> Json:
    """An instant-query table; ``order`` fixes the columns, ``rename`` names the value column."""
    defaults: Json = {
        "color": {"mode": "thresholds"},
        "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False},
        "mappings": [],
        "thresholds": GREEN,
        "unit": unit,
    }
    options = {"cellHeight": "sm", "footer": {"show": False}, "showHeader": True}
    panel = _panel("table", title, description, defaults, options, [target(expr, table=True)])
    panel["transformations"] = [
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "indexByName": {name: index for index, name in enumerate(order)},
                "renameByName": rename,
            },
        }
    ]
    return panel


def row(title: str) -> Json:
    """An expanded row header; the panels laid out after it belong to it."""
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


#: One line of the grid: (panel, width, height) triples, at most 24 wide in all.
GridLine = list[tuple[Json, int, int]]


def layout(lines: list[GridLine]) -> list[Json]:
    """Place panels line by line on Grafana's 24-column grid and number them from 1."""
    panels: list[Json] = []
    y = 0
    for line in lines:
        x = 0
        height = 0
        for panel, width, panel_height in line:
            panels.append({"id": len(panels) + 1, "gridPos": {"h": panel_height, "w": width, "x": x, "y": y}, **panel})
            x += width
            height = max(height, panel_height)
        if x > 24:
            raise ValueError(f"grid line at y={y} is {x} wide")
        y += height
    return panels
