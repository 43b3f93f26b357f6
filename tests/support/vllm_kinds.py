"""Each kind of ``vllm serve`` the tests share, declared once as a fixture that starts it and stops it.

A kind is a launcher: a function of the :class:`ServerContext` (the server environment, the tiny model,
a folder for its files) that starts one ``vllm serve`` and waits until it is ready to test.
:func:`vllm_server_fixture` turns it into a pytest fixture of that name, which starts the server the
first time a test asks for it and stops it, by its process id, when its scope ends. A session-scoped
kind is started at most once per pytest process, so the tests that share it pay its boot (20 to 100 s
on two cores) once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
