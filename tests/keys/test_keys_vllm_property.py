"""The no-decode key path (``mmobs.keys.from_bytes``) against the real vLLM: a Hypothesis run.

Generated files over formats, modes, transparency, animation, EXIF orientations,
malformed EXIF (the corpus's variants) and damaged bytes, keyed by mmobs and by
vLLM 0.33.0's loader and hasher: equal keys, or a header decision vLLM's loaded
image agrees with for every mode, or a decode or a refusal, never a wrong key
(``compare`` in ``keys_vllm.py``).
"""

from __future__ import annotations

import io
import os
import struct
import sys
import zlib
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image

from mmobs.keys.loader import ImageMediaIO
from tests.keys.keys_vllm import (
    COLORS,
    LEDGER,
    MARKS,
    TARGET_MODES,
    compare,
    ledger_since,
    load_make_corpus,
    pixels,
    png_late_trns,
    vllm_formats,
)
from tests.support.images import EXIF_PREFIX, ORIENTATION_TAG, PNG_SIGNATURE, png_chunk

pytestmark = MARKS
load_make_corpus()  # the strategy reads make_corpus.EXIF_VARIANTS

#: Examples per run (derandomized, so CI is reproducible); raise it locally for a longer look.
EXAMPLES = int(os.environ.get("MMOBS_KEYS_EXAMPLES", "400"))

_WRITABLE: dict[str, tuple[str, ...]] = {
    "JPEG": ("L", "RGB", "CMYK"),
    "PNG": ("1", "L", "P", "RGB", "RGBA", "LA", "I;16", "I"),
    "GIF": ("P", "L", "1", "RGB", "RGBA"),
    "WEBP": ("RGB", "RGBA"),
    "BMP": ("1", "L", "P", "RGB", "RGBA"),
    "DIB": ("1", "L", "P", "RGB"),
    "TIFF": ("1", "L", "P", "RGB", "RGBA", "CMYK", "LA", "I;16", "I;16B", "F", "I", "YCbCr", "LAB", "PA"),
    # vLLM's other allowed formats that Pillow can write (decoded, unless image_mode is None):
    "ICO": ("RGB", "RGBA", "P", "L"),
    "TGA": ("L", "P", "RGB", "RGBA", "LA"),
    "PPM": ("1", "L", "I", "RGB", "F"),
    "PCX": ("1", "L", "P", "RGB"),
    "SGI": ("L", "RGB", "RGBA"),
    "QOI": ("RGB", "RGBA"),
    "IM": ("1", "L", "P", "RGB", "RGBA", "LA", "F", "I", "YCbCr", "CMYK"),
    "SPIDER": ("F", "L"),
    "DDS": ("RGB", "RGBA", "L", "LA"),
    "BLP": ("P", "RGBA"),
    "JPEG2000": ("L", "RGB", "RGBA", "LA"),
    "XBM": ("1",),
    "MSP": ("1",),
    "ICNS": ("RGB", "RGBA"),
    "AVIF": ("RGB", "RGBA"),
}
#: The formats keyed from the header come up three times as often as the others (PNG and JPEG five).
_FORMAT_WEIGHTS = tuple(sorted(_WRITABLE)) + ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF") * 2 + ("PNG", "JPEG") * 2
_EXIF_FORMATS = ("JPEG", "PNG", "WEBP", "AVIF")
#: tRNS payloads Pillow accepts, by PNG mode (other lengths are refused or ignored while decoding).
_TRNS: dict[str, st.SearchStrategy[bytes]] = {
    "1": st.binary(min_size=2, max_size=2),
    "L": st.binary(min_size=2, max_size=2),
    "I;16": st.binary(min_size=2, max_size=2),
    "RGB": st.binary(min_size=6, max_size=6),
    "P": st.binary(min_size=1, max_size=32),
}


@st.composite
def exif_blocks(draw: st.DrawFn) -> bytes | None:
    """No EXIF, an orientation (valid or not), an ImageID, or a malformed block from the corpus."""
    kind = draw(st.sampled_from(("none", "orientation", "image_id", "malformed", "random")))
    if kind == "none":
        return None
    if kind == "orientation":
        exif = Image.Exif()
        exif[ORIENTATION_TAG] = draw(st.sampled_from((1, 2, 3, 4, 5, 6, 7, 8, 0, 9, 300)))
        return exif.tobytes()
    if kind == "image_id":
        exif = Image.Exif()
        exif[0x800D] = draw(st.one_of(st.text(max_size=40), st.binary(min_size=16, max_size=16)))
        return exif.tobytes()
    if kind == "malformed":
        variants = sys.modules["make_corpus"].EXIF_VARIANTS
        return EXIF_PREFIX + variants[draw(st.sampled_from(sorted(variants)))][0]
    return EXIF_PREFIX + draw(st.binary(max_size=48))


@st.composite
def image_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """An encoded image and a label: a format, a mode, options, EXIF, and sometimes damage."""
    fmt = draw(st.sampled_from(_FORMAT_WEIGHTS))
    mode = draw(st.sampled_from(_WRITABLE[fmt]))
    size = (draw(st.integers(1, 33)), draw(st.integers(1, 33)))
    seed = draw(st.integers(0, 2**32 - 1))
    image = pixels(mode, size, seed)
    params: dict[str, Any] = {}
    label = f"{fmt}/{mode}/{size}"
    if fmt == "JPEG":
        params.update(
            quality=draw(st.integers(5, 95)),
            progressive=draw(st.booleans()),
            subsampling=draw(st.sampled_from((-1, 0, 1, 2))),
        )
    elif fmt == "WEBP":
        params.update(lossless=draw(st.booleans()), quality=draw(st.integers(1, 100)))
    elif fmt == "TIFF":
        params["compression"] = draw(st.sampled_from((None, "tiff_lzw", "tiff_adobe_deflate", "packbits", "jpeg")))
        if draw(st.booleans()):
            params["tiffinfo"] = {274: draw(st.integers(0, 9))}  # orientation in the IFD itself
    if mode in ("1", "L", "P", "RGB", "I;16", "I") and fmt in ("PNG", "GIF") and draw(st.booleans()):
        params["transparency"] = (draw(st.integers(0, 255)),) * 3 if mode == "RGB" else draw(st.integers(0, 255))
        if mode == "P" and fmt == "PNG" and draw(st.booleans()):
            params["transparency"] = draw(st.binary(min_size=1, max_size=256))
    if fmt in ("GIF", "WEBP", "PNG", "TIFF") and draw(st.integers(0, 3)) == 0:
        frames = [pixels(mode, size, seed + i + 1) for i in range(draw(st.integers(1, 2)))]
        params.update(save_all=True, append_images=frames)
        if fmt == "GIF":
            params.update(disposal=draw(st.integers(0, 3)), optimize=False)
        label += "/animated"
    exif = draw(exif_blocks()) if fmt in _EXIF_FORMATS else None
    if exif is not None:
        params["exif"] = exif
        label += "/exif"
    try:
        buffer = io.BytesIO()
        image.save(buffer, fmt, **params)
        data = buffer.getvalue()
    except Exception:
        data = _fallback_png(image)
        label += "/unwritable->png"
    if fmt == "PNG" and draw(st.integers(0, 2)) == 0:
        payload = draw(_TRNS.get(mode, st.binary(min_size=1, max_size=6)))
        data, label = png_late_trns(data, payload), label + "/tRNS-after-IDAT"
    if fmt == "PNG" and draw(st.integers(0, 5)) == 0:
        data, label = _png16(draw, size, seed), "PNG/16-bit/" + str(size)
    damage = draw(st.sampled_from(("none", "none", "none", "truncate", "flip", "append")))
    if damage == "truncate" and len(data) > 1:
        data = data[: draw(st.integers(1, len(data) - 1))]
    elif damage == "flip":
        position = draw(st.integers(0, len(data) - 1))
        data = data[:position] + bytes([data[position] ^ draw(st.integers(1, 255))]) + data[position + 1 :]
    elif damage == "append":
        data += draw(st.binary(min_size=1, max_size=64))
    return data, f"{label}/{damage}"


def _fallback_png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGBA").save(buffer, "PNG")
    return buffer.getvalue()


def _png16(draw: st.DrawFn, size: tuple[int, int], seed: int) -> bytes:
    """A 16-bit PNG Pillow does not write: grayscale, RGB, gray+alpha or RGBA, maybe with tRNS."""
    color_type = draw(st.sampled_from((0, 2, 4, 6)))
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
    width, height = size
    rng = np.random.default_rng(seed)
    rows = b"".join(b"\x00" + rng.bytes(width * channels * 2) for _ in range(height))
    chunks = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0))
    if color_type in (0, 2) and draw(st.booleans()):
        chunks += png_chunk(b"tRNS", rng.bytes(2 if color_type == 0 else 6))
    return PNG_SIGNATURE + chunks + png_chunk(b"IDAT", zlib.compress(rows)) + png_chunk(b"IEND", b"")


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    file=image_files(),
    image_mode=st.sampled_from(TARGET_MODES),
    color=st.sampled_from(COLORS),
    through_loader_defaults=st.booleans(),
)
def test_property_no_decode_key_is_vllms_or_decoded_or_refused(
    vllm: Any,
    file: tuple[bytes, str],
    image_mode: str | None,
    color: tuple[int, int, int],
    through_loader_defaults: bool,
) -> None:
    data, label = file
    if through_loader_defaults:  # the public function, with the loader's allow-list
        outcome = compare(vllm, data, image_mode, color, label=label)
    else:  # vLLM's allow-list (its other formats), reporting the path taken
        io_ = ImageMediaIO(image_mode, color, formats=vllm_formats(vllm))
        outcome = compare(vllm, data, image_mode, color, io=io_, label=label)
    event(outcome)
    event(label.split("/")[0])
    LEDGER["property_examples"] += 1


def test_the_property_run_compared_enough(vllm: Any, ledger_at_module_start: Counter[str]) -> None:
    """The module's last test: the run was not vacuous, and it reached the header-then-decode path often."""
    ledger = ledger_since(ledger_at_module_start)
    print("\nno-decode key vs vLLM, the property run:", dict(sorted(ledger.items())))
    assert ledger["property_examples"] >= 100 and ledger["path_header_decoded"] >= 20, ledger
