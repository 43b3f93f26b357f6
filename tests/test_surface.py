"""The public surface: what importing costs, what is declared once, what constructors do.

mmobs loads inside every vLLM process (the plugin), so importing its hashing
core must not drag in a metrics or web stack, nor install anything. Facts
stated in more than one place (the metric list, the bad-image reasons) are
held equal here, so they cannot drift apart quietly.
"""

from __future__ import annotations

import importlib
import pkgutil
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


def _public_modules() -> list[str]:
    """Every module of the package, subpackages and ``cli`` included, but private ones (``_name``)."""
    return [
        info.name
        for info in pkgutil.walk_packages(mmobs.__path__, prefix="mmobs.")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_public_module_declares_an_accurate_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    declared = getattr(module, "__all__", None)
    assert declared is not None, f"{module_name} has no __all__"
    missing = [name for name in declared if not hasattr(module, name)]
    assert missing == [], f"{module_name}.__all__ names what it does not define: {missing}"
    undeclared = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module_name and name not in declared
    ]
    assert undeclared == [], f"{module_name} defines public names missing from __all__: {undeclared}"


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
