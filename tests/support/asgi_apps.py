"""Small ASGI helpers for in-process middleware tests.

* :func:`call_http` drives one HTTP request through any ASGI app without a
  client library in between and returns every message the app sent, plus the
  exception that escaped (if any), so a test can assert on the exact ASGI
  conversation (how many ``http.response.start``, the body chunks in order).
* :func:`http_scope` builds a complete HTTP connection scope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
ASGIApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


def http_scope(
    path: str,
    *,
    method: str = "GET",
    headers: Iterable[tuple[bytes, bytes]] = (),
    spec_version: str = "2.4",
) -> dict[str, Any]:
    """A complete ASGI 3 HTTP scope for ``path``."""
    raw_path, _, query = path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
        "state": {},
    }


@dataclass
class Conversation:
    """What the app sent for one request, and what escaped from it."""

    sent: list[Message] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def starts(self) -> list[Message]:
        return [m for m in self.sent if m["type"] == "http.response.start"]

    @property
    def bodies(self) -> list[Message]:
        return [m for m in self.sent if m["type"] == "http.response.body"]

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.bodies)

    @property
    def status(self) -> int:
        (start,) = self.starts
        return start["status"]

    def header(self, name: bytes) -> list[bytes]:
        (start,) = self.starts
        return [v for k, v in start.get("headers", []) if k.lower() == name.lower()]


async def call_http_async(app: ASGIApp, scope: dict[str, Any], body: bytes = b"") -> Conversation:
    """Run one request through ``app``; never raises what the app raises."""
    conversation = Conversation()
    done = asyncio.Event()
    request_sent = False

    async def receive() -> Message:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        conversation.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    try:
        await app(scope, receive, send)
    except BaseException as error:
        conversation.error = error
    finally:
        done.set()
    return conversation


def call_http(app: ASGIApp, scope: dict[str, Any], body: bytes = b"") -> Conversation:
    """Synchronous wrapper of :func:`call_http_async` (its own event loop)."""
    return asyncio.run(call_http_async(app, scope, body))
