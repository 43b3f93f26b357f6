"""Who serves ``MMOBS_METRICS_PORT``: the first vLLM process to load the plugin; every other one answers it.

vLLM loads its general plugins in ``vllm serve``'s own process before it starts the front end and
the engine, so that process finds no peers' directory in its environment, makes one, names it to
its children (:data:`~mmobs.vllm.metrics_port.peers.PEERS_DIR_ENV`) and listens on the port. A
process that finds the directory answers on a socket in it, where the plugin has hooked something.

The port is closed to strangers as ``mmobs serve``'s metrics are: with ``MMOBS_METRICS_TOKEN`` set,
every request needs ``Authorization: Bearer <token>`` (a 401 otherwise, counted in
``mmobs_metrics_unauthorized_total``, which only the port serves). ``/debug/mm-items`` shows request
ids, client uuids and small tensors' values of every client: it answers 404 unless
``MMOBS_METRICS_DEBUG=1`` turns it on, and is turned on only together with a token.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from mmobs.asgi.bearer import TOKEN_ENV, UNAUTHORIZED
from mmobs.vllm.metrics_port.merge import MergedCollector, own_series
from mmobs.vllm.metrics_port.peers import PEERS_DIR_ENV, ask_peers, serve_peer
from mmobs.vllm.startup_log import say

METRICS_PORT_ENV = "MMOBS_METRICS_PORT"
#: The address the port listens on (default: every interface, as ``vllm serve`` listens by default).
METRICS_HOST_ENV = "MMOBS_METRICS_HOST"
#: ``1`` serves ``/debug/mm-items`` (only with a token).
METRICS_DEBUG_ENV = "MMOBS_METRICS_DEBUG"
ITEMS_PATH = "/debug/mm-items"

_started_in: int | None = None


def metrics_port() -> int | None:
    """``MMOBS_METRICS_PORT`` as a port number; None when unset, or (with one warning line) when it is not one."""
    raw = os.environ.get(METRICS_PORT_ENV, "").strip()
    if not raw:
        return None
    if raw.isdigit() and 0 < int(raw) < 65536:
        return int(raw)
    say(logging.WARNING, "mmobs: %s=%r is not a port number (1 to 65535); the engine core's series reach no "
        "scrape", METRICS_PORT_ENV, raw)  # fmt: skip
    return None


def serve_metrics_port(hooked: bool, families: frozenset[str]) -> str | None:
    """Serve the port (its first process) or answer it (the others, where ``hooked``); what the start-up line says.

    ``families`` are the series this process adds to the port: those no vLLM ``/metrics`` reads (the engine
    core's). A Python API server's stay on vLLM's ``/metrics``, and so does every process's when
    ``--api-server-count`` above 1 shares vLLM's ``PROMETHEUS_MULTIPROC_DIR``: no series is scraped twice.
    """
    global _started_in
    port = metrics_port()
    if port is None or _started_in == os.getpid():
        return None
    _started_in = os.getpid()
    own = functools.partial(own_series, REGISTRY, families)
    peers = os.environ.get(PEERS_DIR_ENV)
    if peers and Path(peers).is_dir():
        if not (hooked and families):
            return f"nothing of its own for port {port}"
        serve_peer(Path(peers), {"metrics": own, "items": _own_items})
        return f"its series on port {port}"
    directory = Path(tempfile.mkdtemp(prefix="mmobs-metrics-"))
    atexit.register(shutil.rmtree, directory, True)
    from mmobs.asgi.metrics_server import start_metrics_server

    token = os.environ.get(TOKEN_ENV) or None
    pages = {ITEMS_PATH: functools.partial(_items, directory)} if _debug_pages(token) else {}
    refusals = CollectorRegistry(auto_describe=False)  # the port's own: on no vLLM /metrics
    own_and_refusals = functools.partial(_joined, own, functools.partial(own_series, refusals, {UNAUTHORIZED.name}))
    try:
        start_metrics_server(
            port, os.environ.get(METRICS_HOST_ENV, ""), token,
            render=functools.partial(_render, directory, own_and_refusals), pages=pages, registry=refusals,
        )  # fmt: skip
    except OSError as error:
        say(logging.WARNING, "mmobs: %s=%d could not be served (%s); the engine core's series reach no "
            "scrape", METRICS_PORT_ENV, port, error)  # fmt: skip
        return None
    os.environ[PEERS_DIR_ENV] = str(directory)  # vLLM's processes started from here on answer the port
    guarded = "with a token" if token else f"without a token (set {TOKEN_ENV})"
    return f"port {port} serves the engine core's series {guarded}{', and ' + ITEMS_PATH if pages else ''}"


def _debug_pages(token: str | None) -> bool:
    """Whether ``/debug/mm-items`` is served: asked for with ``MMOBS_METRICS_DEBUG=1``, and a token to guard it."""
    if os.environ.get(METRICS_DEBUG_ENV, "").strip() != "1":
        return False
    if token is None:
        say(logging.WARNING, "mmobs: %s=1 needs %s: %s shows every client's request ids and uuids, so it stays "
            "off without a token", METRICS_DEBUG_ENV, TOKEN_ENV, ITEMS_PATH)  # fmt: skip
        return False
    return True


def _joined(*parts: Callable[[], bytes]) -> bytes:
    return b"".join(part() for part in parts)


def _render(directory: Path, own: Callable[[], bytes], accept: str | None) -> tuple[bytes, str]:
    """Every live process's ``mmobs_*`` series, summed, in the format ``accept`` asks for."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MergedCollector(lambda: [own(), *ask_peers(directory, "metrics").values()]))
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def _own_items() -> bytes:
    from mmobs.vllm.engine_items import item_counter

    counter = item_counter.current
    return json.dumps([] if counter is None else counter.recent_items()).encode()


def _items(directory: Path) -> list[dict[str, Any]]:
    """The recent multimodal items of every engine core (``/debug/mm-items``), each with its process id."""
    answers = {os.getpid(): _own_items(), **ask_peers(directory, "items")}
    found: list[dict[str, Any]] = []
    for pid, answer in sorted(answers.items()):
        try:
            found.extend({**item, "pid": pid} for item in json.loads(answer or b"[]"))
        except ValueError:
            continue
    return found
