"""``mmobs serve`` once its options are parsed: set the process up, then run uvicorn on the service.

The order matters and is kept in one place: logging is configured before
anything can log, the connection cap is settled against the open-files limit
before the settings are written for the workers (``MMOBS_SERVICE_CONFIG``,
read by :func:`mmobs.service.app.create_app` in each of them), and with
several workers the shared metrics directory exists before the first worker
starts, and is removed after the last one stops if it was made here.

The module imports uvicorn when it is imported: that import is how the CLI
learns that the ``serve`` extra is missing, and names it.
"""

from __future__ import annotations

import os
import shutil

import structlog
import uvicorn

from mmobs.observability.logs import configure_logging
from mmobs.service.config import CONFIG_ENV, ServiceConfig
from mmobs.service.process_setup import MULTIPROCESS_DIR_ENV, prepare_multiprocess_dir, raise_open_files_limit
from mmobs.service.serve_options import ServeOptions

#: The application factory each worker process calls (uvicorn imports it there by name).
_APP_FACTORY = "mmobs.service.app:create_app"


def serve(options: ServeOptions) -> None:
    """Run the reference service until uvicorn stops (a signal); the metrics server, if asked, beside it."""
    # Before anything logs: mmobs's events, uvicorn's records, warnings, one format.
    configure_logging(options.log_format, options.log_level)
    config = options.service_config(raise_open_files_limit(options.limit_concurrency))
    os.environ[CONFIG_ENV] = config.to_env()
    if options.workers <= 1:
        _serve_in_this_process(options, config)
    else:
        _serve_in_workers(options, config)


def _serve_in_this_process(options: ServeOptions, config: ServiceConfig) -> None:
    from mmobs.service.app import create_app  # the web stack, loaded once the process is set up

    app = create_app(config)
    _start_metrics_server(options, config)
    uvicorn.run(app, **options.uvicorn_options())


def _serve_in_workers(options: ServeOptions, config: ServiceConfig) -> None:
    """uvicorn's supervisor, its workers writing their metrics to one directory that any scrape sums."""
    owned_dir = prepare_multiprocess_dir()
    structlog.get_logger("mmobs").info(
        "multiprocess_metrics", workers=options.workers, directory=os.environ[MULTIPROCESS_DIR_ENV]
    )
    try:
        _start_metrics_server(options, config)
        uvicorn.run(_APP_FACTORY, factory=True, workers=options.workers, **options.uvicorn_options())
    finally:
        if owned_dir:
            shutil.rmtree(owned_dir, ignore_errors=True)


def _start_metrics_server(options: ServeOptions, config: ServiceConfig) -> None:
    """Serve the metrics on their own port (a listener only Prometheus can reach), with the same token."""
    if not options.metrics_port:
        return
    from mmobs.asgi.metrics_server import start_metrics_server

    # In multiprocess mode every scrape re-reads every worker's files.
    start_metrics_server(options.metrics_port, options.host, config.metrics_token)
