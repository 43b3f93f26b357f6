"""Fixtures of the in-process vLLM modules: the installed vLLM as the oracle, and a module-wide monkeypatch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.vllm_oracle import Oracle, require_vllm


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    """The installed vLLM; skips (fails under MMOBS_REQUIRE_VLLM=1) without it."""
    return require_vllm()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch undone when the module ends (for a module's plugin registered once, its switches unset)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch
