"""``max_pixels`` is the loader's one pixel limit (``mmobs.keys.pixel_limit``).

Above or below Pillow's ``MAX_IMAGE_PIXELS``, with mmobs's message, no Pillow
warning, and no effect on Pillow's behaviour outside the loader (nor across
concurrent loaders); a row wider than Pillow can address is refused from the
header.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import warnings

import pytest
from PIL import Image

from mmobs import BadImageError, ImageMediaIO
from mmobs.keys.guard import check_image_bytes
from mmobs.keys.pixel_limit import pixel_limit
from scripts.corpus import costly
from tests.keys.guard_inputs import ROOT, encode
from tests.support.images import png_header_only

pytestmark = pytest.mark.usefixtures("silent_observer")


def _bilevel_png(size: tuple[int, int]) -> bytes:
    """A real, fully decodable mode-1 PNG: one byte a pixel once decoded, a few KiB encoded."""
    return encode(Image.new("1", size), "PNG")


def test_max_pixels_above_pillows_limit_loads_without_a_warning() -> None:
    """90 MP is above Pillow's MAX_IMAGE_PIXELS (89.5 MP): with max_pixels=100 M it loads, silently."""
    data = _bilevel_png((10000, 9000))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        media = ImageMediaIO(max_pixels=100_000_000, image_mode=None).load_bytes(data)
    assert media.media.size == (10000, 9000)
    assert [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)] == []


def test_max_pixels_above_twice_pillows_limit_is_not_pillows_refusal() -> None:
    """400 MP with max_pixels=500 M: Pillow's "decompression bomb" error used to refuse it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BadImageError) as info:
            loader = ImageMediaIO(max_pixels=500_000_000, image_mode=None)
            loader.load_bytes(png_header_only(20000, 20000, color_type=0))
    assert info.value.reason == "truncated", info.value.message  # it got past every pixel limit
    assert "decompression bomb" not in info.value.message


@pytest.mark.parametrize("size", [(10000, 10000), (20000, 20000), (8000, 7000)])
def test_above_max_pixels_is_mmobs_refusal_with_mmobs_message(size: tuple[int, int]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Pillow warning would fail the test
        with pytest.raises(BadImageError) as info:
            ImageMediaIO().load_bytes(png_header_only(*size))
    assert info.value.reason == "too_many_pixels"
    assert info.value.message.endswith("above the limit of 50000000; resize it before sending")


def test_pillow_limit_applies_inside_the_decoder_too() -> None:
    """A size met while decoding (here a GIF frame past its screen, with the checks off) uses mmobs's limit."""
    data = costly.gif_frame_outside_screen((1, 1), (8000, 7000))
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(decode_limits=None).load_bytes(data)
    assert info.value.reason == "too_many_pixels"
    assert "above the limit of 50000000" in info.value.message


def test_no_pillow_warning_reaches_stderr() -> None:
    """In a fresh interpreter (default warning filters), loads between 89.5 MP and 179 MP print nothing."""
    script = (
        "import mmobs\n"
        "mmobs.set_observer(None)\n"
        "from mmobs import ImageMediaIO, BadImageError\n"
        "from tests.support.images import png_header_only\n"
        "from PIL import Image; import io\n"
        "big = io.BytesIO(); Image.new('1', (10000, 9000)).save(big, 'PNG')\n"
        "ImageMediaIO(max_pixels=100_000_000, image_mode=None).load_bytes(big.getvalue())\n"
        "for limit in (50_000_000, 150_000_000):\n"
        "    try: ImageMediaIO(max_pixels=limit).load_bytes(png_header_only(10000, 10000))\n"
        "    except BadImageError as e: print(e.reason)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["too_many_pixels", "truncated"]
    assert done.stderr == ""


def test_pillow_is_unchanged_outside_the_loader() -> None:
    """Other code in the process keeps Pillow's own limit, warning and error."""
    before = Image.MAX_IMAGE_PIXELS
    ImageMediaIO(max_pixels=500_000_000).load_bytes(encode(Image.new("RGB", (4, 4)), "PNG"))
    assert before == Image.MAX_IMAGE_PIXELS
    with pytest.raises(Image.DecompressionBombError, match="could be decompression bomb"):
        Image.open(io.BytesIO(png_header_only(20000, 20000)))
    with pytest.warns(Image.DecompressionBombWarning):
        Image.open(io.BytesIO(png_header_only(10000, 10000)))


def test_pixel_limits_of_concurrent_loaders_do_not_mix() -> None:
    """Threads with different limits, and plain Pillow in a third, each see their own limit."""
    data = png_header_only(10000, 10000, color_type=0)  # 100 MP
    outcomes: dict[str, set[str]] = {"high": set(), "low": set(), "pillow": set()}
    start = threading.Barrier(3)

    def loader(name: str, limit: int) -> None:
        start.wait()
        io_ = ImageMediaIO(max_pixels=limit, image_mode=None)
        for _ in range(40):
            try:
                io_.load_bytes(data)
            except BadImageError as error:
                outcomes[name].add(error.reason)

    def pillow() -> None:
        start.wait()
        for _ in range(200):
            try:
                Image._decompression_bomb_check((20000, 20000))  # Pillow's own check, outside any loader
            except Image.DecompressionBombError as error:
                outcomes["pillow"].add(type(error).__name__)

    threads = [
        threading.Thread(target=loader, args=("high", 200_000_000)),
        threading.Thread(target=loader, args=("low", 50_000_000)),
        threading.Thread(target=pillow),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {"high": {"truncated"}, "low": {"too_many_pixels"}, "pillow": {"DecompressionBombError"}}


def test_pixel_limit_context_restores_the_previous_limit() -> None:
    with pixel_limit(10):
        with pixel_limit(1_000_000_000):
            Image._decompression_bomb_check((20000, 20000))  # allowed by the inner limit
        with pytest.raises(Image.DecompressionBombError):
            Image._decompression_bomb_check((4, 4))
    with pytest.warns(Image.DecompressionBombWarning):
        Image._decompression_bomb_check((10000, 10000))  # Pillow's own again


@pytest.mark.parametrize(
    ("bit_depth", "color_type"),
    [(1, 0), (8, 0), (16, 0), (8, 2), (16, 2), (8, 3), (8, 4), (16, 4), (8, 6), (16, 6)],
)
def test_a_row_wider_than_pillow_can_address_is_refused_from_the_header(bit_depth: int, color_type: int) -> None:
    """Pillow fails a row of more than about 2^31 bits with a MemoryError before reading a pixel (a 68-byte PNG of
    100,000,000x1 was a 500 inside vLLM). The widest row the check lets through decodes without one; one pixel
    more is refused as too_many_pixels, whatever the pixel limit."""
    narrow, wide = 1, 2**31  # a binary search for the widest row the check lets through
    while wide - narrow > 1:
        middle = (narrow + wide) // 2
        passes = _passes(png_header_only(middle, 1, bit_depth=bit_depth, color_type=color_type))
        narrow, wide = (middle, wide) if passes else (narrow, middle)
    widest = narrow
    with pytest.raises(BadImageError) as refused:
        check_image_bytes(png_header_only(widest + 1, 1, bit_depth=bit_depth, color_type=color_type))
    assert refused.value.reason == "too_many_pixels" and "wide" in refused.value.message
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        image = Image.open(io.BytesIO(png_header_only(widest, 1, bit_depth=bit_depth, color_type=color_type)))
        with pytest.raises(OSError, match="truncated"):  # the data ends early, as it does: no MemoryError
            image.load()
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def _passes(data: bytes) -> bool:
    try:
        check_image_bytes(data)
    except BadImageError:
        return False
    return True
