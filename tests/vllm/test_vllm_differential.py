"""Differential tests: mmobs's cache keys against the real vLLM (the compatibility oracle).

The golden vectors say what vLLM's keys were; these tests ask the installed vLLM
(``tests/support/vllm_oracle.py``; CI installs 0.33.0 and forbids skipping) what they are:

* every input file (golden inputs, the image cases of the bad-input corpus, and
  a few files built here for transparency and for the formats only vLLM opens),
  keyed as a plain PIL image and through each loader (vLLM's loader keyed by
  vLLM, mmobs's keyed by mmobs), with blake3, sha256 and sha512;
* where the loaders disagree about accepting an input, the difference must be
  listed below with its reason;
* a Hypothesis property run over everything ``hash_kwargs`` takes (every PIL
  mode, palettes, ImageID UUIDs, zero sizes, NumPy arrays of every dtype and
  layout, torch tensors, MediaWithBytes, nested containers);
* vLLM's own ``MediaWithBytes`` objects keyed by mmobs (duck typing);
* vLLM's keys for the golden vectors' recipes equal ``vectors.json``.

Both hashers always get fresh objects: Pillow parses EXIF lazily and may raise
only on the first read (``design.md``, "Pillow's EXIF traps"). vLLM keys every
input twice; an input for which vLLM raises or gives two keys has no
deterministic key and must be listed (the loader tests) or excluded from the
strategies with a comment (the property run).

Pixel limit: the loaders are compared under one limit. vLLM's default
(``VLLM_MAX_IMAGE_PIXELS``, 178,956,970, Pillow's bomb error threshold) is
higher than mmobs's (``DEFAULT_MAX_PIXELS``, 50 MP) by design; the tests set
vLLM's to mmobs's, so a 100 MP bomb is refused by both instead of being decoded
by vLLM for seconds.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image, ImagePalette

from mmobs import BadImageError, ImageMediaIO, MediaWithBytes, MultiModalHasher
from mmobs.keys.formats import REFUSED_BY_DEFAULT, VLLM_FORMATS
from mmobs.keys.loader import DEFAULT_FORMATS, DEFAULT_MAX_PIXELS
from tests.support import golden
from tests.support.vllm_oracle import (
    REQUIRE_VLLM,
    NoKey,
    Oracle,
    build_golden_for_vllm,
    deterministic_key,
    quiet_vllm_hasher,
    require_vllm,
)

pytestmark = [
    pytest.mark.usefixtures("silent_observer"),
    # Pillow warns about every corrupt EXIF block and near-bomb in the corpus; mmobs warns
    # (UnsupportedTypeWarning) for every value it pickles, as vLLM logs.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
    pytest.mark.filterwarnings("ignore:IM image format is deprecated:DeprecationWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
Side = Literal["mmobs", "vllm"]
#: vLLM's MMHasherAlgorithm values, spelled out: mmobs's own list must not narrow the comparison.
ALGORITHMS: tuple[str, ...] = ("blake3", "sha256", "sha512")


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    """The installed vLLM; skips (fails under MMOBS_REQUIRE_VLLM=1) without it."""
    return require_vllm()


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

#: Loader options compared: vLLM's ImageMediaIO(**options) against mmobs's.
LOADERS: dict[str, dict[str, Any]] = {
    "rgb": {"image_mode": "RGB"},
    "rgb-bg": {"image_mode": "RGB", "rgba_background_color": (0, 128, 255)},
    "keep": {"image_mode": None},
}


@dataclass(frozen=True)
class LoaderDifference:
    """An input one loader accepts and the other refuses, on purpose or awaiting a decision."""

    accepted_by: Side
    mmobs_reason: str  # the BadImageError reason when mmobs is the one refusing
    why: str


# vLLM's normalize_image: Pillow 13's ImageOps.exif_transpose starts with image.load(), so
# contextlib.suppress(Exception) around it also swallows a *decoding* error, and the loader's
# own image.load() that follows is a no-op (Pillow already consumed the tile list). vLLM then
# serves whatever the failed decode left. (mmobs follows vLLM for an error raised only once
# the pixels are decoded, in a plugin's load_end: TIFF's malformed XMP, say.)
KNOWN_LOADER_DIFFERENCES: dict[str, LoaderDifference] = {
    "corpus:png-garbage-idat.png": LoaderDifference(
        "vllm",
        "corrupt",
        "deliberate: the IDAT is not a zlib stream; vLLM swallows the decode error and serves an "
        "all-black image (keyed by its bytes); mmobs refuses corrupt pixel data",
    ),
}
# Known divergence (d): vLLM opens every format of its ALLOWED_IMAGE_FORMATS; mmobs's default
# allow-list (DEFAULT_FORMATS) is smaller and refuses the others as unsupported_format. Each entry
# goes once mmobs's default follows vLLM for that format (the test then says so).
for _fmt in ("DIB", "ICO", "IM", "MSP", "PCX", "PPM", "QOI", "SGI", "SPIDER", "TGA", "XBM", "DDS", "ICNS", "JPEG2000"):
    KNOWN_LOADER_DIFFERENCES[f"extra:fmt-{_fmt.lower()}"] = LoaderDifference(
        "vllm", "unsupported_format", f"(d): vLLM's allow-list opens {_fmt}, mmobs's default does not"
    )

#: "<input>:<path>" -> why vLLM has no deterministic key for it. Empty today: vLLM keys every
#: input of these tests, and each test asserts that an input listed here still has none.
NO_DETERMINISTIC_KEY: dict[str, str] = {}


def _outcome(load: Callable[[], Any]) -> Any:
    """What a loader returned, or the exception it raised (a refusal)."""
    try:
        return load()
    except Exception as error:
        return error


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
    vllm_result = _outcome(lambda: oracle.load(data, **options))
    mmobs_result = _outcome(lambda: ImageMediaIO(**options).load_bytes(data))
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


# =============================================================================
# The golden vectors are vLLM's keys
# =============================================================================


@pytest.mark.parametrize("case_id", [case["id"] for case in golden.cases()])
def test_vllm_reproduces_golden_vector(oracle: Oracle, case_id: str) -> None:
    """vLLM, given each golden recipe built with its own loader and classes, gives ``expected``."""
    case = golden.case(case_id)
    kwargs = build_golden_for_vllm(oracle, case["kwargs"])
    assert oracle.key(case["algorithm"], **kwargs) == case["expected"]


# =============================================================================
# vLLM's own MediaWithBytes keyed by mmobs (duck typing)
# =============================================================================


def _vllm_media_cases() -> dict[str, Callable[[Oracle], Any]]:
    cases: dict[str, Callable[[Oracle], Any]] = {}
    for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir()):
        for loader in ("rgb", "keep"):
            cases[f"{path.name}:{loader}"] = lambda o, p=path, opts=LOADERS[loader]: o.load(p.read_bytes(), **opts)
    frames = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    cases["video-ndarray-frames"] = lambda o: o.media_with_bytes(frames, b"\x01" * 1000)
    cases["video-ndarray-original-bytes"] = lambda o: o.media_with_bytes(frames, b"\x01" * 10)

    def tensor_frames(o: Oracle, original: bytes) -> Any:
        import torch

        return o.media_with_bytes(torch.from_numpy(frames.copy()), original)

    cases["video-tensor-frames"] = lambda o: tensor_frames(o, b"\x01" * 1000)
    cases["video-tensor-original-bytes"] = lambda o: tensor_frames(o, b"\x01" * 10)
    # vLLM pickles a MediaWithBytes holding anything else (its own object, class path included).
    cases["other-media-str"] = lambda o: o.media_with_bytes("not media", b"\x01" * 10)
    return cases


VLLM_MEDIA_CASES = _vllm_media_cases()


@pytest.mark.parametrize("case_id", list(VLLM_MEDIA_CASES))
def test_mmobs_keys_vllm_media_objects(oracle: Oracle, case_id: str) -> None:
    """mmobs accepts the objects vLLM's loader produced and keys them as vLLM does."""
    make = VLLM_MEDIA_CASES[case_id]
    expected, actual = {}, {}
    with quiet_vllm_hasher():
        for algorithm in ALGORITHMS:
            vllm_key = deterministic_key(oracle, algorithm, lambda: {"media": make(oracle)})
            assert not isinstance(vllm_key, NoKey), vllm_key.reason
            expected[algorithm] = vllm_key
            actual[algorithm] = MultiModalHasher.hash_kwargs(algorithm, media=make(oracle))
    assert actual == expected


# =============================================================================
# Deliberate differences: where vLLM raises or keys a memory address, mmobs keys
# =============================================================================


@dataclass(frozen=True)
class Deliberate:
    """An input vLLM has no deterministic key for, and mmobs keys."""

    make: Callable[[], Any]
    vllm_does: Literal["raises", "keys an address"]
    algorithms: tuple[str, ...] = ALGORITHMS


def _tensor_requiring_grad() -> Any:
    import torch

    return torch.arange(4.0, requires_grad=True)


DELIBERATE_CASES: dict[str, Deliberate] = {
    # np.array(v).view(np.uint8) is refused for arrays of references (TypeError).
    "object-ndarray": Deliberate(lambda: np.array([1, "a", None], dtype=object), "raises"),
    "object-ndarray-frames": Deliberate(lambda: np.array([[b"x"]], dtype=object), "raises"),
    # np.array(big_int) is an object array: its tobytes() is the int object's address.
    "int-beyond-64-bits": Deliberate(lambda: int("9" * 30), "keys an address"),
    "negative-int-beyond-64-bits": Deliberate(lambda: -int("9" * 30), "keys an address"),
    # The digest's update() refuses a non-contiguous buffer (BufferError).
    "noncontiguous-memoryview": Deliberate(lambda: memoryview(bytes(range(16)))[::3], "raises"),
    "2d-noncontiguous-memoryview": Deliberate(lambda: memoryview(np.arange(12, dtype="<i2").reshape(3, 4).T), "raises"),
    # blake3's update() takes only byte-format buffers of at least one dimension
    # ("buffer contents are not compatible with u8", "shape is null"); hashlib takes any.
    "memoryview-of-int16-blake3": Deliberate(lambda: memoryview(np.arange(3, dtype="<i2")), "raises", ("blake3",)),
    "memoryview-of-bool-blake3": Deliberate(lambda: memoryview(np.array([True, False])), "raises", ("blake3",)),
    "0d-memoryview-blake3": Deliberate(lambda: memoryview(np.array(7, dtype=np.uint8)), "raises", ("blake3",)),
    # tensor.cpu().numpy() without detach() raises for a tensor that requires grad.
    "tensor-requires-grad": Deliberate(_tensor_requiring_grad, "raises"),
}


@pytest.mark.parametrize("case_id", list(DELIBERATE_CASES))
def test_deliberate_difference(oracle: Oracle, case_id: str) -> None:
    """vLLM has no deterministic key for these; mmobs keys them, deterministically.

    These inputs are therefore excluded from the property run's strategies.
    If this fails on the vLLM side, vLLM changed: widen the property run.
    """
    case = DELIBERATE_CASES[case_id]
    for algorithm in case.algorithms:
        vllm_key = deterministic_key(oracle, algorithm, lambda: {"x": case.make()})
        assert isinstance(vllm_key, NoKey), f"vLLM now keys {case_id} deterministically: include it in the property run"
        expected_reason = "vLLM raised" if case.vllm_does == "raises" else "vLLM gave two keys"
        assert vllm_key.reason.startswith(expected_reason), vllm_key
        held = [case.make(), case.make()]  # both alive: an address could not repeat
        keys = {MultiModalHasher.hash_kwargs(algorithm, x=value) for value in held}
        assert len(keys) == 1, keys


# =============================================================================
# Divergences the property run found, pinned as plain cases
# =============================================================================

#: name -> (fresh input, the algorithms vLLM keys it with). The property run found mmobs
#: raising TypeError on each ("memoryview: cannot cast view with zeros in shape or strides",
#: fixed since, these are its regression cases): a C-contiguous
#: memoryview of two or more dimensions, one of length 0; vLLM keys it as the empty byte
#: string (blake3 takes byte formats only, hashlib any).
FOUND_CASES: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "memoryview-u8-shape-0x3": (lambda: memoryview(np.zeros((0, 3), np.uint8)), ALGORITHMS),
    "memoryview-i8-shape-2x0": (lambda: memoryview(np.zeros((2, 0), np.int8)), ALGORITHMS),
    "memoryview-f8-shape-3x0": (lambda: memoryview(np.zeros((3, 0))), ("sha256", "sha512")),
}


@pytest.mark.parametrize("case_id", list(FOUND_CASES))
def test_found_divergence(oracle: Oracle, case_id: str) -> None:
    """Each input the property run once shrank to: mmobs's key is vLLM's."""
    make, algorithms = FOUND_CASES[case_id]
    expected, actual = {}, {}
    for algorithm in algorithms:
        vllm_key = deterministic_key(oracle, algorithm, lambda: {"x": make()})
        assert not isinstance(vllm_key, NoKey), vllm_key.reason
        expected[algorithm] = vllm_key
        actual[algorithm] = _outcome(lambda alg=algorithm: MultiModalHasher.hash_kwargs(alg, x=make()))
    assert actual == expected


# =============================================================================
# The property run
# =============================================================================

settings.register_profile(
    "mmobs-vllm-ci",
    max_examples=2000,
    derandomize=True,  # the same examples on every CI run: a red build is reproducible
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "mmobs-vllm-dev",
    max_examples=200,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
#: MMOBS_HYPOTHESIS_PROFILE=ci|dev picks the profile; CI (.ci/run sets it, or the CI variable) runs 2,000 examples.
PROFILE_NAME = os.environ.get("MMOBS_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
PROFILE = settings.get_profile(f"mmobs-vllm-{PROFILE_NAME}")


@dataclass(frozen=True)
class Fresh:
    """A value built anew for each hasher call: PIL images carry EXIF parse state, and a
    MediaWithBytes is mmobs's class for mmobs and vLLM's for vLLM (built from the same parts)."""

    label: str
    make: Callable[[Side], Any]

    def __repr__(self) -> str:
        return self.label


def build(tree: Any, side: Side) -> Any:
    """The value a generated tree describes, for one side."""
    if isinstance(tree, Fresh):
        return tree.make(side)
    if isinstance(tree, list):
        return [build(item, side) for item in tree]
    if isinstance(tree, tuple):
        return tuple(build(item, side) for item in tree)
    if isinstance(tree, dict):
        return {key: build(value, side) for key, value in tree.items()}
    return tree


def _media_with_bytes_class(side: Side) -> Any:
    return MediaWithBytes if side == "mmobs" else require_vllm().media_with_bytes


def _shared(value: Any, label: str) -> Fresh:
    """A value both sides may share (arrays and tensors: neither hasher mutates them), labelled."""
    return Fresh(label, lambda side: value)


# -- leaves --------------------------------------------------------------------

# Python ints are kept within 64 bits (signed or unsigned): beyond, vLLM keys the int
# object's address (deliberate difference "int-beyond-64-bits").
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=16),
)

# Values both hashers pickle. Only types whose pickle is deterministic for equal values:
# a pickle that depends on object identity or set order would give vLLM no stable key
# (mmobs pickles them too, with an UnsupportedTypeWarning).
_pickled = st.one_of(
    st.complex_numbers(),
    st.floats(width=32).map(np.float32),
    st.floats(width=16).map(np.float16),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.booleans().map(np.bool_),
    st.binary(max_size=8).map(bytearray),
    st.builds(Fraction, st.integers(-99, 99), st.integers(1, 99)),
)

_array_dtypes = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64, 128)),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
    hnp.byte_string_dtypes(max_len=4),
    hnp.unicode_string_dtypes(endianness="?", max_len=3),
    hnp.array_dtypes(hnp.scalar_dtypes(), min_size=1, max_size=3),  # structured
)
_LAYOUTS = ("as-is", "transposed", "every-other", "reversed", "fortran", "broadcast", "swapped")


def _relayout(array: np.ndarray, layout: str) -> np.ndarray:
    """The same content in another memory layout (non-contiguous, negative or zero strides)."""
    if array.ndim == 0 or layout == "as-is":
        return array
    if layout == "transposed":
        return array.T
    if layout == "every-other":
        return array[::2]
    if layout == "reversed":
        return array[::-1]
    if layout == "fortran":
        return np.asfortranarray(array)
    if layout == "broadcast":
        return np.broadcast_to(array, (2, *array.shape))
    return np.swapaxes(array, 0, -1)


# Object arrays are excluded (deliberate difference "object-ndarray"), except 0-d ones,
# which vLLM keys by .item() (known divergence (b), in _object_scalars below).
@st.composite
def _ndarrays(draw: st.DrawFn) -> Fresh:
    dtype = draw(_array_dtypes)
    array = draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)))
    layout = draw(st.sampled_from(_LAYOUTS))
    array = _relayout(array, layout)
    return _shared(array, f"ndarray({dtype.str}, shape={array.shape}, strides={array.strides}, {layout})")


@st.composite
def _object_scalars(draw: st.DrawFn) -> Fresh:
    """Known divergence (b): a 0-d object array, keyed by its ``.item()`` in vLLM."""
    leaf = draw(st.one_of(_scalars, st.tuples(_scalars, _scalars)))
    array = np.empty((), dtype=object)
    array[()] = leaf
    return _shared(array, f"ndarray(object, shape=(), item={leaf!r})")


# Memoryviews are C-contiguous: vLLM's digest update refuses any other buffer (deliberate
# difference "noncontiguous-memoryview"). They hold bytes (format B or b) in at least one
# dimension: blake3 refuses other formats and 0-d views (deliberate differences
# "memoryview-of-*-blake3", "0d-memoryview-blake3"); with sha256 and sha512 they would key.
@st.composite
def _memoryviews(draw: st.DrawFn) -> Fresh:
    if draw(st.booleans()):
        data = draw(st.binary(max_size=16))
        return _shared(memoryview(data), f"memoryview({data!r})")
    dtype = draw(st.sampled_from([np.uint8, np.int8]))
    array = draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)))
    return _shared(memoryview(array), f"memoryview(ndarray({array.dtype.str}, shape={array.shape}))")


_TORCH_DTYPES = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)  # fmt: skip
_TENSOR_LAYOUTS = ("as-is", "transposed", "every-other", "expanded", "permuted")


@st.composite
def _tensor_parts(draw: st.DrawFn) -> tuple[Any, str]:
    """A torch tensor (bfloat16 included, non-contiguous views included) and its label.

    Never one that requires grad: vLLM calls ``.numpy()`` without ``detach()`` and
    raises (deliberate difference "tensor-requires-grad"). Never one that ``.numpy()``
    refuses on both sides (float8, conjugate views): no key to compare.
    """
    import torch

    dtype = draw(st.sampled_from(_TORCH_DTYPES))
    array = draw(hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
    tensor = torch.from_numpy(array.copy())
    bfloat16 = not dtype.startswith("complex") and draw(st.booleans())
    if bfloat16:
        tensor = tensor.to(torch.bfloat16)
    layout = draw(st.sampled_from(_TENSOR_LAYOUTS)) if tensor.dim() else "as-is"
    if layout == "transposed":
        tensor = tensor.t() if tensor.dim() <= 2 else tensor.transpose(0, 1)
    elif layout == "every-other":
        tensor = tensor[::2]
    elif layout == "expanded":
        tensor = tensor.unsqueeze(0).expand(2, *tensor.shape)  # stride 0
    elif layout == "permuted":
        tensor = tensor.permute(*reversed(range(tensor.dim())))
    if bfloat16 and tensor.dim() and tensor.is_contiguous() and tensor.stride(-1) != 1:
        # Torch calls a tensor contiguous when its last axis has length 0 or 1, whatever its
        # stride, so .contiguous() keeps a stride that .view(torch.uint8) refuses: vLLM and
        # mmobs both raise RuntimeError (no key to compare). Give it standard strides.
        tensor = tensor.clone(memory_format=torch.contiguous_format)
    label = f"tensor({tensor.dtype}, shape={tuple(tensor.shape)}, strides={tensor.stride()}, {layout})"
    return tensor, label


_tensors = _tensor_parts().map(lambda parts: _shared(*parts))

_MODES = tuple(Image.MODES)
_PALETTES = ("none", "rgb", "rgba", "raw-after-load")
_EXIF = ("none", "uuid", "string-id", "int-id", "orientation")
_SOURCES = ("memory", "png", "png-lazy")


@st.composite
def _images(draw: st.DrawFn) -> Fresh:
    """A PIL image of any mode and size (0 included), palette and EXIF variants, in memory or decoded."""
    mode = draw(st.sampled_from(_MODES))
    size = (draw(st.integers(0, 6)), draw(st.integers(0, 6)))
    nbytes = len(Image.new(mode, size).tobytes())
    raw = draw(st.binary(min_size=nbytes, max_size=nbytes))
    palette = draw(st.sampled_from(_PALETTES)) if mode in ("P", "PA") else "none"
    palette_data = draw(st.binary(min_size=12, max_size=48)) if palette != "none" else b""
    exif = draw(st.sampled_from(_EXIF))
    image_id = uuid.UUID(bytes=draw(st.binary(min_size=16, max_size=16)))

    def make_memory() -> Image.Image:
        image = Image.frombytes(mode, size, raw) if nbytes else Image.new(mode, size)
        if palette in ("rgb", "rgba"):
            image.putpalette(palette_data, palette.upper())
        elif palette == "raw-after-load":
            # Pillow realizes a raw palette at the next load(), which both hashers trigger
            # (vLLM through np.asarray): the palette is read after it, in both.
            image.load()
            image.palette = ImagePalette.raw("RGB", palette_data)
        if exif == "uuid":
            image.getexif()[0x800D] = image_id
        elif exif == "string-id":
            image.getexif()[0x800D] = str(image_id)
        elif exif == "int-id":
            image.getexif()[0x800D] = 7
        elif exif == "orientation":
            image.getexif()[0x0112] = 6
        return image

    source = draw(st.sampled_from(_SOURCES))
    encoded = b""
    if source != "memory":
        try:  # PNG holds 1, L, LA, P, RGB, RGBA, I;16 (and a few more); others stay in memory
            buffer = io.BytesIO()
            make_memory().save(buffer, "PNG")
            encoded = buffer.getvalue()
        except Exception:
            source = "memory"

    def make(side: Side) -> Image.Image:
        if source == "memory":
            return make_memory()
        image = Image.open(io.BytesIO(encoded))
        if source == "png":
            image.load()
        return image

    return Fresh(f"Image({mode}, {size[0]}x{size[1]}, palette={palette}, exif={exif}, source={source})", make)


@st.composite
def _media_with_bytes(draw: st.DrawFn, media: st.SearchStrategy[Fresh]) -> Fresh:
    """A MediaWithBytes of ``media``, with original bytes on both sides of ``nbytes`` for frames."""
    inner = draw(media)
    probe = inner.make("mmobs")
    if isinstance(probe, Image.Image):
        length = draw(st.integers(0, 24))
    else:  # frames: vLLM keys the frames if nbytes < len(original_bytes), else the bytes
        length = max(0, probe.nbytes + draw(st.integers(-2, 2)))
    original = draw(st.binary(min_size=length, max_size=length))
    io_config = draw(st.one_of(
        st.none(),
        st.just({}),
        st.fixed_dictionaries({
            "image_mode": st.sampled_from(["RGB", "L", None]),
            "rgba_background_color": st.tuples(*[st.integers(0, 255)] * 3),
        }),
        st.dictionaries(st.text(max_size=4), _scalars, max_size=2),
    ))  # fmt: skip

    def make(side: Side) -> Any:
        config = None if io_config is None else dict(io_config)
        return _media_with_bytes_class(side)(inner.make(side), original, config)

    return Fresh(f"MediaWithBytes({inner!r}, original_bytes={len(original)} bytes, io_config={io_config!r})", make)


@st.composite
def _video_frames(draw: st.DrawFn) -> Fresh:
    """Decoded video frames as vLLM produces them: (T, H, W, 3) uint8."""
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4)), 3)
    frames = draw(hnp.arrays(np.uint8, shape))
    return _shared(frames, f"frames{shape}")


def _tensor_frames(frames: Fresh) -> Fresh:
    import torch

    array = frames.make("mmobs")
    return _shared(torch.from_numpy(array.copy()), f"tensor-{frames!r}")


def kwargs_strategy(*, known_divergences: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for ``hash_kwargs``: nested containers of every kind of leaf.

    ``known_divergences=False`` leaves out the inputs of the known divergences (a)
    (frames as a tensor in MediaWithBytes) and (b) (0-d object arrays), to look
    for other divergences while those are being fixed; the tests run with them.
    """
    frames = _video_frames()
    media = [
        _media_with_bytes(_images()),
        _media_with_bytes(_images()),
        _media_with_bytes(frames),
        _media_with_bytes(_ndarrays()),  # any array as frames (vLLM only checks isinstance)
    ]
    images = _images()
    # Images are the point of the hasher: weighted up (one_of picks branches uniformly).
    leaves = [_scalars, _pickled, _ndarrays(), _memoryviews(), _tensors, images, images, images, *media]
    if known_divergences:
        leaves += [_object_scalars(), _media_with_bytes(frames.map(_tensor_frames)), _media_with_bytes(_tensors)]
    values = st.recursive(
        st.one_of(leaves),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.lists(children, max_size=3).map(tuple),
            st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-3, 3)), children, max_size=3),
        ),
        max_leaves=5,
    )
    return st.dictionaries(st.text(max_size=6), values, min_size=1, max_size=3)


def run_property(
    oracle: Oracle,
    strategy: st.SearchStrategy[dict[str, Any]],
    profile: settings,
    *,
    mmobs_side: Side = "mmobs",
) -> int:
    """Assert mmobs's key == vLLM's for every generated example; return how many passed.

    ``mmobs_side="vllm"`` hands mmobs the very objects vLLM gets (vLLM's own
    MediaWithBytes class), as the vLLM plugin does.
    """
    passed = 0

    @profile
    @given(algorithm=st.sampled_from(ALGORITHMS), tree=strategy)
    def check(algorithm: str, tree: dict[str, Any]) -> None:
        nonlocal passed
        vllm_key = deterministic_key(oracle, algorithm, lambda: build(tree, "vllm"))
        assert not isinstance(vllm_key, NoKey), (
            f"the strategies generated an input vLLM has no deterministic key for ({vllm_key.reason}); "
            "exclude it with a comment naming the deliberate difference"
        )
        assert MultiModalHasher.hash_kwargs(algorithm, **build(tree, mmobs_side)) == vllm_key
        passed += 1

    with quiet_vllm_hasher(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow, torch and mmobs warnings, thousands of them
        check()
    return passed


def test_property_mmobs_key_equals_vllm_key(oracle: Oracle) -> None:
    """Every generated input: mmobs's key is vLLM's (2,000 examples in CI, and they all ran)."""
    passed = run_property(oracle, kwargs_strategy(), PROFILE)
    assert passed >= PROFILE.max_examples, f"only {passed} of {PROFILE.max_examples} examples ran"


_FOCUSED = settings(PROFILE, max_examples=min(PROFILE.max_examples, 100))


def test_property_video_frames_as_tensor(oracle: Oracle) -> None:
    """Known divergence (a): MediaWithBytes holding torch frames (and any tensor) keys as in vLLM."""
    strategy = st.one_of(_media_with_bytes(_video_frames().map(_tensor_frames)), _media_with_bytes(_tensors))
    assert run_property(oracle, st.fixed_dictionaries({"video": strategy}), _FOCUSED) >= _FOCUSED.max_examples


def test_property_0d_object_arrays(oracle: Oracle) -> None:
    """Known divergence (b): a 0-d object array keys as vLLM keys its ``.item()``."""
    strategy = st.fixed_dictionaries({"x": _object_scalars()})
    assert run_property(oracle, strategy, _FOCUSED) >= _FOCUSED.max_examples


def test_strategies_cover_every_pil_mode() -> None:
    """The property run is not narrower than it claims: the modes come from Pillow, and include these."""
    assert set(_MODES) >= {"1", "L", "P", "LA", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "LAB", "HSV",
                           "I", "I;16", "I;16B", "I;16L", "F", "La", "RGBa"}  # fmt: skip


def test_property_vllm_media_objects_keyed_by_mmobs(oracle: Oracle) -> None:
    """Duck typing: vLLM's own MediaWithBytes (images, frames, tensor frames) keyed by mmobs."""
    frames = _video_frames()
    strategy = st.one_of(
        _media_with_bytes(_images()),
        _media_with_bytes(frames),
        _media_with_bytes(frames.map(_tensor_frames)),
    )
    passed = run_property(oracle, st.fixed_dictionaries({"media": strategy}), _FOCUSED, mmobs_side="vllm")
    assert passed >= _FOCUSED.max_examples
