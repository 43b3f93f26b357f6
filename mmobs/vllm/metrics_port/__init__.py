"""``MMOBS_METRICS_PORT``: the series no vLLM ``/metrics`` reads, from whichever vLLM process counts them, on a port.

vLLM's ``/metrics`` carries what its API server's registry holds, so the plugin's series reach it
only from the Python API server. The engine core's series (:mod:`mmobs.vllm.engine_items`) live in a
process no vLLM scrape reads, and with the Rust front end (``VLLM_USE_RUST_FRONTEND=1``)
``/metrics`` is served by ``vllm-rs``, which reads no Python registry at all.

With ``MMOBS_METRICS_PORT=<port>`` set, the first vLLM process the plugin loads in (``vllm serve``'s
own) serves ``/metrics`` on that port, and every other vLLM process with series of that kind (the
engine core) answers it on a Unix socket (:mod:`~mmobs.vllm.metrics_port.peers`): each scrape asks
each live process and sums their series (:mod:`~mmobs.vllm.metrics_port.merge`), as
prometheus_client's multiprocess mode would, without setting ``PROMETHEUS_MULTIPROC_DIR`` under
vLLM's own metrics. What each process adds is :func:`mmobs.vllm.plugin._port_series`'s: a series is
on vLLM's ``/metrics`` or on the port, never both.
"""
