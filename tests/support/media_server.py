"""A loopback HTTP server for media files: what a client's ``http://`` image URL points at, in the tests."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _QuietHandler(SimpleHTTPRequestHandler):
    delay = 0.0

    def do_GET(self) -> None:
        time.sleep(self.delay)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not the test's output."""


@contextlib.contextmanager
def serving(directory: Path, delay: float = 0.0) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) while the block runs; yields the base URL.

    ``delay`` seconds pass before each answer: a slow media host.
    """
    handler = functools.partial(type("Handler", (_QuietHandler,), {"delay": delay}), directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="media-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
