#!/usr/bin/env python3
"""Render the mmobs monitoring mixin: Grafana dashboards, recording rules and alerts (stdlib only).

The files under ``dashboards/grafana/``, ``dashboards/prometheus/*.yml``,
``dashboards/provisioning/alerting/`` and ``dashboards/alerting/`` (the same
alerts as Grafana-managed rules, for file provisioning and for the HTTP API) are
the output of this script for the default configuration and are checked in;
``tests/dashboards/test_mixin_output.py`` fails when they differ from what it produces.
The panels, rules and alerts live in ``dashboards/mixin/``; edit them there::

    python dashboards/generate.py             # rewrite the checked-in files
    python dashboards/generate.py --check     # exit 1 if a file is out of date

Render for another environment into a directory of your own::

    python dashboards/generate.py --out /tmp/mmobs-mixin \\
        --selector 'job="vllm"' --cluster-label cluster \\
        --runbook-url-pattern 'https://runbooks.example.com/mmobs/{alert}' --rate-window 2m \\
        --datasource-uid my-prometheus --threshold exif_fallback_ratio=0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):  # run as a script: make `dashboards.mixin` importable
    sys.path.insert(0, str(HERE.parent))

from dashboards.mixin import MixinConfig, render_all  # noqa: E402
from dashboards.mixin.config import AlertThresholds  # noqa: E402

DEFAULTS = MixinConfig()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date instead of writing it")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write the files into")
    parser.add_argument(
        "--selector", default=DEFAULTS.selector, help=f"label matchers of the mmobs jobs ({DEFAULTS.selector})"
    )
    parser.add_argument("--cluster-label", default=DEFAULTS.cluster_label, help="label naming the cluster (none)")
    parser.add_argument(
        "--runbook-url-pattern", default=DEFAULTS.runbook_url_pattern, help="runbook URL, {alert} is the alert name"
    )
    parser.add_argument(
        "--rate-window", default=DEFAULTS.rate_window, help=f"rules' rate() range ({DEFAULTS.rate_window})"
    )
    parser.add_argument(
        "--datasource-uid",
        default=DEFAULTS.datasource_uid,
        help=f"uid of the Prometheus data source the Grafana alert rules query ({DEFAULTS.datasource_uid})",
    )
    bounds = ", ".join(
        f"{f.name}={getattr(DEFAULTS.thresholds, f.name):g}" for f in dataclasses.fields(AlertThresholds)
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=FRACTION",
        help=f"an alert's bound, a fraction of 1; repeat for each ({bounds})",
    )
    return parser.parse_args(argv)


def thresholds(pairs: list[str]) -> AlertThresholds:
    """``["exif_fallback_ratio=0.1", ...]`` as :class:`AlertThresholds`; ValueError says what is wrong."""
    names = {f.name for f in dataclasses.fields(AlertThresholds)}
    chosen: dict[str, float] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in names:
            raise ValueError(f"--threshold {pair!r}: the thresholds are {', '.join(sorted(names))}")
        try:
            chosen[name] = float(value)
        except ValueError:
            raise ValueError(f"--threshold {pair!r}: {value!r} is not a number (0.05 is 5%)") from None
    return AlertThresholds(**chosen)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = MixinConfig(
            args.selector,
            args.cluster_label,
            args.runbook_url_pattern,
            args.rate_window,
            args.datasource_uid,
            thresholds(args.threshold),
        )
    except ValueError as error:
        print(f"generate.py: {error}", file=sys.stderr)
        return 2
    stale = []
    for name, text in render_all(config).items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print("out of date (run python dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
