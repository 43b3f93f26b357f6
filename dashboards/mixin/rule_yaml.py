"""A YAML writer for Prometheus rule files and Grafana provisioning files (stdlib only).

It writes ``{"groups": [{"name": ..., "rules": [{...}]}]}`` with a comment
header and optional comments above rules, multi-line PromQL as literal blocks
and long prose folded at 76 columns, so the files read like hand-written ones.
``tests/dashboards/test_mixin_output.py`` checks that PyYAML loads each rendered file back to
the exact document it was written from.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

WIDTH = 76
_TEMPLATE = re.compile(r"\{\{.*?\}\}")
_NBSP = "\x00"
_PLAIN_START = re.compile(r"[A-Za-z0-9_(/$]")
_YAML_SPECIAL = re.compile(r"(?i)(?:true|false|yes|no|on|off|null|~|[-+]?(?:\.?\d[\d._]*(?:e[-+]?\d+)?|\.inf|\.nan))")


def comment_block(text: str, indent: str = "") -> list[str]:
    """``# `` lines; blank lines in ``text`` stay as bare ``#`` lines."""
    return [f"{indent}# {line}".rstrip() if line else f"{indent}#" for line in text.splitlines()]


#: Prose fields, folded when long; PromQL is never folded (it stays one line or a literal block).
FOLDED_KEYS = frozenset({"description"})


def scalar(value: Any, indent: str, fold: bool = False) -> str:
    """The text after ``key:`` for a scalar (with a leading space), continuation lines indented."""
    if isinstance(value, bool) or not isinstance(value, str):
        return " " + json.dumps(value)
    if "\n" in value:
        body = "\n".join(f"{indent}  {line}" if line else "" for line in value.rstrip("\n").split("\n"))
        return " |-\n" + body
    if fold and len(value) + len(indent) > WIDTH and _foldable(value):
        return " >-\n" + "\n".join(f"{indent}  {line}" for line in _wrap(value, WIDTH - len(indent)))
    if _plain(value):
        return " " + value
    return " " + json.dumps(value, ensure_ascii=False)


def _wrap(text: str, width: int) -> list[str]:
    """Wrap at spaces, never inside a ``{{ template }}`` (it would read as broken when folded)."""
    protected = _TEMPLATE.sub(lambda match: match.group().replace(" ", _NBSP), text)
    lines = textwrap.wrap(protected, width, break_long_words=False, break_on_hyphens=False)
    return [line.replace(_NBSP, " ") for line in lines]


def _plain(value: str) -> bool:
    return (
        bool(value)
        and value == value.strip()
        and _PLAIN_START.match(value) is not None
        and ": " not in value
        and " #" not in value
        and not value.endswith(":")
        and _YAML_SPECIAL.fullmatch(value) is None
    )


def _foldable(value: str) -> bool:
    """Folding joins lines with one space: safe for single-spaced text that starts with a word."""
    return "  " not in value and "\t" not in value and _NBSP not in value and value[:1].isalnum()


def mapping(entries: dict[str, Any], indent: str, first_prefix: str) -> list[str]:
    """A block mapping; the first key goes after ``first_prefix`` (``- `` for a list item)."""
    lines: list[str] = []
    for position, (key, value) in enumerate(entries.items()):
        prefix = first_prefix if position == 0 else " " * len(first_prefix)
        if isinstance(value, dict) and value:
            lines.append(f"{indent}{prefix}{key}:")
            lines.extend(mapping(value, indent + " " * len(prefix) + "  ", ""))
        elif isinstance(value, list) and value:
            lines.append(f"{indent}{prefix}{key}:")
            lines.extend(sequence(value, indent + " " * len(prefix) + "  "))
        elif isinstance(value, dict | list):
            lines.append(f"{indent}{prefix}{key}: {json.dumps(value)}")
        else:
            lines.append(f"{indent}{prefix}{key}:{scalar(value, indent + ' ' * len(prefix), key in FOLDED_KEYS)}")
    return lines


def sequence(items: list[Any], indent: str) -> list[str]:
    """A block sequence of mappings or scalars (Grafana's provisioning files have both)."""
    lines: list[str] = []
    for item in items:
        if isinstance(item, dict) and item:
            lines.extend(mapping(item, indent, "- "))
        else:
            lines.append(f"{indent}-{scalar(item, indent)}")
    return lines


def dump(document: dict[str, Any], header: str = "", comments: dict[str, str] | None = None) -> str:
    """A rule file; ``comments`` maps a rule's record/alert name to a comment written above it."""
    comments = comments or {}
    out = comment_block(header) + ([""] if header else []) + ["groups:"]
    for index, group in enumerate(document["groups"]):
        if index:
            out.append("")
        out.append(f"  - name: {group['name']}")
        out.append("    rules:")
        for position, rule in enumerate(group["rules"]):
            name = rule.get("record") or rule.get("alert")
            if position and ("alert" in rule or name in comments):
                out.append("")
            if name in comments:
                out.extend(comment_block(comments[name], "      "))
            out.extend(mapping(rule, "      ", "- "))
    return "\n".join(out) + "\n"
