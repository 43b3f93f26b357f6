"""``docs/architecture.md`` names every module of the package, and nothing that is not there.

Its layer table is the map a contributor reads first: each row's "where" cell
gives the layer's files or directory, its "what" cell the modules inside, as
paths relative to that directory (``guard/png.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mmobs"
_CODE = re.compile(r"`([^`]+)`")


def layer_rows() -> dict[str, tuple[list[str], set[str]]]:
    """Layer -> (the paths its "where" cell gives, the module names its "what" cell gives)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---"):
            continue
        layer, where, what = cells
        rows[layer] = (
            _CODE.findall(where),
            {name for name in _CODE.findall(what) if name.endswith((".py", ".json", "/"))},
        )
    return rows


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def named_where(module: Path, rows: dict[str, tuple[list[str], set[str]]]) -> str | None:
    """The layer whose row names ``module``: by its own path in "where", or relative to a directory there."""
    relative = module.relative_to(ROOT).as_posix()
    for layer, (wheres, names) in rows.items():
        if relative in wheres:
            return layer
        for where in (w for w in wheres if w.endswith("/")):
            if relative.startswith(where):
                inner = relative.removeprefix(where)
                if inner == "__init__.py" or inner in names or inner.removesuffix("__init__.py") in names:
                    return layer
    return None


def test_every_module_is_named_in_its_layers_row() -> None:
    rows = layer_rows()
    assert {"base", "keys core", "observability", "asgi", "service", "vllm", "top"} <= set(rows)
    unnamed = [m.relative_to(ROOT).as_posix() for m in modules() if named_where(m, rows) is None]
    assert unnamed == [], "modules docs/architecture.md does not name"


def test_every_module_the_page_names_exists() -> None:
    missing = []
    for wheres, names in layer_rows().values():
        directories = [w for w in wheres if w.endswith("/")]
        missing += [w for w in wheres if not (ROOT / w).exists()]
        missing += [
            name
            for name in names
            if not (ROOT / name).exists() and not any((ROOT / d / name).exists() for d in directories)
        ]
    assert missing == [], "names in docs/architecture.md with no file behind them"


def test_the_check_fails_on_a_module_left_out() -> None:
    """It can fail: take a module's name out of its row and the module is unnamed."""
    rows = layer_rows()
    wheres, names = rows["keys core"]
    rows["keys core"] = (wheres, names - {"refusals.py"})
    assert named_where(PACKAGE / "keys" / "refusals.py", rows) is None
    assert named_where(PACKAGE / "keys" / "loader.py", rows) == "keys core"
