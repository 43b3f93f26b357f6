"""The no-decode key path (``mmobs.keys.from_bytes``) against the real vLLM, case by case.

Each branch the header decides (a mode, with and without transparency, per
format) keys as vLLM without decoding; each case the header cannot decide is
decoded (and the header alone would have keyed it wrong); a JPEG without scan
data is refused by both; GIF frame zero keeps its header mode under every
Pillow loading strategy.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections import Counter
from typing import Any

import numpy as np
import pytest
from PIL import Image, UnidentifiedImageError

from mmobs.errors import BadImageError
from mmobs.events import observing
from mmobs.keys.from_bytes import key_for_bytes, key_image
from mmobs.keys.loader import ImageMediaIO, has_transparency
from tests.keys.keys_vllm import (
    COLORS,
    LEDGER,
    MARKS,
    MODES,
    compare,
    encode,
    gifs,
    ledger_since,
    pixels,
    png_late_trns,
    vllm_formats,
    vllm_key,
)
from tests.support.images import ORIENTATION_TAG, PNG_SIGNATURE, png_chunk

pytestmark = MARKS


def _png_split_idat_late_trns() -> bytes:
    """An RGB PNG whose image data spans two IDAT chunks, and a tRNS after them."""
    width, height = 9, 7
    rows = b"".join(b"\x00" + np.random.default_rng(9).bytes(width * 3) for _ in range(height))
    packed = zlib.compress(rows)
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    trns = png_chunk(b"tRNS", b"\0\1\0\2\0\3")
    idat1, idat2 = png_chunk(b"IDAT", packed[:10]), png_chunk(b"IDAT", packed[10:])
    return PNG_SIGNATURE + ihdr + idat1 + idat2 + trns + png_chunk(b"IEND", b"")


DECODE_CASES: dict[str, tuple[bytes, str | None]] = {
    "png-rgb-trns-after-idat": (png_late_trns(encode(pixels("RGB", (9, 7), 1), "PNG"), b"\0\1\0\2\0\3"), "RGB"),
    "png-rgb-trns-after-second-idat": (_png_split_idat_late_trns(), "RGB"),
    "icns-rgb-holds-rgba-header": (encode(pixels("RGB", (16, 16), 2), "ICNS"), "RGB"),
    "png-p-to-i16-not-convertible": (encode(pixels("P", (9, 7), 3), "PNG"), "I;16"),
    "tiff-lab-to-l-not-convertible": (encode(pixels("LAB", (9, 7), 4), "TIFF"), "L"),
}


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
def test_each_case_the_header_cannot_decide_is_decoded(vllm: Any, name: str) -> None:
    data, image_mode = DECODE_CASES[name]
    io_ = ImageMediaIO(image_mode, formats=vllm_formats(vllm))
    expected = vllm_key(vllm, data, "blake3", image_mode, (255, 255, 255))
    with observing(None):
        opened = io_.open_header(data)
        header_io_config = io_.io_config if io_.converts(opened.mode, has_transparency(opened)) else None
        try:
            found = key_image(io_, data)
        except BadImageError:
            assert expected is None, f"{name}: vLLM accepts what the decode refused"
            LEDGER["decode_case_refused"] += 1
            return
    assert found.key_path == "header_decoded" and found.decoded_because, found
    assert found.key == expected
    # Not vacuous: the header alone would have keyed this image wrong.
    assert header_io_config != found.io_config, f"{name}: the header would have decided it right"
    LEDGER["decode_case_decoded"] += 1


def _transparent(mode: str, value: Any, seed: int) -> Image.Image:
    image = pixels(mode, (9, 7), seed)
    image.info["transparency"] = value
    return image


def _header_cases() -> dict[str, bytes]:
    """One input per branch the header decides: each mode, with and without transparency, per format."""
    orientation = Image.Exif()
    orientation[ORIENTATION_TAG] = 6
    px = pixels
    cases = {
        "jpeg-rgb": encode(px("RGB", (9, 7), 1), "JPEG"),
        "jpeg-l": encode(px("L", (9, 7), 2), "JPEG"),
        "jpeg-cmyk": encode(px("CMYK", (9, 7), 3), "JPEG"),
        "jpeg-progressive-orientation-6": encode(
            px("RGB", (9, 7), 4), "JPEG", progressive=True, exif=orientation.tobytes()
        ),
        "png-rgb": encode(px("RGB", (9, 7), 5), "PNG"),
        "png-rgb-trns": encode(px("RGB", (9, 7), 6), "PNG", transparency=(1, 2, 3)),
        "png-l-trns": encode(px("L", (9, 7), 7), "PNG", transparency=7),
        "png-1": encode(px("1", (9, 7), 8), "PNG"),
        "png-p": encode(px("P", (9, 7), 9), "PNG"),
        "png-p-trns": encode(px("P", (9, 7), 10), "PNG", transparency=b"\x00\x80\xff"),
        "png-la": encode(px("LA", (9, 7), 11), "PNG"),
        "png-rgba": encode(px("RGBA", (9, 7), 12), "PNG"),
        "png-i16": encode(px("I;16", (9, 7), 13), "PNG"),
        "apng-rgba": encode(px("RGBA", (9, 7), 14), "PNG", save_all=True, append_images=[px("RGBA", (9, 7), 15)]),
        "gif-p-transparency": gifs()["p-transparency"],
        "gif-l": gifs()["l"],
        "webp-rgb": encode(px("RGB", (9, 7), 16), "WEBP"),
        "webp-rgba-lossless": encode(px("RGBA", (9, 7), 17), "WEBP", lossless=True),
        "webp-animated": encode(px("RGB", (9, 7), 18), "WEBP", save_all=True, append_images=[px("RGBA", (9, 7), 19)]),
        "bmp-1": encode(px("1", (9, 7), 20), "BMP"),
        "bmp-p": encode(px("P", (9, 7), 21), "BMP"),
        "bmp-rgba": encode(px("RGBA", (9, 7), 22), "BMP"),
        "tiff-rgb-jpeg": encode(px("RGB", (16, 16), 23), "TIFF", compression="jpeg"),
        "tiff-rgba-orientation-8": encode(px("RGBA", (9, 7), 24), "TIFF", tiffinfo={274: 8}),
        "tiff-cmyk": encode(px("CMYK", (9, 7), 25), "TIFF"),
        "tiff-la": encode(px("LA", (9, 7), 26), "TIFF"),
        "tiff-i16": encode(px("I;16", (9, 7), 27), "TIFF"),
        "tiff-p-lzw": encode(px("P", (9, 7), 28), "TIFF", compression="tiff_lzw"),
    }
    if "AVIF" in Image.SAVE:
        cases["avif-rgba"] = encode(px("RGBA", (9, 7), 29), "AVIF")
    return cases


HEADER_CASES = _header_cases()


@pytest.mark.parametrize("name", sorted(HEADER_CASES))
def test_each_header_branch_keys_as_vllm_without_decoding(vllm: Any, name: str) -> None:
    data = HEADER_CASES[name]
    for image_mode in (*MODES, "P", "CMYK", "LA"):
        for color in COLORS:
            io_ = ImageMediaIO(image_mode, color, formats=vllm_formats(vllm))
            with observing(None):
                found = key_image(io_, data)
            assert found.key_path == "header", (name, found)
            assert compare(vllm, data, image_mode, color, io=io_, label=name) == "equal"


def test_a_jpeg_without_scan_data_is_refused_by_both(vllm: Any) -> None:
    whole = encode(pixels("RGB", (9, 7), 5), "JPEG")
    no_scan = whole[: whole.index(b"\xff\xda")]
    assert vllm_key(vllm, no_scan, "blake3", "RGB", (255, 255, 255)) is None
    with observing(None), pytest.raises(BadImageError) as refused:
        key_for_bytes(no_scan)
    try:
        Image.open(io.BytesIO(no_scan))
    except UnidentifiedImageError:
        assert refused.value.reason == "unidentified"  # Pillow 11 and 12 refuse it at open already
    else:
        assert refused.value.reason == "corrupt"  # Pillow 13 opens the header, and the decode fails


@pytest.mark.parametrize("strategy", ["RGB_AFTER_FIRST", "RGB_AFTER_DIFFERENT_PALETTE_ONLY", "RGB_ALWAYS"])
def test_gif_frame_zero_keeps_its_header_mode_under_every_loading_strategy(
    vllm: Any, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import GifImagePlugin

    monkeypatch.setattr(GifImagePlugin, "LOADING_STRATEGY", GifImagePlugin.LoadingStrategy[strategy])
    for name, data in gifs().items():
        for image_mode in MODES:
            io_ = ImageMediaIO(image_mode, formats=vllm_formats(vllm))
            assert compare(vllm, data, image_mode, COLORS[0], io=io_, label=f"gif-{name}") == "equal"


def test_every_case_the_header_cannot_decide_was_decoded_or_refused(
    vllm: Any, ledger_at_module_start: Counter[str]
) -> None:
    """The module's last test: each of ``DECODE_CASES`` went one way or the other, none was left out."""
    ledger = ledger_since(ledger_at_module_start)
    assert ledger["decode_case_decoded"] + ledger["decode_case_refused"] == len(DECODE_CASES), ledger
