"""What an operator may change when rendering the mixin, and nothing else.

The defaults are the values the committed files under ``dashboards/`` are
rendered with; ``tests/dashboards/test_mixin_output.py`` fails when those files differ from
``render_all(MixinConfig())``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

_LABEL = r"[A-Za-z_][A-Za-z0-9_]*"
_MATCHER = re.compile(rf'\s*{_LABEL}\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')
_UID = re.compile(r"[A-Za-z0-9_-]{1,40}")
_DURATION = re.compile(r"(?:\d+(?:ms|[smhdwy]))+")


@dataclass(frozen=True)
class AlertThresholds:
    """The bounds of the alerts that compare a share, each a fraction of 1 (``0.05`` is 5%).

    An alert fires above its bound; its summary, description and the "why" in
    the rule file's header quote it. The dashboards' colour steps keep the
    defaults. At most four significant digits, so that every form quotes the
    bound exactly (the jsonnet mixin formats it as Python does).

    ``exif_fallback_ratio``: MmobsExifFallbackRatioHigh, the share of image keys
    that fell back from the EXIF ImageID. ``cache_key_drift_ratio``:
    MmobsCacheKeyDrift, the share of sampled items whose key drifted.
    ``vllm_poisoned_entry_share``: MmobsVllmMmCachePoisonedEntry, the share of
    drifted items that drifted before. ``vllm_front_end_ttft_share``:
    MmobsVllmMmFrontEndDominatesTtft, the front end's share of vLLM's time to
    first token.
    """

    exif_fallback_ratio: float = 0.05
    cache_key_drift_ratio: float = 0.01
    vllm_poisoned_entry_share: float = 0.5
    vllm_front_end_ttft_share: float = 0.5

    def __post_init__(self) -> None:
        for bound in fields(self):
            value = getattr(self, bound.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
                raise ValueError(f"{bound.name} must be a fraction between 0 and 1 (0.05 is 5%), got {value!r}")
            if float(f"{value:.4g}") != value:
                raise ValueError(f"{bound.name} must have at most 4 significant digits, got {value!r}")

    @staticmethod
    def number(value: float) -> str:
        """A bound as PromQL and the rule files quote it: ``0.05``."""
        return f"{value:g}"

    @staticmethod
    def percent(value: float) -> str:
        """A bound as the alerts' texts quote it: ``5%``."""
        return f"{value * 100:g}%"


@dataclass(frozen=True)
class MixinConfig:
    """Parameters of the rendered dashboards, rules and alerts.

    ``selector``: label matchers (PromQL syntax, comma separated, no braces)
    that pick the mmobs scrape jobs. Every recording rule and alert adds them to
    its selectors, and the dashboards' ``job`` variable offers only the jobs
    they match. Empty means every job.

    ``cluster_label``: for multi-cluster Prometheus/Thanos/Mimir setups, the
    label that names the cluster (often ``cluster``). When set, the dashboards
    get a ``cluster`` variable used by every query, and every recording rule and
    alert keeps the label (so the rule names gain a ``cluster_`` level prefix).

    ``runbook_url_pattern``: where each alert's runbook lives; ``{alert}`` is
    replaced by the alert name.

    ``rate_window``: the range of every ``rate()`` in the recording rules and
    alerts (and the ``_rate5m`` suffix of the rule names). Dashboards always use
    ``$__rate_interval``, which Grafana derives from the scrape interval.

    ``datasource_uid``: the Prometheus data source the Grafana-managed alert
    rules query (a rule cannot use the dashboards' ``datasource`` variable). The
    default is the uid of the data source in ``provisioning/datasources/``.

    ``thresholds``: the alerts' bounds (:class:`AlertThresholds`).
    """

    selector: str = 'job=~"mmobs.*"'
    cluster_label: str = ""
    runbook_url_pattern: str = "https://github.com/mmobs/mmobs/blob/main/docs/runbooks/{alert}.md"
    rate_window: str = "5m"
    datasource_uid: str = "prometheus"
    thresholds: AlertThresholds = field(default_factory=AlertThresholds)

    def __post_init__(self) -> None:
        if self.selector and not all(_MATCHER.fullmatch(part) for part in split_matchers(self.selector)):
            raise ValueError(f'selector must be label matchers such as job=~"mmobs.*", got {self.selector!r}')
        if self.cluster_label and not re.fullmatch(_LABEL, self.cluster_label):
            raise ValueError(f"cluster_label must be a label name, got {self.cluster_label!r}")
        if self.cluster_label in ("job", "instance", "le"):
            raise ValueError(f"cluster_label cannot be {self.cluster_label!r}: the mixin uses that label itself")
        if "{alert}" not in self.runbook_url_pattern:
            raise ValueError("runbook_url_pattern must contain {alert}")
        if not _DURATION.fullmatch(self.rate_window):
            raise ValueError(f"rate_window must be a Prometheus duration such as 5m, got {self.rate_window!r}")
        if not _UID.fullmatch(self.datasource_uid):
            raise ValueError(
                f"datasource_uid must be a Grafana uid (letters, digits, - and _), got {self.datasource_uid!r}"
            )

    @property
    def selector_matchers(self) -> tuple[str, ...]:
        """The selector as separate matchers, spaces trimmed."""
        return tuple(part.strip() for part in split_matchers(self.selector)) if self.selector else ()

    @property
    def rule_labels(self) -> tuple[str, ...]:
        """Labels every recording rule and alert aggregation keeps: the cluster (if any) and the job."""
        return (self.cluster_label, "job") if self.cluster_label else ("job",)

    def runbook_url(self, alert: str) -> str:
        return self.runbook_url_pattern.replace("{alert}", alert)


def split_matchers(selector: str) -> list[str]:
    """Split ``a="x,y", b=~"z"`` at the commas outside quoted values."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in selector:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts
