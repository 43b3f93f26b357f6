"""Where the reference service decodes and keys images: a small pool of worker processes.

Structural checks in the loader refuse the costly inputs someone has thought
of; this pool bounds the ones nobody has. Each worker (:mod:`mmobs.service.decode_worker`)
is a fresh interpreter started with ``subprocess`` (never forked from the
threaded service) that runs one task at a time under an address-space limit
and a CPU-time timer. A task that breaches them ends as an *outcome*
(``too_costly``), the worker that breached is replaced, and neither the
service process nor any other request notices.

Concurrency is the pool size; a request that finds every worker busy waits
in a FIFO line of bounded length for a bounded time, and past either bound
gets :class:`ServerBusy` (the service answers 503 with ``Retry-After``).
The exchange with a worker runs in a thread (socket I/O that releases the
GIL), in a copy of the request's context, so events replayed from the worker
are logged with the request id.

:class:`InlineDecoder` offers the same interface without processes (no
limits): for ``--decode-workers 0``, platforms without ``/proc`` and
in-process profiling.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmobs.observability.logs import mmobs_logger
from mmobs.service import decode_worker
from mmobs.service.relay import Replayer
from mmobs.service.wire import WireClosed, recv_message, send_message

_log = mmobs_logger()
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
#: Keep a worker's address space close to what it uses, so the limit measures the task:
#: two malloc arenas, big buffers mapped (and unmapped on free), no BLAS thread pools.
_WORKER_ENV = {
    "MALLOC_ARENA_MAX": "2",
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


class ServerBusy(Exception):
    """The service's own shortage (every worker busy, the line full, memory): a 503, never the client's fault."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class PoolSettings:
    """Size and limits of a :class:`DecodePool`."""

    size: int = 2
    #: How much one task may grow a worker's address space.
    memory_bytes: int = 512 * 1024 * 1024
    #: Requests that may wait for a worker, and for how long.
    queue_limit: int = 64
    queue_timeout: float = 10.0
    #: Wall-clock bound of one task (a backstop: the CPU timer normally ends it first).
    task_timeout: float = 30.0
    start_timeout: float = 30.0


class _Worker:
    """One worker process and the service's end of its socket."""

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket, info: dict[str, Any]) -> None:
        self.process, self.sock, self.info = process, sock, info

    @property
    def pid(self) -> int:
        return self.process.pid

    def exchange(
        self, header: Any, blobs: list[bytes], replayer: Replayer, timeout: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Run one task (blocking): replay its events as they come, answer its questions, return its outcome."""
        deadline = time.monotonic() + timeout
        try:
            self.sock.settimeout(timeout)
            send_message(self.sock, header, tuple(blobs))
            blobs.clear()  # the worker has them: the service need not hold a second copy meanwhile
            while True:
                self.sock.settimeout(max(0.001, deadline - time.monotonic()))
                message, out = recv_message(self.sock)
                tag = message[0]
                if tag == "event":
                    replayer.event(message[1], message[2])
                elif tag == "ask":
                    send_message(self.sock, ("answer", replayer.ask(*message[1:])))
                elif tag == "done":
                    return message[1], out
        except TimeoutError:
            self.kill()
            return {"status": "server_busy", "lost": True,
                    "detail": f"decoding took longer than {timeout:g} s of wall-clock time"}, []  # fmt: skip
        except (WireClosed, OSError):
            return self.death(), []

    def death(self) -> dict[str, Any]:
        """What ended the worker, as an outcome."""
        self.sock.close()
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        outcome: dict[str, Any] = {"lost": True, "exit": code}
        if code == -signal.SIGPROF:
            return {**outcome, "status": "too_costly", "resource": "cpu"}
        if code == -signal.SIGKILL:
            return {**outcome, "status": "server_busy", "detail": "a decode worker was killed (out of memory?)"}
        if code < 0:
            return {**outcome, "status": "crashed", "signal": signal.Signals(-code).name}
        return {**outcome, "status": "server_busy", "detail": f"a decode worker exited with status {code}"}

    def kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass

    def stop(self) -> None:
        """Ask the worker to exit, and make sure it did."""
        try:
            send_message(self.sock, "stop")
        except OSError:
            pass
        self.sock.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _spawn(settings: PoolSettings, python: str) -> _Worker:
    """Start one worker and wait for it to say it is ready (blocking)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {**os.environ, **_WORKER_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    try:
        process = subprocess.Popen(
            [python, "-m", "mmobs.service.decode_worker", str(theirs.fileno()), str(settings.memory_bytes)],
            pass_fds=(theirs.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal is the service's to handle
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    try:
        ours.settimeout(settings.start_timeout)
        header, _ = recv_message(ours)
    except BaseException:
        ours.close()
        process.kill()
        process.wait()
        raise
    if not (isinstance(header, tuple) and header[0] == "ready"):
        ours.close()
        process.kill()
        process.wait()
        raise RuntimeError(f"unexpected first message from a decode worker: {header!r}")
    return _Worker(process, ours, header[1])


class DecodePool:
    """``size`` decode workers behind a bounded FIFO line. Bound to the event loop that starts it."""

    def __init__(self, settings: PoolSettings | None = None, *, python: str = sys.executable) -> None:
        self.settings = settings or PoolSettings()
        if self.settings.size < 1:
            raise ValueError("a decode pool needs at least one worker; use InlineDecoder for none")
        self.python = python
        self._started = False
        self._closed = False
        self._waiting = 0
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: asyncio.Queue[_Worker] | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Start the workers in the background; requests wait (bounded) until one is ready.

        A closed pool starts afresh (an app whose lifespan runs again, in another event loop).
        """
        if self._started and not self._closed:
            return
        self._started, self._closed, self._waiting = True, False, 0
        self._loop = asyncio.get_running_loop()
        self._idle = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=2 * self.settings.size + 1, thread_name_prefix="mmobs-decode")
        for _ in range(self.settings.size):
            self._spawn_soon()

    async def close(self) -> None:
        """Stop every worker (busy ones see their socket close and exit)."""
        self._closed = True
        with self._lock:
            workers = list(self._workers)
            self._workers.clear()
        if self._loop is not None and workers:

            def stop_all() -> None:
                for worker in workers:
                    worker.stop()

            await self._loop.run_in_executor(None, stop_all)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def ready(self) -> int:
        """Workers alive (busy or idle)."""
        with self._lock:
            return len(self._workers)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(worker.pid for worker in self._workers)

    def _spawn_soon(self, delay: float = 0.0) -> None:
        assert self._loop is not None and self._executor is not None
        if self._closed:
            return
        if delay:
            self._loop.call_later(delay, self._spawn_soon)
            return
        future = self._loop.run_in_executor(self._executor, _spawn, self.settings, self.python)
        future.add_done_callback(self._spawned)

    def _spawned(self, future: asyncio.Future[_Worker]) -> None:
        assert self._idle is not None
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            _log.error("decode_worker_start_failed", error=f"{type(error).__name__}: {str(error)[:200]}")
            self._spawn_soon(delay=1.0)
            return
        worker = future.result()
        if self._closed:
            worker.stop()
            return
        with self._lock:
            self._workers.add(worker)
        self._idle.put_nowait(worker)

    def _retire(self, worker: _Worker) -> None:
        """Forget ``worker`` (dead, or asked to go), reap it off the loop, and start its replacement."""
        with self._lock:
            self._workers.discard(worker)
        assert self._executor is not None
        if not self._closed:
            self._executor.submit(worker.stop)
            self._spawn_soon()

    # -- work ------------------------------------------------------------------------------

    async def _acquire(self) -> _Worker:
        assert self._idle is not None
        if self._closed:
            raise ServerBusy("the service is shutting down")
        try:
            return self._idle.get_nowait()
        except asyncio.QueueEmpty:
            pass
        if self._waiting >= self.settings.queue_limit:
            raise ServerBusy(
                f"all {self.settings.size} decode workers are busy and {self._waiting} requests are waiting"
            )
        self._waiting += 1
        try:
            return await asyncio.wait_for(self._idle.get(), self.settings.queue_timeout)
        except TimeoutError:
            raise ServerBusy(
                f"no decode worker became free within {self.settings.queue_timeout:g} s", retry_after=2
            ) from None
        finally:
            self._waiting -= 1

    async def run(self, header: Any, blobs: list[bytes], replayer: Replayer) -> tuple[dict[str, Any], list[bytes]]:
        """Run one task on a free worker; its outcome (a dict with ``status``) and output blobs."""
        await self.start()
        assert self._loop is not None and self._executor is not None
        worker = await self._acquire()
        context = contextvars.copy_context()
        future = self._loop.run_in_executor(
            self._executor, context.run, worker.exchange, header, blobs, replayer, self.settings.task_timeout
        )
        future.add_done_callback(functools.partial(self._finished, worker))
        # Shielded: a cancelled request leaves the task to finish, and the worker to come back.
        return await asyncio.shield(future)

    def _finished(self, worker: _Worker, future: asyncio.Future[tuple[dict[str, Any], list[bytes]]]) -> None:
        assert self._idle is not None
        if future.cancelled() or future.exception() is not None:
            worker.kill()
            self._retire(worker)
            return
        outcome = future.result()[0]
        if outcome.get("lost") or outcome.get("retire") or self._closed:
            self._retire(worker)
        else:
            self._idle.put_nowait(worker)


class InlineDecoder:
    """The :class:`DecodePool` interface, run in a thread of the service itself: no isolation, no limits.

    ``threaded=False`` runs each task on the event loop's own thread (for profiling one request whole).
    """

    ready = 0

    def __init__(self, *, threaded: bool = True) -> None:
        self.threaded = threaded
        self._executor: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def pids(self) -> list[int]:
        return []

    async def run(self, header: Any, blobs: list[bytes], replayer: Replayer) -> tuple[dict[str, Any], list[bytes]]:
        kind, params = header

        def call() -> tuple[dict[str, Any], tuple[bytes, ...]]:
            started = time.thread_time()
            out: tuple[bytes, ...]
            if kind == "key":
                outcome, out = decode_worker.key_image(blobs[0], params, replayer.observer), ()
            elif kind == "keys":
                outcome, out = decode_worker.key_header(blobs[0], params, replayer.observer), ()
            else:
                outcome, out = decode_worker.parse_body(blobs[0], params)
            outcome["cpu_seconds"] = time.thread_time() - started
            return outcome, out

        if not self.threaded:
            outcome, out = call()
            return outcome, list(out)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mmobs-inline")
        context = contextvars.copy_context()
        outcome, out = await asyncio.get_running_loop().run_in_executor(self._executor, context.run, call)
        return outcome, list(out)
