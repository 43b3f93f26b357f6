"""Differential tests, the property run: mmobs's key equals the real vLLM's for generated inputs.

A Hypothesis property run over everything ``hash_kwargs`` takes (every PIL
mode, palettes, ImageID UUIDs, zero sizes, NumPy arrays of every dtype and
layout, torch tensors, MediaWithBytes, nested containers), keyed by mmobs and by
the installed vLLM (``tests/support/vllm_oracle.py``), and vLLM's own
``MediaWithBytes`` objects keyed by mmobs (duck typing).

Both hashers always get fresh objects: Pillow parses EXIF lazily and may raise
only on the first read (``design.md``, "Pillow's EXIF traps"). vLLM keys every
input twice; an input for which vLLM raises or gives two keys has no
deterministic key and is excluded from the strategies with a comment (the
deliberate differences of ``test_vllm_differential_objects.py``).
"""

from __future__ import annotations

import io
import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image, ImagePalette

from mmobs import MediaWithBytes, MultiModalHasher
from tests.support.vllm_oracle import NoKey, Oracle, deterministic_key, quiet_vllm_hasher, require_vllm
from tests.vllm.differential import ALGORITHMS, MARKS, Side

pytestmark = MARKS

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
