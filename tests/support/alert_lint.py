"""mixtool's alert lint rules, ported to Python for the tests, plus the runbook rule of the mixin guidelines.

mixtool (github.com/monitoring-mixins/mixtool, ``mixtool lint``) enforces the
monitoring-mixins guidelines for alert names, labels and annotations:

================================ ======================================================
alert-name-camelcase             the name is CamelCase (``^([A-Z]+[a-z0-9]+)+$``)
alert-severity-rule              ``severity`` is critical, warning or info
alert-summary-missing-rule       a ``summary`` annotation exists
alert-summary-templating         the summary uses no ``{{ }}`` templates (it titles and
                                 groups notifications, so it must not vary per alert)
alert-summary-style              the summary starts with a capital letter and ends with
                                 a period
alert-description-missing-rule   a ``description`` annotation exists
alert-description-templating     the description uses templates (it carries the values)
alert-runbook-url                a ``runbook_url`` annotation: an https URL naming the
                                 alert (the guidelines' runbook link; not in mixtool)
================================ ======================================================
"""

from __future__ import annotations

import re
from typing import Any

from tests.support.dashboard_lint import Finding

RULES: dict[str, str] = {
    "alert-name-camelcase": "alert names are CamelCase",
    "alert-severity-rule": "severity is critical, warning or info",
    "alert-summary-missing-rule": "alerts have a summary",
    "alert-summary-templating": "summaries use no templates",
    "alert-summary-style": "summaries are a capitalised sentence ending with a period",
    "alert-description-missing-rule": "alerts have a description",
    "alert-description-templating": "descriptions use templates",
    "alert-runbook-url": "alerts link their runbook",
}
SEVERITIES = frozenset({"critical", "warning", "info"})
_CAMEL_CASE = re.compile(r"([A-Z]+[a-z0-9]+)+")
_TEMPLATE = re.compile(r"\{\{.+\}\}", re.DOTALL)
_SENTENCE = re.compile(r"[A-Z].+\.", re.DOTALL)


def lint_alert(rule: dict[str, Any]) -> list[Finding]:
    name = str(rule.get("alert", ""))
    annotations = rule.get("annotations") or {}
    severity = (rule.get("labels") or {}).get("severity")
    findings: list[Finding] = []

    def add(rule_name: str, message: str) -> None:
        findings.append(Finding(rule_name, f"alert {name}", message))

    if not _CAMEL_CASE.fullmatch(name):
        add("alert-name-camelcase", "name is not in CamelCase")
    if severity not in SEVERITIES:
        add("alert-severity-rule", f"severity must be one of {sorted(SEVERITIES)}, is {severity!r}")
    summary = annotations.get("summary")
    if summary is None:
        add("alert-summary-missing-rule", "no summary annotation")
    else:
        if _TEMPLATE.search(summary):
            add("alert-summary-templating", f"summary must not use templates: {summary!r}")
        if not _SENTENCE.fullmatch(summary.strip()):
            add("alert-summary-style", f"summary must start with a capital and end with a period: {summary!r}")
    description = annotations.get("description")
    if description is None:
        add("alert-description-missing-rule", "no description annotation")
    elif not _TEMPLATE.search(description):
        add("alert-description-templating", f"description must use templates: {description!r}")
    runbook = annotations.get("runbook_url", "")
    if not (runbook.startswith("https://") and name and name in runbook):
        add("alert-runbook-url", f"runbook_url must be an https URL naming the alert, is {runbook!r}")
    return findings


def lint_alert_document(document: dict[str, Any]) -> list[Finding]:
    """Findings for every alerting rule of a rule-file document (recording rules are skipped)."""
    return [
        finding
        for group in document.get("groups", [])
        for rule in group.get("rules", [])
        if "alert" in rule
        for finding in lint_alert(rule)
    ]
