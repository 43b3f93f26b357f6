"""A decode worker: parses, decodes and keys one task at a time under hard limits.

Started by :class:`mmobs.service.decode_pool.DecodePool` as ``python -m
mmobs.service.decode_worker FD MEMORY_BYTES`` (a fresh interpreter, never a fork of
the threaded service). Before each task it sets:

* an address-space limit (``RLIMIT_AS``) of its current size plus the memory
  budget, so one task can grow the process by at most that much: an
  allocation beyond it fails with ``MemoryError`` (or Pillow's "out of memory"
  decoder error) instead of the machine swapping;
* a CPU-time timer (``ITIMER_PROF``) at the request's remaining CPU budget. Its
  signal, ``SIGPROF``, is left at its default action, which ends the process:
  a decoder stuck in C code for minutes is stopped by the kernel at the
  budget, wherever it is, and the service sees the worker die of ``SIGPROF``.

It imports the hashing core only (no prometheus_client, no structlog) and
reports every event through :class:`~mmobs.service.relay.RelayObserver`. It runs at a
lower CPU priority than the service, so the event loop (and ``/healthz``)
wins the CPU while images decode. It exits when the service closes the socket.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
import time
import warnings
from typing import Any, TextIO

from PIL import Image, _imaging

from mmobs.errors import BadImageError
from mmobs.events import (
    NULL_OBSERVER,
    HashObserver,
    RecordingObserver,
    observing,
    set_observer,
)
from mmobs.keys import from_bytes
from mmobs.keys.hashing import hash_in_format
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.raw_bytes import raw_bytes_key
from mmobs.service.hash_request import HashOptions, RequestError, RequestLimits, parse_json_body
from mmobs.service.relay import RelayObserver, is_memory_failure
from mmobs.service.wire import WireClosed, recv_message, send_message

#: Retire a worker whose resident memory stayed this far above its start (heap fragmentation).
_RETIRE_GROWTH = 128 * 1024 * 1024
_NICENESS = 5

_relay: RelayObserver | None = None


def process_memory() -> dict[str, int]:
    """This process's VmSize, VmRSS and VmHWM in bytes (Linux ``/proc``; empty elsewhere)."""
    wanted = {"VmSize", "VmRSS", "VmHWM"}
    values: dict[str, int] = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                name, _, rest = line.partition(":")
                if name in wanted:
                    values[name] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return values


def memory_available() -> int | None:
    """``MemAvailable`` of the machine, in bytes (None where unknown)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class _SourceModeIO(ImageMediaIO):
    """The service's loader, remembering the decoded mode before conversion (the response's ``source_mode``)."""

    source_mode: str | None = None

    def _convert(self, image: Image.Image) -> Image.Image:
        self.source_mode = image.mode
        return super()._convert(image)


def _limit_memory(budget: int) -> None:
    if budget <= 0:
        return
    size = process_memory().get("VmSize")
    if size is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + budget
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:  # reset VmHWM so the next task's peak is its own
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


def _memory_outcome(budget: int) -> dict[str, Any]:
    """A failed allocation: the input's breach of the budget, or the machine's own shortage."""
    available = memory_available()
    if available is not None and available < budget:
        return {"status": "server_busy", "detail": f"the machine has {available >> 20} MiB available"}
    return {"status": "too_costly", "resource": "memory"}


def key_image(data: bytes, params: dict[str, Any], observer: HashObserver) -> dict[str, Any]:
    """Load and key one image; every event goes to ``observer``. A refusal is an outcome, not an exception."""
    options: HashOptions = params["options"]
    io = _SourceModeIO(**options.io_options, **params["io_limits"])
    recorder = RecordingObserver(observer)
    started = time.time_ns()
    with observing(recorder):
        try:
            media = io.load_bytes(data)
        except BadImageError as error:
            if is_memory_failure(error):
                raise MemoryError from error
            stages = {"load": (started, time.time_ns())}
            return {"status": "bad_image", "reason": error.reason, "message": error.message, "stages": stages}
        loaded = time.time_ns()
        if options.front_end == "rust":
            key = raw_bytes_key(data)
        else:
            key = hash_in_format(io.key_format, options.algorithm, dict(image=media, **options.extras))
    image = media.media
    return {
        "status": "keyed",
        # When each stage started and ended (ns since the epoch), for the request's trace.
        "stages": {"load": (started, loaded), "key": (loaded, time.time_ns())},
        "item": {
            "mm_hash": key,
            # The Rust front end's key is the bytes' digest: no hasher ran, nothing else was read.
            "key_source": recorder.keyed[-1].key_source if recorder.keyed else "original_bytes",
            "exif_fallback": bool(recorder.fallbacks),
            "width": image.width,
            "height": image.height,
            "source_mode": io.source_mode or image.mode,
            "mode": image.mode,
        },
    }


def key_header(data: bytes, params: dict[str, Any], observer: HashObserver) -> dict[str, Any]:
    """Key one image from its header (``POST /v1/keys``), decoding only where the header cannot decide."""
    options: HashOptions = params["options"]
    io = ImageMediaIO(**options.io_options, **params["io_limits"])
    started = time.time_ns()
    with observing(observer):
        try:
            verify: Any = options.verify
            front_end: Any = options.front_end  # checked when the request was read (hash_request.hash_options)
            found = from_bytes.key_image(
                io, data, options.algorithm, verify=verify, front_end=front_end, **options.extras
            )
        except BadImageError as error:
            if is_memory_failure(error):
                raise MemoryError from error
            return {"status": "bad_image", "reason": error.reason, "message": error.message}
    width, height = found.size
    return {
        "status": "keyed",
        "stages": {"key": (started, time.time_ns())},
        "item": {
            "mm_hash": found.key,
            "key_source": "original_bytes",
            "key_path": found.key_path,
            "format": found.format,
            "width": width,
            "height": height,
        },
    }


def parse_body(body: bytes, params: dict[str, Any]) -> tuple[dict[str, Any], tuple[bytes, ...]]:
    """Parse a JSON request; its URLs come back as UTF-8 blobs (surrogates kept), in order."""
    limits: RequestLimits = params["limits"]
    try:
        parsed = parse_json_body(body, limits)
    except RequestError as error:
        return {"status": "request_error", "error": (error.status, error.code, error.message, error.param)}, ()
    urls = tuple(url.encode("utf-8", "surrogatepass") for _, url in parsed.sources)
    return {"status": "parsed", "options": parsed.options, "params": [param for param, _ in parsed.sources]}, urls


def run_task(
    header: Any, blobs: list[bytes], relay: RelayObserver, budget: int
) -> tuple[dict[str, Any], tuple[bytes, ...]]:
    """One task under the CPU timer; the outcome as plain data (never raises)."""
    kind, params = header
    out: tuple[bytes, ...] = ()
    started = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, max(0.001, float(params["cpu_seconds"])))
    try:
        if kind == "key":
            outcome = key_image(blobs[0], params, relay)
        elif kind == "keys":
            outcome = key_header(blobs[0], params, relay)
        elif kind == "parse":
            outcome, out = parse_body(blobs[0], params)
        else:
            outcome = {"status": "internal", "detail": f"unknown task {kind!r}"}
    except MemoryError:
        outcome = {}  # computed below, once the task's memory is released
    except Exception as error:  # noqa: BLE001 - reported to the service, which logs it with the request id
        outcome = {"status": "internal", "detail": f"{type(error).__name__}: {str(error)[:300]}"}
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    blobs.clear()
    if not outcome:
        outcome = _memory_outcome(budget)
        outcome["retire"] = True
    if relay.memory_failure and outcome.get("status") not in ("too_costly", "server_busy"):
        outcome = {**_memory_outcome(budget), "retire": True}
    outcome["cpu_seconds"] = time.process_time() - started
    return outcome, out


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    if _relay is not None:
        _relay.warning(message, category, filename, lineno)


def main(argv: list[str] | None = None) -> int:
    global _relay
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    budget = int(args[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service decides when we stop
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        os.nice(_NICENESS)
    except OSError:
        pass
    set_observer(NULL_OBSERVER)  # events reach the service through the relay only
    warnings.simplefilter("always")  # the service's filters decide what is shown
    warnings.showwarning = _show_warning
    Image.init()
    _imaging.set_blocks_max(0)  # freed pixel blocks go back to the system: the limit is per task
    started = process_memory()
    try:
        send_message(sock, ("ready", {"pid": os.getpid(), **started}))
    except OSError:
        return 0  # the service stopped (or gave up on us) while we started: nothing to say, no traceback
    while True:
        _limit_memory(budget)
        idle = process_memory()
        try:
            header, blobs = recv_message(sock)
        except (WireClosed, ConnectionError):
            return 0
        if header == "stop":
            return 0
        _relay = RelayObserver(sock)
        outcome, out = run_task(header, blobs, _relay, budget)
        _relay = None
        memory = process_memory()
        outcome["peak_rss"] = memory.get("VmHWM", 0)
        outcome["idle_rss"] = idle.get("VmRSS", 0)
        if memory.get("VmRSS", 0) - started.get("VmRSS", 0) > _RETIRE_GROWTH:
            outcome["retire"] = True
        try:
            send_message(sock, ("done", outcome), out)
        except OSError:
            return 0
        if outcome.get("retire"):
            return 0


if __name__ == "__main__":
    sys.exit(main())
