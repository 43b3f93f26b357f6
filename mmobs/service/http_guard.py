"""uvicorn's HTTP/1.1 protocol with what it lacks against idle and slow clients.

uvicorn has no deadline for a request's headers or body, and its only cap
(``limit_concurrency``) counts idle connections too: 1,024 sockets that never
send a byte make it answer 503 to everybody for as long as they stay open,
and those 503s never pass through the application, so no metric sees them.
Hypercorn has an optional read timeout and no cap; Granian has a header
timeout and a request cap (idle connections again hold it) but replaces the
whole server, its process model and its HTTP error handling. So the service
keeps uvicorn (its workers, its h11 parser, the corpus's expectations) and
adds, per connection:

* a **header deadline**: a connection must deliver a request's headers
  within ``header_timeout`` seconds of opening (or of its previous response);
  a drip-fed request line does not reset it. It is a kept-alive connection's
  only idle limit: uvicorn's own keep-alive timer is cancelled. Past it, the connection is
  closed (with a ``408`` if some of a request had arrived);
* a **body deadline**: the whole body must arrive within ``body_timeout``
  seconds of the headers; past it, the connection is closed and the
  application sees the client disconnect (a 4xx in the request metrics);
* a **connection cap with eviction**: at ``max_connections`` open
  connections per server process, a new connection closes the *oldest*
  connection that has no request being answered (still idle, still sending
  headers or still uploading) rather than being refused. A flood of idle or
  slow sockets therefore costs the attacker its own connections, not
  everybody's: a real client's request, sent as soon as it connects, is
  answered. Only when every connection has a request in progress is the new
  one closed.

No answer comes from this layer except that ``408``: it produces no 5xx, so
every 503 the service gives is the application's own (decode line full,
memory), counted in ``mmobs_http_requests_total``. What it sheds is logged,
at most every 10 seconds, as one ``connections_shed`` event with counts.

The settings come from the service configuration (``MMOBS_SERVICE_CONFIG``,
set by ``mmobs serve`` for every worker); use it with
``uvicorn.run(..., http=GuardedH11Protocol, ws="none")`` (the class: uvicorn 0.30 resolves
a string only if it names one of its own protocols).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

from mmobs.service.config import ServiceConfig

_log = structlog.get_logger("mmobs")
_REPORT_INTERVAL = 10.0
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: 104\r\n\r\n"
    b'{"error":{"message":"the request was not sent in time","type":"invalid_request_error","code":"timeout"}}'
)
assert len(_TIMEOUT_RESPONSE.split(b"\r\n\r\n", 1)[1]) == 104


@dataclass(frozen=True)
class GuardSettings:
    """Deadlines and the connection cap of one server process."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_connections: int = 1024

    @classmethod
    def from_config(cls, config: ServiceConfig) -> GuardSettings:
        return cls(config.header_timeout_seconds, config.body_timeout_seconds, config.max_connections)


class _Guard:
    """The open connections of one server, oldest first, and what was shed."""

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self.connections: dict[GuardedH11Protocol, None] = {}
        self.shed: Counter[str] = Counter()
        self._reported = 0.0
        self._report: asyncio.TimerHandle | None = None

    def admit(self, protocol: GuardedH11Protocol) -> bool:
        if len(self.connections) >= self.settings.max_connections:
            victim = next((p for p in self.connections if p.evictable), None)
            if victim is None:
                self.note("refused")
                return False
            victim.shed("evicted")
        self.connections[protocol] = None
        return True

    def forget(self, protocol: GuardedH11Protocol) -> None:
        self.connections.pop(protocol, None)

    def note(self, reason: str) -> None:
        """Count a shed connection; log the counts at most every ``_REPORT_INTERVAL`` seconds."""
        self.shed[reason] += 1
        if self._report is None:
            wait = max(0.0, self._reported + _REPORT_INTERVAL - time.monotonic())
            self._report = asyncio.get_running_loop().call_later(wait, self._flush)

    def _flush(self) -> None:
        self._report = None
        self._reported = time.monotonic()
        if self.shed:
            _log.warning("connections_shed", open=len(self.connections), **dict(sorted(self.shed.items())))
            self.shed.clear()


_guards: weakref.WeakKeyDictionary[Any, _Guard] = weakref.WeakKeyDictionary()


class GuardedH11Protocol(H11Protocol):
    """``H11Protocol`` with header and body deadlines and a connection cap that evicts idle connections."""

    #: Overrides the service configuration (tests, embedding).
    settings: ClassVar[GuardSettings | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        guard = _guards.get(self.server_state)
        if guard is None:
            settings = type(self).settings or GuardSettings.from_config(ServiceConfig.from_env())
            guard = _guards[self.server_state] = _Guard(settings)
        self._guard = guard
        self._phase: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._phase_bytes = 0

    # -- uvicorn's hooks --------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self._guard.admit(self):
            transport.close()
            return
        self._follow()

    def data_received(self, data: bytes) -> None:
        self._phase_bytes += len(data)
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # One idle limit, the header deadline: uvicorn's own keep-alive timer (5 s by default) would close
        # first, at the very moment a pooled client reuses the connection (httpx, and the openai client
        # over it, keeps idle connections for 5 s too), and the request is reset unanswered.
        self._unset_keepalive_if_required()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.forget(self)
        self._cancel()
        super().connection_lost(exc)

    # -- the guard -------------------------------------------------------------------

    @property
    def evictable(self) -> bool:
        """No request is being answered: the connection is idle, sending headers or uploading."""
        return self._phase is not None

    def shed(self, reason: str) -> None:
        self._guard.note(reason)
        self._cancel()
        self._phase = None
        if not self.transport.is_closing():
            self.transport.close()

    def _follow(self) -> None:
        """Start the deadline of the phase the connection is in now (once per phase)."""
        state = self.conn.their_state
        if self.transport is None or self.transport.is_closing():
            phase = None
        elif state is h11.IDLE:
            phase = "headers"
        elif state is h11.SEND_BODY:
            phase = "body"
        else:
            phase = None
        if phase == self._phase:
            return
        self._cancel()
        self._phase = phase
        if phase == "headers":
            self._phase_bytes = 0
            self._timer = self.loop.call_later(self._guard.settings.header_timeout, self._expire, phase)
        elif phase == "body":
            self._timer = self.loop.call_later(self._guard.settings.body_timeout, self._expire, phase)

    def _expire(self, phase: str) -> None:
        self._timer = None
        if self._phase != phase or self.transport.is_closing():
            return
        if phase == "headers" and self._phase_bytes and self.conn.our_state is h11.IDLE:
            self.transport.write(_TIMEOUT_RESPONSE)
        self.shed(f"{phase}_timeout")

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
