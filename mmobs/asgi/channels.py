"""The ASGI channels as the middleware watches them: what the app sends, what it reads.

:class:`ResponseWatch` sits on ``send``: the status, when the first and the
last body bytes left and how many, and the request id header appended to the
response. :class:`CountingReceive` sits on ``receive`` for a request that
declared no length, counting the body bytes the app reads. One small object a
request each, with ``__slots__``: the hottest path of the middleware.
"""

from __future__ import annotations

from time import perf_counter

from starlette.types import Message, Receive, Send


class ResponseWatch:
    """What the app sends, seen through ``send``: the status, when the first and last body bytes left, how many.

    Also appends the request id header. One object a request (a closure
    would make a cell per variable it shares).
    """

    __slots__ = ("_header", "_send", "finished", "first_byte", "sent", "status")

    def __init__(self, send: Send, header: tuple[bytes, bytes]) -> None:
        self._send, self._header = send, header
        self.status = self.sent = 0
        self.first_byte = self.finished = 0.0

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            now = perf_counter()  # one clock read serves a body that is both the first and the last
            body = message.get("body", b"")
            if body:
                self.sent += len(body)
                if not self.first_byte:
                    self.first_byte = now
            if not message.get("more_body", False):
                self.finished = now
                if not self.first_byte:
                    self.first_byte = now
        elif message["type"] == "http.response.start":
            self.status = message["status"]
            # "headers" is optional in ASGI and may be any iterable; the app's
            # own list (a Response's raw_headers) is never modified in place.
            headers = message.get("headers", ())
            name = self._header[0]
            for present, _ in headers:
                if present.lower() == name:
                    break
            else:
                message["headers"] = [*headers, self._header]
        await self._send(message)


class CountingReceive:
    """``receive`` counting the body bytes the app reads (for a request that declared no length)."""

    __slots__ = ("_receive", "received")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.received = 0

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
        return message
