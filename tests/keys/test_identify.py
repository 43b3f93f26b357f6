"""``mmobs.keys.identify`` leaves out only plugins that fail, so Pillow identifies every file as before.

The oracle is Pillow itself: each left-out plugin's factory, called on bytes
its test says it cannot open, must raise ``SyntaxError`` (what ``Image.open``
catches to go on); and ``Image.open`` over the shorter order must return what
it returns over vLLM's whole order, or fail the same way, for the corpus's
images, files the left-out plugins do open, and Hypothesis's bytes.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from mmobs.keys.formats import DEFAULT_FORMATS, VLLM_FORMATS
from mmobs.keys.identify import CANNOT_OPEN, clear_cache, identification_order
from scripts.corpus.build import build_corpus
from tests.support.images import encode, jpeg_bytes, noisy_image, png_bytes

ALL_ALLOWED = tuple(VLLM_FORMATS)

# The IM files these tests write and read are the point, not Pillow's notice that IM goes in Pillow 15.
pytestmark = pytest.mark.filterwarnings("ignore:IM image format is deprecated:DeprecationWarning")


def _reading(data: bytes, formats: tuple[str, ...] | None) -> tuple[Any, ...]:
    """What ``Image.open`` makes of ``data`` over ``formats``: the plugin, mode and size, or the error's type."""
    try:
        image = Image.open(io.BytesIO(data), formats=formats)
    except Exception as error:  # the type is what is compared
        return ("raised", type(error))
    return (type(image), image.format, image.mode, image.size)


def _whole_order() -> tuple[str, ...]:
    """vLLM's formats that this Pillow has: Pillow 10.1 has no AVIF, and ``Image.open`` raises ``KeyError``
    for a format it was given and does not have (once every other has refused the file)."""
    Image.init()
    return tuple(name for name in VLLM_FORMATS if name in Image.OPEN)


def _same_reading(data: bytes) -> None:
    for allowed in (DEFAULT_FORMATS, ALL_ALLOWED):
        assert _reading(data, identification_order(allowed, data)) == _reading(data, _whole_order()), allowed


def test_every_left_out_plugin_is_registered_as_read() -> None:
    """The shortcut applies: each plugin is Pillow's class, with no accept function, in vLLM's formats."""
    Image.init()
    for name, (plugin, _) in CANNOT_OPEN.items():
        assert Image.OPEN[name] == (plugin, None)
        assert name in VLLM_FORMATS


def test_jpegs_and_pngs_are_tried_as_what_they_are_only() -> None:
    """No plugin is built to fail: vLLM's other 36 formats refuse these prefixes, or cannot open the bytes."""
    for allowed, data, found in (
        (DEFAULT_FORMATS, jpeg_bytes(), "JPEG"),
        (DEFAULT_FORMATS, png_bytes(), "PNG"),
        (ALL_ALLOWED, encode(noisy_image("RGB", (8, 8)), "GIF"), "GIF"),
    ):
        order = identification_order(allowed, data) or ()
        assert order[: order.index(found) + 1] == (found,)  # those after it (SPIDER, TGA) are never reached


def test_a_plugin_not_pillows_own_is_always_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    """An accept function from outside Pillow may read more than the prefix: Image.open calls it, every time."""

    class Foreign(Image.Image):
        pass

    monkeypatch.setitem(Image.OPEN, "FOREIGN", (Foreign, lambda prefix: False))
    monkeypatch.setitem(Image.OPEN, "JPEG", (Image.OPEN["JPEG"][0], lambda prefix: prefix[:2] == b"\xff\xd8"))
    try:
        order = identification_order((*DEFAULT_FORMATS, "FOREIGN"), png_bytes()) or ()
        assert (order[0], order[1], order[-1]) == ("JPEG", "PNG", "FOREIGN")  # both kept, though both refuse
    finally:
        clear_cache()


def test_no_allow_list_means_pillows_own_order() -> None:
    assert identification_order(None, jpeg_bytes()) is None


def test_files_the_plugins_do_open_keep_them() -> None:
    """An IM file (Pillow writes them) and bytes each test cannot rule out keep their plugin in the order."""
    im_file = encode(noisy_image("L", (8, 8)), "IM")
    assert "IM" in (identification_order(ALL_ALLOWED, im_file) or ())
    assert _reading(im_file, identification_order(ALL_ALLOWED, im_file))[1] == "IM"
    for name, data in (
        ("IPTC", b"\x1c\x03\x3c\x00\x02" + b"\0" * 64),
        ("PCD", b"\0" * 2048 + b"PCD_" + b"\0" * 1600),
        ("IMT", b"xyz\n" + b"\0" * 64),
        ("IMT", b"* a comment\npixel n8\n" + b"\0" * 64),
        ("IM", b"\r\rImage type: L image\n" + b"\0" * 64),
    ):
        assert name in (identification_order(ALL_ALLOWED, data) or ()), name
        _same_reading(data)


@pytest.mark.parametrize("case", [c for c in build_corpus() if c.kind == "image"], ids=lambda c: c.name)
def test_corpus_images_are_read_as_over_the_whole_order(case: Any) -> None:
    _same_reading(case.payload)


_PREFIXES = st.sampled_from(
    [
        b"",
        b"\xff\xd8\xff",
        b"\x89PNG\r\n\x1a\n",
        b"\x1c",
        b"\0\0\0\0\0",
        b"\r\n",
        b"*\n",
        b" x\n",
        b"Image type: L\n",
        b"width 4\nheight 4\npixel n8\n\x0c",
    ]
)


@settings(max_examples=300, deadline=None)
@given(prefix=_PREFIXES, body=st.binary(max_size=2200), pcd=st.booleans())
def test_a_plugin_left_out_raises_syntax_error_on_those_bytes(prefix: bytes, body: bytes, pcd: bool) -> None:
    data = prefix + body
    if pcd:
        data = data.ljust(2048, b"\0")[:2048] + b"PCD_" + body
    for plugin, cannot in CANNOT_OPEN.values():
        if cannot(data):
            with pytest.raises(SyntaxError):
                plugin(io.BytesIO(data))
    _same_reading(data)


_REAL_FILES = [
    encode(noisy_image(mode, (16, 12)), fmt)
    for mode, fmt in (("RGB", "JPEG"), ("RGBA", "PNG"), ("P", "GIF"), ("RGB", "WEBP"), ("RGB", "TIFF"), ("RGB", "BMP"))
] + [encode(noisy_image("L", (8, 8)), "IM"), encode(noisy_image("RGB", (40, 40)), "PPM")]


@settings(max_examples=400, deadline=None)
@given(
    original=st.sampled_from(_REAL_FILES),
    edits=st.lists(st.tuples(st.integers(0, 2099), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_damaged_real_files_are_read_as_over_the_whole_order(original: bytes, edits: list[tuple[int, int]]) -> None:
    """Real files of eight formats with bytes overwritten where the tests and accept functions look."""
    data = bytearray(original.ljust(2100, b"\0"))
    for position, value in edits:
        data[position] = value
    _same_reading(bytes(data))
