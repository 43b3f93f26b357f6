"""The mmobs monitoring mixin: Grafana dashboards, recording rules and alerts from one config.

Like the Jsonnet mixins (kubernetes-mixin, node-mixin), everything an operator
installs is rendered from a :class:`~dashboards.mixin.config.MixinConfig`, so a
different job selector, a cluster label, another runbook host or rate window is
a re-render, not a hand edit of generated files. Stdlib only, so rendering needs
nothing beyond Python.

Modules, in the order the output is built:

* :mod:`.config`     what an operator may change (the alerts' thresholds too), with today's values as defaults;
* :mod:`.metrics`    the metric names every query reads (mmobs's and vLLM's);
* :mod:`.promql`     selector/rate/ratio builders for dashboards and for rules;
* :mod:`.panels`     Grafana panel JSON (targets, stat, timeseries, table, row, layout);
* :mod:`.dashboard`  the dashboard envelope and its template variables;
* :mod:`.exif_fallbacks`, :mod:`.cache_keys`, :mod:`.vllm_cache`  the panels themselves;
* :mod:`.rules`, :mod:`.alerts`  Prometheus recording rules and alerts;
* :mod:`.grafana_alerts`  the same alerts as Grafana-managed rules (provisioning file, HTTP API bodies);
* :mod:`.rule_yaml`  the small YAML writer for the rule and provisioning files;
* :mod:`.kubernetes` the kustomize bundle (PrometheusRule, monitors, the ConfigMaps' kustomization);
* :mod:`.jsonnet`   ``mixin.libsonnet`` over the rendered files, with ``_config``;
* :mod:`.render`     file name -> text for everything above.
"""

from .config import MixinConfig
from .render import render_all

__all__ = ["MixinConfig", "render_all"]
