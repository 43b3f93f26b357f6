"""One request's passage through vLLM's sender cache (P0): what it put there, and whether the engine took it.

vLLM's API server updates its sender cache while it renders a request (each
new item's metadata goes in, and from then on the item is sent by hash
alone) and refuses some requests only afterwards: a prompt longer than the
context once the image tokens are in, a full queue, bad sampling
parameters. Such a request never reaches the engine, so its items stay in
P0 and not in P1, and the next request that carries one of them is sent by
hash to an engine that never saw it: a drift miss, a 500, for somebody else.

An :class:`Attempt` lives in a context variable for the duration of one
request (set by :mod:`mmobs.vllm.cache_drift.cache_heal`; vLLM's executor threads see it
because the plugin runs them in a copy of the request's context). The sender
cache records into it the hashes it inserted for this request; sending the
request to the engine marks it taken; :func:`roll_back` takes the inserted
hashes out of P0 again when the request ends refused before that.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mmobs.observability.context import current_request
from mmobs.vllm.cache_drift.drift import DriftBook


@dataclass
class Attempt:
    """The sender-cache bookkeeping of one request (and of its one resubmission, if drift failed it)."""

    #: vLLM's request id (``chatcmpl-...``) once known, for the log.
    request_id: str | None = None
    #: The sender cache ``inserted`` refers to (vLLM has one per API server).
    cache: Any = None
    #: Hashes this request put into the sender cache that were not there before.
    inserted: list[str] = field(default_factory=list)
    #: Whether the request was handed to the engine (its items are then P1's as well).
    taken: bool = False
    #: Renders the request again (fresh media, fresh sender-cache lookups); None where a path cannot.
    rerender: Callable[[], Awaitable[Any]] | None = None
    #: Drift failures seen (a sender-cache miss, an engine miss).
    drifts: int = 0
    #: A request is resubmitted once at most.
    resubmitted: bool = False
    #: The resubmission sends every item with its data, whatever the sender cache believes.
    resend: bool = False
    resolved: bool = False

    def restart(self) -> None:
        """A resubmission starts with nothing inserted and nothing taken, and relies on no cached item.

        Resubmitted by hash, an item could drift again (another request may
        have changed either cache meanwhile, or the request's own items may
        not fit together); with every item's data it cannot.
        """
        self.inserted = []
        self.taken = False
        self.resend = True

    def resolve(self, book: DriftBook, outcome: Literal["healed", "failed"]) -> None:
        """Count what became of a drift-failed request, once (several paths may see the end)."""
        if self.drifts and not self.resolved:
            self.resolved = True
            book.resolved(self.request_id, outcome, 2 if self.resubmitted else 1)


current_attempt: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("mmobs_vllm_attempt", default=None)


def request_id_now() -> str | None:
    """The current request's id for a log line: vLLM's (``chatcmpl-...``) where an attempt knows it, else the
    ``X-Request-Id`` the preset set and the client got back (healing off, or a route without an attempt)."""
    attempt = current_attempt.get()
    if attempt is not None and attempt.request_id:
        return attempt.request_id
    stats = current_request.get()
    return stats.request_id if stats is not None else None


def roll_back(attempt: Attempt, book: DriftBook, reason: str) -> int:
    """Take out of the sender cache what a request put there, unless the engine took the request.

    vLLM's own ``invalidate`` (the recovery path of its drift misses) drops
    each hash. An entry that another request inserted again since is dropped
    too: that direction is safe (P0 then resends data the engine has, one
    extra transfer), the other one (P0 believing in an entry P1 lacks) is
    the failure this prevents. Returns how many hashes were taken out.
    """
    if attempt.taken or not attempt.inserted or attempt.cache is None:
        return 0
    hashes, attempt.inserted = attempt.inserted, []
    for mm_hash in hashes:
        attempt.cache.invalidate(mm_hash)
    book.rolled_back(attempt.request_id, len(hashes), reason)
    return len(hashes)
