"""The code's style is the formatter's and the linter's (configured in pyproject.toml), checked here.

The pinned ruff of the ``test`` extra runs over the whole tree, so the README's
one test command (and CI) fails on an unformatted file or a lint finding.
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
