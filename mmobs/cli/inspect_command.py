"""``mmobs inspect``: how reading one file's EXIF behaves on every path an image takes.

Pillow parses EXIF lazily, so whether reading it raises depends on what
touched the image first; the report reads it on each load path, then parses
the metadata on its own, so that the runbook (MmobsExifFallbackRatioHigh)
can tell a broken input from a load path that breaks a good one.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from io import BytesIO
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from mmobs.cli.hash_command import print_failure
from mmobs.errors import BadImageError
from mmobs.events import RecordingObserver, observing
from mmobs.keys.hashing import MultiModalHasher
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.refusals import pillow_error_reason
from mmobs.keys.writer import IMAGE_ID_TAG
from mmobs.observability.log_fields import safe_text

_ORIENTATION_TAG = 0x0112
_XMP_TAG = 700


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


def run_inspect(args: argparse.Namespace) -> int:
    """Print the file's report (a summary, or the whole report as JSON); 1 if it cannot be read, opened or keyed."""
    try:
        report = _inspect_file(args.file)
    except OSError as error:
        print(f"mmobs: {args.file}: cannot read the file: {error.strerror or error}", file=sys.stderr)
        return 1
    if "unopened" in report:
        print_failure(args, args.file, report["unopened"]["reason"], report["unopened"]["message"])
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
