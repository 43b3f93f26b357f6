"""``mmobs hash``: each file's cache key, and how it was derived, as the reference service would key it.

Without ``--no-decode`` a file is loaded and keyed as vLLM does (the EXIF
fallback reported with it); with it, keyed from its header as ``POST
/v1/keys`` would. A file that cannot be keyed is reported on stderr (and as a
JSON error line with ``--json``) and makes the exit code 1; the rest are
still keyed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from mmobs.errors import BadImageError
from mmobs.events import RecordingObserver, get_observer, observing
from mmobs.keys.from_bytes import Verify, key_image
from mmobs.keys.hashing import hash_in_format
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.raw_bytes import FrontEnd
from mmobs.keys.refusals import report_bad_image
from mmobs.observability.log_fields import safe_text


def _hash_file(path: str, algorithm: str, io: ImageMediaIO) -> dict[str, Any]:
    """Key one file as the reference service would; a dict for printing."""
    recorder = RecordingObserver(get_observer())
    with observing(recorder):
        media = io.load_file(path)
        key = hash_in_format(io.key_format, algorithm, {"image": media})
    fallback = recorder.fallbacks[0] if recorder.fallbacks else None
    return {
        "file": path,
        "mm_hash": key,
        "algorithm": algorithm,
        "vllm_version": io.vllm_version,
        "front_end": "python",
        "key_source": recorder.keyed[-1].key_source,
        "exif_fallback": fallback is not None,
        "exif_error": (f"{type(fallback.error).__name__}: {safe_text(fallback.error)}" if fallback else None),
        "exif_transpose_failed": bool(recorder.transpose_failures),
        "format": media.media.format,
        "mode": media.media.mode,
        "width": media.media.width,
        "height": media.media.height,
    }


def _key_file(
    path: str, algorithm: str, io: ImageMediaIO, front_end: FrontEnd = "python", verify: Verify = "header"
) -> dict[str, Any]:
    """Key one file from its header, as ``POST /v1/keys`` would; a dict for printing.

    ``front_end="rust"``: the key vLLM's Rust front end gives the file (the digest of its bytes), after the
    same checks; decoded too unless ``--no-decode``, as ``mmobs hash`` decodes.
    """
    size = os.stat(path).st_size
    if size > io.max_bytes:  # as load_file: refused before reading
        message = f"the image is {size} bytes, above the limit of {io.max_bytes} bytes"
        raise report_bad_image(BadImageError("too_large", message))
    with open(path, "rb") as handle:
        data = handle.read(io.max_bytes + 1)
    found = key_image(io, data, algorithm, verify=verify, front_end=front_end)
    return {
        "file": path,
        "mm_hash": found.key,
        "algorithm": algorithm,
        "vllm_version": io.vllm_version,
        "front_end": front_end,
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


def run_hash(args: argparse.Namespace) -> int:
    """Key every file, one report each as it is keyed; 1 if any could not be keyed."""
    io = ImageMediaIO(image_mode=args.image_mode, vllm_version=args.vllm_version)
    failures = 0
    progress = _Progress(len(args.files), sys.stderr)
    for done, path in enumerate(args.files, 1):
        try:
            if args.no_decode or args.front_end == "rust":
                verify: Verify = "header" if args.no_decode else "decode"
                result = _key_file(path, args.algorithm, io, args.front_end, verify)
            else:
                result = _hash_file(path, args.algorithm, io)
        except BadImageError as error:
            failures += 1
            print_failure(args, path, error.reason, error.message)
        except OSError as error:
            failures += 1
            print_failure(args, path, "unreadable", f"cannot read the file: {error.strerror or error}")
        else:
            if args.json:
                print(json.dumps(result), flush=True)
            elif args.no_decode or args.front_end == "rust":
                why = f" ({result['decoded_because']})" if result["decoded_because"] else ""
                print(
                    f"{result['mm_hash']}  {path}\n"
                    f"    key_source=original_bytes key_path={result['key_path']}{why}"
                    f"{' front_end=rust' if args.front_end == 'rust' else ''}\n"
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


def print_failure(args: argparse.Namespace, path: str, reason: str, message: str) -> None:
    """A file that could not be keyed: on stderr always, and as a JSON line on stdout with ``--json``."""
    if args.json:
        print(json.dumps({"file": path, "error": {"reason": reason, "message": message}}), flush=True)
    print(f"mmobs: {path}: {reason}: {message}", file=sys.stderr, flush=True)
