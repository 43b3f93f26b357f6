"""Decode budgets (``mmobs.keys.guard``): robustness, and the limits themselves.

The checks raise nothing but ``BadImageError`` on fuzzed bytes, allocate nothing
proportional to what a header declares, take any buffer, and apply a pixel limit
only when given one; the loader frees the decoded original before converting.
The limits (``DecodeLimits``) are validated, tunable, and off when asked.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from mmobs import BAD_IMAGE_REASONS, BadImageError, ImageMediaIO
from mmobs.keys.guard import DecodeLimits, check_image_bytes, sniff_format
from scripts.corpus import costly
from tests.keys.guard_inputs import MAX_PIXELS, ROOT, encode, loads, refusal, tiled_tiff
from tests.support.images import png_header_only

pytestmark = pytest.mark.usefixtures("silent_observer")


_SEEDS = [
    costly.base_image("JPEG"), costly.progressive_jpeg((32, 32)), costly.base_image("PNG"), costly.base_image("GIF"),
    costly.base_image("WEBP"), costly.webp_animated_canvas((8, 8), frames=3), costly.tiff_many_pages(3),
    tiled_tiff((40, 30), 16), costly.base_image("BMP"), costly.bmp_rle_end_of_lines((20, 10)),
    costly.png_fdat_flood(700), costly.gif_frames(4), costly.jpeg_icc_chain(3, 10),
]  # fmt: skip


@settings(
    derandomize=True, max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    seed=st.sampled_from(_SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 4096), st.binary(min_size=0, max_size=8), st.booleans()), max_size=6),
    cut=st.integers(0, 4096),
)
def test_mutated_inputs_raise_only_bad_image_error(seed: bytes, edits: list[tuple[int, bytes, bool]], cut: int) -> None:
    """Overwrite or insert bytes anywhere, cut anywhere: the check raises nothing but BadImageError."""
    data = bytearray(seed)
    for at, blob, insert in edits:
        at %= len(data) + 1
        data[at : at if insert else at + len(blob)] = blob
    for candidate in (bytes(data), bytes(data[: len(data) - cut % (len(data) + 1)])):
        try:
            check_image_bytes(candidate, max_pixels=MAX_PIXELS)
        except BadImageError as error:
            assert error.reason in BAD_IMAGE_REASONS


@settings(derandomize=True, max_examples=200, deadline=None, database=None)
@given(
    prefix=st.sampled_from(
        [
            b"\xff\xd8\xff",
            b"\x89PNG\r\n\x1a\n",
            b"GIF89a",
            b"RIFF\0\0\0\0WEBP",
            b"II*\0",
            b"MM\0*",
            b"II+\0\x08\0\0\0",
            b"BM",
        ]
    ),
    rest=st.binary(max_size=300),
)
def test_random_bytes_behind_a_signature_raise_only_bad_image_error(prefix: bytes, rest: bytes) -> None:
    try:
        check_image_bytes(prefix + rest, max_pixels=MAX_PIXELS)
    except BadImageError as error:
        assert error.reason in BAD_IMAGE_REASONS


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: costly.png_iccp_flood(8 * 2**20), id="iccp-8MiB"),
        pytest.param(lambda: costly.png_itxt_flood(8 * 2**20), id="itxt-8MiB"),
        pytest.param(lambda: costly.png_exif_huge_rational(8 * 2**20), id="exif-8MiB"),
        pytest.param(lambda: costly.tiff_huge_tile(46336), id="tile-46336"),
        pytest.param(lambda: costly.gif_sub_block_flood(400_000), id="gif-sub-blocks-800KiB"),
        pytest.param(lambda: costly.jpeg_fill_flood(8 * 2**20), id="jpeg-fill-8MiB"),
    ],
)
def test_checks_allocate_nothing_proportional_to_the_input(build: Callable[[], bytes]) -> None:
    """Inflating is done 64 KiB at a time and stops at the budget; nothing copies the input."""
    data = build()
    tracemalloc.start()
    try:
        with pytest.raises(BadImageError) as info:
            check_image_bytes(data, max_pixels=MAX_PIXELS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.reason == "too_costly"
    assert peak < 512 * 1024, f"{peak} bytes allocated while checking {len(data)} bytes"


def test_check_takes_any_buffer_and_ignores_other_formats() -> None:
    data = costly.jpeg_app0_flood(2000 * 4)
    for buffer in (data, bytearray(data), memoryview(data)):
        with pytest.raises(BadImageError):
            check_image_bytes(buffer)
    assert sniff_format(b"\x00\x00\x01\x00") is None
    check_image_bytes(b"not an image at all")
    check_image_bytes(b"")


def test_pixel_limit_is_only_applied_when_given() -> None:
    data = png_header_only(40000, 40000)
    check_image_bytes(data)  # no max_pixels: structure only
    with pytest.raises(BadImageError) as info:
        check_image_bytes(data, max_pixels=1_000_000)
    assert info.value.reason == "too_many_pixels"
    assert "40000x40000" in info.value.message


def test_loader_frees_the_decoded_original_before_converting(tmp_path: Path) -> None:
    """An RGBA image costs its decode, the transpose's copy and the RGB composite, not all three at once.

    ``exif_transpose`` returns a copy even without a rotation; the loader closes
    the original before compositing, so a 49 MP RGBA PNG peaks at ~420 MiB,
    not ~610 (``docs/reliability.md``). Measured here on 12 MP, in a fresh process,
    by its own ``VmHWM`` (``ru_maxrss`` would include the parent's high-water mark).
    """
    path = tmp_path / "rgba.png"
    path.write_bytes(encode(Image.new("RGBA", (4000, 3000), (10, 20, 30, 128)), "PNG", compress_level=1))
    script = (
        "import os, sys, mmobs\n"
        "mmobs.set_observer(None)\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "loader = mmobs.ImageMediaIO()\n"
        "rss = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20\n"
        "media = loader.load_bytes(data)\n"
        "peak = next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print(peak / 1024 - rss)\n"
    )
    command = [sys.executable, "-c", script, str(path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    core = 4000 * 3000 * 4 / 2**20  # MiB of one RGBA (or RGB: 4 bytes a pixel too) image core
    # decode + copy (2 cores), then the copy + RGB + alpha (2.25 cores); all at once would be 3.25.
    assert float(done.stdout) < 2.6 * core, (float(done.stdout), core)


# =============================================================================
# Limits: validated, tunable, and off when asked
# =============================================================================


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", None, True])
def test_decode_limits_must_be_positive_integers(value: Any) -> None:
    with pytest.raises(ValueError, match="max_jpeg_scans"):
        DecodeLimits(max_jpeg_scans=value)


def test_loader_validates_and_can_disable_the_checks() -> None:
    with pytest.raises(ValueError, match="decode_limits"):
        ImageMediaIO(decode_limits={"max_jpeg_scans": 5})  # type: ignore[arg-type]
    flood = costly.jpeg_app0_flood(2000 * 4)
    with pytest.raises(BadImageError):
        ImageMediaIO().load_bytes(flood)
    assert ImageMediaIO(decode_limits=None).load_bytes(flood).media.size == (16, 12)
    assert "decode_limits=DecodeLimits(" in repr(ImageMediaIO())


def test_raising_a_limit_accepts_the_input() -> None:
    data = costly.jpeg_repeated_scans((64, 64), 200)
    assert refusal(data).reason == "too_costly"  # type: ignore[union-attr]
    assert refusal(data, DecodeLimits(max_jpeg_scans=1000)) is None
    loads(data, DecodeLimits(max_jpeg_scans=1000))


def test_the_check_respects_the_format_allow_list() -> None:
    """A format the loader does not open is refused by name, whatever its structure."""
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(formats=["PNG"]).load_bytes(costly.jpeg_app0_flood(2000 * 4))
    assert info.value.reason == "unsupported_format"
