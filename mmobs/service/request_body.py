"""A request's body, bounded while it arrives: its own size, and the bytes the process holds at once.

A body over ``--max-body-bytes`` is refused (``413``) as soon as its
``Content-Length`` or its bytes so far say so, before the rest is read. Every
byte received is also held against the process's budget of buffered bodies
(one event loop per process, so no lock), and a request that would exceed it
is the server's shortage (``503``, retry shortly), not the client's fault.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.types import Message, Receive

from mmobs.service.decode_pool import ServerBusy
from mmobs.service.hash_request import RequestError


class BodyTooLarge(RequestError):
    """The body is larger than the service takes: ``413``."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, "payload_too_large", f"the request body is larger than {limit} bytes")


class BodyBudget:
    """Request body bytes buffered at once by this process (a single event loop: no lock needed)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise ServerBusy(f"the server is buffering {self.held >> 20} MiB of request bodies; retry shortly")
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


def bounded_request(request: Request, limit: int, budget: BodyBudget, held: list[int]) -> Request:
    """``request``, its body refused beyond ``limit`` bytes and held against ``budget`` as it arrives.

    ``held[0]`` counts the bytes this request took from the budget, for the
    caller to give back once the request is answered, however it ends.
    """
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    return Request(request.scope, _limited(request.receive, limit, budget, held))


def _limited(receive: Receive, limit: int, budget: BodyBudget, held: list[int]) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that refuses bodies over the limit, and holds their bytes against the process's budget."""
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            size = len(message.get("body", b""))
            received += size
            if received > limit:
                raise BodyTooLarge(limit)
            budget.take(size)
            held[0] += size
        return message

    return limited_receive


async def read_body(request: Request) -> bytes:
    """The whole body, in one buffer."""
    # One growing buffer, each chunk freed as soon as it is copied: a list of chunks
    # joined at the end would leave tens of megabytes of holes in the heap.
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
    return bytes(body)
