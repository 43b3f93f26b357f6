"""The code's style is the formatter's, the linter's and the type checker's (configured in pyproject.toml).

The pinned ruff and mypy of the ``test`` extra run here, so the README's one
test command (and CI) fails on an unformatted file, a lint finding, or a type
error in ``mmobs/`` (which ships ``py.typed``: its annotations are a promise).
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"


#: mypy reads the annotations of mmobs's dependencies, and below these releases they are missing or narrower
#: (pybase64 1.3 ships none, blake3 0.4 takes ``bytes`` only, numpy 1.x types arrays otherwise): mmobs's
#: annotations are checked against these and newer, which the newest run of CI has. Below them (the
#: floors run) mmobs still works; only this check cannot be made.
TYPED_SINCE = {"numpy": "2.0", "blake3": "1.0", "pybase64": "1.4"}


def _below_typed_releases() -> list[str]:
    found = {name: Version(metadata.version(name)) for name in TYPED_SINCE}
    return [f"{name} {found[name]} (< {floor})" for name, floor in TYPED_SINCE.items() if found[name] < Version(floor)]


def test_mypy_strict(tmp_path: Path) -> None:
    """``mypy --strict`` over mmobs/ with the configuration in pyproject.toml, from a cold cache."""
    older = _below_typed_releases()
    if older:
        pytest.skip(f"mmobs's annotations are checked against newer dependencies than {', '.join(older)}")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, f"mypy:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
    assert "Success: no issues found" in result.stdout
