"""The image loader: vLLM's decoding semantics, and clean refusals of bad input.

Every refusal must be a ``BadImageError`` (a ``ValueError``, so it maps to
400, never 500) with a reason from the closed set, reported to the observer
exactly once. Nothing Pillow raises (``OSError``, ``SyntaxError``,
``struct.error``, ``DecompressionBombError``) may escape.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mmobs import (
    BadImageError,
    ImageMediaIO,
    MultiModalHasher,
    load_data_url,
    normalize_image,
    safe_exif_transpose,
)
from tests.support import golden
from tests.support.images import (
    BAD_TIFF_HEADER,
    as_base64,
    as_data_url,
    encode,
    jpeg_bytes,
    noisy_image,
    png_bytes,
    png_with_exif_chunk,
    png_with_orientation,
    written,
)

pytestmark = pytest.mark.usefixtures("silent_observer")

hash_kwargs = MultiModalHasher.hash_kwargs


# =============================================================================
# Options are validated at construction
# =============================================================================


@pytest.mark.parametrize(
    "color",
    [(256, 0, 0), (-1, 0, 0), (1, 2), (1, 2, 3, 4), "abc", b"abc", (1.0, 2, 3), (True, 0, 0), None, 5, {1, 2, 3}],
    ids=repr,
)
def test_bad_background_color_is_rejected(color: Any) -> None:
    """rgba_background_color must be three ints in 0..255 (bools and floats are not ints here)."""
    with pytest.raises(ValueError, match="rgba_background_color"):
        ImageMediaIO(rgba_background_color=color)


@pytest.mark.parametrize("color", [[0, 0, 0], (255, 255, 255), (1, 2, 3)], ids=repr)
def test_good_background_color_is_stored_as_tuple(color: Any) -> None:
    """A valid colour is normalised to a tuple, which is what io_config carries."""
    assert ImageMediaIO(rgba_background_color=color).rgba_background_color == tuple(color)


@pytest.mark.parametrize("mode", ["RGBB", "rgb", "", "JPEG", "I;32"])
def test_unknown_image_mode_is_rejected(mode: str) -> None:
    """A mode Pillow does not know fails at construction, naming the valid ones."""
    with pytest.raises(ValueError, match="image_mode") as info:
        ImageMediaIO(image_mode=mode)
    assert "RGB" in str(info.value)


@pytest.mark.parametrize("mode", [None, "RGB", "RGBA", "L", "1", "P", "I;16", "F", "CMYK"])
def test_known_image_modes_are_accepted(mode: str | None) -> None:
    assert ImageMediaIO(image_mode=mode).image_mode == mode


@pytest.mark.parametrize("option", ["max_pixels", "max_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, "100", None], ids=repr)
def test_bad_limits_are_rejected(option: str, value: Any) -> None:
    """Limits are positive integers."""
    with pytest.raises(ValueError, match=option):
        ImageMediaIO(**{option: value})


@pytest.mark.parametrize("option", ["max_pixels", "max_bytes"])
def test_bool_limits_are_rejected(option: str) -> None:
    """``True`` is not a pixel or byte count (the colour check already refuses bools)."""
    with pytest.raises(ValueError, match=option):
        ImageMediaIO(**{option: True})


# =============================================================================
# Entry points and io_config
# =============================================================================


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(lambda: png_bytes(), id="png"),
        pytest.param(lambda: jpeg_bytes(), id="jpeg"),
        pytest.param(lambda: png_bytes("RGBA"), id="png-rgba"),
    ],
)
def test_entry_points_agree(data: Callable[[], bytes], tmp_path: Path) -> None:
    """load_bytes, load_base64 (str and bytes), load_file and load_data_url give one key."""
    raw = data()
    loader = ImageMediaIO()
    loaded = {
        "bytes": loader.load_bytes(raw),
        "bytearray": loader.load_bytes(bytearray(raw)),
        "base64-str": loader.load_base64("image/png", as_base64(raw)),
        "base64-bytes": loader.load_base64("image/png", as_base64(raw).encode()),
        "file": loader.load_file(written(tmp_path, raw)),
        "data-url": load_data_url(as_data_url(raw), loader),
        "data-url-octet-stream": load_data_url(as_data_url(raw, "application/octet-stream"), loader),
        "data-url-uppercase": load_data_url("DATA:IMAGE/PNG;BASE64," + as_base64(raw), loader),
    }
    expected_key = hash_kwargs("blake3", image=loader.load_bytes(raw))
    expected_pixels = hash_kwargs("blake3", image=loader.load_bytes(raw).media)
    for name, media in loaded.items():
        assert media.original_bytes == raw, name
        assert type(media.original_bytes) is bytes, name
        assert hash_kwargs("blake3", image=media) == expected_key, name
        assert hash_kwargs("blake3", image=media.media) == expected_pixels, name


@pytest.mark.parametrize("wrap", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_mime_wrapped_base64_is_accepted(wrap: str) -> None:
    """MIME-style base64 (lines of 76 characters) decodes to the same image."""
    raw = png_bytes()
    wrapped = base64.encodebytes(raw).decode("ascii").replace("\n", wrap)
    assert wrap in wrapped.strip()
    loader = ImageMediaIO()
    expected = hash_kwargs("blake3", image=loader.load_bytes(raw))
    assert hash_kwargs("blake3", image=loader.load_base64("image/png", wrapped)) == expected
    assert hash_kwargs("blake3", image=load_data_url("data:image/png;base64," + wrapped)) == expected


def test_io_config_is_none_without_conversion() -> None:
    """Already in the target mode (or no target): no io_config, so the key is the bytes alone."""
    assert ImageMediaIO().load_bytes(png_bytes("RGB")).io_config is None
    assert ImageMediaIO().load_bytes(jpeg_bytes()).io_config is None
    kept = ImageMediaIO(image_mode=None).load_bytes(png_bytes("RGBA"))
    assert kept.io_config is None
    assert kept.media.mode == "RGBA"


@pytest.mark.parametrize(
    ("source_mode", "options", "expected"),
    [
        ("RGBA", {}, {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}),
        ("RGBA", {"rgba_background_color": [0, 0, 0]}, {"image_mode": "RGB", "rgba_background_color": (0, 0, 0)}),
        ("L", {}, {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}),
        ("RGB", {"image_mode": "L"}, {"image_mode": "L", "rgba_background_color": (255, 255, 255)}),
    ],
)
def test_io_config_is_set_when_converted(source_mode: str, options: dict[str, Any], expected: dict[str, Any]) -> None:
    """A conversion records exactly the options that changed the pixels."""
    media = ImageMediaIO(**options).load_bytes(png_bytes(source_mode))
    assert media.io_config == expected
    assert type(media.io_config["rgba_background_color"]) is tuple
    assert media.media.mode == expected["image_mode"]
    assert media.media.format == "PNG"


def test_rgba_is_composited_onto_the_background() -> None:
    """Transparent pixels take the background colour; opaque ones keep theirs."""
    rgba = Image.new("RGBA", (2, 1))
    rgba.putpixel((0, 0), (10, 20, 30, 0))
    rgba.putpixel((1, 0), (200, 100, 50, 255))
    media = ImageMediaIO(rgba_background_color=(1, 2, 3)).load_bytes(encode(rgba, "PNG"))
    assert media.media.mode == "RGB"
    assert [media.media.getpixel((x, 0)) for x in range(2)] == [(1, 2, 3), (200, 100, 50)]


def _transparent_sources() -> dict[str, bytes]:
    """One encoded image per way of carrying transparency, each with one transparent pixel."""
    la = Image.new("LA", (2, 1))
    la.putpixel((0, 0), (10, 0))
    la.putpixel((1, 0), (200, 255))
    palette = Image.new("P", (2, 1))
    palette.putpalette([10, 20, 30, 200, 100, 50])
    palette.putpixel((1, 0), 1)
    gray = Image.new("L", (2, 1))
    gray.putpixel((1, 0), 200)
    rgb = Image.new("RGB", (2, 1))
    rgb.putpixel((1, 0), (200, 100, 50))
    return {
        "LA": encode(la, "PNG"),
        "P+tRNS": encode(palette, "PNG", transparency=0),
        "L+tRNS": encode(gray, "PNG", transparency=0),
        "RGB+tRNS": encode(rgb, "PNG", transparency=(0, 0, 0)),
    }


@pytest.mark.parametrize("source", ["LA", "P+tRNS", "L+tRNS", "RGB+tRNS"])
def test_every_transparency_is_composited_onto_the_background(source: str) -> None:
    """vLLM composites any image with transparency (LA, PA, a tRNS entry), not only RGBA.

    The transparent pixel takes the background colour; io_config is set even
    for an RGB image whose only change is its transparent colour.
    """
    media = ImageMediaIO(rgba_background_color=(1, 2, 3)).load_bytes(_transparent_sources()[source])
    assert media.media.mode == "RGB"
    assert media.media.getpixel((0, 0)) == (1, 2, 3)
    assert media.media.getpixel((1, 0))[0] == 200
    assert media.io_config == {"image_mode": "RGB", "rgba_background_color": (1, 2, 3)}


def test_transparency_is_kept_when_converting_to_another_mode() -> None:
    """Compositing belongs to RGB only: to L, an LA image goes through convert."""
    media = ImageMediaIO(image_mode="L").load_bytes(_transparent_sources()["LA"])
    assert media.media.mode == "L"
    assert media.media.getpixel((0, 0)) == 10


def test_background_colour_changes_the_key() -> None:
    """Different compositing, different key (io_config is part of it)."""
    data = png_bytes("RGBA")
    white = hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))
    black = hash_kwargs("blake3", image=ImageMediaIO(rgba_background_color=(0, 0, 0)).load_bytes(data))
    assert white != black


def test_load_file_missing_raises_oserror(tmp_path: Path) -> None:
    """A missing file is the caller's problem (documented), not a bad image."""
    with pytest.raises(FileNotFoundError):
        ImageMediaIO().load_file(tmp_path / "missing.png")


# =============================================================================
# EXIF orientation: normalize_image and safe_exif_transpose
# =============================================================================


def test_orientation_6_is_applied() -> None:
    """Orientation 6 means "rotate 90 degrees clockwise to display"."""
    data, stored = png_with_orientation(6, size=(4, 2))
    image = Image.open(io.BytesIO(data))
    normalized = normalize_image(image)
    assert normalized.size == (2, 4)
    expected = stored.transpose(Image.Transpose.ROTATE_270)
    assert np.array_equal(np.asarray(normalized), np.asarray(expected))
    assert normalized.format == "PNG"
    assert 0x0112 not in normalized.getexif()


def test_loader_applies_orientation() -> None:
    """load_bytes returns the displayed orientation, keyed by the original bytes."""
    data, stored = png_with_orientation(6, size=(4, 2))
    media = ImageMediaIO().load_bytes(data)
    assert media.media.size == (2, 4)
    assert np.array_equal(np.asarray(media.media), np.asarray(stored.transpose(Image.Transpose.ROTATE_270)))
    assert media.io_config is None


def test_safe_exif_transpose_in_place_rotates_and_returns_none() -> None:
    """in_place=True mirrors ImageOps: the image itself turns, the result is None."""
    data, stored = png_with_orientation(6, size=(4, 2))
    image = Image.open(io.BytesIO(data))
    assert safe_exif_transpose(image, in_place=True) is None
    assert image.size == (2, 4)
    assert np.array_equal(np.asarray(image), np.asarray(stored.transpose(Image.Transpose.ROTATE_270)))


BAD_EXIF_PNGS = {
    "golden-bad-exif-chunk.png": lambda: golden.input_bytes("bad-exif-chunk.png"),
    "built-bad-exif-chunk": lambda: png_with_exif_chunk(BAD_TIFF_HEADER),
}


def _open_fresh(name: str) -> Image.Image:
    return Image.open(io.BytesIO(BAD_EXIF_PNGS[name]()))


@pytest.mark.parametrize("name", sorted(BAD_EXIF_PNGS))
def test_normalize_image_tolerates_malformed_exif(name: str, record: Any) -> None:
    """Malformed EXIF: no exception, one transpose_failed report, the image unchanged."""
    image = _open_fresh(name)
    with record() as rec:
        normalized = normalize_image(image)
    assert normalized is image
    (event,) = rec.transpose_failures
    assert type(event.error) is SyntaxError
    assert event.image is image
    reference = _open_fresh(name)
    reference.load()
    assert normalized.size == reference.size
    assert np.array_equal(np.asarray(normalized), np.asarray(reference))


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("name", sorted(BAD_EXIF_PNGS))
def test_safe_exif_transpose_tolerates_malformed_exif(name: str, in_place: bool, record: Any) -> None:
    """The drop-in for ImageOps.exif_transpose: same return contract, never raises."""
    image = _open_fresh(name)
    with record() as rec:
        result = safe_exif_transpose(image, in_place=in_place)
    assert result is (None if in_place else image)
    assert len(rec.transpose_failures) == 1
    reference = _open_fresh(name)
    reference.load()
    assert np.array_equal(np.asarray(image), np.asarray(reference))


def test_loader_reports_the_tolerated_transpose_once(record: Any) -> None:
    """Loading the bad-eXIf PNG reports exactly one transpose failure and still succeeds."""
    with record() as rec:
        media = ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-chunk.png"))
    assert media.media.size == (16, 12)
    assert [type(e.error) for e in rec.transpose_failures] == [SyntaxError]
    assert rec.bad_images == []


# =============================================================================
# Format allow-list
# =============================================================================


@pytest.mark.parametrize("fmt", ["PCX", "TGA", "PPM", "ICO", "SGI"])
def test_formats_outside_the_allow_list_are_refused_by_name(fmt: str) -> None:
    """Decoders clients do not need are not reached by default; the refusal names the format found."""
    # An ICO's sizes are named: Pillow 10.1's default sizes start at 16, and it writes an 8x8 ICO empty.
    data = encode(noisy_image("RGB", (8, 8)), fmt, **({"sizes": [(8, 8)]} if fmt == "ICO" else {}))
    with pytest.raises(BadImageError) as caught:
        ImageMediaIO().load_bytes(data)
    assert caught.value.reason == "unsupported_format"
    assert f"a {fmt} image" in caught.value.message
    assert "send one of JPEG, PNG, WEBP, GIF, BMP, TIFF" in caught.value.message
    assert ImageMediaIO(formats=None).load_bytes(data).media.size == (8, 8)
    assert ImageMediaIO(formats=[fmt.lower()]).load_bytes(data).media.size == (8, 8)


@pytest.mark.parametrize("formats", ["PNG", ["NOPE"], [], [1]])
def test_bad_format_lists_are_refused_at_construction(formats: object) -> None:
    with pytest.raises(ValueError, match="format"):
        ImageMediaIO(formats=formats)  # type: ignore[arg-type]


def test_a_polyglot_is_identified_in_vllms_order_then_refused() -> None:
    """A PNG that the PCD plugin also accepts is a PCD file to vLLM (PCD comes first in its list).

    Keyed as a PNG it would get a key vLLM never computes; mmobs refuses it as
    the PCD image it is, and opens it as vLLM does when PCD is allowed.
    """
    data = bytearray(png_bytes("RGBA", size=(64, 64)))
    data += b"\x00" * max(0, 2048 + 8 - len(data))
    data[2048:2055] = b"PCD_IPI"
    polyglot = bytes(data)
    with pytest.raises(BadImageError) as refused:
        ImageMediaIO().load_bytes(polyglot)
    assert refused.value.reason == "unsupported_format" and "PCD" in refused.value.message
    assert ImageMediaIO(formats=("PCD", "PNG")).open_header(polyglot).format == "PCD"
