"""Each kind of ``vllm serve`` the session's tests use, started once and booted before the tests ask for it.

A server takes 30 to 100 s to boot on two cores, almost all of it one core's work, and the tests that
use one server are over in less. Booted only when a fixture asks, the servers' boots are most of the
vLLM tests' time. So a kind of server is declared with :func:`vllm_server_fixture`, and the session's
:class:`ServerPool` boots, in a thread of its own and one at a time, the kinds the collected tests
use, in the order they first use them, while the tests run on the other core. A fixture claims its
server (waiting for its boot, or booting it on the spot if its turn has not come) and stops it when
its scope ends, exactly as a fixture that started it itself would.

Booting ahead is bounded: at most ``lookahead`` servers booted and not yet claimed, and none booted
ahead while ``max_alive`` are running (each holds about 2.5 GB; seven is what the decode-free module
holds at once in any case). A kind whose tests are not collected
is never started; one booted ahead and then never claimed (its tests skipped) is stopped at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
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

#: Every declared kind, by its fixture's name.
LAUNCHERS: dict[str, Launcher] = {}


def vllm_server_fixture(scope: str = "session") -> Callable[[Launcher], Any]:
    """Declare a kind of server: the decorated launcher starts it (and waits until it is ready to test).

    The result is a pytest fixture named after the launcher, which claims the server from the session's
    pool and stops it when its scope ends.
    """

    def declare(launch: Launcher) -> Any:
        name = launch.__name__
        LAUNCHERS[name] = launch

        def fixture(vllm_pool: ServerPool) -> Iterator[VllmServer]:
            server = vllm_pool.claim(name)
            try:
                yield server
            finally:
                vllm_pool.stop(server)

        fixture.__doc__ = launch.__doc__
        return pytest.fixture(scope=scope, name=name)(fixture)  # type: ignore[call-overload]

    return declare


def kinds_in_order_of_use(items: Sequence[pytest.Item]) -> list[str]:
    """The declared kinds the items use, in the order of first use.

    An item uses a kind through any fixture it depends on, or by naming it in a ``vllm_servers`` mark (a
    parametrized test that takes each case's servers with ``request.getfixturevalue``).
    """
    order: dict[str, None] = {}
    for item in items:
        marked = (name for mark in item.iter_markers("vllm_servers") for name in mark.args)
        for name in (*getattr(item, "fixturenames", ()), *marked):
            if name in LAUNCHERS:
                order.setdefault(name)
    return list(order)


class ServerPool:
    """The session's vLLM servers: booted ahead in ``order``, claimed by their fixtures, stopped by them."""

    def __init__(self, context: ServerContext, order: Sequence[str], *, lookahead: int = 3, max_alive: int = 7) -> None:
        self.context = context
        self.lookahead = lookahead
        self.max_alive = max_alive
        self._order = list(order)
        self._boots: dict[str, Future[VllmServer]] = {}
        self._claimed: set[str] = set()
        self._alive: set[VllmServer] = set()
        self._closing = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._boot_ahead, name="vllm-pool", daemon=True)
        self._thread.start()

    def claim(self, name: str) -> VllmServer:
        """The server of kind ``name``: booted ahead, being booted (wait), or not yet (boot it here)."""
        with self._changed:
            self._claimed.add(name)
            boot = self._boots.get(name)
            if boot is None:
                boot = self._boots[name] = Future()
                boot.set_running_or_notify_cancel()
                here = True
            else:
                here = False
            self._changed.notify_all()
        if here:
            self._run(name, boot)
        return boot.result()

    def stop(self, server: VllmServer) -> None:
        server.stop()
        with self._changed:
            self._alive.discard(server)
            self._changed.notify_all()

    def close(self) -> None:
        """Stop the boot-ahead thread and every server still running (booted ahead, never claimed)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()
        for server in list(self._alive):
            self.stop(server)

    def _run(self, name: str, boot: Future[VllmServer]) -> None:
        try:
            server = LAUNCHERS[name](self.context)
        except BaseException as error:  # the claiming fixture re-raises it, with the server's log
            boot.set_exception(error)
            return
        with self._changed:
            self._alive.add(server)
        boot.set_result(server)

    def _next_to_boot(self) -> str | None:
        """The first kind not yet booted, if booting it now stays within the bounds; called under the lock."""
        unclaimed = sum(1 for name in self._boots if name not in self._claimed)
        if unclaimed >= self.lookahead or len(self._alive) >= self.max_alive:
            return None
        return next((name for name in self._order if name not in self._boots), None)

    def _boot_ahead(self) -> None:
        while True:
            with self._changed:
                while not self._closing and (name := self._next_to_boot()) is None:
                    if all(name in self._boots for name in self._order):
                        return
                    self._changed.wait()
                if self._closing:
                    return
                boot = self._boots[name] = Future()
                boot.set_running_or_notify_cancel()
            self._run(name, boot)
