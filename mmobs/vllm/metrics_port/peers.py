"""vLLM's processes, each answering for its own mmobs series on a Unix socket, and the one process asking them.

Every process but the port's owner listens on ``<directory>/<pid>.sock`` (the owner makes the
directory and names it to its children in :data:`PEERS_DIR_ENV`, which they inherit). A peer reads
one line, the name of what is asked (:data:`ASKS`), answers with the bytes of it, and closes. The
owner asks every socket in the directory in turn; a socket nobody answers on (its process ended)
is removed, so an ended engine's series leave the scrape with it, as a restarted process's would.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

#: Set by the owner for its children: the directory of the peers' sockets.
PEERS_DIR_ENV = "_MMOBS_METRICS_PEERS_DIR"
#: What a peer answers for: its ``mmobs_*`` series (text format) and its recent engine items (JSON).
ASKS = ("metrics", "items")
_TIMEOUT_SECONDS = 2.0
_MAX_ASK = 32


def serve_peer(directory: Path, answers: Mapping[str, Callable[[], bytes]]) -> Path:
    """Answer the owner's asks from a daemon thread; the socket is ``<directory>/<pid>.sock``."""
    path = directory / f"{os.getpid()}.sock"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    threading.Thread(target=_answer_forever, args=(listener, answers), name="mmobs-metrics-peer", daemon=True).start()
    return path


def _answer_forever(listener: socket.socket, answers: Mapping[str, Callable[[], bytes]]) -> None:
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                connection.settimeout(_TIMEOUT_SECONDS)
                asked = connection.recv(_MAX_ASK).decode("ascii", "replace").strip()
                answer = answers.get(asked)
                connection.sendall(answer() if answer is not None else b"")
            except Exception:  # noqa: BLE001 - one failed ask must not end the peer
                continue


def ask_peers(directory: Path, what: str) -> dict[int, bytes]:
    """Each live peer's answer to ``what``, by process id; the sockets of ended processes are removed."""
    answers: dict[int, bytes] = {}
    for path in sorted(directory.glob("*.sock")):
        try:
            answers[int(path.stem)] = _ask(path, what)
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        except (OSError, ValueError):
            continue  # alive but slow, or not a peer's socket: skipped this scrape
    return answers


def _ask(path: Path, what: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(_TIMEOUT_SECONDS)
        connection.connect(str(path))
        connection.sendall(what.encode("ascii") + b"\n")
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)
