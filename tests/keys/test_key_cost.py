"""A cheap regression check on what a key costs: no path may fall far behind blake3 alone.

Not a timed target: the targets are measured by ``benchmarks/`` and quoted in
``docs/performance.md``. This catches a change that makes a path several
times the hash it is built around, as the structural checks once did (4.3x
blake3 alone on a 2 MB JPEG, unnoticed until measured): each path is timed
against blake3 over the same bytes in paired repetitions that alternate
which goes first, in this process's CPU time, and the median of the per-pair
ratios must stay under a bound well above what the path measures (see each
bound), so that a loaded machine does not fail it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import pytest
from blake3 import blake3
from PIL import Image

from mmobs import MultiModalHasher, key_for_bytes
from scripts.corpus import costly
from tests.support.images import encode

pytestmark = pytest.mark.usefixtures("silent_observer")  # the drift tracker would add a digest pass to a sample

#: Pairs per check, and calls per side of a pair.
PAIRS, CALLS = 9, 3
#: The no-decode path reads a header and hashes the bytes once: 1.1x to 1.4x at 2-4 MB here (the
#: header parse is a fixed cost of about 0.1 ms); 2.08x once under CI's full load (core-py313 at nice 10
#: beside vllm-servers' servers, which share the core's other half); 4.3x when the JPEG check searched every scan.
NO_DECODE_BOUND = 3.0
#: A progressive JPEG's scans are searched for its markers at about 3 GB/s: 3x to 3.5x here, alone; 6.3x once
#: under CI's full load (the floors' blake3 0.4 beside ten tox environments and a vLLM server).
PROGRESSIVE_BOUND = 8.0
#: Pixels are repacked (RGB's fourth byte dropped) on their way to the digest: 1.5x to 1.8x, with room for
#: the 1.5x that CI's load has added to the no-decode ratio; ``np.asarray`` then hash is 8x.
PIXEL_BOUND = 4.0


def _noise(size: tuple[int, int], seed: int) -> Image.Image:
    """Noise compresses worst: the most bytes (and, for JPEG, the most stuffed FF bytes) per pixel."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def paired_ratio(path: Callable[[], object], floor: Callable[[], object]) -> float:
    """The median over :data:`PAIRS` of (CPU time of ``path``) / (CPU time of ``floor``), run back to back."""
    path(), floor()  # lazy imports, caches, first-use allocations
    ratios = []
    for pair in range(PAIRS):
        spent = {}
        for name, call in (("path", path), ("floor", floor))[:: 1 if pair % 2 else -1]:
            started = time.process_time()
            for _ in range(CALLS):
                call()
            spent[name] = time.process_time() - started
        ratios.append(spent["path"] / max(spent["floor"], 1e-9))
    return statistics.median(ratios)


@pytest.mark.parametrize(
    ("make", "bound"),
    [
        pytest.param(lambda: encode(_noise((2000, 1500), 1), "JPEG", quality=90), NO_DECODE_BOUND, id="jpeg-3MB"),
        pytest.param(
            lambda: costly.png_rechunked(encode(_noise((1400, 1000), 3), "PNG", compress_level=1), 8192),
            NO_DECODE_BOUND,
            id="png-8KiB-chunks-4MB",
        ),
        pytest.param(
            lambda: encode(_noise((1400, 1000), 2), "JPEG", quality=90, progressive=True),
            PROGRESSIVE_BOUND,
            id="jpeg-progressive-1MB",
        ),
    ],
)
def test_no_decode_key_stays_near_blake3_alone(make: Callable[[], bytes], bound: float) -> None:
    data = make()
    assert len(data) > 1_000_000
    ratio = paired_ratio(lambda: key_for_bytes(data), lambda: blake3(data).hexdigest())
    assert ratio < bound, f"key_for_bytes costs {ratio:.2f}x blake3 alone over the same bytes"


def test_rgb_pixel_key_stays_near_blake3_alone() -> None:
    image = _noise((1024, 1024), 4)
    stream = b"".join(MultiModalHasher.iter_item_to_bytes("image", image))
    ratio = paired_ratio(
        lambda: MultiModalHasher.hash_kwargs("blake3", image=image), lambda: blake3(stream).hexdigest()
    )
    assert ratio < PIXEL_BOUND, f"the RGB pixel key costs {ratio:.2f}x blake3 alone over its stream"
