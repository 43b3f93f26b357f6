"""A chat completion to a real ``vllm serve`` with mmobs: what it must move, how to send it, what it logged.

What one request must count is worked out independently, in this process
(:func:`expected_for`): mmobs's loader and hasher (proven key for key equal to
vLLM's by the differential tests) say which EXIF reads raise, where each key
comes from and how many bytes the digest is fed. :func:`comparable` keeps the
moved series a test can predict exactly; :func:`chat` sends one image through
the ``openai`` client; :func:`mmobs_lines` reads mmobs's events from the
server's log. Used by ``tests/vllm/test_vllm_server.py`` and the other modules
that talk to the servers of ``tests/conftest.py``.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
from PIL import Image, ImageOps

from mmobs import ImageMediaIO, MultiModalHasher
from mmobs.errors import BadImageError
from mmobs.events import RecordingObserver, observing
from mmobs.keys.guard import check_image_bytes
from mmobs.observability.metrics import exception_label
from mmobs.vllm.decode_free_hits.decode_metrics import METRIC_NAMES as DECODE_SKIP_NAMES
from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES as FRONT_END_NAMES
from tests.support import golden
from tests.support.vllm_server import VLLM_LINE, VllmServer, series

ROUTE = "/v1/chat/completions"
#: vLLM's own pixel limit (``VLLM_MAX_IMAGE_PIXELS``'s default), which the plugin's guard applies.
VLLM_MAX_IMAGE_PIXELS = 178_956_970
BAD_EXIF_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO = golden.input_bytes("photo.jpg")
FRONT_END = "mmobs_vllm_mm_preprocessing_total_seconds"
#: Histogram series whose value (a time, a size) the test cannot know: only their counts are compared.
_UNKNOWABLE = ("_bucket", "_sum")


# -- what a request must do, worked out here ------------------------------------------------------


@dataclass
class Expected:
    """The mmobs series one request must move on the server, by exactly these amounts."""

    counts: Counter[tuple[str, tuple[tuple[str, str], ...]]]
    status: int

    def __iadd__(self, other: Expected) -> Expected:
        self.counts.update(other.counts)
        return self


def expected_for(data: bytes, model: str, *, sampled: bool) -> Expected:
    """What a chat completion carrying ``data`` as its one image must count, status included.

    The guard's checks, then the loader (vLLM's formats: every format Pillow reads), then
    ``hash_kwargs(model_id=MODEL, image=...)`` as vLLM's processor calls it.
    """
    counts: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()
    recorder = RecordingObserver()
    status = 200
    with observing(recorder), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's warnings about the corpus's broken files: expected here
        try:
            check_image_bytes(data, max_pixels=VLLM_MAX_IMAGE_PIXELS)
        except BadImageError as error:
            counts[series("mmobs_bad_images_total", reason=error.reason)] += 1
            status = 400
        else:
            try:
                media = ImageMediaIO(formats=None, decode_limits=None, max_pixels=VLLM_MAX_IMAGE_PIXELS).load_bytes(
                    data
                )
            except BadImageError as error:
                counts[series("mmobs_bad_images_total", reason=error.reason)] += 1
                status = 400
                # vLLM applies the EXIF orientation before it decodes, and swallows what that raises; mmobs's
                # loader refuses first. A twin, opened alike, raises exactly when vLLM's transpose does.
                label = None if recorder.transpose_failures else _twin_transpose_failure(data)
                if label is not None:
                    counts[series("mmobs_exif_transpose_failures_total", exception=label)] += 1
            else:
                MultiModalHasher.hash_kwargs("blake3", model_id=model, image=media)
    for fallback in recorder.fallbacks:
        counts[
            series("mmobs_exif_fallback_total", kind=fallback.kind, exception=exception_label(type(fallback.error)))
        ] += 1
    for failure in recorder.transpose_failures:
        counts[series("mmobs_exif_transpose_failures_total", exception=exception_label(type(failure.error)))] += 1
    for keyed in recorder.keyed:
        counts[series("mmobs_media_keys_total", kind=keyed.kind, key_source=keyed.key_source)] += 1
        if sampled:
            counts[series("mmobs_cache_key_drift_samples_total", kind=keyed.kind)] += 1
    for call in recorder.hashed_calls:
        counts[series("mmobs_hash_duration_seconds_count", algorithm=call.algorithm)] += 1
        counts[series("mmobs_hashed_bytes_total", algorithm=call.algorithm)] += call.nbytes
    status_class = f"{status // 100}xx"
    counts[series("mmobs_http_requests_total", route=ROUTE, method="POST", status_class=status_class)] += 1
    counts[series("mmobs_http_image_requests_total", route=ROUTE, status_class=status_class)] += 1
    if recorder.fallbacks:
        counts[series("mmobs_http_exif_fallback_requests_total", route=ROUTE)] += 1
    for histogram in (
        "request_duration_seconds",
        "time_to_first_byte_seconds",
        "request_size_bytes",
        "response_size_bytes",
    ):
        counts[series(f"mmobs_http_{histogram}_count", route=ROUTE, method="POST")] += 1
    return Expected(counts, status)


def _twin_transpose_failure(data: bytes) -> str | None:
    """The exception label of ``ImageOps.exif_transpose`` on a freshly opened twin of ``data``, if it raises."""
    try:
        twin = Image.open(io.BytesIO(data))
    except Exception:  # vLLM's loader stops at the open: no transpose
        return None
    try:
        ImageOps.exif_transpose(twin)
    except Exception as error:
        return exception_label(type(error))
    return None


def drift_sampled(payloads: list[bytes], seed: str) -> list[bool]:
    """Whether the server's drift tracker samples each payload (its choice depends on the hash seed)."""
    code = (
        "import sys, json\nfrom mmobs.observability.drift import DriftTracker\nfrom mmobs.keys.media import MediaWithBytes\n"
        "tracker = DriftTracker()\n"
        "print(json.dumps([tracker.samples(MediaWithBytes(None, bytes.fromhex(h))) for h in json.load(sys.stdin)]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([payload.hex() for payload in payloads]),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
    )
    return json.loads(result.stdout)


def comparable(moved: dict[Any, float]) -> Counter[Any]:
    """The moved series that a test can predict exactly (no hasher_info, no bucket or time sums).

    Nor the decode-free hits' or the front end's stages: whether an image is decoded again, or
    processed, depends on what the server saw before the test (tests/vllm/test_vllm_decode_free_hits.py
    and tests/vllm/test_vllm_front_end.py count them exactly, on images of their own).
    """
    kept: Counter[Any] = Counter()
    for key, value in moved.items():
        name = key[0]
        if name == "mmobs_hasher_info" or name.endswith(_UNKNOWABLE) or name in DECODE_SKIP_NAMES:
            continue
        if name.removesuffix("_count") in FRONT_END_NAMES:
            continue
        kept[key] = int(value) if float(value).is_integer() else value
    return kept


# -- talking to the server ------------------------------------------------------------------------


def image_message(data: bytes, media_type: str = "image/jpeg", text: str = "Describe this image.") -> list[dict]:
    url = f"data:{media_type};base64,{base64.b64encode(data).decode()}"
    return [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}
    ]


def client_for(server: VllmServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(server: VllmServer, data: bytes, media_type: str = "image/jpeg") -> tuple[int, str, Any]:
    """(status, x-request-id, parsed completion or the error body) for one chat completion with one image."""
    client = client_for(server)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=server.model, max_tokens=4, messages=image_message(data, media_type)
        )
    except openai.APIStatusError as error:
        return error.status_code, error.response.headers.get("x-request-id", ""), error.response.json()
    return raw.http_response.status_code, raw.headers.get("x-request-id", ""), raw.parse()


def mmobs_lines(server: VllmServer, event: str) -> list[dict[str, Any]]:
    """mmobs's ``event`` lines in vLLM's log, parsed (not by mmobs's own reader, which they check).

    A text line gives vLLM's prefix fields plus the event's key=value fields; a JSON line (mmobs's
    logging config) is the event's object.
    """
    found: list[dict[str, Any]] = []
    for line in server.log_lines():
        if line.startswith("{"):
            document = json.loads(line)
            if document.get("event") == event:
                found.append(document)
            continue
        match = VLLM_LINE.match(line)
        if match is None or not match["message"].startswith(event + " "):
            continue
        fields = dict(match.groupdict())
        for part in _logfmt(match["message"][len(event) + 1 :]):
            key, _, value = part.partition("=")
            fields[key] = json.loads(value) if value.startswith('"') else value
        found.append(fields)
    return found


def _logfmt(text: str) -> Iterator[str]:
    """Split ``k=v k="quoted \\" v"`` into its parts."""
    part, quoted, escaped = "", False, False
    for ch in text:
        if escaped:
            part, escaped = part + ch, False
        elif ch == "\\" and quoted:
            part, escaped = part + ch, True
        elif ch == '"':
            part, quoted = part + ch, not quoted
        elif ch == " " and not quoted:
            if part:
                yield part
            part = ""
        else:
            part += ch
    if part:
        yield part
