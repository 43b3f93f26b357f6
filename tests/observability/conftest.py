"""Fixtures of the observability modules: a private registry, and an Instrumentation on it in force for the test."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from mmobs.events import observing
from mmobs.observability.instrument import Instrumentation


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def instr(registry: CollectorRegistry):
    """An Instrumentation on a private registry, in force for this test's context."""
    instrumentation = Instrumentation(registry, hasher_info=False)
    with observing(instrumentation):
        yield instrumentation
