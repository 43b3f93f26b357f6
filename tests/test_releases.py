"""The one release table (``mmobs.releases``): its supported range, and the policy for a release outside it.

What each listed release keys like is held to that release's own hasher in ``tests/keys/test_releases.py``;
what the plugin carries on each, to ``docs/vllm.md`` in ``tests/docs/test_docs.py``. Here: the range is
declared once and is the table's, the module stays import-light (the plugin reads it in every vLLM
process), and a release outside the range, or between two rows, meets the one stated policy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mmobs.errors import InvalidOptionError
from mmobs.releases import (
    FIRST_PROVEN,
    NEWEST,
    OLDEST,
    RELEASES,
    key_format,
    keyed_as,
    release_number,
    standing,
    unproven,
)

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("vllm", "torch", "prometheus_client", "structlog", "starlette")


def test_the_supported_range_is_the_tables_first_and_last_release() -> None:
    listed = list(RELEASES)
    assert (listed[0], listed[-1]) == (OLDEST, NEWEST)
    numbers = [number for release in listed if (number := release_number(release)) is not None]
    assert len(numbers) == len(listed) and numbers == sorted(numbers), "RELEASES is written oldest first"
    assert key_format() == RELEASES[NEWEST]
    assert all(release in RELEASES for release in FIRST_PROVEN.values())


def test_importing_the_release_table_loads_nothing_heavy() -> None:
    probe = f"import sys, mmobs.releases; print(sorted(n for n in {HEAVY!r} if n in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


@pytest.mark.parametrize(
    ("version", "number"),
    [("0.33.0", (0, 33, 0)), ("0.32.0+cpu", (0, 32, 0)), ("0.35.0rc1", (0, 35, 0)), ("1.2", (1, 2, 0)), ("main", None)],
)
def test_a_release_number_is_read_from_the_versions_start(version: str, number: tuple[int, int, int] | None) -> None:
    assert release_number(version) == number


def test_a_listed_release_is_keyed_in_its_own_format_and_stands_supported() -> None:
    for release, fmt in RELEASES.items():
        assert keyed_as(release) == keyed_as(f"{release}+cpu") == release
        assert key_format(release) is fmt
        assert standing(release) == f"supported: vLLM {OLDEST} to {NEWEST}"


def test_a_newer_release_is_held_to_the_newest_format_and_carries_every_feature_its_checks_allow() -> None:
    """Inside vLLM the plugin loads, keyed as the newest release; no feature declines for its release alone."""
    newer = "0.35.0"
    assert keyed_as(newer) == keyed_as("0.40.1+cpu") == NEWEST
    assert all(unproven(feature, newer) is None for feature in FIRST_PROVEN)
    assert standing(newer).startswith(f"newer than vLLM {NEWEST}, the newest supported: held to its key format")
    with pytest.raises(InvalidOptionError, match="known releases"):  # outside vLLM: nothing to check against
        key_format(newer)


def test_an_unlisted_release_inside_the_range_is_held_to_the_newest_row_at_or_below_it() -> None:
    """A change from the plugin's fingerprint before the one table: such a release was held to the newest format."""
    assert keyed_as("0.28.1") == "0.28.0" and key_format(keyed_as("0.28.1")).name == "0.27"
    assert keyed_as("0.33.0rc1") == "0.33.0"
    assert standing("0.28.1").startswith("not listed: held to vLLM 0.28.0's key format")
    assert unproven("cache_drift", "0.31.5") is not None and unproven("cache_drift", "0.32.1") is None
    with pytest.raises(InvalidOptionError):
        key_format("0.28.1")


def test_an_older_release_is_declined() -> None:
    """Every feature, the hasher's hooks included, is unproven there: the plugin declines whole."""
    older = "0.24.0"
    assert all(unproven(feature, older) is not None for feature in FIRST_PROVEN)
    assert unproven("keys", older) == f"proven from vLLM {OLDEST} on, and this is {older}"
    assert standing(older) == f"older than vLLM {OLDEST}, the oldest supported: declined"
    for refuses in (key_format, keyed_as):
        with pytest.raises(InvalidOptionError, match="known releases"):
            refuses(older)


def test_a_source_build_is_held_to_the_newest_format_and_left_to_the_shape_checks() -> None:
    assert keyed_as("main") == NEWEST
    assert all(unproven(feature, "main") is None for feature in FIRST_PROVEN)
    assert standing("main").startswith(f"no release number: held to vLLM {NEWEST}'s key format")
