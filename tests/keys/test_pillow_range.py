"""The Pillow-sensitive tests, under each Pillow release of the range ``pyproject.toml`` declares.

The rest of the suite runs under whichever Pillow the environment has (CI runs it twice: with the newest
releases, and with the declared floors). Here each other release of :data:`PILLOW_RELEASES` is installed
into a folder of its own (``pip install --target``, from the package index) and put first on
``PYTHONPATH`` for a child pytest of :data:`PILLOW_SENSITIVE`: the golden keys, the EXIF fallback and its
canaries, the pixel limit and decode budgets, identification, and Pillow left as mmobs found it
(``test_pillow_isolation.py``, vLLM's loader included where vLLM is installed). Where the index cannot be
reached the release skips with the reason; ``MMOBS_REQUIRE_PILLOW_RANGE=1`` (set by tox's pillow-range environment) makes that
a failure.

Below the floor (Pillow 10.1.0: a process that got mmobs with ``pip install --no-deps`` may still have an
older Pillow) no key is claimed, but loading mmobs must still leave Pillow as it was: there only
``test_pillow_isolation.py`` runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import PIL
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("MMOBS_REQUIRE_PILLOW_RANGE") == "1"

#: The floor, the last release of each major version after it, and the newest.
PILLOW_RELEASES = ("11.3.0", "12.3.0", "13.0.0")
#: Older releases a process may still have beside mmobs: only Pillow's isolation is held there.
BELOW_THE_FLOOR = ("10.1.0",)
ISOLATION = "tests/keys/test_pillow_isolation.py"
PILLOW_SENSITIVE = [
    ISOLATION,
    *(
        f"tests/keys/{name}.py"
        for name in (
            "test_golden",
            "test_hashing_exif",
            "test_hashing_pixels",
            "test_guard_classes",
            "test_guard_normal",
            "test_guard_robustness",
            "test_pixel_limit",
            "test_identify",
            "test_image_io",
            "test_image_io_refusals",
            "test_keys_vllm_cases",
            "test_keys_vllm_inputs",
            "test_keys_vllm_property",
        )
    ),
]


def _declared_pillow() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (requirement,) = (Requirement(line) for line in project["dependencies"] if line.lower().startswith("pillow"))
    return requirement


def test_the_releases_start_at_the_declared_floor_and_are_all_allowed() -> None:
    declared = _declared_pillow()
    (floor,) = declared.specifier
    assert (floor.operator, Version(floor.version)) == (">=", Version(PILLOW_RELEASES[0]))
    assert all(declared.specifier.contains(release) for release in PILLOW_RELEASES)


RELEASES_HERE = [release for release in (*BELOW_THE_FLOOR, *PILLOW_RELEASES) if release != PIL.__version__]


def _install(release: str, folder: Path) -> Path | str:
    """Pillow ``release`` in a folder of its own, or why pip could not install it."""
    target = folder / f"pillow-{release}"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:"]
    result = subprocess.run(
        [*command, "--target", str(target), f"Pillow=={release}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        return f"could not install Pillow {release} from the package index: {result.stderr.strip()[-600:]}"
    return target


def _child_pytest(release: str, folder: Path) -> subprocess.CompletedProcess[str] | str:
    """The Pillow-sensitive tests in a child pytest with Pillow ``release`` first on its path."""
    target = _install(release, folder)
    if isinstance(target, str):
        return target
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "MMOBS_EXPECTED_PILLOW": release,
    }
    tests = [ISOLATION] if release in BELOW_THE_FLOOR else PILLOW_SENSITIVE
    # The corpus's costly inputs (decode budgets: seconds of decoding each, against vLLM's loader) run once,
    # under the environment's own Pillow; each release here gets every other case.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-k", "not costly", *tests],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
        env=environment,
    )


@pytest.mark.parametrize("release", RELEASES_HERE)
def test_the_pillow_sensitive_tests_pass_under(release: str, tmp_path: Path) -> None:
    """Pillow ``release`` first on the path of a child pytest; every test there passes (or skips for its reason)."""
    result = _child_pytest(release, tmp_path)
    if isinstance(result, str):
        if REQUIRE:
            pytest.fail(f"{result}; MMOBS_REQUIRE_PILLOW_RANGE=1 forbids skipping")
        pytest.skip(result)
    assert result.returncode == 0, f"under Pillow {release}:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
    assert " passed" in result.stdout.splitlines()[-1], result.stdout[-2000:]
