"""Messages between the service and its decode workers, over one Unix socket pair.

A message is a small picklable header plus any number of byte blobs. Blobs
(encoded images, request bodies) travel as raw bytes after the header rather
than inside the pickle, so megabytes cross the boundary with ``sendall`` and
``recv_into``, which release the GIL: the service's event loop keeps running
while an image is handed over. Both ends are this package's own processes;
pickle is never applied to bytes a client sent.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("!I")
_MAX_HEADER = 16 * 1024 * 1024


class WireClosed(EOFError):
    """The other end closed the socket (a worker exited, or its parent did)."""


def send_message(sock: socket.socket, header: Any, blobs: tuple[bytes | bytearray | memoryview, ...] = ()) -> None:
    """Send ``header`` (picklable) followed by ``blobs`` (raw bytes)."""
    sizes = [memoryview(blob).nbytes for blob in blobs]
    encoded = pickle.dumps((header, sizes), protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(encoded)) + encoded)
    for blob in blobs:
        sock.sendall(blob)


def recv_message(sock: socket.socket) -> tuple[Any, list[bytes]]:
    """Receive one message: its header and its blobs. Raises :class:`WireClosed` at end of stream."""
    (length,) = _LENGTH.unpack(_recv_exactly(sock, _LENGTH.size))
    if length > _MAX_HEADER:
        raise ValueError(f"message header of {length} bytes")
    header, sizes = pickle.loads(_recv_exactly(sock, length))
    return header, [_recv_exactly(sock, size) if size else b"" for size in sizes]


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    # MSG_WAITALL fills one bytes object in the common case: no second copy of a large blob.
    data = sock.recv(size, socket.MSG_WAITALL)
    if len(data) == size:
        return data
    buffer = bytearray(data)
    while len(buffer) < size:
        chunk = sock.recv(size - len(buffer))
        if not chunk:
            raise WireClosed("the other end closed the connection")
        buffer += chunk
    return bytes(buffer)
