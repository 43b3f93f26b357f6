"""The reference service that ``mmobs serve`` runs: the middleware on a hashing API.

:mod:`~mmobs.service.serve` starts it: the parsed options
(:mod:`~mmobs.service.serve_options`) become the
:class:`~mmobs.service.config.ServiceConfig` and uvicorn's options, and the
process gets its open-files limit and metrics directory
(:mod:`~mmobs.service.process_setup`). :mod:`~mmobs.service.app` builds the
Starlette application; :mod:`~mmobs.service.hash_service` answers its
requests, read by :mod:`~mmobs.service.request_reader` (bodies bounded by
:mod:`~mmobs.service.request_body`, JSON parsed by
:mod:`~mmobs.service.hash_request`), remote images fetched by
:mod:`~mmobs.service.fetch` (:mod:`~mmobs.service.request_image`), and images
decoded in worker processes (:mod:`~mmobs.service.decode_pool`,
:mod:`~mmobs.service.decode_worker`, speaking :mod:`~mmobs.service.wire` and
reporting back through :mod:`~mmobs.service.relay`; their answers read by
:mod:`~mmobs.service.decode_outcome`). Errors are answered by
:mod:`~mmobs.service.error_responses`. :mod:`~mmobs.service.http_guard`
protects uvicorn from idle and slow clients; :mod:`~mmobs.asgi.metrics_server`
serves ``/metrics`` on a port of its own. A sibling of :mod:`mmobs.vllm`:
neither imports the other.
"""
