"""Candidate changes to mmobs/, measured side by side with the code as it is.

Nothing here is imported by mmobs. Each candidate is the smallest code that
reproduces a proposed change in mmobs/ so that the benchmark can time it in
the same run as the current code; the numbers and the exact proposed diffs
are in docs/performance.md. When a change lands in mmobs/, its candidate
here measures the same thing twice and can be deleted.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import math

import numpy as np
import structlog
from blake3 import blake3
from PIL import Image

import mmobs.pixels
from mmobs.drift import Drift, DriftTracker
from mmobs.hashing import MultiModalHasher, _framed, _pixel_layout
from mmobs.media import MediaWithBytes
from mmobs.pixels import pixel_chunks

# -- 1. streamed pixels: bigger chunks -----------------------------------------------

#: Proposed ``mmobs.pixels.STREAM_CHUNK_BYTES`` (today 96 KiB).
PROPOSED_STREAM_CHUNK_BYTES = 256 * 1024


@contextlib.contextmanager
def stream_chunk_bytes(size: int) -> Iterator[None]:
    """Run with ``mmobs.pixels.STREAM_CHUNK_BYTES`` set to ``size`` (read per call)."""
    previous = mmobs.pixels.STREAM_CHUNK_BYTES
    mmobs.pixels.STREAM_CHUNK_BYTES = size
    try:
        yield
    finally:
        mmobs.pixels.STREAM_CHUNK_BYTES = previous


def with_chunk_bytes(size: int, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with stream_chunk_bytes(size):
            return fn()

    return run


# -- 2. the drift tracker's sampling probe -------------------------------------------

_EDGE = 4096
_SCALE = 1 << 64


#: FR("image") and the leaf tag: the framing in front of FR(original bytes) in the
#: item of a MediaWithBytes keyed by its original bytes with no io_config.
_ORIGINAL_ITEM_PREFIX = (5).to_bytes(8, "little") + b"image" + b"\x03"


class ProposedDriftTracker(DriftTracker):
    """Two changes to :class:`~mmobs.drift.DriftTracker`, same detection.

    ``samples``: hash the two 4 KiB edges first and the length last. Today
    the 8-byte length goes first, so both edges reach blake3 off its 1 KiB
    chunk grid and are compressed a block at a time; fed first, they are
    whole aligned chunks. Same inputs to the decision, same determinism; a
    different (equally uniform) set of sampled contents.

    ``observe``: identify the content by the digest of its original-bytes
    item, ``blake3(FR("image") 03 FR(original))``, instead of
    ``blake3(original)``. For the common sighting (keyed by its original
    bytes, no ``io_config``) that digest *is* the item digest the hasher just
    teed off the stream, so a sampled item costs one extra pass over its bytes
    instead of two. Other sightings (ImageID, an ``io_config``) compute the
    same function with one pass, as today. Identity and comparison are
    unchanged; only the value stored (and logged, truncated, in a
    ``cache_key_drift`` event) as the content digest differs.
    """

    def samples(self, media: Any) -> bool:
        if not isinstance(media, MediaWithBytes) or self._threshold == 0:
            return False
        if self._threshold >= _SCALE:
            return True
        data = media.original_bytes
        probe = blake3(data[:_EDGE])
        probe.update(data[-_EDGE:])
        probe.update(len(data).to_bytes(8, "little"))
        return int.from_bytes(probe.digest(8), "little") < self._threshold

    def observe(self, kind: str, media: MediaWithBytes, key: str, key_source: str) -> Any:
        original = media.original_bytes
        if kind == "media_with_bytes" and key_source == "original_bytes" and not media.io_config:
            content = bytes.fromhex(key)[:16]
        else:
            digest = blake3(_ORIGINAL_ITEM_PREFIX + len(original).to_bytes(8, "little"))
            digest.update(original)
            content = digest.digest(16)
        entry = (kind, content)
        with self._lock:
            previous = self._entries.get(entry)
            self._entries[entry] = (key, key_source)
            self._entries.move_to_end(entry)
            if len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        if previous is None or previous[0] == key:
            return None
        return Drift(kind, content.hex(), previous[0], previous[1], key, key_source)


# -- 3. the JSON log line: the pid without a stack walk ------------------------------


def add_pid(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """``process`` as CallsiteParameterAdder([PROCESS]) writes it, without walking frames."""
    event_dict["process"] = os.getpid()
    return event_dict


def _json_renderer() -> Any:
    """structlog's JSONRenderer, serialized by orjson when it is installed."""
    try:
        import orjson
    except ImportError:
        return structlog.processors.JSONRenderer()

    def dumps(obj: Any, **_: Any) -> str:
        return orjson.dumps(obj, default=str).decode()

    return structlog.processors.JSONRenderer(serializer=dumps)


def configure_logging_proposed(stream: Any, level: int = logging.INFO) -> None:
    """``mmobs.configure_logging("json", stream=...)`` with :func:`add_pid` instead of
    ``CallsiteParameterAdder([PROCESS])`` and orjson (when installed) rendering."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            add_pid,
            structlog.processors.format_exc_info,
            _json_renderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )


# -- 4. fewer, bigger framing chunks -------------------------------------------------


def _pack_len(n: int) -> bytes:
    return n.to_bytes(8, "little")


class LeanHeaderHasher(MultiModalHasher):
    """The same pixel keys with the framing yielded as one chunk instead of dozens.

    Today the ~200 bytes of framing in front of an image's pixels go out as
    ~35 chunks, each resumed through five nested generators and fed to its own
    ``digest.update``, and the byte count is ``np.prod(shape)`` (a NumPy
    reduction over a 2- or 3-tuple). ``_pixels_item`` here joins the framing
    first (same helpers, same bytes, same order) and uses ``math.prod``.
    Streams, and so keys, are unchanged (the benchmark checks).
    """

    @classmethod
    def _pixels_item(cls, image: Image.Image) -> Iterator[Any]:
        mode = image.mode
        image.load()
        dtype, shape, rawmode = _pixel_layout(image)
        nbytes = np.dtype(dtype).itemsize * math.prod(shape)
        fields = 2
        palette = image.palette
        palette_bytes = palette_rawmode = None
        if palette is not None:
            palette_bytes = palette.palette
            palette_rawmode = palette.rawmode
            fields += (palette_bytes is not None) + (palette_rawmode is not None)
        header = [
            *_framed(b"image"), b"\x02", _pack_len(fields),
            *cls.iter_item_to_bytes("mode", mode),
            *_framed(b"data"), b"\x03", *_framed(b"ndarray"), b"\x02", _pack_len(3),
            *cls.iter_item_to_bytes("dtype", dtype),
            *cls.iter_item_to_bytes("shape", shape),
            *_framed(b"data"), b"\x03", _pack_len(nbytes),
        ]
        yield b"".join(header)
        yield from pixel_chunks(image, rawmode, nbytes)
        trailer: list[Any] = []
        if palette_bytes is not None:
            trailer += cls.iter_item_to_bytes("palette", palette_bytes)
        if palette_rawmode is not None:
            trailer += cls.iter_item_to_bytes("palette_rawmode", palette_rawmode)
        if trailer:
            yield b"".join(trailer)


def proposed_pixel_key(image: Image.Image) -> str:
    """The pixel key with both pixel-path proposals (lean framing, 256 KiB chunks)."""
    with stream_chunk_bytes(PROPOSED_STREAM_CHUNK_BYTES):
        return LeanHeaderHasher.hash_kwargs("blake3", image=image)


# -- 5. the middleware: two per-request costs ----------------------------------------

from mmobs.middleware import MMObsMiddleware  # noqa: E402


class LeanerMMObsMiddleware(MMObsMiddleware):
    """MMObsMiddleware with the duration child cached and a cheaper fresh request id.

    * ``_record`` calls ``duration.labels(route, method)`` on every request
      (prometheus_client validates and locks on each call); the request
      counter's child is already cached in ``self._children``; cache the
      histogram's the same way.
    * A generated request id is ``uuid.uuid4().hex``: the same 128 random
      bits as ``os.urandom(16).hex()`` plus a UUID object built and thrown
      away (and the version nibble). Same length and alphabet either way.
    """

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, **options)
        self._durations: dict[tuple[str, str], Any] = {}

    def _request_id(self, scope: Any) -> str:
        for name, value in scope["headers"]:
            if name == self._request_id_key:
                try:
                    candidate = value.decode("ascii")
                except UnicodeDecodeError:
                    break
                if REQUEST_ID_PATTERN.fullmatch(candidate):
                    return candidate
                break
        return os.urandom(16).hex()

    def _record(self, route: str, method: str, status: int, seconds: float, stats: Any) -> None:
        status_class = f"{status // 100}xx" if 100 <= status < 600 else "5xx"
        key = (route, method, status_class)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.metrics.requests.labels(route, method, status_class)
        child.inc()
        duration = self._durations.get((route, method))
        if duration is None:
            duration = self._durations[(route, method)] = self.metrics.duration.labels(route, method)
        duration.observe(seconds)
        if stats.images or stats.bad_images:
            self.metrics.image_requests.labels(route, status_class).inc()
        if stats.exif_fallbacks:
            self.metrics.fallback_requests.labels(route).inc()


from mmobs.middleware import REQUEST_ID_PATTERN  # noqa: E402


# -- 6. the service: optional fast paths -------------------------------------------


def patch_service_fast_paths() -> list[str]:
    """In this process only: pybase64 for base64 and orjson for the request JSON.

    ``mmobs.image_io`` calls ``base64.b64decode(data, validate=True)`` and
    ``mmobs.service`` calls ``json.loads(body)``; both names are module
    globals, so pointing them at drop-in replacements reproduces the proposed
    change (``pybase64.b64decode`` takes the same arguments and raises the
    same ``binascii.Error``; ``orjson.JSONDecodeError`` is a ``ValueError``).
    Returns what was patched. For speed measurements only: old orjson releases
    (3.8.3 here) crash on very deeply nested arrays; see docs/performance.md.
    """
    import json as _json
    import types

    import mmobs.image_io
    import mmobs.service

    patched = []
    try:
        import pybase64

        mmobs.image_io.base64 = pybase64  # type: ignore[attr-defined]
        patched.append("pybase64")
    except ImportError:
        pass
    try:
        import orjson

        mmobs.service.json = types.SimpleNamespace(loads=orjson.loads, dumps=_json.dumps)  # type: ignore[attr-defined]
        patched.append("orjson")
    except ImportError:
        pass
    return patched
