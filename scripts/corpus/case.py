"""Corpus cases: one input, how it is sent, and the answer the service must give."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: Limits of the service the corpus is written for (``tests/service/test_corpus.py``).
IMAGE_MAX_PIXELS = 50_000_000
IMAGE_MAX_BYTES = 1024 * 1024
BODY_MAX_BYTES = 2 * 1024 * 1024
SERVE_ARGS: tuple[str, ...] = (
    "--max-pixels", str(IMAGE_MAX_PIXELS),
    "--max-image-bytes", str(IMAGE_MAX_BYTES),
    "--max-body-bytes", str(BODY_MAX_BYTES),
    "--log-level", "warning",
    # Remote fetching on (for a host nothing resolves), so URLs go through the fetcher's parser.
    "--allow-remote-host", "images.invalid",
)  # fmt: skip

Kind = Literal["image", "url", "request"]
OK = "ok"
ERROR = "error"
NOT_5XX = "not_5xx"


@dataclass(frozen=True)
class Case:
    """One input and what the service must answer.

    ``payload`` is the encoded image (``image``), the URL string (``url``) or
    the raw HTTP body (``request``, sent with ``content_type`` and
    ``headers``). ``transport`` says how a request is sent: ``httpx`` (an
    ordinary client request), ``chunked`` (no Content-Length, the body in
    64 KiB pieces), ``socket`` (written verbatim on a raw socket, so headers a
    client library would refuse, like a lying Content-Length, go out as
    given) or ``trickle`` (like ``socket``, in 4 KiB pieces, polling for an
    early answer, the way a slow client sends) or ``cut`` (like ``socket``,
    but the body stops short of its Content-Length and the client half-closes
    the connection: an upload the client gave up on).
    """

    name: str
    kind: Kind
    payload: bytes | str
    expect: tuple
    note: str = ""
    media_type: str = "image/jpeg"
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())
    transport: Literal["httpx", "chunked", "socket", "trickle", "cut"] = "httpx"
    path: str = "/v1/hash"
    method: str = "POST"

    @property
    def only_not_5xx(self) -> bool:
        """The answer depends on how TCP splits the bytes: only "no 5xx" is asserted."""
        return self.expect[0] == NOT_5XX

    @property
    def ok(self) -> bool:
        return self.expect[0] == OK

    @property
    def fallback(self) -> bool:
        return self.ok and bool(self.expect[1])

    @property
    def status(self) -> int | None:
        return 200 if self.ok else None if self.only_not_5xx else self.expect[1]

    @property
    def code(self) -> str | None:
        return None if self.ok or self.only_not_5xx else self.expect[2]

    @property
    def reason(self) -> str | None:
        return None if self.ok or self.only_not_5xx else self.expect[3]


def ok(fallback: bool) -> tuple:
    return (OK, fallback)


def bad(reason: str) -> tuple:
    return (ERROR, 400, "bad_image", reason)


def refused(status: int, code: str | None) -> tuple:
    return (ERROR, status, code, None)
