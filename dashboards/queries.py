"""Every PromQL expression the mmobs dashboards and rules run (stdlib only).

Made for tests that evaluate the queries against a live Prometheus. Import it
by path, it is not part of the ``mmobs`` package::

    spec = importlib.util.spec_from_file_location("mmobs_dashboard_queries", "dashboards/queries.py")
    queries = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(queries)
    for source, expr in queries.all_queries():
        promql = queries.substitute(expr)   # $job, $instance, ... -> .*, $__rate_interval -> 1m
        ...

Dashboard expressions contain Grafana variables (``$job``, ``$instance``,
``$model_name``, ``$__rate_interval``); :func:`substitute` replaces them. Recording-rule
expressions are plain PromQL; each reads raw mmobs series only, so it can be
evaluated before the rules have run. Alert expressions (:func:`alert_queries`)
return data only while an alert condition holds, so they are kept separate.

The rule files are read with a small parser for the layout they use (``- record:``
or ``- alert:`` followed by ``expr:``, inline or as a ``|`` block), because PyYAML
is not in the standard library. ``tests/dashboards/test_queries_and_provisioning.py`` checks it against
PyYAML on the real files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRAFANA_DIR = HERE / "grafana"
RULES_DIR = HERE / "prometheus"
RECORDING_RULES = RULES_DIR / "recording-rules.yml"
ALERTS = RULES_DIR / "alerts.yml"

_RULE = re.compile(r"^(?P<indent>\s*)-\s+(?P<kind>record|alert):\s*(?P<name>\S+)\s*$")
_EXPR = re.compile(r"^(?P<indent>\s*)expr:\s*(?P<value>.*?)\s*$")


def dashboard_queries(grafana_dir: Path = GRAFANA_DIR) -> list[tuple[str, str]]:
    """(source, expr) for every target of every panel of every dashboard JSON file."""
    found: list[tuple[str, str]] = []
    for path in sorted(grafana_dir.glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        for panel in _panels(board.get("panels", [])):
            for target in panel.get("targets", []):
                if "expr" in target:
                    source = f"{path.name}: panel {panel.get('id')} {panel.get('title')!r} target {target.get('refId')}"
                    found.append((source, target["expr"]))
    return found


def _panels(panels: list[dict]) -> list[dict]:
    flat: list[dict] = []
    for panel in panels:
        flat.append(panel)
        flat.extend(_panels(panel.get("panels", [])))  # panels folded into a collapsed row
    return flat


def rule_queries(path: Path, kind: str) -> list[tuple[str, str]]:
    """(source, expr) for every ``record`` (or ``alert``) rule in a rules file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[tuple[str, str]] = []
    name: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        rule = _RULE.match(line)
        if rule:
            name = rule["name"] if rule["kind"] == kind else None
            continue
        expr = _EXPR.match(line)
        if not expr or name is None:
            continue
        value = expr["value"]
        if value in ("|", "|-", ">", ">-"):
            block: list[str] = []
            indent = len(expr["indent"])
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            margin = min(_indent(b) for b in block if b.strip())
            body = [b[margin:] for b in block]
            value = " ".join(b.strip() for b in body) if value.startswith(">") else "\n".join(body)
        elif value[:1] in ("'", '"'):
            value = _unquote(value)
        found.append((f"{path.name}: {kind} {name}", value.strip()))
        name = None
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _unquote(value: str) -> str:
    if value[0] == "'":
        return value[1:-1].replace("''", "'")
    return json.loads(value)


def recording_rule_queries() -> list[tuple[str, str]]:
    return rule_queries(RECORDING_RULES, "record")


def alert_queries() -> list[tuple[str, str]]:
    return rule_queries(ALERTS, "alert")


def all_queries() -> list[tuple[str, str]]:
    """(source description, expr) for every dashboard target and every recording rule."""
    return dashboard_queries() + recording_rule_queries()


_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def substitute(expr: str, rate_interval: str = "1m", **values: str) -> str:
    """Replace the Grafana variables the dashboards use, so Prometheus can run the query.

    ``$__rate_interval`` becomes ``rate_interval``; any other variable (``$job``,
    ``$instance``, ``$model_name``, a cluster variable) becomes ``values[name]``,
    by default ``.*`` (what "All" selects, plus series without the label).
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return rate_interval if name == "__rate_interval" else values.get(name, ".*")

    return _VARIABLE.sub(value, expr)


if __name__ == "__main__":
    for source, expr in all_queries():
        print(f"# {source}\n{expr}\n")
