"""Per-request bookkeeping that the hashing hooks update and the middleware reads.

The middleware opens a :class:`RequestStats` for each HTTP request in a
context variable. Starlette runs sync endpoints in a thread pool with a copy of
the context, so the same mutable object is reached from the worker thread:
the observer counts into it, and the middleware reads the totals when the
response ends (for example to count requests that carried an EXIF fallback).

The same object is the request's log context: :func:`mmobs.observability.logs.add_request_context`
reads ``request_id`` and ``route`` from it when an event is logged, which
costs nothing on requests that log nothing (binding structlog contextvars
per request cost more than the rest of the middleware's bookkeeping).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(slots=True)
class RequestStats:
    """What happened to images during one request."""

    request_id: str
    route: str
    images: int = 0
    exif_fallbacks: int = 0
    bad_images: int = 0
    #: The reason of the last input refused during the request, if any.
    bad_image_reason: str | None = None


current_request: contextvars.ContextVar[RequestStats | None] = contextvars.ContextVar("mmobs_request", default=None)
