"""Proof that the no-decode key path (``mmobs.keys.from_bytes``) gives the real vLLM's key, input by input.

The oracle is vLLM 0.33.0 itself: ``MultiModalHasher.hash_kwargs(alg,
image=ImageMediaIO(image_mode, rgba_background_color=...).load_bytes(data))``.
Every golden input and every image case of the corpus (``scripts/make_corpus.py``),
for several image modes and background colours, and a Hypothesis run over
formats, modes, transparency, animation, EXIF orientations, malformed EXIF and
damaged bytes, must satisfy:

* when vLLM accepts the image and mmobs keys it, the keys are equal;
* when mmobs keys it from the header alone (``key_path="header"``), the
  header's decision (convert or not) is the one the image vLLM's loader ends
  up with implies, for every ``image_mode`` the header decides (a stronger
  check: it catches a wrong decision the tested modes happen not to expose);
* otherwise mmobs decodes (``header_decoded``) or refuses: never a wrong key.

``LEDGER`` counts what was compared; the last test prints it and checks that the
run compared enough keys to mean something. vLLM is required
(``tests.support.vllm_oracle.require_vllm``): without it these tests skip with a
reason, or fail under ``MMOBS_REQUIRE_VLLM=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import io
import os
import struct
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image, UnidentifiedImageError

from mmobs.errors import BadImageError
from mmobs.events import observing
from mmobs.keys.from_bytes import ImageKey, key_for_bytes, key_image
from mmobs.keys.loader import DEFAULT_MAX_PIXELS, ImageMediaIO, has_transparency
from tests.support import golden
from tests.support.images import EXIF_PREFIX, ORIENTATION_TAG, PNG_SIGNATURE, png_chunk
from tests.support.vllm_oracle import require_vllm

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
]

# -- the oracle ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm() -> Iterator[Any]:
    """vLLM's hasher and loader (``tests.support.vllm_oracle``), and its image module for the loaded-state check."""
    oracle = require_vllm()
    from vllm.multimodal import image as image_module

    # vLLM's pixel limit, aligned with the loader's: without it, a 56-megapixel
    # header in the corpus would have vLLM allocate the whole buffer.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_MAX_IMAGE_PIXELS", str(DEFAULT_MAX_PIXELS))
        assert oracle.envs.VLLM_MAX_IMAGE_PIXELS == DEFAULT_MAX_PIXELS  # read lazily: check it took
        yield oracle.hasher, image_module, oracle.image_media_io, oracle.allowed_formats


def vllm_key(vllm: Any, data: bytes, algorithm: str, image_mode: str | None, color: tuple[int, int, int]) -> str | None:
    """vLLM's key for ``data``, or None when its loader refuses the image."""
    hasher, _, image_media_io, _ = vllm
    try:
        media = image_media_io(image_mode, rgba_background_color=color).load_bytes(data)
    except Exception:
        return None
    return hasher.hash_kwargs(algorithm, image=media)


def vllm_state(vllm: Any, data: bytes) -> tuple[str, bool] | None:
    """(mode, transparency) of the image vLLM's loader converts, or None when it refuses it.

    vLLM's own steps: open with its allow-list, EXIF transpose (tolerant), load.
    """
    _, image_module, _, _ = vllm
    try:
        image = image_module.open_image(io.BytesIO(data))
        image = image_module.normalize_image(image)
        image.load()
    except Exception:
        return None
    return image.mode, has_transparency(image)


# -- what is compared ----------------------------------------------------------------

MODES: tuple[str | None, ...] = ("RGB", None, "L", "RGBA")
COLORS: tuple[tuple[int, int, int], ...] = ((255, 255, 255), (0, 0, 0), (12, 200, 77))
LEDGER: Counter[str] = Counter()


def _vllm_formats(vllm: Any) -> tuple[str, ...]:
    return vllm[3]


def compare(
    vllm: Any,
    data: bytes,
    image_mode: str | None,
    color: tuple[int, int, int],
    *,
    io: ImageMediaIO | None = None,
    algorithm: str = "blake3",
    label: str = "",
) -> str:
    """Check one input; return the outcome, for the ledger and Hypothesis' statistics."""
    expected = vllm_key(vllm, data, algorithm, image_mode, color)
    try:
        with observing(None):
            if io is None:
                found: ImageKey | None = None
                key = key_for_bytes(data, algorithm, image_mode, color)
            else:
                found = key_image(io, data, algorithm)
                key = found.key
    except BadImageError:
        outcome = "vllm_accepts_mmobs_refuses" if expected is not None else "both_refuse"
    else:
        if expected is None:
            outcome = "vllm_refuses_mmobs_keys"
        else:
            assert key == expected, f"{label}: key differs from vLLM's (image_mode={image_mode!r}, color={color})"
            outcome = "equal"
        if found is not None and found.key_path == "header" and io is not None:
            check_every_target_mode(vllm, data, io.formats, label)
        if found is not None:
            LEDGER[f"path_{found.key_path}"] += 1
    LEDGER[outcome] += 1
    return outcome


def check_every_target_mode(vllm: Any, data: bytes, formats: tuple[str, ...] | None, label: str) -> None:
    """For every ``image_mode`` the header decides, its decision is the one vLLM's loaded image implies.

    Stronger than comparing keys for the modes under test: a header decision
    that is wrong only for some other mode fails here too.
    """
    state = vllm_state(vllm, data)
    if state is None:
        return
    mode, transparent = state
    for target in _TARGET_MODES:
        try:
            with observing(None):
                found = key_image(ImageMediaIO(target, formats=formats), data)
        except BadImageError:
            continue
        if found.key_path == "header":
            converts = target is not None and ((target == "RGB" and transparent) or mode != target)
            assert (found.io_config is not None) == converts, (
                f"{label}: for image_mode={target!r} the header says convert={not converts}, "
                f"but vLLM loads mode {mode} (transparency {transparent})"
            )
            LEDGER["header_decisions_checked"] += 1


# -- golden inputs and the corpus ------------------------------------------------------


def _golden_inputs() -> list[Path]:
    return sorted((golden.GOLDEN_DIR / "inputs").iterdir())


def _corpus_images() -> list[Any]:
    if "make_corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "scripts" / "make_corpus.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["make_corpus"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return [case for case in sys.modules["make_corpus"].build_corpus() if case.kind == "image"]


@pytest.mark.parametrize("path", _golden_inputs(), ids=lambda p: p.name)
def test_golden_inputs_key_as_vllm(vllm: Any, path: Path) -> None:
    data = path.read_bytes()
    outcomes = Counter()
    for image_mode in MODES:
        for color in COLORS:
            outcomes[compare(vllm, data, image_mode, color, label=path.name)] += 1
            # The same through key_image, with vLLM's allow-list, for the header-state check.
            compare(
                vllm,
                data,
                image_mode,
                color,
                io=ImageMediaIO(image_mode, color, formats=_vllm_formats(vllm)),
                label=path.name,
            )
    for algorithm in ("sha256", "sha512"):
        compare(vllm, data, "RGB", COLORS[0], algorithm=algorithm, label=path.name)
    LEDGER["golden_inputs"] += 1
    assert outcomes["equal"] == len(MODES) * len(COLORS), outcomes  # vLLM accepts every golden input


CORPUS_IMAGES = _corpus_images()


@pytest.mark.parametrize("case", CORPUS_IMAGES, ids=lambda c: c.name)
def test_corpus_images_key_as_vllm(vllm: Any, case: Any) -> None:
    data = bytes(case.payload)
    for image_mode in MODES:
        for color in COLORS:
            compare(vllm, data, image_mode, color, label=case.name)
        compare(
            vllm,
            data,
            image_mode,
            COLORS[2],
            io=ImageMediaIO(image_mode, COLORS[2], formats=_vllm_formats(vllm)),
            label=case.name,
        )
    LEDGER["corpus_images"] += 1


# -- the property run ------------------------------------------------------------------

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
_TARGET_MODES = ("RGB", None, "L", "RGBA", "P", "CMYK", "LA", "1", "I;16", "F", "I", "YCbCr", "PA")


def _pixels(mode: str, size: tuple[int, int], seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    image = Image.frombytes(mode, size, rng.bytes(size[0] * size[1] * 8))
    if mode in ("P", "PA"):
        image.putpalette(rng.bytes(768))
    return image


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
    image = _pixels(mode, size, seed)
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
        frames = [_pixels(mode, size, seed + i + 1) for i in range(draw(st.integers(1, 2)))]
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
        data, label = _png_late_trns(data, payload), label + "/tRNS-after-IDAT"
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


def _png_late_trns(data: bytes, payload: bytes) -> bytes:
    """``data`` with a tRNS chunk inserted just before IEND (after the image data)."""
    end = data.rfind(b"IEND")
    if not data.startswith(PNG_SIGNATURE) or end < 4:
        return data
    return data[: end - 4] + png_chunk(b"tRNS", payload) + data[end - 4 :]


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
    image_mode=st.sampled_from(_TARGET_MODES),
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
        io_ = ImageMediaIO(image_mode, color, formats=_vllm_formats(vllm))
        outcome = compare(vllm, data, image_mode, color, io=io_, label=label)
    event(outcome)
    event(label.split("/")[0])
    LEDGER["property_examples"] += 1


# -- the cases that must be decoded, one by one --------------------------------------------


def _encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _gifs() -> dict[str, bytes]:
    indexed = Image.frombytes("P", (9, 7), bytes(range(63)))
    indexed.putpalette(np.random.default_rng(6).bytes(768))
    clear = indexed.copy()
    clear.info["transparency"] = 5
    gray = _pixels("L", (9, 7), 7)
    return {
        "p": _encode(indexed, "GIF"),
        "p-transparency": _encode(clear, "GIF", transparency=5),
        "l": _encode(gray, "GIF"),
        "animated-transparency": _encode(
            clear, "GIF", transparency=5, save_all=True, append_images=[indexed], disposal=2
        ),
        "animated-later-transparency": _encode(indexed, "GIF", save_all=True, append_images=[clear]),
        "local-palettes": _encode(
            indexed, "GIF", save_all=True, append_images=[_pixels("P", (9, 7), 8)], optimize=False
        ),
    }


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
    "png-rgb-trns-after-idat": (_png_late_trns(_encode(_pixels("RGB", (9, 7), 1), "PNG"), b"\0\1\0\2\0\3"), "RGB"),
    "png-rgb-trns-after-second-idat": (_png_split_idat_late_trns(), "RGB"),
    "icns-rgb-holds-rgba-header": (_encode(_pixels("RGB", (16, 16), 2), "ICNS"), "RGB"),
    "png-p-to-i16-not-convertible": (_encode(_pixels("P", (9, 7), 3), "PNG"), "I;16"),
    "tiff-lab-to-l-not-convertible": (_encode(_pixels("LAB", (9, 7), 4), "TIFF"), "L"),
}


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
def test_each_case_the_header_cannot_decide_is_decoded(vllm: Any, name: str) -> None:
    data, image_mode = DECODE_CASES[name]
    io_ = ImageMediaIO(image_mode, formats=_vllm_formats(vllm))
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
    image = _pixels(mode, (9, 7), seed)
    image.info["transparency"] = value
    return image


def _header_cases() -> dict[str, bytes]:
    """One input per branch the header decides: each mode, with and without transparency, per format."""
    orientation = Image.Exif()
    orientation[ORIENTATION_TAG] = 6
    px = _pixels
    cases = {
        "jpeg-rgb": _encode(px("RGB", (9, 7), 1), "JPEG"),
        "jpeg-l": _encode(px("L", (9, 7), 2), "JPEG"),
        "jpeg-cmyk": _encode(px("CMYK", (9, 7), 3), "JPEG"),
        "jpeg-progressive-orientation-6": _encode(
            px("RGB", (9, 7), 4), "JPEG", progressive=True, exif=orientation.tobytes()
        ),
        "png-rgb": _encode(px("RGB", (9, 7), 5), "PNG"),
        "png-rgb-trns": _encode(px("RGB", (9, 7), 6), "PNG", transparency=(1, 2, 3)),
        "png-l-trns": _encode(px("L", (9, 7), 7), "PNG", transparency=7),
        "png-1": _encode(px("1", (9, 7), 8), "PNG"),
        "png-p": _encode(px("P", (9, 7), 9), "PNG"),
        "png-p-trns": _encode(px("P", (9, 7), 10), "PNG", transparency=b"\x00\x80\xff"),
        "png-la": _encode(px("LA", (9, 7), 11), "PNG"),
        "png-rgba": _encode(px("RGBA", (9, 7), 12), "PNG"),
        "png-i16": _encode(px("I;16", (9, 7), 13), "PNG"),
        "apng-rgba": _encode(px("RGBA", (9, 7), 14), "PNG", save_all=True, append_images=[px("RGBA", (9, 7), 15)]),
        "gif-p-transparency": _gifs()["p-transparency"],
        "gif-l": _gifs()["l"],
        "webp-rgb": _encode(px("RGB", (9, 7), 16), "WEBP"),
        "webp-rgba-lossless": _encode(px("RGBA", (9, 7), 17), "WEBP", lossless=True),
        "webp-animated": _encode(px("RGB", (9, 7), 18), "WEBP", save_all=True, append_images=[px("RGBA", (9, 7), 19)]),
        "bmp-1": _encode(px("1", (9, 7), 20), "BMP"),
        "bmp-p": _encode(px("P", (9, 7), 21), "BMP"),
        "bmp-rgba": _encode(px("RGBA", (9, 7), 22), "BMP"),
        "tiff-rgb-jpeg": _encode(px("RGB", (16, 16), 23), "TIFF", compression="jpeg"),
        "tiff-rgba-orientation-8": _encode(px("RGBA", (9, 7), 24), "TIFF", tiffinfo={274: 8}),
        "tiff-cmyk": _encode(px("CMYK", (9, 7), 25), "TIFF"),
        "tiff-la": _encode(px("LA", (9, 7), 26), "TIFF"),
        "tiff-i16": _encode(px("I;16", (9, 7), 27), "TIFF"),
        "tiff-p-lzw": _encode(px("P", (9, 7), 28), "TIFF", compression="tiff_lzw"),
    }
    if "AVIF" in Image.SAVE:
        cases["avif-rgba"] = _encode(px("RGBA", (9, 7), 29), "AVIF")
    return cases


HEADER_CASES = _header_cases()


@pytest.mark.parametrize("name", sorted(HEADER_CASES))
def test_each_header_branch_keys_as_vllm_without_decoding(vllm: Any, name: str) -> None:
    data = HEADER_CASES[name]
    for image_mode in (*MODES, "P", "CMYK", "LA"):
        for color in COLORS:
            io_ = ImageMediaIO(image_mode, color, formats=_vllm_formats(vllm))
            with observing(None):
                found = key_image(io_, data)
            assert found.key_path == "header", (name, found)
            assert compare(vllm, data, image_mode, color, io=io_, label=name) == "equal"


def test_a_jpeg_without_scan_data_is_refused_by_both(vllm: Any) -> None:
    whole = _encode(_pixels("RGB", (9, 7), 5), "JPEG")
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
    for name, data in _gifs().items():
        for image_mode in MODES:
            io_ = ImageMediaIO(image_mode, formats=_vllm_formats(vllm))
            assert compare(vllm, data, image_mode, COLORS[0], io=io_, label=f"gif-{name}") == "equal"


_ = _corpus_images  # the property strategy reads make_corpus.EXIF_VARIANTS, loaded above


def test_ledger_compared_enough(vllm: Any) -> None:
    """The run compared enough keys, all of them equal (a difference fails where it is found)."""
    print("\nno-decode key vs vLLM:", dict(sorted(LEDGER.items())))
    if not LEDGER["golden_inputs"] or not LEDGER["corpus_images"]:
        pytest.skip("run with the whole module to check the totals")
    assert LEDGER["equal"] >= 1000, LEDGER
    assert LEDGER["path_header"] >= 100 and LEDGER["path_header_decoded"] >= 20, LEDGER
    assert LEDGER["header_decisions_checked"] >= 1000, LEDGER
    assert LEDGER["decode_case_decoded"] + LEDGER["decode_case_refused"] == len(DECODE_CASES), LEDGER
