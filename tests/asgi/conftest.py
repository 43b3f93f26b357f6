"""Fixtures of the ASGI layer's tests: a fresh registry each, the observer put back, the Starlette app in both mounting styles."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.testclient import TestClient

import mmobs
from tests.support.middleware_app import (
    STYLES,
    AppState,
    make_app,
)


@pytest.fixture(autouse=True)
def observer() -> Iterator[None]:
    """Put the process-wide observer back: the middleware installs its own."""
    previous = mmobs.get_observer()
    try:
        yield
    finally:
        mmobs.set_observer(previous)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def context_logs() -> Iterator[list[dict[str, Any]]]:
    """Captured log events *with* ``merge_contextvars`` in the chain (structlog's default chain has it)."""
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        yield capture.entries
    finally:
        structlog.reset_defaults()


@pytest.fixture(params=STYLES)
def style(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def app_state(registry: CollectorRegistry, style: str) -> tuple[Starlette, AppState]:
    return make_app(registry, style)


@pytest.fixture
def client(app_state: tuple[Starlette, AppState]) -> Iterator[TestClient]:
    with TestClient(app_state[0]) as test_client:
        yield test_client
