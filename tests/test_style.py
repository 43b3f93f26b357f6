"""The code's style is the formatter's, the linter's and the type checker's (configured in pyproject.toml).

The pinned ruff and mypy of the ``test`` extra run here, so the README's one
test command (and CI) fails on an unformatted file, a lint finding, or a type
error in ``mmobs/`` (which ships ``py.typed``: its annotations are a promise).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"


def test_mypy_strict(tmp_path: Path) -> None:
    """``mypy --strict`` over mmobs/ with the configuration in pyproject.toml, from a cold cache."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, f"mypy:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
    assert "Success: no issues found" in result.stdout
