"""Fixtures of the differential modules (``test_vllm_differential_*.py``): the installed vLLM as the oracle."""

from __future__ import annotations

import pytest

from tests.support.vllm_oracle import Oracle, require_vllm


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    """The installed vLLM; skips (fails under MMOBS_REQUIRE_VLLM=1) without it."""
    return require_vllm()
