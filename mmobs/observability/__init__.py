"""What mmobs sees: the observer behind :mod:`mmobs.events`, its metrics, logs and drift checks.

:mod:`~mmobs.observability.instrument` is the default observer: it turns the
keys core's events into Prometheus series (:mod:`~mmobs.observability.metrics`),
structlog or stdlib log events (:mod:`~mmobs.observability.logs`,
:mod:`~mmobs.observability.stdlib_events`) and drift samples
(:mod:`~mmobs.observability.drift`, :mod:`~mmobs.observability.fingerprint`).
It imports the keys core and the seam, never the HTTP layers above it; the
per-request bookkeeping they share lives in :mod:`~mmobs.observability.context`.
"""
