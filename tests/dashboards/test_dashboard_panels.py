"""The Grafana dashboards under ``dashboards/grafana``: files, uids, variables, panels and queries.

The conventions of the design notes: a datasource variable and no hard-coded
datasource, stable uids, job/instance filters on every selector,
``$__rate_interval``, a description and a unit on every panel, panels that do
not overlap; and every metric a query reads is one mmobs (or vLLM) exports, every
mmobs metric on a dashboard. The ported dashboard-linter and mixtool rules are
in ``tests/dashboards/test_lint.py``, the Grafana schema round trip in
``tests/dashboards/test_dashboard_schema.py``.
"""

from __future__ import annotations

import json
import re

from tests.dashboards.dashboard_files import (
    DATASOURCE,
    EXPECTED_UIDS,
    GRAFANA,
    METRIC_NAMES,
    RATE_INTERVAL,
    VLLM_METRICS,
    all_panels,
    dashboard_targets,
    dashboards,
    query_panels,
)
from tests.support.promql_scan import COUNTER_FUNCTIONS, family, selectors


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
    assert [panels[i]["title"] for i in rows] == [
        "vLLM multimodal cache", "Multimodal front end", "Multimodal items at the engine", "Render for routers",
    ]  # fmt: skip
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
