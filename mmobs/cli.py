"""The ``mmobs`` command: hash files, explain their EXIF, print the fingerprint, read logs, serve.

Exit codes: 0 success, 1 some input could not be keyed, 2 usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Sequence
from importlib import resources
from io import BytesIO
from pathlib import Path
from typing import Any, TextIO

import structlog
from PIL import Image, ImageOps, UnidentifiedImageError

from mmobs._version import __version__
from mmobs.errors import BadImageError
from mmobs.events import RecordingObserver, get_observer, observing
from mmobs.keys.from_bytes import key_image
from mmobs.keys.hashing import ALGORITHMS, IMAGE_ID_TAG, MultiModalHasher
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.refusals import pillow_error_reason, report_bad_image
from mmobs.observability.logs import configure_logging, safe_text
from mmobs.service.config import CONFIG_ENV, ServiceConfig

__all__ = ["build_parser", "main"]

_ORIENTATION_TAG = 0x0112
_XMP_TAG = 700


# -- mmobs hash -------------------------------------------------------------------


def _hash_file(path: str, algorithm: str, io: ImageMediaIO) -> dict[str, Any]:
    """Key one file as the reference service would; a dict for printing."""
    recorder = RecordingObserver(get_observer())
    with observing(recorder):
        media = io.load_file(path)
        key = MultiModalHasher.hash_kwargs(algorithm, image=media)
    fallback = recorder.fallbacks[0] if recorder.fallbacks else None
    return {
        "file": path,
        "mm_hash": key,
        "algorithm": algorithm,
        "key_source": recorder.keyed[-1].key_source,
        "exif_fallback": fallback is not None,
        "exif_error": (f"{type(fallback.error).__name__}: {safe_text(fallback.error)}" if fallback else None),
        "exif_transpose_failed": bool(recorder.transpose_failures),
        "format": media.media.format,
        "mode": media.media.mode,
        "width": media.media.width,
        "height": media.media.height,
    }


def _key_file(path: str, algorithm: str, io: ImageMediaIO) -> dict[str, Any]:
    """Key one file from its header, as ``POST /v1/keys`` would; a dict for printing."""
    size = os.stat(path).st_size
    if size > io.max_bytes:  # as load_file: refused before reading
        message = f"the image is {size} bytes, above the limit of {io.max_bytes} bytes"
        raise report_bad_image(BadImageError("too_large", message))
    with open(path, "rb") as handle:
        found = key_image(io, handle.read(io.max_bytes + 1), algorithm)
    return {
        "file": path,
        "mm_hash": found.key,
        "algorithm": algorithm,
        "key_source": "original_bytes",
        "key_path": found.key_path,
        "decoded_because": found.decoded_because,
        "format": found.format,
        "header_mode": found.header_mode,
        "width": found.size[0],
        "height": found.size[1],
    }


class _Progress:
    """A one-line progress bar on a terminal; silent elsewhere."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.enabled = total > 1 and stream.isatty()

    def update(self, done: int) -> None:
        if self.enabled:
            filled = int(30 * done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")


def _cmd_hash(args: argparse.Namespace) -> int:
    io = ImageMediaIO(image_mode=args.image_mode)
    failures = 0
    progress = _Progress(len(args.files), sys.stderr)
    for done, path in enumerate(args.files, 1):
        try:
            result = _key_file(path, args.algorithm, io) if args.no_decode else _hash_file(path, args.algorithm, io)
        except BadImageError as error:
            failures += 1
            _print_failure(args, path, error.reason, error.message)
        except OSError as error:
            failures += 1
            _print_failure(args, path, "unreadable", f"cannot read the file: {error.strerror or error}")
        else:
            if args.json:
                print(json.dumps(result), flush=True)
            elif args.no_decode:
                why = f" ({result['decoded_because']})" if result["decoded_because"] else ""
                print(
                    f"{result['mm_hash']}  {path}\n"
                    f"    key_source=original_bytes key_path={result['key_path']}{why}\n"
                    f"    format={result['format']} header_mode={result['header_mode']} "
                    f"size={result['width']}x{result['height']}",
                    flush=True,
                )
            else:
                why = f" ({result['exif_error']})" if result["exif_error"] else ""
                print(
                    f"{result['mm_hash']}  {path}\n"
                    f"    key_source={result['key_source']} exif_fallback={str(result['exif_fallback']).lower()}{why}\n"
                    f"    format={result['format']} mode={result['mode']} size={result['width']}x{result['height']}",
                    flush=True,
                )
        progress.update(done)
    progress.close()
    return 1 if failures else 0


def _print_failure(args: argparse.Namespace, path: str, reason: str, message: str) -> None:
    if args.json:
        print(json.dumps({"file": path, "error": {"reason": reason, "message": message}}), flush=True)
    print(f"mmobs: {path}: {reason}: {message}", file=sys.stderr, flush=True)


# -- mmobs inspect ------------------------------------------------------------------


def _read_exif(image: Image.Image) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exif = image.getexif()
            image_id = exif.get(IMAGE_ID_TAG)
            result: dict[str, Any] = {
                "raises": None,
                "tags": len(exif),
                "orientation": exif.get(_ORIENTATION_TAG),
                "image_id": None if image_id is None else safe_text(image_id, 80),
                "image_id_type": None if image_id is None else type(image_id).__name__,
            }
        except Exception as error:  # noqa: BLE001 - reporting it is the point
            result = {"raises": f"{type(error).__name__}: {safe_text(error)}"}
    result["warnings"] = [safe_text(w.message) for w in caught]
    return result


def _inspect_file(path: str) -> dict[str, Any]:
    """How reading this file's EXIF behaves on each path an image takes."""
    data = Path(path).read_bytes()
    report: dict[str, Any] = {"file": path, "bytes": len(data), "exif_segment_bytes": None, "paths": {}}

    def fresh() -> Image.Image:
        return Image.open(BytesIO(data))

    try:
        opened = fresh()
    except Exception as error:  # noqa: BLE001 - reported as the file's one problem
        report["unopened"] = _unopened(error)
        return report
    report.update(format=opened.format, mode=opened.mode, size=list(opened.size))
    exif_bytes = opened.info.get("exif")
    report["exif_segment_bytes"] = len(exif_bytes) if exif_bytes else 0
    report["exif_block"] = _exif_block(opened)
    paths = report["paths"]
    paths["open"] = _read_exif(opened)
    loaded = fresh()
    try:
        loaded.load()
        paths["open+load"] = _read_exif(loaded)
    except Exception as error:  # noqa: BLE001
        paths["open+load"] = {"load_error": f"{type(error).__name__}: {safe_text(error)}"}
    try:
        transposed = ImageOps.exif_transpose(fresh())
        paths["exif_transpose"] = {"raises": None, **_read_exif(transposed)}
    except Exception as error:  # noqa: BLE001
        paths["exif_transpose"] = {"raises": f"{type(error).__name__}: {safe_text(error)}"}
    recorder = RecordingObserver()
    with observing(recorder):
        try:
            paths["loader"] = _read_exif(ImageMediaIO().load_bytes(data).media)
            MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))
            report["key_source"] = recorder.keyed[-1].key_source
            report["exif_fallback"] = bool(recorder.fallbacks)
        except BadImageError as error:
            report["error"] = f"{error.reason}: {error.message}"
    report["verdict"] = _verdict(report)
    return report


def _exif_block(image: Image.Image) -> dict[str, Any]:
    """The file's metadata parsed on its own, apart from any load path: whether the metadata itself is broken.

    Which load path raises depends on what touched the image first (Pillow parses EXIF lazily); the
    metadata parsed fresh does not. Read as Pillow finds it: a JPEG's, WebP's or PNG's EXIF block
    (``info["exif"]``), a PNG's hex ``Raw profile type exif`` text, or a TIFF's own directory, whose
    XMP tag Pillow's transpose reads as bytes. It is malformed when it does not parse, when Pillow
    warns ``Corrupt EXIF data`` on it, or when the XMP tag is not bytes.
    """
    raw = image.info.get("exif")
    profile = image.info.get("Raw profile type exif")
    if raw is None and profile is not None:
        try:
            raw = bytes.fromhex("".join(str(profile).split("\n")[3:]))
        except ValueError as error:
            return {"state": "malformed", "problem": f"the 'Raw profile type exif' text is not hex: {safe_text(error)}"}
    tags = getattr(image, "tag_v2", None)
    if raw is None and tags is not None:  # a TIFF: its directory is its EXIF
        xmp = tags.get(_XMP_TAG)
        if xmp is not None and not isinstance(xmp, bytes | bytearray):
            return {"state": "malformed", "problem": f"the XMP tag holds {type(xmp).__name__}, not bytes"}
        return {"state": "well-formed", "tags": len(tags)}
    if not raw:
        return {"state": "none"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exif = Image.Exif()
            exif.load(raw)
            count = len(dict(exif))
        except Exception as error:  # noqa: BLE001 - reporting it is the point
            return {"state": "malformed", "problem": f"{type(error).__name__}: {safe_text(error)}"}
    if caught:
        return {"state": "malformed", "problem": f"Pillow warns: {safe_text(caught[0].message)}"}
    return {"state": "well-formed", "tags": count}


def _verdict(report: dict[str, Any]) -> str | None:
    """What the runbook concludes (MmobsExifFallbackRatioHigh, step 4), for a file whose key fell back."""
    if not report.get("exif_fallback"):
        return None
    if report["exif_block"]["state"] == "malformed":
        return "the file's EXIF block is malformed: a broken input (the runbook's cause 1)"
    return "the EXIF block parses on its own, yet the read failed: the load path (the runbook's cause 2)"


def _unopened(error: Exception) -> dict[str, str]:
    """Why Pillow cannot open a file, as a reason and a message (no BytesIO repr, no traceback)."""
    if isinstance(error, UnidentifiedImageError):
        return {"reason": "unidentified", "message": "not an image Pillow can identify"}
    return {"reason": pillow_error_reason(error) or "corrupt", "message": f"{type(error).__name__}: {safe_text(error)}"}


def _cmd_inspect(args: argparse.Namespace) -> int:
    try:
        report = _inspect_file(args.file)
    except OSError as error:
        print(f"mmobs: {args.file}: cannot read the file: {error.strerror or error}", file=sys.stderr)
        return 1
    if "unopened" in report:
        _print_failure(args, args.file, report["unopened"]["reason"], report["unopened"]["message"])
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['file']}: {report.get('format')} {report.get('mode')} {report.get('size')}, "
            f"{report['bytes']} bytes, EXIF segment {report['exif_segment_bytes']} bytes"
        )
        for name, result in report["paths"].items():
            print(f"  {name:15} {_describe_path(result)}")
        block = report["exif_block"]
        detail = {"malformed": block.get("problem"), "well-formed": f"{block.get('tags')} tags"}.get(block["state"])
        print(f"  {'EXIF block':15} {block['state']}" + (f": {detail}" if detail else ""))
        if "key_source" in report:
            print(
                f"  key: from {report['key_source']}, EXIF fallback {'ran' if report['exif_fallback'] else 'not needed'}"
            )
        if report.get("verdict"):
            print(f"  verdict: {report['verdict']}")
    if "error" in report:
        print(f"mmobs: {args.file}: {report['error']}", file=sys.stderr)
        return 1
    return 0


def _describe_path(result: dict[str, Any]) -> str:
    if result.get("load_error"):
        return f"load() raises {result['load_error']}"
    if result.get("raises"):
        text = f"getexif() raises {result['raises']}"
    else:
        text = (
            f"ok: {result['tags']} tags, orientation={result['orientation']}, "
            f"ImageID={result['image_id']} ({result['image_id_type']})"
        )
    if result.get("warnings"):
        text += f"; warnings: {'; '.join(result['warnings'])}"
    return text


# -- mmobs fingerprint ---------------------------------------------------------------


def _cmd_fingerprint(args: argparse.Namespace) -> int:
    from mmobs.observability.fingerprint import compute_fingerprint

    fingerprint = compute_fingerprint()
    if args.json:
        print(json.dumps({"fingerprint": fingerprint.digest, "keys": fingerprint.keys}, indent=2))
    else:
        print(fingerprint.digest)
        for name, key in sorted(fingerprint.keys.items()):
            print(f"  {name:28} {key}")
    return 0


# -- mmobs events, mmobs vllm-logging-config ---------------------------------------


def _cmd_events(args: argparse.Namespace) -> int:
    from mmobs.observability.log_reader import read_events

    wanted = set(args.event or ())
    try:
        for name in args.files or ["-"]:
            try:
                source = sys.stdin if name == "-" else open(name, encoding="utf-8", errors="replace")  # noqa: SIM115
            except OSError as error:
                print(f"mmobs: {name}: cannot read the log: {error.strerror or error}", file=sys.stderr)
                return 1
            with source:
                for event in read_events(source):
                    if not wanted or event.get("event") in wanted:
                        print(json.dumps(event, ensure_ascii=False, default=str))
    except BrokenPipeError:  # `mmobs events ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


#: mmobs's JSON logging config for vLLM (``VLLM_LOGGING_CONFIG_PATH``), shipped in the package.
VLLM_LOGGING_CONFIG = resources.files("mmobs") / "vllm" / "logging.json"


def _cmd_vllm_logging_config(args: argparse.Namespace) -> int:
    sys.stdout.write(VLLM_LOGGING_CONFIG.read_text(encoding="utf-8"))
    return 0


# -- mmobs serve ---------------------------------------------------------------------


def _missing_extra(command: str, extra: str, error: ModuleNotFoundError) -> int:
    """One line naming what to install, and exit code 1 (not a traceback)."""
    print(
        f"mmobs: '{command}' needs {error.name}, which is not installed: pip install 'mmobs[{extra}]'",
        file=sys.stderr,
    )
    return 1


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ModuleNotFoundError as error:
        return _missing_extra("mmobs serve", "serve", error)

    # Before anything logs: mmobs's events, uvicorn's records, warnings, one format (issue #12).
    configure_logging(args.log_format, args.log_level)

    max_connections = _raise_open_files_limit(args.limit_concurrency)
    config = ServiceConfig(
        max_body_bytes=args.max_body_bytes,
        max_images=args.max_images,
        max_pixels=args.max_pixels,
        max_image_bytes=args.max_image_bytes,
        image_formats=args.image_formats,
        fetch_allow_private=args.fetch_allow_private,
        metrics_path=None if args.no_metrics or args.metrics_port else args.metrics_path,
        metrics_token=args.metrics_token or os.environ.get("MMOBS_METRICS_TOKEN") or None,
        allowed_hosts=tuple(args.allow_remote_host),
        log_format=args.log_format,
        log_level=args.log_level,
        decode_workers=args.decode_workers,
        max_request_cpu_seconds=args.max_request_cpu_seconds,
        max_decode_memory_bytes=args.max_decode_memory_mib * 1024 * 1024,
        decode_queue=args.decode_queue,
        decode_queue_timeout_seconds=args.decode_queue_timeout,
        max_buffered_body_bytes=max(ServiceConfig.max_buffered_body_bytes, 2 * args.max_body_bytes),
        header_timeout_seconds=args.header_timeout,
        body_timeout_seconds=args.body_timeout,
        max_connections=max_connections,
        request_log=args.request_log,
    )
    os.environ[CONFIG_ENV] = config.to_env()
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "access_log": args.access_log,
        "log_level": args.log_level,
        "timeout_graceful_shutdown": 10,
        # No text handlers of uvicorn's own: its records reach configure_logging's handler.
        "log_config": None,
        # Header and body deadlines and a connection cap that evicts idle connections
        # (mmobs.service.http_guard) instead of uvicorn's limit_concurrency, whose 503s idle sockets trigger.
        "http": "mmobs.service.http_guard:GuardedH11Protocol",
        "ws": "none",
        "limit_concurrency": None,
        "h11_max_incomplete_event_size": 64 * 1024,
    }
    if args.workers <= 1:
        from mmobs.service.app import create_app

        app = create_app(config)
        _start_metrics_server(args, config)
        uvicorn.run(app, **options)
        return 0
    owned_dir = _prepare_multiprocess_dir()
    structlog.get_logger("mmobs").info(
        "multiprocess_metrics", workers=args.workers, directory=os.environ["PROMETHEUS_MULTIPROC_DIR"]
    )
    try:
        _start_metrics_server(args, config)
        uvicorn.run("mmobs.service.app:create_app", factory=True, workers=args.workers, **options)
    finally:
        if owned_dir:
            shutil.rmtree(owned_dir, ignore_errors=True)
    return 0


def _start_metrics_server(args: argparse.Namespace, config: ServiceConfig) -> None:
    """Serve the metrics on their own port (a listener only Prometheus can reach), with the same token."""
    if not args.metrics_port:
        return
    from mmobs.service.metrics_server import start_metrics_server

    # In multiprocess mode every scrape re-reads every worker's files.
    start_metrics_server(args.metrics_port, args.host, config.metrics_token)


def _raise_open_files_limit(connections: int) -> int:
    """Let the process hold ``connections`` sockets; the cap actually possible under the hard limit."""
    import resource

    reserve = 256  # decode workers' sockets, metrics files, logs, the listening socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + reserve
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        possible = max(16, soft - reserve)
        structlog.get_logger("mmobs").warning(
            "connection_cap_lowered", open_files_limit=soft, connections=possible, asked=connections
        )
        return possible
    return connections


def _prepare_multiprocess_dir() -> str | None:
    """Point every worker at one fresh metrics directory; return it if we made it."""
    existing = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if existing:
        Path(existing).mkdir(parents=True, exist_ok=True)
        for stale in Path(existing).glob("*.db"):
            stale.unlink()
        return None
    made = tempfile.mkdtemp(prefix="mmobs-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    return made


# -- parser -------------------------------------------------------------------------


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmobs", description="vLLM-compatible multimodal cache keys, with observability."
    )
    parser.add_argument("--version", action="version", version=f"mmobs {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)

    hash_parser = command("hash", "print each file's cache key and how it was derived")
    hash_parser.add_argument("files", nargs="+", metavar="FILE", help="image files to key")
    hash_parser.add_argument("--algorithm", choices=ALGORITHMS, default="blake3", help="the digest of the key")
    hash_parser.add_argument("--image-mode", type=_image_mode, default="RGB", help="mode the loader converts to")
    hash_parser.add_argument("--json", action="store_true", help="one JSON object per line")
    hash_parser.add_argument(
        "--no-decode",
        action="store_true",
        help="key from the header, decoding only where it cannot decide (as POST /v1/keys)",
    )
    hash_parser.set_defaults(handler=_cmd_hash)

    inspect_parser = command("inspect", "explain a file's EXIF on every load path")
    inspect_parser.add_argument("file", metavar="FILE", help="the image file to explain")
    inspect_parser.add_argument("--json", action="store_true", help="the report as one JSON document")
    inspect_parser.set_defaults(handler=_cmd_inspect)

    fingerprint_parser = command("fingerprint", "print this install's fleet fingerprint")
    fingerprint_parser.add_argument("--json", action="store_true", help="the digest and every reference key as JSON")
    fingerprint_parser.set_defaults(handler=_cmd_fingerprint)

    events_parser = command(
        "events", "print a log's records as JSON lines, whichever format wrote it (mmobs's JSON, vLLM's text or JSON)"
    )
    events_parser.add_argument("files", nargs="*", metavar="FILE", help="log files ('-' or none: standard input)")
    events_parser.add_argument(
        "--event", action="append", metavar="NAME", help="only records of this event (repeatable)"
    )
    events_parser.set_defaults(handler=_cmd_events)

    vllm_logging = command(
        "vllm-logging-config",
        "print mmobs's JSON logging config for vLLM (save it, point VLLM_LOGGING_CONFIG_PATH at it)",
    )
    vllm_logging.set_defaults(handler=_cmd_vllm_logging_config)

    defaults = ServiceConfig()
    serve = command("serve", "run the reference service (POST /v1/hash, GET /metrics)")
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
        help="seconds a connection has to send a request's headers",
    )
    serve.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=defaults.body_timeout_seconds,
        metavar="S",
        help="seconds a request has to send its whole body",
    )
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
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="also let uvicorn log every request (in the same format, with the request id)",
    )
    serve.set_defaults(handler=_cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        # Events go to stderr so stdout stays clean for --json; the command prints the facts.
        configure_logging("console", "warning", stream=sys.stderr)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
