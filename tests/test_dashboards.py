"""The Grafana dashboards, recording rules and alerts under ``dashboards/``.

Checks the conventions in the design notes (datasource variable, job/instance
filters on every selector, ``$__rate_interval``, units, descriptions, stable
uids, rule and alert naming, runbooks), that every metric a query reads is one
mmobs exports (:data:`mmobs.metrics.METRIC_NAMES`), and runs ``promtool check``
and ``promtool test`` on the rules.

PromQL is read with a small tokenizer, strict on purpose: an unknown character,
a selector without a metric name or an unknown function fails the test rather
than being skipped.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from mmobs.metrics import METRIC_NAMES
from tests.support import require_binary

ROOT = Path(__file__).resolve().parents[1]
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
RUNBOOK_URL = "https://github.com/mmobs/mmobs/blob/main/docs/runbooks/{}.md"
SEVERITIES = frozenset({"critical", "warning", "info"})
RATE_INTERVAL = "$__rate_interval"


# -- promtool -------------------------------------------------------------------


def run_promtool(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [require_binary("promtool"), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"promtool {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result


# -- a small, strict PromQL scanner --------------------------------------------------

_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<range>\[[^\]]*\])
    | (?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*\b)
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}@])
    """,
    re.VERBOSE,
)
#: Keywords followed by a parenthesised list of label names.
_LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_OPERATOR_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2"})
_AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
)
_FUNCTIONS = _AGGREGATIONS | frozenset(
    {
        "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "clamp", "clamp_max", "clamp_min",
        "count_over_time", "delta", "deriv", "floor", "histogram_quantile", "idelta", "increase", "irate",
        "label_join", "label_replace", "last_over_time", "max_over_time", "min_over_time",
        "quantile_over_time", "rate", "resets", "round", "scalar", "sort", "sort_desc", "sum_over_time",
        "time", "timestamp", "vector",
    }
)
_COUNTER_FUNCTIONS = frozenset({"rate", "increase", "irate"})
#: What may stand inside a range selector's brackets: a duration or a Grafana variable.
_RANGE = re.compile(r"\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*|\$\w+|\$\{\w+\}")


@dataclass
class Selector:
    """One vector selector: metric name, label matchers, range, innermost enclosing function."""

    name: str | None
    matchers: list[tuple[str, str, str]] = field(default_factory=list)
    range: str | None = None
    function: str | None = None

    def has(self, label: str, op: str, value: str) -> bool:
        return (label, op, value) in self.matchers


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot tokenize PromQL at {expr[pos:pos + 20]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append((kind, match.group()))
        pos = match.end()
    return tokens


def _unquote(text: str) -> str:
    if text[0] == "`":
        return text[1:-1]
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def selectors(expr: str) -> list[Selector]:
    """Every vector selector in a PromQL expression, with its matchers and range."""
    tokens = _tokens(expr)
    found: list[Selector] = []
    stack: list[tuple[str, int]] = []  # (function, paren depth inside it)
    depth = 0
    pending: str | None = None
    i = 0

    def peek(offset: int = 0) -> tuple[str, str]:
        j = i + offset
        return tokens[j] if j < len(tokens) else ("end", "")

    while i < len(tokens):
        kind, text = tokens[i]
        if kind == "ident":
            word = text.lower()
            if word in _LABEL_LIST_KEYWORDS:
                i += 1
                if peek() == ("op", "("):
                    close = next(j for j in range(i, len(tokens)) if tokens[j] == ("op", ")"))
                    labels = [t for k, t in tokens[i + 1 : close] if k == "ident"]
                    if any(k not in ("ident", "op") for k, _ in tokens[i + 1 : close]):
                        raise ValueError(f"bad label list after {text!r} in {expr!r}")
                    assert labels or word in ("group_left", "group_right"), expr
                    i = close + 1
                continue
            if word in _OPERATOR_KEYWORDS:
                i += 1
                continue
            if word in _AGGREGATIONS or peek(1) == ("op", "("):
                if text not in _FUNCTIONS:
                    raise ValueError(f"unknown PromQL function {text!r} in {expr!r}")
                pending = text
                i += 1
                continue
            selector = Selector(text, function=stack[-1][0] if stack else None)
            i += 1
            if peek() == ("op", "{"):
                i = _matchers(tokens, i + 1, selector, expr)
            if peek()[0] == "range":
                selector.range = peek()[1][1:-1].strip()
                if not _RANGE.fullmatch(selector.range):
                    raise ValueError(f"range [{selector.range}] is not a duration (subquery?) in {expr!r}")
                i += 1
            found.append(selector)
            continue
        if (kind, text) == ("op", "{"):
            selector = Selector(None, function=stack[-1][0] if stack else None)
            i = _matchers(tokens, i + 1, selector, expr)
            found.append(selector)
            continue
        if kind == "range":
            raise ValueError(f"range {text} not attached to a selector (subquery?) in {expr!r}")
        if (kind, text) == ("op", "("):
            depth += 1
            if pending is not None:
                stack.append((pending, depth))
                pending = None
        elif (kind, text) == ("op", ")"):
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced parentheses in {expr!r}")
        elif kind not in ("number", "duration", "op", "string"):
            raise ValueError(f"unexpected {kind} {text!r} in {expr!r}")
        i += 1
    if depth != 0:
        raise ValueError(f"unbalanced parentheses in {expr!r}")
    return found


def _matchers(tokens: list[tuple[str, str]], i: int, selector: Selector, expr: str) -> int:
    """Parse ``label op "value"`` pairs up to the closing brace; return the index after it."""
    while True:
        if tokens[i] == ("op", "}"):
            return i + 1
        (k1, label), (k2, op), (k3, value) = tokens[i : i + 3]
        if k1 != "ident" or k2 != "op" or op not in ("=", "!=", "=~", "!~") or k3 != "string":
            raise ValueError(f"bad label matcher near {label!r} in {expr!r}")
        selector.matchers.append((label, op, _unquote(value)))
        i += 3
        if tokens[i] == ("op", ","):
            i += 1
        elif tokens[i] != ("op", "}"):
            raise ValueError(f"expected ',' or '}}' after matcher {label!r} in {expr!r}")


def family(name: str) -> str:
    """The metric family of a series name: strip histogram suffixes of known families."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and base in METRIC_NAMES and not base.endswith(("_total", "_info")):
            return base
    return name


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


def dashboard_targets() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, panel, target) for every target of every panel."""
    return [
        (f"{name} panel {panel['id']} {panel['title']!r} {target.get('refId')}", panel, target)
        for name, board in dashboards().items()
        for panel in all_panels(board)
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
        "m{job~\"x\"}",
    ],
)
def test_scanner_is_strict(expr: str) -> None:
    def scan() -> None:
        if any(s.name is None for s in selectors(expr)):
            raise ValueError("selector without a metric name")

    with pytest.raises(ValueError):
        scan()


# -- dashboards: files, generator, uids ---------------------------------------------------


def test_every_dashboard_parses_and_has_the_expected_uid() -> None:
    boards = dashboards()
    assert set(boards) == set(EXPECTED_UIDS)
    for name, board in boards.items():
        assert board["uid"] == EXPECTED_UIDS[name], name
        assert board["title"].startswith("mmobs / ")
        assert board["schemaVersion"] >= 36, "Grafana 10+ dashboards"
        assert board.get("id") is None, "a dashboard id is instance-specific; keep it null"
    assert len({b["uid"] for b in boards.values()}) == len(boards)


def test_checked_in_json_is_the_generator_output() -> None:
    generate = load_module("mmobs_dashboards_generate", DASHBOARDS / "generate.py")
    expected = generate.rendered()
    assert set(expected) == {p.name for p in GRAFANA.glob("*.json")}
    for name, text in expected.items():
        assert (GRAFANA / name).read_text(encoding="utf-8") == text, (
            f"{name} is out of date: run python dashboards/generate.py"
        )


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
    for name, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert list(variables) == ["datasource", "job", "instance"], name
        ds = variables["datasource"]
        assert ds["type"] == "datasource" and ds["query"] == "prometheus", name
        for var in ("job", "instance"):
            v = variables[var]
            assert v["type"] == "query", (name, var)
            assert v["datasource"] == DATASOURCE, (name, var)
            assert v["multi"] is True and v["includeAll"] is True, (name, var)
            assert v["allValue"] == ".*", (name, var)
            assert v["query"] == v["definition"], (name, var)
            match = re.fullmatch(r"label_values\((\w+)(\{.*\})?, (\w+)\)", v["query"])
            assert match and match.group(3) == var, (name, v["query"])
            assert match.group(1) in METRIC_NAMES, (name, v["query"])
        assert 'job=~"$job"' in variables["instance"]["query"], name


def test_every_panel_has_datasource_description_unit_and_targets() -> None:
    for name, board in dashboards().items():
        ids = [p["id"] for p in all_panels(board)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        for panel in all_panels(board):
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


def test_panels_do_not_overlap() -> None:
    for name, board in dashboards().items():
        cells: dict[tuple[int, int], int] = {}
        for panel in all_panels(board):
            g = panel["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, (name, panel["id"])
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
            assert selector.has("job", "=~", "$job"), f"{where}: {selector.name} lacks job=~\"$job\""
            assert selector.has("instance", "=~", "$instance"), (
                f"{where}: {selector.name} lacks instance=~\"$instance\""
            )


def test_every_rate_and_increase_uses_rate_interval() -> None:
    for where, _, target in dashboard_targets():
        expr = target["expr"]
        for selector in selectors(expr):
            if selector.function in _COUNTER_FUNCTIONS:
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
            assert family(selector.name or "") in METRIC_NAMES, f"{where}: unknown metric {selector.name}"


def test_dashboards_cover_every_metric() -> None:
    used = {family(s.name or "") for _, _, t in dashboard_targets() for s in selectors(t["expr"])}
    assert used == set(METRIC_NAMES), f"not on any dashboard: {sorted(set(METRIC_NAMES) - used)}"


# -- rules and alerts ---------------------------------------------------------------------


def test_rule_metrics_exist() -> None:
    known = set(METRIC_NAMES) | recording_names() | BUILTIN_METRICS
    for path in RULE_FILES:
        for rule in rules(path):
            for selector in selectors(rule["expr"]):
                assert selector.name, f"{path.name} {rule}: selector without a metric name"
                assert family(selector.name) in known, f"{path.name}: unknown metric {selector.name}"


def test_recording_rule_names() -> None:
    names = [rule["record"] for rule in rules(RECORDING_RULES)]
    assert len(names) == len(set(names))
    assert "job:mmobs_exif_fallback:rate5m" in names
    assert "job:mmobs_exif_fallback_ratio:rate5m" in names
    for rule in rules(RECORDING_RULES):
        name = rule["record"]
        match = re.fullmatch(r"([a-z]+(?:_[a-z]+)*):(mmobs_[a-z0-9_]+):([a-z0-9_]+)", name)
        assert match, f"{name} is not level:metric:operations"
        assert match.group(1).startswith("job"), name
        assert not match.group(2).endswith("_total"), f"{name}: drop _total after rate()"
        # The level names the labels the rule keeps: its (first, outermost) by (...) clause.
        grouping = re.search(r"\bby\s*\(([^)]*)\)", rule["expr"])
        assert grouping, f"{name}: no by (...) clause"
        kept = [label.strip() for label in grouping.group(1).split(",") if label.strip() != "le"]
        assert match.group(1) == "_".join(kept), f"{name}: level should be {'_'.join(kept)}"


def test_alerts_are_well_formed() -> None:
    alerts = alert_rules()
    assert len(alerts) >= 5
    names = [alert["alert"] for alert in alerts]
    assert len(names) == len(set(names)), "one rule per alert name"
    for alert in alerts:
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

    assert alert_reading("job:mmobs_exif_fallback_ratio:rate5m"), "an EXIF fallback ratio alert"
    assert alert_reading("job:mmobs_cache_key_drift_ratio:rate5m"), "a cache-key drift alert"
    assert alert_reading("job:mmobs_hasher_fingerprints:count"), "a fleet fingerprint alert"
    assert alert_reading("job:mmobs_http_image_requests_5xx:rate5m"), "a 5xx-on-image-requests alert"
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
    alerts = [rule["expr"].strip() for rule in alert_rules()]
    assert [expr for _, expr in queries.alert_queries()] == alerts
    for _, expr in listed:
        assert "$" not in queries.substitute(expr)


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
def test_promtool_check_rules() -> None:
    for path in RULE_FILES:
        run_promtool("check", "rules", path)


@pytest.mark.prometheus
def test_promtool_test_rules() -> None:
    tests = sorted(RULE_TESTS.glob("*.yml"))
    result = run_promtool("test", "rules", *tests)
    assert "FAILED" not in result.stdout + result.stderr


@pytest.mark.prometheus
def test_promtool_check_config() -> None:
    run_promtool("check", "config", PROMETHEUS / "prometheus.yml")
