"""What every benchmark section shares: the run's settings, the inputs, the keyers.

Importing this module also makes the benchmarks measure *this checkout*: the
repository root goes first on ``sys.path`` (and into ``PYTHONPATH`` for the
servers the sections start), so an mmobs installed elsewhere in editable
mode is never the one measured.
"""

from __future__ import annotations

import io
import math
import os
import statistics
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(HERE), str(ROOT)):
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT))]
)

import _harness as harness  # noqa: E402
import numpy as np  # noqa: E402
from blake3 import blake3  # noqa: E402
from PIL import Image  # noqa: E402

from mmobs import MultiModalHasher, observing  # noqa: E402
from mmobs.observability.instrument import Instrumentation, set_hasher_info  # noqa: E402

MiB = 1024 * 1024


@dataclass(frozen=True)
class Config:
    quick: bool
    rounds: int  # rounds of an in-process comparison
    http_rounds: int
    http_seconds: float
    service_rounds: int
    service_seconds: float
    profile_requests: int
    pixel_sizes: tuple[tuple[str, int, int], ...]


FULL = Config(
    quick=False,
    rounds=41,
    http_rounds=9,
    http_seconds=5.0,
    service_rounds=5,
    service_seconds=8.0,
    profile_requests=60,
    pixel_sizes=(("1 MP", 1024, 1024), ("4 MP", 2048, 2048), ("12 MP", 4000, 3000)),
)
QUICK = Config(
    quick=True,
    rounds=7,
    http_rounds=2,
    http_seconds=2.0,
    service_rounds=1,
    service_seconds=3.0,
    profile_requests=15,
    pixel_sizes=(("1 MP", 1024, 1024), ("4 MP", 2048, 2048), ("12 MP", 4000, 3000)),
)


def noisy_image(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """An image whose every byte is pseudo-random (its palette too), already loaded."""
    rng = np.random.default_rng(seed)
    width, height = size
    image = Image.frombytes(mode, size, rng.bytes(width * height * 4))
    if mode == "P":
        image.putpalette(rng.bytes(768))
    image.load()
    return image


def noisy_jpeg(target_bytes: int, seed: int = 0, quality: int = 90) -> bytes:
    """A noise JPEG within 3 % of ``target_bytes`` (noise defeats compression)."""
    rng = np.random.default_rng(seed)
    side = max(16, int(math.sqrt(target_bytes / 1.5)))
    data = b""
    for _ in range(12):
        image = Image.frombytes("RGB", (side, side), rng.bytes(side * side * 3))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        data = buffer.getvalue()
        if abs(len(data) - target_bytes) <= 0.03 * target_bytes:
            break
        side = max(16, int(side * math.sqrt(target_bytes / len(data))))
    return data


#: The TIFF header of the vLLM regression image (vLLM issue #56527).
BAD_TIFF_HEADER = b"XXXX\x00\x00\x00\x08"


def jpeg_with_bad_exif(size: tuple[int, int] = (64, 48)) -> bytes:
    """A small JPEG whose EXIF block has a broken TIFF header (the vLLM regression input)."""
    image = noisy_image("RGB", size, seed=3)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    base = buffer.getvalue()
    payload = b"Exif\x00\x00" + BAD_TIFF_HEADER
    segment = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return base[:2] + segment + base[2:]


def plain_jpeg(size: tuple[int, int] = (64, 48)) -> bytes:
    buffer = io.BytesIO()
    noisy_image("RGB", size, seed=3).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def mmobs_key(obj: Any) -> str:
    with observing(None):
        return MultiModalHasher.hash_kwargs("blake3", image=obj)


def keyer(obj: Any, observer: Any = None, *, default: bool = False) -> Callable[[], str]:
    """``hash_kwargs("blake3", image=obj)`` under ``observer`` (or the process default)."""
    if default:
        return lambda: MultiModalHasher.hash_kwargs("blake3", image=obj)

    def run() -> str:
        with observing(observer):
            return MultiModalHasher.hash_kwargs("blake3", image=obj)

    return run


def stream_of(obj: Any) -> bytes:
    with observing(None):
        return b"".join(MultiModalHasher.iter_item_to_bytes("image", obj))


def blake3_alone(stream: bytes) -> Callable[[], str]:
    return lambda: blake3(stream).hexdigest()


def private_instrumentation(**options: Any) -> Instrumentation:
    """An instrumentation on a registry of its own, its fingerprint set up front."""
    from prometheus_client import CollectorRegistry

    instr = Instrumentation(CollectorRegistry(), hasher_info=False, **options)
    set_hasher_info(instr.metrics)  # once, up front: not part of any timed call
    return instr


def asgi_scope(path: str = "/ping") -> dict[str, Any]:
    """A minimal HTTP scope, with the headers a load generator sends."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"curl/8.5.0"), (b"accept", b"*/*")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


def paired_delta(a: harness.Stats, b: harness.Stats) -> float:
    """Median per-round difference between two competitors of one comparison."""
    return statistics.median(x - y for x, y in zip(a.samples, b.samples))
