"""A small, strict PromQL scanner for the dashboard, rule and lint tests (no Prometheus needed).

It finds every vector selector in an expression with its label matchers, its
range and the innermost function or aggregation around it: enough for the
ported dashboard-linter rules (job/instance matchers, ``$__rate_interval``,
counters inside ``rate``) and the metric-name checks. Strict on purpose: an
unknown character, function or a subquery raises ``ValueError`` rather than
being skipped. Full PromQL validity is checked by promtool where it is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mmobs.observability.metrics import METRIC_NAMES as HASHER_HTTP_NAMES
from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES as FRONT_END_NAMES

#: The histogram families whose ``_bucket``/``_sum``/``_count`` series the scanner folds: mmobs's and vLLM's.
HISTOGRAMS = HASHER_HTTP_NAMES | FRONT_END_NAMES | {"vllm:time_to_first_token_seconds"}

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
        "abs",
        "absent",
        "absent_over_time",
        "avg_over_time",
        "ceil",
        "clamp",
        "clamp_max",
        "clamp_min",
        "count_over_time",
        "delta",
        "deriv",
        "floor",
        "histogram_quantile",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "last_over_time",
        "max_over_time",
        "min_over_time",
        "quantile_over_time",
        "rate",
        "resets",
        "round",
        "scalar",
        "sort",
        "sort_desc",
        "sum_over_time",
        "time",
        "timestamp",
        "vector",
    }
)
COUNTER_FUNCTIONS = frozenset({"rate", "increase", "irate"})
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

    @property
    def named_by_matcher(self) -> bool:
        """``{__name__=~"a|b", ...}``: no metric name, but a matcher on it (valid PromQL)."""
        return any(label == "__name__" for label, _, _ in self.matchers)


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot tokenize PromQL at {expr[pos : pos + 20]!r} in {expr!r}")
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
        if i + 1 > len(tokens) or (tokens[i] != ("op", "}") and i + 4 > len(tokens)):
            raise ValueError(f"unclosed label matchers in {expr!r}")
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
        if base != name and base in HISTOGRAMS and not base.endswith(("_total", "_info")):
            return base
    return name
