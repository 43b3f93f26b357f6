"""The bearer token a metrics listener requires: compared in constant time, and every refusal counted.

One scheme for every place mmobs serves metrics: ``mmobs serve``'s ``/metrics`` and its
``--metrics-port``, the middleware's ``metrics_path``, and vLLM's ``MMOBS_METRICS_PORT``. A refused
request gets a 401 that says only that a bearer token is required (never whether the one sent was
close), and ``mmobs_metrics_unauthorized_total{credentials}`` counts it: ``missing`` (no bearer
token: a scanner, or a scrape job without its secret) or ``wrong`` (a token that does not match: a
rotated secret, or someone guessing).
"""

from __future__ import annotations

import hmac
import threading
import weakref
from typing import Literal, get_args

from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry

from mmobs.asgi.http_errors import error_body
from mmobs.observability.metrics import MetricSpec

#: The token's variable, for every listener that takes one from the environment (``mmobs serve``, vLLM's port).
TOKEN_ENV = "MMOBS_METRICS_TOKEN"

Credentials = Literal["missing", "wrong"]
CREDENTIALS: tuple[str, ...] = get_args(Credentials)

UNAUTHORIZED = MetricSpec(
    "unauthorized", Counter, "mmobs_metrics_unauthorized_total",
    "Requests a metrics listener refused with a 401, by what they carried: missing (no bearer token) or wrong "
    "(another token).", ("credentials",),
)  # fmt: skip

#: The 401's body and header, the same for a missing and a wrong token.
UNAUTHORIZED_BODY = error_body(
    "the metrics endpoint requires 'Authorization: Bearer <token>'", code="unauthorized", type="authentication_error"
)
CHALLENGE = 'Bearer realm="metrics"'

_counters: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def unauthorized_counter(registry: CollectorRegistry) -> Counter:
    """The registry's one ``mmobs_metrics_unauthorized_total`` (two listeners on one registry share it)."""
    with _lock:
        counter = _counters.get(registry)
        if counter is None:
            counter = _counters[registry] = UNAUTHORIZED.build(registry)
            for credentials in CREDENTIALS:
                counter.labels(credentials)
        return counter


class BearerToken:
    """``Authorization: Bearer <token>`` checked against one token; refusals counted in ``registry``."""

    def __init__(self, token: str, registry: CollectorRegistry) -> None:
        if not token:
            raise ValueError("the metrics token must not be empty")
        self._token = token.encode()
        counter = unauthorized_counter(registry)
        self._refused = {credentials: counter.labels(credentials) for credentials in CREDENTIALS}

    def admits(self, authorization: str) -> bool:
        """Whether the header carries the token; a refusal is counted by what it carried."""
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            self._refused["missing"].inc()
            return False
        if not hmac.compare_digest(credentials.strip().encode(), self._token):
            self._refused["wrong"].inc()
            return False
        return True
