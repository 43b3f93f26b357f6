"""The ``mmobs`` command line: every subcommand's options, their checks and their help.

One builder per subcommand, each given a factory for its parser so that every
subcommand shares the help format. Parsing only: each subcommand's parser
names its handler (``handler`` in the parsed namespace), which lives in the
subcommand's own module; :func:`mmobs.cli.main` calls it. The option values
are checked here, as argparse reads them, so a bad value is a usage error
(exit code 2) that names the option. ``serve``'s defaults are
:class:`~mmobs.service.config.ServiceConfig`'s, read without loading a web
stack.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mmobs._version import __version__
from mmobs.cli.fingerprint_command import run_fingerprint
from mmobs.cli.hash_command import run_hash
from mmobs.cli.inspect_command import run_inspect
from mmobs.cli.log_commands import run_events, run_vllm_logging_config
from mmobs.cli.serve_command import run_serve
from mmobs.keys.hashing import ALGORITHMS
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.raw_bytes import FRONT_ENDS
from mmobs.releases import NEWEST, key_format
from mmobs.service.config import ServiceConfig

#: Makes one subcommand's parser from its name and its one-line help (also its description).
NewCommand = Callable[[str, str], argparse.ArgumentParser]


# -- option values ------------------------------------------------------------------
# argparse names a type function in its "invalid ... value" message (``invalid
# _positive value: 'abc'``): these names are part of the command's messages.


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive integer, not {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _image_mode(text: str) -> str:
    try:
        return ImageMediaIO(image_mode=text).image_mode or text
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _vllm_version(text: str) -> str:
    try:
        key_format(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _otlp_endpoint(text: str) -> str:
    from mmobs.service.tracing_setup import MISSING_PACKAGES_HINT, missing_packages, validate_endpoint

    try:
        url = validate_endpoint(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    missing = missing_packages()
    if missing:
        raise argparse.ArgumentTypeError(f"needs {', '.join(missing)}, which is not installed: {MISSING_PACKAGES_HINT}")
    return url


def _formats(text: str) -> tuple[str, ...] | None:
    if text.strip().lower() == "any":
        return None
    try:
        return ImageMediaIO(formats=[f.strip() for f in text.split(",") if f.strip()]).formats
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default after its help, as a person writes it: off, none, a comma-joined list."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if isinstance(action, (argparse._VersionAction, argparse._HelpAction)):
            return text
        default = action.default
        if default is None or default is False:
            shown = "off"
        elif default is True:
            shown = "on"
        elif isinstance(default, (list, tuple)):
            shown = ",".join(map(str, default)) or "none"
        else:
            shown = str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


# -- the command ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; its subcommands in the order ``mmobs --help`` lists them."""
    parser = argparse.ArgumentParser(
        prog="mmobs", description="vLLM-compatible multimodal cache keys, with observability."
    )
    parser.add_argument("--version", action="version", version=f"mmobs {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)

    for add in (_add_hash, _add_inspect, _add_fingerprint, _add_events, _add_vllm_logging_config, _add_serve):
        add(command)
    return parser


def _add_hash(command: NewCommand) -> None:
    hash_parser = command("hash", "print each file's cache key and how it was derived")
    hash_parser.add_argument("files", nargs="+", metavar="FILE", help="image files to key")
    hash_parser.add_argument("--algorithm", choices=ALGORITHMS, default="blake3", help="the digest of the key")
    hash_parser.add_argument("--image-mode", type=_image_mode, default="RGB", help="mode the loader converts to")
    hash_parser.add_argument(
        "--vllm-version",
        type=_vllm_version,
        default=NEWEST,
        help="key as this vLLM release keys (its key format: mmobs.releases)",
    )
    hash_parser.add_argument(
        "--front-end",
        choices=FRONT_ENDS,
        default="python",
        help="whose key: vLLM's Python front end's, or its Rust front end's (the bytes' digest; vLLM 0.33 and 0.34)",
    )
    hash_parser.add_argument("--json", action="store_true", help="one JSON object per line")
    hash_parser.add_argument(
        "--no-decode",
        action="store_true",
        help="key from the header, decoding only where it cannot decide (as POST /v1/keys)",
    )
    hash_parser.set_defaults(handler=run_hash)


def _add_inspect(command: NewCommand) -> None:
    inspect_parser = command("inspect", "explain a file's EXIF on every load path")
    inspect_parser.add_argument("file", metavar="FILE", help="the image file to explain")
    inspect_parser.add_argument("--json", action="store_true", help="the report as one JSON document")
    inspect_parser.set_defaults(handler=run_inspect)


def _add_fingerprint(command: NewCommand) -> None:
    fingerprint_parser = command("fingerprint", "print this install's fleet fingerprint")
    fingerprint_parser.add_argument("--json", action="store_true", help="the digest and every reference key as JSON")
    fingerprint_parser.add_argument(
        "--vllm-version",
        type=_vllm_version,
        default=NEWEST,
        help="the fingerprint of a process keying as this vLLM release (mmobs serve --vllm-version, the plugin in it)",
    )
    fingerprint_parser.add_argument(
        "--front-end",
        choices=FRONT_ENDS,
        default="python",
        help="the fingerprint of a vLLM whose front end is this one (rust: VLLM_USE_RUST_FRONTEND=1)",
    )
    fingerprint_parser.set_defaults(handler=run_fingerprint)


def _add_events(command: NewCommand) -> None:
    events_parser = command(
        "events", "print a log's records as JSON lines, whichever format wrote it (mmobs's JSON, vLLM's text or JSON)"
    )
    events_parser.add_argument("files", nargs="*", metavar="FILE", help="log files ('-' or none: standard input)")
    events_parser.add_argument(
        "--event", action="append", metavar="NAME", help="only records of this event (repeatable)"
    )
    events_parser.set_defaults(handler=run_events)


def _add_vllm_logging_config(command: NewCommand) -> None:
    vllm_logging = command(
        "vllm-logging-config",
        "print mmobs's JSON logging config for vLLM (save it, point VLLM_LOGGING_CONFIG_PATH at it)",
    )
    vllm_logging.set_defaults(handler=run_vllm_logging_config)


# -- mmobs serve: its options in the order --help lists them ------------------------------


def _add_serve(command: NewCommand) -> None:
    defaults = ServiceConfig()
    serve = command("serve", "run the reference service (POST /v1/hash, GET /metrics)")
    _add_server_options(serve, defaults)
    _add_request_limits(serve, defaults)
    _add_metrics_options(serve, defaults)
    _add_fetch_options(serve)
    _add_connection_options(serve, defaults)
    _add_decode_options(serve, defaults)
    serve.add_argument(
        "--otlp-endpoint",
        type=_otlp_endpoint,
        default=None,
        metavar="URL",
        help="export OpenTelemetry spans (each request's, and its images' fetch, load and key) to this "
        "OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces (needs mmobs[otel])",
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="also let uvicorn log every request (in the same format, with the request id)",
    )
    serve.set_defaults(handler=run_serve)


def _add_server_options(serve: argparse.ArgumentParser, defaults: ServiceConfig) -> None:
    """Where the service listens, in how many processes, and how it logs."""
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument(
        "--workers", type=_positive, default=1, help="server processes; above 1 the metrics are summed over all of them"
    )
    serve.add_argument(
        "--log-format",
        choices=("json", "console"),
        default="json",
        help="json: one object a line on stderr, uvicorn's records and warnings included; console: for people",
    )
    serve.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info", help="the lowest level logged"
    )
    serve.add_argument(
        "--request-log",
        action=argparse.BooleanOptionalAction,
        default=defaults.request_log,
        help="one canonical http_request line per request (request id, route, status, duration, "
        "images, fallbacks, bad-image reason)",
    )


def _add_request_limits(serve: argparse.ArgumentParser, defaults: ServiceConfig) -> None:
    """How large a request and its images may be, and which formats are opened."""
    serve.add_argument(
        "--max-body-bytes",
        type=_positive,
        default=defaults.max_body_bytes,
        metavar="B",
        help="largest request body; above it: 413",
    )
    serve.add_argument(
        "--max-images", type=_positive, default=defaults.max_images, metavar="N", help="most images in one request"
    )
    serve.add_argument(
        "--max-pixels",
        type=_positive,
        default=defaults.max_pixels,
        metavar="P",
        help="most pixels (width x height) of one image; above it: too_many_pixels",
    )
    serve.add_argument(
        "--max-image-bytes",
        type=_positive,
        default=defaults.max_image_bytes,
        metavar="B",
        help="largest encoded image; above it: too_large",
    )
    serve.add_argument(
        "--image-formats",
        type=_formats,
        default=defaults.image_formats,
        metavar="FMT,FMT|any",
        help="Pillow formats to open ('any' for all)",
    )
    serve.add_argument(
        "--vllm-version",
        type=_vllm_version,
        default=NEWEST,
        help="key as this vLLM release keys (its key format: mmobs.releases)",
    )


def _add_metrics_options(serve: argparse.ArgumentParser, defaults: ServiceConfig) -> None:
    """Where the metrics are served, and who may read them."""
    serve.add_argument("--metrics-path", default=defaults.metrics_path, help="where the metrics are served")
    serve.add_argument("--no-metrics", action="store_true", help="do not serve metrics")
    serve.add_argument(
        "--metrics-port",
        type=_positive,
        default=None,
        metavar="P",
        help="serve the metrics on this port instead of --metrics-path",
    )
    serve.add_argument(
        "--metrics-token",
        default=None,
        metavar="T",
        help="require this bearer token on the metrics (or MMOBS_METRICS_TOKEN)",
    )


def _add_fetch_options(serve: argparse.ArgumentParser) -> None:
    """Which remote image URLs the service may fetch (none unless allowed)."""
    serve.add_argument(
        "--allow-remote-host",
        action="append",
        default=[],
        metavar="HOST",
        help="allow fetching http(s) image URLs from HOST (repeatable)",
    )
    serve.add_argument(
        "--fetch-allow-private",
        action="store_true",
        help="let remote fetches reach private/loopback addresses (testing only)",
    )


def _add_connection_options(serve: argparse.ArgumentParser, defaults: ServiceConfig) -> None:
    """The connection guard: how many connections, and how long a client may take to send a request."""
    serve.add_argument(
        "--limit-concurrency",
        type=_positive,
        default=defaults.max_connections,
        metavar="N",
        help="open connections per server process; at the cap a new connection "
        "closes the oldest one that has no request being answered",
    )
    serve.add_argument(
        "--header-timeout",
        type=_positive_float,
        default=defaults.header_timeout_seconds,
        metavar="S",
        help="seconds a connection has to send a request's headers, from its opening or its previous response "
        "(a kept-alive connection's idle limit)",
    )
    serve.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=defaults.body_timeout_seconds,
        metavar="S",
        help="seconds a request has to send its whole body",
    )


def _add_decode_options(serve: argparse.ArgumentParser, defaults: ServiceConfig) -> None:
    """The decode workers and the budgets decoding runs under."""
    serve.add_argument(
        "--decode-workers",
        type=_non_negative,
        default=defaults.decode_workers,
        metavar="N",
        help="decode worker processes per server process (0 decodes in the "
        "server process, without CPU or memory limits)",
    )
    serve.add_argument(
        "--max-request-cpu-seconds",
        type=_positive_float,
        default=defaults.max_request_cpu_seconds,
        metavar="S",
        help="CPU time one request's decoding and keying may use; beyond it the image is refused as too_costly",
    )
    serve.add_argument(
        "--max-decode-memory-mib",
        type=_positive,
        metavar="MIB",
        default=defaults.max_decode_memory_bytes >> 20,
        help="memory decoding one image may use; beyond it: too_costly",
    )
    serve.add_argument(
        "--decode-queue",
        type=_positive,
        default=defaults.decode_queue,
        metavar="N",
        help="requests that may wait for a decode worker; beyond it: 503",
    )
    serve.add_argument(
        "--decode-queue-timeout",
        type=_positive_float,
        metavar="S",
        default=defaults.decode_queue_timeout_seconds,
        help="seconds a request may wait for a decode worker; then 503",
    )
