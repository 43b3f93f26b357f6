"""Differential tests, input files: mmobs's cache keys against the real vLLM's (the compatibility oracle).

The golden vectors say what vLLM's keys were; these tests ask the installed vLLM
(``tests/support/vllm_oracle.py``; CI installs 0.33.0 and forbids skipping) what they are,
for every input file (golden inputs, the image cases of the bad-input corpus, and
a few files built here for transparency and for the formats only vLLM opens),
keyed as a plain PIL image and through each loader (vLLM's loader keyed by
vLLM, mmobs's keyed by mmobs), with blake3, sha256 and sha512. Where the loaders
disagree about accepting an input, the difference must be listed (in
``tests/vllm/differential.py``) with its reason.

The other differential modules: ``test_vllm_differential_objects.py`` (the golden
vectors' recipes, vLLM's own objects, deliberate and found differences) and
``test_vllm_differential_property.py`` (the Hypothesis property run).

Both hashers always get fresh objects: Pillow parses EXIF lazily and may raise
only on the first read (``design.md``, "Pillow's EXIF traps"). vLLM keys every
input twice; an input for which vLLM raises or gives two keys has no
deterministic key and must be listed (``NO_DETERMINISTIC_KEY``).

Pixel limit: the loaders are compared under one limit. vLLM's default
(``VLLM_MAX_IMAGE_PIXELS``, 178,956,970, Pillow's bomb error threshold) is
higher than mmobs's (``DEFAULT_MAX_PIXELS``, 50 MP) by design; the tests set
vLLM's to mmobs's, so a 100 MP bomb is refused by both instead of being decoded
by vLLM for seconds.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mmobs import BadImageError, ImageMediaIO, MultiModalHasher
from mmobs.keys.formats import DEFAULT_FORMATS, REFUSED_BY_DEFAULT, VLLM_FORMATS
from mmobs.keys.loader import DEFAULT_MAX_PIXELS
from tests.support import golden
from tests.support.vllm_oracle import REQUIRE_VLLM, NoKey, Oracle, deterministic_key
from tests.vllm.differential import (
    ALGORITHMS,
    KNOWN_LOADER_DIFFERENCES,
    LOADERS,
    MARKS,
    LoaderDifference,
    outcome,
)

pytestmark = MARKS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def same_pixel_limit(oracle: Oracle) -> Iterator[None]:
    """vLLM's loader with mmobs's pixel limit, so the loaders differ only in behaviour."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_MAX_IMAGE_PIXELS", str(DEFAULT_MAX_PIXELS))
        # vllm.envs is read lazily unless a server froze it (enable_envs_cache): check it took.
        assert oracle.envs.VLLM_MAX_IMAGE_PIXELS == DEFAULT_MAX_PIXELS
        yield


# =============================================================================
# Inputs: golden files, corpus image cases, and files built here
# =============================================================================


def _make_corpus() -> Any:
    """scripts/make_corpus.py, loaded once (test_corpus.py and test_fuzz.py share the module)."""
    if "make_corpus" in sys.modules:
        return sys.modules["make_corpus"]
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "scripts" / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_corpus"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _extra_inputs() -> dict[str, bytes | str]:
    """Encoded files the golden set and the corpus lack; a str says why one could not be written.

    Transparency in every form vLLM composites (``_has_transparency``: RGBA, LA,
    PA, or ``transparency`` in ``info``, whatever the mode), with a transparent
    pixel really present; the formats of vLLM's allow-list that Pillow can
    write; EPS as a control (both loaders must refuse it: it would run Ghostscript).
    """
    rng = np.random.default_rng(10)

    def noisy(mode: str, size: tuple[int, int] = (8, 6)) -> Image.Image:
        return Image.frombytes(mode, size, rng.bytes(size[0] * size[1] * 4))

    def encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
        buffer = io.BytesIO()
        image.save(buffer, fmt, **params)
        return buffer.getvalue()

    def palette_image(mode: str = "P", rawmode: str = "RGB") -> Image.Image:
        image = noisy(mode)
        image.putpalette(rng.bytes(256 * len(rawmode)), rawmode)
        return image

    def with_pixel(image: Image.Image, value: Any) -> Image.Image:
        image.putpixel((0, 0), value)
        return image

    recipes: dict[str, Callable[[], bytes]] = {
        "png-p-trns": lambda: encode(with_pixel(palette_image(), 3), "PNG", transparency=3),
        "png-p-rgba-palette": lambda: encode(palette_image(rawmode="RGBA"), "PNG"),
        "png-l-trns": lambda: encode(with_pixel(noisy("L"), 7), "PNG", transparency=7),
        "png-rgb-trns": lambda: encode(with_pixel(noisy("RGB"), (1, 2, 3)), "PNG", transparency=(1, 2, 3)),
        # vLLM composites *any* mode with a transparency entry, not only P, L and RGB.
        "png-i16-trns": lambda: encode(with_pixel(noisy("I;16"), 7), "PNG", transparency=7),
        "png-1-trns": lambda: encode(with_pixel(noisy("1"), 0), "PNG", transparency=0),
        "png-la": lambda: encode(noisy("LA"), "PNG"),
        "png-rgba": lambda: encode(noisy("RGBA"), "PNG"),
        "png-i16": lambda: encode(noisy("I;16"), "PNG"),
        "png-1": lambda: encode(noisy("1"), "PNG"),
        "gif-trns": lambda: encode(with_pixel(palette_image(), 3), "GIF", transparency=3),
        "webp-rgba": lambda: encode(noisy("RGBA"), "WEBP", lossless=True),
        "tiff-la": lambda: encode(noisy("LA"), "TIFF"),
        "tiff-pa": lambda: encode(palette_image("PA"), "TIFF"),
        "tiff-rgba": lambda: encode(noisy("RGBA"), "TIFF"),
        "tiff-cmyk": lambda: encode(noisy("CMYK"), "TIFF"),
        "tiff-f": lambda: encode(noisy("F"), "TIFF"),
        "tiff-i": lambda: encode(noisy("I"), "TIFF"),
        "jpeg-cmyk": lambda: encode(noisy("CMYK"), "JPEG"),
        "jpeg-l": lambda: encode(noisy("L"), "JPEG"),
        "avif-rgba": lambda: encode(noisy("RGBA"), "AVIF"),
        # Formats in vLLM's ALLOWED_IMAGE_FORMATS that Pillow writes.
        "fmt-dib": lambda: encode(noisy("RGB"), "DIB"),
        "fmt-ico": lambda: encode(noisy("RGBA", (16, 16)), "ICO"),
        "fmt-im": lambda: encode(noisy("RGB"), "IM"),
        "fmt-msp": lambda: encode(noisy("1"), "MSP"),
        "fmt-pcx": lambda: encode(noisy("RGB"), "PCX"),
        "fmt-ppm": lambda: encode(noisy("RGB"), "PPM"),
        "fmt-qoi": lambda: encode(noisy("RGBA"), "QOI"),
        "fmt-sgi": lambda: encode(noisy("RGB"), "SGI"),
        "fmt-spider": lambda: encode(noisy("F"), "SPIDER"),
        "fmt-tga": lambda: encode(noisy("RGBA"), "TGA"),
        "fmt-xbm": lambda: encode(noisy("1"), "XBM"),
        "fmt-dds": lambda: encode(noisy("RGBA"), "DDS"),
        "fmt-icns": lambda: encode(noisy("RGBA", (16, 16)), "ICNS"),
        "fmt-jpeg2000": lambda: encode(noisy("RGB"), "JPEG2000"),
        "fmt-eps": lambda: encode(noisy("RGB"), "EPS"),
    }
    inputs: dict[str, bytes | str] = {}
    for name, recipe in recipes.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # IM, deprecated in Pillow 13
                inputs[name] = recipe()
        except Exception as error:
            inputs[name] = f"this Pillow cannot write it ({type(error).__name__}: {error})"
    return inputs


def _all_inputs() -> tuple[dict[str, bytes], dict[str, str]]:
    """(name -> bytes, name -> why it is missing) for every input file of the module."""
    inputs = {f"golden:{path.name}": path.read_bytes() for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())}
    for case in _make_corpus().build_corpus():
        if case.kind == "image":
            inputs[f"corpus:{case.name}"] = case.payload
    missing: dict[str, str] = {}
    for name, data in _extra_inputs().items():
        if isinstance(data, str):
            missing[f"extra:{name}"] = data
        else:
            inputs[f"extra:{name}"] = data
    return inputs, missing


INPUTS, MISSING_INPUTS = _all_inputs()
Image.init()
#: Formats the plain path may open: Pillow's, except EPS (it would run Ghostscript on test input).
_PLAIN_FORMATS = tuple(fmt for fmt in Image.OPEN if fmt != "EPS")


def _plain(data: bytes) -> Image.Image:
    """``Image.open`` + ``load()``: no transpose, no conversion. A fresh object per call."""
    image = Image.open(io.BytesIO(data), formats=_PLAIN_FORMATS)
    image.load()
    return image


def _plain_decodable(data: bytes) -> bool:
    """Whether the plain path has an image to key (bombs above the pixel limit are not decoded)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            image = Image.open(io.BytesIO(data), formats=_PLAIN_FORMATS)
            if image.width * image.height > DEFAULT_MAX_PIXELS:
                return False
            image.load()
        except Exception:
            return False
    return True


PLAIN_INPUTS = [name for name, data in INPUTS.items() if _plain_decodable(data)]

#: "<input>:<path>" -> why vLLM has no deterministic key for it. Empty today: vLLM keys every
#: input of these tests, and each test asserts that an input listed here still has none.
NO_DETERMINISTIC_KEY: dict[str, str] = {}


def _describe(result: Any) -> str:
    if isinstance(result, BadImageError):
        return f"refused ({result.reason}: {str(result)[:120]})"
    if isinstance(result, Exception):
        return f"refused ({type(result).__name__}: {str(result)[:120]})"
    return f"accepted ({result.media.mode} {result.media.size}, io_config={result.io_config})"


def _mmobs_key(algorithm: str, make: Callable[[], Any]) -> str:
    return MultiModalHasher.hash_kwargs(algorithm, image=make())


def _compare_keys(
    oracle: Oracle,
    case_id: str,
    paths: dict[str, tuple[Callable[[], Any], Callable[[], Any]]],
    context: str = "",
) -> None:
    """For each path (label -> (make vLLM's value, make mmobs's value)) and algorithm: equal keys.

    A path where vLLM has no deterministic key must be listed in NO_DETERMINISTIC_KEY
    and is then checked to still have none.
    """
    expected: dict[str, str | NoKey] = {}
    actual: dict[str, str | NoKey] = {}
    for label, (make_vllm, make_mmobs) in paths.items():
        listed = NO_DETERMINISTIC_KEY.get(f"{case_id}:{label}")
        for algorithm in ALGORITHMS:
            vllm_key = deterministic_key(oracle, algorithm, lambda make=make_vllm: {"image": make()})
            if listed is not None:
                assert isinstance(vllm_key, NoKey), f"{case_id}:{label} is listed without a key, but vLLM keys it"
                continue
            assert not isinstance(vllm_key, NoKey), f"{case_id}:{label}: {vllm_key.reason}"
            expected[f"{label}/{algorithm}"] = vllm_key
            actual[f"{label}/{algorithm}"] = _mmobs_key(algorithm, make_mmobs)
    assert actual == expected, f"{case_id}: {context}"


# =============================================================================
# Every input file, plain and through each loader
# =============================================================================


def test_inputs_are_all_there() -> None:
    """The comparison is not vacuous: golden, corpus and extra inputs are all present."""
    kinds = {kind: sum(name.startswith(kind + ":") for name in INPUTS) for kind in ("golden", "corpus", "extra")}
    assert kinds["golden"] >= 10 and kinds["corpus"] >= 200 and kinds["extra"] >= 25, kinds
    # Only writers this Pillow may lack are allowed to be missing, and never in CI.
    assert set(MISSING_INPUTS) <= {"extra:avif-rgba", "extra:fmt-jpeg2000"}, MISSING_INPUTS
    if REQUIRE_VLLM:
        assert not MISSING_INPUTS, MISSING_INPUTS
    assert len(PLAIN_INPUTS) >= 150


@pytest.mark.parametrize("name", PLAIN_INPUTS)
def test_plain_image_key(oracle: Oracle, name: str) -> None:
    """``Image.open`` + ``load()``: mmobs's key is vLLM's, for every algorithm."""
    data = INPUTS[name]
    _compare_keys(oracle, name, {"plain": (lambda: _plain(data), lambda: _plain(data))})


@pytest.mark.usefixtures("same_pixel_limit")
@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("name", list(INPUTS))
def test_loader(oracle: Oracle, name: str, loader: str) -> None:
    """vLLM's loader keyed by vLLM against mmobs's loader keyed by mmobs.

    Both refuse, or both accept and key alike: the loaded ``MediaWithBytes``
    (original bytes plus ``io_config``) and the decoded pixels (``.media`` as
    a plain image, which catches a conversion that differs in pixels only).
    """
    data, options = INPUTS[name], LOADERS[loader]
    vllm_result = outcome(lambda: oracle.load(data, **options))
    mmobs_result = outcome(lambda: ImageMediaIO(**options).load_bytes(data))
    vllm_refused, mmobs_refused = isinstance(vllm_result, Exception), isinstance(mmobs_result, Exception)
    if mmobs_refused:
        assert isinstance(mmobs_result, BadImageError), f"mmobs's loader may only raise BadImageError: {mmobs_result!r}"
    outcomes = f"vLLM {_describe(vllm_result)}; mmobs {_describe(mmobs_result)}"

    known = KNOWN_LOADER_DIFFERENCES.get(name) or _documented_difference(data, vllm_result, mmobs_result)
    if known is not None:
        assert (vllm_refused, mmobs_refused) == (known.accepted_by == "mmobs", known.accepted_by == "vllm"), (
            f"listed as accepted only by {known.accepted_by}, but {outcomes}"
        )
        if known.accepted_by == "vllm":
            assert mmobs_result.reason == known.mmobs_reason, outcomes
        return
    if vllm_refused and mmobs_refused:
        return
    assert vllm_refused == mmobs_refused, f"the loaders disagree and it is not listed: {outcomes}"

    _compare_keys(
        oracle,
        f"{name}:{loader}",
        {
            "media_with_bytes": (
                lambda: oracle.load(data, **options),
                lambda: ImageMediaIO(**options).load_bytes(data),
            ),
            "pixels": (
                lambda: oracle.load(data, **options).media,
                lambda: ImageMediaIO(**options).load_bytes(data).media,
            ),
        },
        context=outcomes,
    )


def _documented_difference(data: bytes, vllm_result: Any, mmobs_result: Any) -> LoaderDifference | None:
    """A refusal mmobs makes on purpose, for any input, where vLLM accepts.

    Divergence (d): vLLM opened a format that mmobs refuses by default, by
    name. And the decode budgets: mmobs refuses as ``too_costly`` an input
    whose structure would cost more to decode than a plain image of its size
    (vLLM pays that cost; ``docs/reliability.md`` measures it).
    """
    if isinstance(vllm_result, Exception) or not isinstance(mmobs_result, BadImageError):
        return None
    if mmobs_result.reason == "too_costly":
        return LoaderDifference("vllm", "too_costly", "deliberate: over mmobs's decode budget")
    found = Image.open(io.BytesIO(data), formats=VLLM_FORMATS).format
    if mmobs_result.reason != "unsupported_format" or found not in REFUSED_BY_DEFAULT:
        return None
    return LoaderDifference("vllm", "unsupported_format", f"(d): {found}: {REFUSED_BY_DEFAULT[found]}")


def test_known_loader_differences_name_real_inputs(oracle: Oracle) -> None:
    """A stale entry (a renamed corpus case) would otherwise excuse nothing, silently.

    The (d) entries name exactly the formats vLLM's allow-list opens and mmobs's
    default leaves out, among those this Pillow can write.
    """
    assert set(KNOWN_LOADER_DIFFERENCES) <= set(INPUTS) | set(MISSING_INPUTS)
    listed = {name.removeprefix("extra:fmt-").upper() for name, known in KNOWN_LOADER_DIFFERENCES.items()
              if known.why.startswith("(d)")}  # fmt: skip
    writable = {name.removeprefix("extra:fmt-").upper() for name in INPUTS if name.startswith("extra:fmt-")}
    assert listed & writable == (set(oracle.allowed_formats) - set(DEFAULT_FORMATS)) & writable
    for key in NO_DETERMINISTIC_KEY:  # "<input>:<path>" or "<input>:<loader>:<path>"
        assert any(key.startswith(name + ":") for name in INPUTS), key
