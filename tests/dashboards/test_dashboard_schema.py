"""Each dashboard against Grafana's own schema: grafana-foundation-sdk's round trip is the identity.

Grafana cannot be installed on these machines, so its schema comes from
grafana-foundation-sdk (generated from the same CUE/TypeScript definitions as
``@grafana/schema``). ``Dashboard.from_json`` parses a dashboard into the typed
model and ``JSONEncoder`` writes it back: a field the model does not know is
lost, a required field we left out is added with its default. The committed dashboards must come back unchanged; a
copy with the defects the schema found before the mixin (a link without
``tooltip``, the datasource variable's ``current: {}``, a ``definition`` on a
variable) must not.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"


def round_trip(board: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Every field lost, added or changed between two JSON documents, by JSON path."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = [f"lost {path}/{key}" for key in before.keys() - after.keys()]
        found += [f"added {path}/{key} = {json.dumps(after[key])[:60]}" for key in after.keys() - before.keys()]
        for key in before.keys() & after.keys():
            found += differences(before[key], after[key], f"{path}/{key}")
        return sorted(found)
    if isinstance(before, list) and isinstance(after, list):
        found = [f"{path}: {len(before)} items became {len(after)}"] if len(before) != len(after) else []
        for index, (old, new) in enumerate(zip(before, after)):
            found += differences(old, new, f"{path}[{index}]")
        return found
    if before != after or type(before) is not type(after):
        return [f"changed {path}: {before!r} -> {after!r}"]
    return []


@pytest.mark.parametrize("path", sorted(GRAFANA.glob("*.json")), ids=lambda path: path.name)
def test_dashboard_survives_the_schema_round_trip_unchanged(path: Path) -> None:
    board = json.loads(path.read_text(encoding="utf-8"))
    assert differences(board, round_trip(board)) == []


def test_the_round_trip_reports_what_the_schema_found_before_the_mixin() -> None:
    board = json.loads((GRAFANA / "mmobs-cache-keys.json").read_text(encoding="utf-8"))
    broken = copy.deepcopy(board)
    del broken["links"][0]["tooltip"]
    variables = broken["templating"]["list"]
    variables[0]["current"] = {}
    variables[1]["definition"] = variables[1]["query"]
    broken["sharedCrosshair"] = True  # Grafana 8's field, replaced by graphTooltip
    found = differences(broken, round_trip(broken))
    assert 'added /links[0]/tooltip = ""' in found
    assert 'added /templating/list[0]/current/text = ""' in found
    assert 'added /templating/list[0]/current/value = ""' in found
    assert "lost /templating/list[1]/definition" in found
    assert "lost /sharedCrosshair" in found
    assert len(found) == 5, found
