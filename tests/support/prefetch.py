"""Slow, self-contained results a few tests only read, computed in the background from the session's start.

Some tests spend their time waiting on child processes that share nothing with the rest of the session:
each vLLM release's own hasher in a child interpreter (``tests/keys/test_releases.py``,
``tests/vllm/test_vllm_releases_plugin.py``), a child pytest under each Pillow of the declared range
(``tests/keys/test_pillow_range.py``). Run in the foreground they add minutes to the session while a
core sits idle for much of it (the suite's other waits are on vLLM servers booting, one core's work).

So such a result is declared with :func:`prefetched_fixture`: the decorated function computes it, and
the session fixture named after it returns it. When a collected test uses one, the session's
:class:`Prefetcher` starts computing it, in a thread of its own, one result at a time, at the
session's first test; the fixture then only waits for it. The thread runs at a lower priority (Linux's
per-thread nice value, inherited by the threads and child processes it starts), so the work takes the
cycles the foreground leaves and slows the timed tests as little as it can. Those tests run last
(:func:`last`), when the work is most likely done.

The work runs beside tests that change ``os.environ`` for a while (``monkeypatch.setenv``), so a child
process it starts must not inherit the environment of the moment: it is handed
:data:`SESSION_ENVIRON`, the environment as the session began.

An exception the function raises (a ``pytest.skip`` or ``pytest.fail`` included) is raised again by the
fixture, in the test that asks for it, as if the fixture had computed it itself.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import pytest

Compute = Callable[[pytest.TempPathFactory], Any]

#: Every declared result, by its fixture's name.
PREFETCHED: dict[str, Compute] = {}
#: The environment as the session began (this module is imported with the root conftest, before any test):
#: what background work hands the processes it starts. Without it, a zygote started while a test had set
#: ``VLLM_MAX_IMAGE_PIXELS`` made every vLLM release it ran refuse a 100-megapixel JPEG.
SESSION_ENVIRON: Mapping[str, str] = dict(os.environ)
#: How much lower the background's priority is than the foreground's (nice values, 0 to 19).
NICENESS = 10


def prefetched_fixture(compute: Compute) -> Any:
    """Declare a result computed in the background: a session fixture named after ``compute``."""
    name = compute.__name__
    PREFETCHED[name] = compute

    def fixture(prefetcher: Prefetcher) -> Any:
        return prefetcher.result(name)

    fixture.__doc__ = compute.__doc__
    return pytest.fixture(scope="session", name=name)(fixture)


def _uses(item: pytest.Item) -> list[str]:
    return [name for name in getattr(item, "fixturenames", ()) if name in PREFETCHED]


def in_order_of_use(items: Sequence[pytest.Item]) -> list[str]:
    """The declared results the items use, in the order of first use."""
    order: dict[str, None] = {}
    for item in items:
        for name in _uses(item):
            order.setdefault(name)
    return list(order)


def last(items: list[pytest.Item]) -> None:
    """Move the tests that read a prefetched result to the end, in their order (in place)."""
    items[:] = [item for item in items if not _uses(item)] + [item for item in items if _uses(item)]


def _lower_this_threads_priority() -> None:
    """Raise this thread's nice value (Linux: per thread, inherited by what it starts); elsewhere, nothing."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)


class Prefetcher:
    """The session's prefetched results: computed in ``order`` by one background thread, read by their fixtures."""

    def __init__(self, order: Sequence[str], tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory
        # Made here, in the session's thread: pytest makes the session's base folder on first use, and two
        # threads making it at once would each make one.
        tmp_path_factory.getbasetemp()
        self._results: dict[str, Future[Any]] = {name: Future() for name in order}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._compute_all, name="prefetch", daemon=True)
        self._thread.start()

    def result(self, name: str) -> Any:
        """The result named ``name``, once computed (computed here if the session's order did not name it)."""
        future = self._results.get(name)
        if future is None:
            return PREFETCHED[name](self._tmp_path_factory)
        return future.result()

    def close(self) -> None:
        """Start nothing more and wait for the result being computed (its child processes end with it)."""
        self._closing.set()
        self._thread.join()

    def _compute_all(self) -> None:
        _lower_this_threads_priority()
        for name, future in self._results.items():
            if self._closing.is_set():
                return
            future.set_running_or_notify_cancel()
            try:
                future.set_result(PREFETCHED[name](self._tmp_path_factory))
            except BaseException as error:  # the fixture raises it again, in the test that asks
                future.set_exception(error)
