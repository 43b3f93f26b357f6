"""The public surface: which modules are public, what importing costs, what is declared once, what constructors do.

mmobs loads inside every vLLM process (the plugin), so importing its hashing
core must not drag in a metrics or web stack, nor install anything. Facts
stated in more than one place (the metric list, the bad-image reasons) are
held equal here, so they cannot drift apart quietly.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from PIL import UnidentifiedImageError
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.testclient import TestClient

import mmobs
from mmobs.asgi.middleware import MMObsMiddleware
from mmobs.errors import BAD_IMAGE_REASONS, BadImageReason, InvalidOptionError
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.refusals import bad_image_from_pillow, pillow_error_reason
from mmobs.observability.metrics import HASHER_METRICS, HTTP_METRICS, METRIC_NAMES

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("prometheus_client", "structlog", "starlette", "opentelemetry")

_IMPORT_PROBE = """
import sys
import mmobs.keys.hashing, mmobs.keys.loader, mmobs.keys.media, mmobs.errors
from mmobs import MultiModalHasher, ImageMediaIO
from mmobs.events import _global_observer
loaded = sorted(name for name in {heavy!r} if name in sys.modules)
print(",".join(loaded) or "none", _global_observer is None)
"""


def test_importing_the_core_loads_no_metrics_or_web_stack_and_installs_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(heavy=HEAVY)],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=True,
    )  # fmt: skip
    assert result.stdout.split() == ["none", "True"], result.stdout + result.stderr


_FIRST_USE_PROBE = """
from prometheus_client import REGISTRY
from mmobs import MultiModalHasher
assert REGISTRY.get_sample_value("mmobs_media_keys_total", {"kind": "image", "key_source": "pixels"}) is None
from PIL import Image
MultiModalHasher.hash_kwargs("blake3", image=Image.new("L", (2, 2)))
print(REGISTRY.get_sample_value("mmobs_media_keys_total", {"kind": "image", "key_source": "pixels"}))
"""


def test_the_default_instrumentation_installs_itself_on_first_use() -> None:
    """A library user still gets counters with no set-up: the first event installs them."""
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_USE_PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True
    )
    assert result.stdout.strip() == "1.0", result.stderr


def test_set_observer_none_before_first_use_keeps_reporting_off() -> None:
    probe = "import mmobs, sys; mmobs.set_observer(None); from PIL import Image\n"
    probe += "mmobs.MultiModalHasher.hash_kwargs('blake3', i=Image.new('L', (1, 1)))\n"
    probe += "print('prometheus_client' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "False"


#: The public API: the package's own names and the modules README.md and docs/ tell users to import
#: (the vLLM plugin's entry point and preset, the decode budgets, the release a process keys as, the JSON
#: formatter a logging config names). Each declares ``__all__``; every other module is internal and
#: declares none, and its names are imported from the module that defines them.
PUBLIC_MODULES = frozenset(
    {"mmobs", "mmobs.keys.guard", "mmobs.observability.fingerprint", "mmobs.observability.stdlib_events", "mmobs.vllm"}
)
_DOC_PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def _declares_all(path: Path) -> bool:
    """Whether the module's source assigns ``__all__`` at its top level (read, not imported)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            return True
    return False


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules_declaring_all() -> set[str]:
    return {_module_name(path) for path in (ROOT / "mmobs").rglob("*.py") if _declares_all(path)}


def test_only_the_public_modules_declare_all() -> None:
    """``__all__`` marks a public module: an internal one declaring it would read as API."""
    declaring = _modules_declaring_all()
    assert sorted(declaring - PUBLIC_MODULES) == [], "internal modules declare __all__ (see docs/architecture.md)"
    assert sorted(PUBLIC_MODULES - declaring) == [], "public modules with no __all__"


def test_the_check_reads_all_from_the_source(tmp_path: Path) -> None:
    """It can fail: an assignment or an annotated one counts, a mention in a function or a docstring does not."""
    sources = {
        "plain.py": '__all__ = ["a"]\n',
        "annotated.py": "__all__: list[str] = []\n",
        "mention.py": '"""Has no __all__ = []."""\n\n\ndef f() -> None:\n    __all__ = []\n',
    }
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    assert [_declares_all(tmp_path / name) for name in sources] == [True, True, False]


@pytest.mark.parametrize("module_name", sorted(PUBLIC_MODULES))
def test_every_name_a_public_module_exports_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    declared = list(module.__all__)
    assert declared, f"{module_name}.__all__ is empty"
    assert len(declared) == len(set(declared)), f"{module_name}.__all__ names a name twice"
    missing = [name for name in declared if getattr(module, name, None) is None]
    assert missing == [], f"{module_name}.__all__ names what it does not have: {missing}"
    private = [name for name in declared if name.startswith("_") and name != "__version__"]
    assert private == [], f"{module_name}.__all__ exports private names: {private}"


@pytest.mark.parametrize("module_name", sorted(PUBLIC_MODULES - {"mmobs"}))
def test_every_public_module_is_documented(module_name: str) -> None:
    """A module is public because the user docs send users to it: one they never name is internal."""
    named = [page.name for page in _DOC_PAGES if module_name in page.read_text()]
    assert named, f"no page of docs/ or README.md names {module_name}"


def _private_imports(path: Path) -> list[str]:
    """Private names (``_name``) ``path`` imports from an mmobs module that does not define them."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "mmobs"):
            continue
        assert node.module is not None
        source = ROOT / Path(*node.module.split("."))
        source = source / "__init__.py" if source.is_dir() else source.with_suffix(".py")
        if not source.is_file():
            continue
        defined = _defined_names(source)
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}"
            for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__") and alias.name not in defined
        ]
    return found


def _defined_names(path: Path) -> set[str]:
    """The names a module binds itself (functions, classes, assignments), not those it imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def test_private_names_are_imported_from_where_they_are_defined() -> None:
    """No module re-exports a private name for a test: the test imports it from its own module."""
    paths = [path for folder in ("mmobs", "tests", "benchmarks", "scripts") for path in (ROOT / folder).rglob("*.py")]
    found = [line for path in sorted(paths) for line in _private_imports(path)]
    assert found == []


def test_package_exports_resolve() -> None:
    for name in mmobs.__all__:
        assert getattr(mmobs, name) is not None, name


def test_metric_names_are_derived_from_the_declarations() -> None:
    assert {spec.name for spec in (*HASHER_METRICS, *HTTP_METRICS)} == METRIC_NAMES


def test_bad_image_reasons_follow_the_literal() -> None:
    assert tuple(BAD_IMAGE_REASONS) == get_args(BadImageReason)
    assert all(BAD_IMAGE_REASONS.values())


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"image_mode": "RGB "}, "image_mode"),
        ({"rgba_background_color": (1, 2)}, "rgba_background_color"),
        ({"max_pixels": 0}, "max_pixels"),
        ({"formats": ["NOPE"]}, "formats"),
    ],
)
def test_invalid_loader_options_name_their_param(options: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        ImageMediaIO(**options)  # type: ignore[arg-type]
    assert raised.value.param == param
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (UnidentifiedImageError("cannot identify image file"), "unidentified"),
        (OSError("image file is truncated (3 bytes not processed)"), "truncated"),
        (OSError("Truncated File Read"), "truncated"),
        (EOFError(), "truncated"),
        (SyntaxError("not a TIFF file"), None),
    ],
)
def test_one_classifier_for_pillow_errors(error: BaseException, reason: str | None) -> None:
    """The loader and the middleware classify through the same function."""
    assert pillow_error_reason(error) == reason
    assert bad_image_from_pillow(error, "image").reason == (reason or "corrupt")


def test_middleware_constructor_registers_nothing_until_start_up() -> None:
    registry = CollectorRegistry()
    app = Starlette()
    middleware = MMObsMiddleware(app, registry=registry)
    assert list(registry.collect()) == []
    with TestClient(middleware):  # lifespan start-up
        names = {family.name for family in registry.collect()}
    assert "mmobs_http_requests" in names and "mmobs_hasher_info" in names
