"""Grafana's dashboard-linter rules for Prometheus dashboards, ported to Python for the tests.

Grafana itself cannot run on these machines, and the Go linter is not
installable here, so its documented rules (github.com/grafana/dashboard-linter,
docs/index.md: every rule that applies to Prometheus panels; the two LogQL
rules do not) are re-implemented from their descriptions and behaviour:

=============================== =========================================================
template-datasource-rule        a datasource variable named ``datasource`` (or
                                ``<type>_datasource``), labelled "Data source"
template-job-rule               a ``job`` query variable on ``$datasource``, labelled "Job",
template-instance-rule          multi-select, "All" = ``.+`` (same for ``instance``)
template-label-promql-rule      query variables use label_values/label_names/metrics/
                                query_result over valid PromQL
template-on-time-change-reload  query variables refresh on time-range change (2)
panel-datasource-rule           panels use the datasource variable
panel-title-description-rule    panels have a title and a description
panel-units-rule                panels have a valid Grafana unit
panel-no-targets-rule           panels have at least one target
target-promql-rule              every target is valid PromQL
target-rate-interval-rule       rate/irate ranges are ``$__rate_interval``
target-job-rule                 every selector has ``job=~"$job"``
target-instance-rule            every selector has ``instance=~"$instance"``
target-counter-agg-rule         ``*_total`` counters only inside rate/irate/increase
uneditable-dashboard            ``editable: false``
=============================== =========================================================

PromQL is read with :mod:`tests.support.promql_scan` (strict); promtool parses every
query for real in ``tests/dashboards/test_queries_and_provisioning.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.support.promql_scan import COUNTER_FUNCTIONS, selectors

Json = dict[str, Any]

RULES: dict[str, str] = {
    "template-datasource-rule": "the dashboard has a templated datasource",
    "template-job-rule": "the dashboard has a templated job",
    "template-instance-rule": "the dashboard has a templated instance",
    "template-label-promql-rule": "templated labels use valid PromQL",
    "template-on-time-change-reload-rule": "query variables reload on time-range change",
    "panel-datasource-rule": "each panel uses the templated datasource",
    "panel-title-description-rule": "each panel has a title and a description",
    "panel-units-rule": "each panel has a valid unit",
    "panel-no-targets-rule": "each panel has at least one target",
    "target-promql-rule": "each target is valid PromQL",
    "target-rate-interval-rule": "each rate uses $__rate_interval",
    "target-job-rule": "every PromQL selector has a job matcher",
    "target-instance-rule": "every PromQL selector has an instance matcher",
    "target-counter-agg-rule": "counters (_total) are aggregated with rate, irate or increase",
    "uneditable-dashboard": "the dashboard is not editable",
}

#: Panel types the panel rules look at (row, text and the like have no queries).
QUERY_PANELS = frozenset({"stat", "singlestat", "graph", "table", "timeseries", "gauge", "bargauge"})
VARIABLE_FUNCTIONS = frozenset({"label_names", "label_values", "metrics", "query_result"})
DATASOURCE_VARIABLE_UIDS = frozenset(
    {"$datasource", "${datasource}", "$prometheus_datasource", "${prometheus_datasource}"}
)
RATE_INTERVAL = "$__rate_interval"
#: Grafana's unit ids (grafana-data valueFormats categories), the ones a Prometheus panel plausibly uses.
VALID_UNITS = frozenset(
    {
        "none",
        "string",
        "short",
        "percent",
        "percentunit",
        "humidity",
        "dB",
        "hex0x",
        "hex",
        "sci",
        "locale",
        "bytes",
        "decbytes",
        "bits",
        "decbits",
        "kbytes",
        "deckbytes",
        "mbytes",
        "decmbytes",
        "gbytes",
        "decgbytes",
        "tbytes",
        "dectbytes",
        "pbytes",
        "decpbytes",
        "pps",
        "binBps",
        "Bps",
        "binbps",
        "bps",
        "KiBs",
        "Kibits",
        "KBs",
        "Kbits",
        "MiBs",
        "Mibits",
        "MBs",
        "Mbits",
        "GiBs",
        "Gibits",
        "GBs",
        "Gbits",
        "TiBs",
        "Tibits",
        "TBs",
        "Tbits",
        "dateTimeAsIso",
        "dateTimeAsUS",
        "dateTimeFromNow",
        "dateTimeAsLocal",
        "dateTimeAsSystem",
        "hertz",
        "ns",
        "µs",
        "ms",
        "s",
        "m",
        "h",
        "d",
        "dtdurationms",
        "dtdurations",
        "dthms",
        "dtdhms",
        "timeticks",
        "clockms",
        "clocks",
        "cps",
        "ops",
        "reqps",
        "rps",
        "wps",
        "iops",
        "cpm",
        "opm",
        "rpm",
        "wpm",
        "bool",
        "bool_yes_no",
        "bool_on_off",
    }
)
_VARIABLE_QUERY = re.compile(r"([a-z_]+)\((.*)\)", re.DOTALL)
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Finding:
    rule: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.where}: {self.message}"


def panels_of(board: Json) -> list[Json]:
    """Every panel, including those folded into collapsed rows."""
    flat: list[Json] = []
    for panel in board.get("panels", []):
        flat.append(panel)
        flat.extend(panel.get("panels", []))
    return flat


def variables_of(board: Json) -> list[Json]:
    return board.get("templating", {}).get("list", [])


def _uid(datasource: Any) -> str:
    return datasource.get("uid", "") if isinstance(datasource, dict) else str(datasource or "")


def _valid_promql(expr: str) -> str | None:
    """None if the scanner accepts ``expr``, else why not."""
    if not expr.strip():
        return "empty expression"
    try:
        found = selectors(expr)
    except ValueError as error:
        return str(error)
    if any(selector.name is None and not selector.named_by_matcher for selector in found):
        return "selector without a metric name"
    return None


def _prometheus_datasource_variables(board: Json) -> list[Json]:
    return [v for v in variables_of(board) if v.get("type") == "datasource" and v.get("query") == "prometheus"]


def template_datasource(board: Json) -> list[str]:
    found = [v for v in variables_of(board) if v.get("type") == "datasource"]
    if not found:
        return ["no templated data source"]
    problems = []
    for variable in found:
        kind = str(variable.get("query", ""))
        names = {f"{kind.lower()}_datasource"} | ({"datasource"} if len(found) == 1 else set())
        labels = {f"{kind.title()} data source"} | ({"Data source"} if len(found) == 1 else set())
        if variable.get("name") not in names:
            problems.append(f"data source variable named {variable.get('name')!r}, should be one of {sorted(names)}")
        if variable.get("label") not in labels:
            label = variable.get("label")
            problems.append(f"data source variable labelled {label!r}, should be one of {sorted(labels)}")
    return problems


def template_named(board: Json, name: str) -> list[str]:
    if not _prometheus_datasource_variables(board):
        return []
    variable = next((v for v in variables_of(board) if v.get("name") == name), None)
    if variable is None:
        return [f"no {name} template variable"]
    problems = []
    if _uid(variable.get("datasource")) not in DATASOURCE_VARIABLE_UIDS:
        problems.append(f"{name} variable should use the datasource variable, uses {variable.get('datasource')!r}")
    if variable.get("type") != "query":
        problems.append(f"{name} variable should be a query, is {variable.get('type')!r}")
    if variable.get("label") != name.title():
        problems.append(f"{name} variable should be labelled {name.title()!r}, is {variable.get('label')!r}")
    if variable.get("multi") is not True:
        problems.append(f"{name} variable should be multi-select")
    if variable.get("allValue") != ".+":
        problems.append(f"{name} variable allValue should be '.+', is {variable.get('allValue')!r}")
    return problems


def template_label_promql(board: Json) -> list[str]:
    if not _prometheus_datasource_variables(board):
        return []
    problems = []
    for variable in variables_of(board):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else str(query or "")
        match = _VARIABLE_QUERY.fullmatch(query.strip())
        if match is None or match.group(1) not in VARIABLE_FUNCTIONS:
            problems.append(f"{variable.get('name')}: {query!r} is not one of {sorted(VARIABLE_FUNCTIONS)}")
            continue
        function, argument = match.groups()
        if function == "label_values":
            series, _, label = argument.rpartition(",")
            if not series:  # label_values(label) lists the label over every series
                series, label = "", argument
            if not _LABEL_NAME.fullmatch(label.strip()):
                problems.append(f"{variable.get('name')}: {label.strip()!r} is not a label name")
                continue
            argument = series
        if function == "label_names" and not argument.strip():
            continue
        error = _valid_promql(argument) if argument.strip() else None
        if error:
            problems.append(f"{variable.get('name')}: invalid PromQL in {query!r}: {error}")
    return problems


def template_on_time_change_reload(board: Json) -> list[str]:
    return [
        f"{v.get('name')}: refresh is {v.get('refresh')!r}, should be 2 (on time range change)"
        for v in variables_of(board)
        if v.get("type") == "query" and v.get("refresh") != 2
    ]


def uneditable(board: Json) -> list[str]:
    return ["dashboard is editable; it should be editable: false"] if board.get("editable", True) else []


def panel_datasource(board: Json, panel: Json) -> list[str]:
    allowed = {f"${v.get('name')}" for v in variables_of(board) if v.get("type") == "datasource"}
    allowed |= {f"${{{v.get('name')}}}" for v in variables_of(board) if v.get("type") == "datasource"}
    uid = _uid(panel.get("datasource"))
    return [] if uid in allowed else [f"does not use a templated datasource, uses {uid!r}"]


def panel_title_description(board: Json, panel: Json) -> list[str]:
    if panel.get("title") and panel.get("description"):
        return []
    return [f"missing title or description (title {panel.get('title')!r})"]


def panel_units(board: Json, panel: Json) -> list[str]:
    field_config = panel.get("fieldConfig", {})
    unit = field_config.get("defaults", {}).get("unit", "")
    for override in field_config.get("overrides", []):
        for prop in override.get("properties", []):
            if prop.get("id") == "unit":
                unit = prop.get("value", "")
    return [] if unit in VALID_UNITS else [f"no or invalid unit {unit!r}"]


def panel_no_targets(board: Json, panel: Json) -> list[str]:
    return [] if panel.get("targets") else ["has no targets"]


def target_promql(expr: str) -> list[str]:
    error = _valid_promql(expr)
    return [f"invalid PromQL {expr!r}: {error}"] if error else []


def target_rate_interval(expr: str) -> list[str]:
    return [
        f"{selector.function}({selector.name}[{selector.range}]) should use [{RATE_INTERVAL}]"
        for selector in _safe_selectors(expr)
        if selector.range is not None and selector.function in ("rate", "irate") and selector.range != RATE_INTERVAL
    ]


def target_matcher(expr: str, label: str) -> list[str]:
    wanted = (label, "=~", f"${label}")
    return [
        f'{selector.name or "{...}"} has no {label}=~"${label}" matcher'
        for selector in _safe_selectors(expr)
        if wanted not in selector.matchers
    ]


def target_counter_agg(expr: str) -> list[str]:
    return [
        f"counter {selector.name} is not inside rate, irate or increase"
        for selector in _safe_selectors(expr)
        if (selector.name or "").endswith("_total")
        and (selector.range is None or selector.function not in COUNTER_FUNCTIONS)
    ]


def _safe_selectors(expr: str) -> list[Any]:
    """Selectors of a valid expression; an invalid one is target-promql-rule's finding, not ours."""
    try:
        return selectors(expr)
    except ValueError:
        return []


def lint_dashboard(board: Json, name: str = "") -> list[Finding]:
    """Every finding of every rule on one dashboard (empty when it passes)."""
    where = name or str(board.get("title"))
    findings: list[Finding] = []

    def add(rule: str, location: str, messages: list[str]) -> None:
        findings.extend(Finding(rule, location, message) for message in messages)

    add("template-datasource-rule", where, template_datasource(board))
    add("template-job-rule", where, template_named(board, "job"))
    add("template-instance-rule", where, template_named(board, "instance"))
    add("template-label-promql-rule", where, template_label_promql(board))
    add("template-on-time-change-reload-rule", where, template_on_time_change_reload(board))
    add("uneditable-dashboard", where, uneditable(board))
    prometheus = bool(_prometheus_datasource_variables(board))
    for panel in panels_of(board):
        if panel.get("type") not in QUERY_PANELS:
            continue
        at = f"{where} panel {panel.get('id')} {panel.get('title')!r}"
        add("panel-datasource-rule", at, panel_datasource(board, panel))
        add("panel-title-description-rule", at, panel_title_description(board, panel))
        add("panel-units-rule", at, panel_units(board, panel))
        add("panel-no-targets-rule", at, panel_no_targets(board, panel))
        if not prometheus:
            continue
        for index, target in enumerate(panel.get("targets") or []):
            expr = str(target.get("expr", ""))
            target_at = f"{at} target {index} ({target.get('refId')})"
            add("target-promql-rule", target_at, target_promql(expr))
            add("target-rate-interval-rule", target_at, target_rate_interval(expr))
            add("target-job-rule", target_at, target_matcher(expr, "job"))
            add("target-instance-rule", target_at, target_matcher(expr, "instance"))
            add("target-counter-agg-rule", target_at, target_counter_agg(expr))
    return findings
