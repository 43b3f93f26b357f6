"""Each kind of ``vllm serve`` the tests share, declared once as a fixture that starts it and stops it.

A kind is a launcher: a function of the :class:`ServerContext` (the server environment, the tiny model,
a folder for its files) that starts one ``vllm serve`` and waits until it is ready to test.
:func:`vllm_server_fixture` turns it into a pytest fixture of that name, which starts the server the
first time a test asks for it and stops it, by its process id, when its scope ends. A session-scoped
kind is started at most once per pytest process, so the tests that share it pay its boot (20 to 100 s
on two cores) once. The servers a module compares (with mmobs and alone, say) are declared together with
:func:`vllm_servers_fixture`, which boots them side by side.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.vllm_server import VllmServer


@dataclass(frozen=True)
class ServerContext:
    """What every kind's launcher starts from: the server environment, the model, a place for its files."""

    venv: Path
    model: Path
    media_dir: Path
    tmp_path_factory: pytest.TempPathFactory

    def directory(self, name: str) -> Path:
        return self.tmp_path_factory.mktemp(name)


Launcher = Callable[[ServerContext], VllmServer]


def vllm_server_fixture(scope: str = "session") -> Callable[[Launcher], Any]:
    """Declare a kind of server: a fixture named after the decorated launcher, with its docstring.

    The fixture starts the server with the launcher and stops it when its ``scope`` ends (a server that
    does not come up is stopped by :meth:`VllmServer.wait_until` before it raises).
    """

    def declare(launch: Launcher) -> Any:
        def fixture(vllm_server_context: ServerContext) -> Iterator[VllmServer]:
            server = launch(vllm_server_context)
            try:
                yield server
            finally:
                server.stop()

        fixture.__doc__ = launch.__doc__
        return pytest.fixture(scope=scope, name=launch.__name__)(fixture)  # type: ignore[call-overload]

    return declare


@contextlib.contextmanager
def side_by_side(starting: Iterable[VllmServer]) -> Iterator[tuple[VllmServer, ...]]:
    """The servers ``starting`` yields (each started with ``wait=False``), once each is healthy; every one
    started is stopped, by its process id, on leaving or when a boot fails.

    A boot is mostly one process importing at a time: two boots side by side on two cores take about 45 s
    where one after the other take 65.
    """
    started: list[VllmServer] = []
    try:
        for server in starting:
            started.append(server)
        for server in started:
            server.wait_until_healthy()
        yield tuple(started)
    finally:
        for server in started:
            server.stop()


SideBySide = Callable[[ServerContext], Iterator[VllmServer]]


def vllm_servers_fixture(scope: str = "module") -> Callable[[SideBySide], Any]:
    """Declare the servers a module compares (with mmobs and alone, say), booted :func:`side_by_side`: a
    fixture named after the decorated launcher, which yields each server started with ``wait=False``."""

    def declare(launch: SideBySide) -> Any:
        def fixture(vllm_server_context: ServerContext) -> Iterator[tuple[VllmServer, ...]]:
            with side_by_side(launch(vllm_server_context)) as servers:
                yield servers

        fixture.__doc__ = launch.__doc__
        return pytest.fixture(scope=scope, name=launch.__name__)(fixture)  # type: ignore[call-overload]

    return declare
