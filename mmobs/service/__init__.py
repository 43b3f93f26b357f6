"""The reference service that ``mmobs serve`` runs: the middleware on a hashing API.

:mod:`~mmobs.service.app` builds the Starlette application from a
:class:`~mmobs.service.config.ServiceConfig`; requests are parsed by
:mod:`~mmobs.service.hash_request`, remote images fetched by
:mod:`~mmobs.service.fetch`, and images decoded in worker processes
(:mod:`~mmobs.service.decode_pool`, :mod:`~mmobs.service.decode_worker`,
speaking :mod:`~mmobs.service.wire` and reporting back through
:mod:`~mmobs.service.relay`). :mod:`~mmobs.service.http_guard` protects uvicorn
from idle and slow clients; :mod:`~mmobs.service.metrics_server` serves
``/metrics`` on a port of its own. A sibling of :mod:`mmobs.vllm`: neither
imports the other.
"""

__all__: list[str] = []
