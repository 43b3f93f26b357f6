"""The package's shape: one subpackage per layer, every import pointing down, no cycle.

Read from the source (every ``import`` statement, those inside functions and
under ``TYPE_CHECKING`` included), not from what happens to be loaded, so an
import that runs only on a rare path counts as much as one at the top.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mmobs"

#: Where each module lives: the longest prefix that matches names its layer.
LAYER_OF: dict[str, str] = {
    "mmobs._version": "base",
    "mmobs.errors": "base",
    "mmobs.events": "base",
    "mmobs.releases": "base",
    "mmobs.keys": "keys",
    "mmobs.observability": "observability",
    "mmobs.asgi": "asgi",
    "mmobs.service": "service",
    "mmobs.vllm": "vllm",
    "mmobs.cli": "top",
    "mmobs": "top",
}
#: A module may import from its own layer and from layers of a lower rank only:
#: ``service`` and ``vllm`` share a rank, so neither imports the other.
RANK: dict[str, int] = {"base": 0, "keys": 1, "observability": 2, "asgi": 3, "service": 4, "vllm": 4, "top": 5}

#: The most modules that may sit directly in mmobs/: about a dozen.
MAX_TOP_LEVEL_MODULES = 12


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _resolve(target: str) -> str | None:
    """The mmobs module ``target`` names (``pkg.name`` may be a module or a name in ``pkg``)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _imports(name: str, path: Path) -> set[str]:
    """Every mmobs module that ``name`` imports, anywhere in its source."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if target == "mmobs" or target.startswith("mmobs."):
                module = _resolve(target)
                if module is not None and module != name:
                    found.add(module)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _prefix(module: str) -> str:
    return max((prefix for prefix in LAYER_OF if module == prefix or module.startswith(prefix + ".")), key=len)


def _layer(module: str) -> str:
    return LAYER_OF[_prefix(module)]


def test_every_module_is_placed_in_a_layer() -> None:
    """A new module directly in mmobs/ must be given its layer here, not fall into "top" by default."""
    unplaced = sorted(module for module in MODULES if module != "mmobs" and _prefix(module) == "mmobs")
    assert unplaced == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module: str) -> None:
    layer = _layer(module)
    upward = sorted(
        imported for imported in GRAPH[module] if _layer(imported) != layer and RANK[_layer(imported)] >= RANK[layer]
    )
    assert upward == [], f"{module} ({layer}) imports from a layer that is not below it: {upward}"


def test_no_import_cycle() -> None:
    """Depth-first search for a back edge; the message names the cycle."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def visit(module: str) -> None:
        state[module] = "open"
        trail.append(module)
        for imported in sorted(GRAPH[module]):
            if state.get(imported) == "open":
                cycle = [*trail[trail.index(imported) :], imported]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                visit(imported)
        trail.pop()
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def test_the_top_of_the_package_stays_small() -> None:
    top = sorted(path.stem for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_the_keys_core_imports_only_the_seam_from_outside() -> None:
    """The core reports through ``mmobs.events``, raises ``mmobs.errors`` and reads ``mmobs.releases``; nothing else."""
    outside = {
        imported
        for module, imports in GRAPH.items()
        if _layer(module) == "keys"
        for imported in imports
        if _layer(imported) != "keys"
    }
    assert outside == {"mmobs.errors", "mmobs.events", "mmobs.releases"}


def test_the_graph_reads_real_imports() -> None:
    """The reader itself: known arrows are found, including one inside a function."""
    assert "mmobs.keys.hashing" in GRAPH["mmobs.keys.from_bytes"]
    assert "mmobs.observability.instrument" in GRAPH["mmobs"]  # imported inside _default_observer
    assert (
        "mmobs.service.decode_worker" in GRAPH["mmobs.service.decode_pool"]
    )  # from mmobs.service import decode_worker
    assert importlib.util.find_spec("mmobs.keys.guard.jpeg") is not None
