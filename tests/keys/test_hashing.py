"""MultiModalHasher: the framed key format, its fast paths, and the tolerant EXIF read.

Expected keys come from the plain reference implementation of the format
(``tests/support/reference.py``), which shares no code with ``mmobs.keys.hashing``. It is
itself checked against the golden vectors here, so agreeing with it means
agreeing with vLLM (the differential tests check the real vLLM directly).
"""

from __future__ import annotations

import dataclasses
import fractions
import pickle
from typing import Any

import numpy as np
import pytest
from PIL import Image

import mmobs
from mmobs import MediaWithBytes, MultiModalHasher
from tests.support import golden
from tests.support.images import (
    noisy_image,
)
from tests.support.reference import (
    FR,
    ref_item,
    ref_key,
    ref_stream,
    stream_key,
)

pytestmark = pytest.mark.usefixtures("silent_observer")

hash_kwargs = MultiModalHasher.hash_kwargs


@pytest.mark.parametrize("case_id", [case["id"] for case in golden.cases()])
def test_reference_implementation_matches_golden(case_id: str) -> None:
    """The test's own reference agrees with vLLM, so comparing against it is meaningful."""
    case = golden.case(case_id)
    assert ref_key(case["algorithm"], **golden.build(case["kwargs"])) == case["expected"]


# =============================================================================
# hash_kwargs: signature and algorithms
# =============================================================================


def test_algorithm_is_required() -> None:
    """No default algorithm: a caller must choose one explicitly."""
    with pytest.raises(TypeError, match="algorithm"):
        hash_kwargs()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="algorithm"):
        hash_kwargs(value="x")  # type: ignore[call-arg]


def test_algorithm_is_positional_only() -> None:
    """``algorithm=`` is just another keyword to key; the positional one is still missing."""
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        hash_kwargs(algorithm="blake3")  # type: ignore[call-arg]


def test_keyword_named_algorithm_is_keyed_as_data() -> None:
    """With the positional algorithm given, a keyword ``algorithm`` is an ordinary item."""
    key = hash_kwargs("blake3", algorithm="sha256")
    assert key == ref_key("blake3", algorithm="sha256")
    assert key != hash_kwargs("sha256", algorithm="sha256")


@pytest.mark.parametrize("algorithm", ["md5", "BLAKE3", "sha384", "", None, ["blake3"]])
def test_unknown_algorithm_names_the_choices(algorithm: Any) -> None:
    """A typo gets a ValueError that lists what is accepted."""
    with pytest.raises(ValueError) as info:
        hash_kwargs(algorithm, x=1)
    message = str(info.value)
    for choice in ("blake3", "sha256", "sha512"):
        assert choice in message
    assert set(mmobs.ALGORITHMS) == {"blake3", "sha256", "sha512"}


@pytest.mark.parametrize("algorithm", ["blake3", "sha256", "sha512"])
def test_each_algorithm_digests_the_same_stream(algorithm: str) -> None:
    """The algorithm only changes the digest, not the stream; output is lowercase hex."""
    kwargs = {"text": "héllo", "n": 7, "cfg": {"a": [1, 2.5, None]}, "raw": b"\x00\xff"}
    key = hash_kwargs(algorithm, **kwargs)
    assert key == stream_key(ref_stream(**kwargs), algorithm)
    assert key == key.lower()
    assert len(key) == {"blake3": 64, "sha256": 64, "sha512": 128}[algorithm]


def test_hashed_hook_reports_algorithm_and_exact_byte_count(record: Any) -> None:
    """The `hashed` hook runs once per call and counts every byte of the stream."""
    kwargs = {"image": noisy_image("RGBA", (33, 17)), "arr": np.arange(10, dtype="<i2"), "s": "x"}
    with record() as rec:
        hash_kwargs("sha256", **kwargs)
    assert len(rec.hashed_calls) == 1
    (call,) = rec.hashed_calls
    algorithm, seconds, nbytes = call.algorithm, call.seconds, call.nbytes
    assert algorithm == "sha256"
    assert seconds >= 0
    assert nbytes == len(ref_stream(**kwargs))


# =============================================================================
# Framing: no two different inputs share a stream (the collisions vLLM tests)
# =============================================================================


_RAW12 = bytes(range(0, 240, 20))  # 12 bytes
_RAW36 = bytes(range(36))


def _palette_image(palette: bytes) -> Image.Image:
    image = Image.frombytes("P", (4, 3), _RAW12)
    image.putpalette(palette)
    return image


DIFFERENT = [
    pytest.param(lambda: {"a": "bc"}, lambda: {"ab": "c"}, id="key-value-boundary-str"),
    pytest.param(lambda: {"a": b"bc"}, lambda: {"ab": b"c"}, id="key-value-boundary-bytes"),
    pytest.param(lambda: {"x": {"a": {"b": 1}}}, lambda: {"x": {"a.b": 1}}, id="nested-vs-dotted"),
    pytest.param(lambda: {"a": {"b": 1}}, lambda: {"a.b": 1}, id="nested-vs-dotted-top-level"),
    pytest.param(lambda: {"x": [1, 2]}, lambda: {"x": {"0": 1, "1": 2}}, id="list-vs-index-dict"),
    pytest.param(lambda: {"x": [[1], 2]}, lambda: {"x": [1, [2]]}, id="list-nesting"),
    pytest.param(lambda: {"x": ["ab", "c"]}, lambda: {"x": ["a", "bc"]}, id="list-element-boundary"),
    pytest.param(lambda: {"x": {"a": 1, "b": 2}}, lambda: {"x": {"b": 2, "a": 1}}, id="nested-order-matters"),
    pytest.param(lambda: {"a": 1}, lambda: {"a": 1, "b": []}, id="omitted-vs-empty-list"),
    pytest.param(lambda: {"a": 1}, lambda: {"a": 1, "b": {}}, id="omitted-vs-empty-dict"),
    pytest.param(lambda: {"a": 1}, lambda: {"a": 1, "b": None}, id="omitted-vs-none"),
    pytest.param(lambda: {"a": 1}, lambda: {"a": 1, "b": ""}, id="omitted-vs-empty-str"),
    pytest.param(dict, lambda: {"": None}, id="nothing-vs-empty-key"),
    pytest.param(lambda: {"x": 1}, lambda: {"x": True}, id="int-vs-bool"),
    pytest.param(lambda: {"x": 5}, lambda: {"x": np.array(5)}, id="int-vs-0d-array"),
    pytest.param(lambda: {"x": np.array(5)}, lambda: {"x": np.array([5])}, id="0d-vs-1d-array"),
    pytest.param(lambda: {"x": np.array(5, dtype="<i4")}, lambda: {"x": np.array(5, dtype="<i8")}, id="0d-dtype"),
    pytest.param(
        lambda: {"x": np.array([1, 2, 3], dtype="<i4")},
        lambda: {"x": np.array([1, 2, 3], dtype=">i4")},
        id="byte-order-same-values",
    ),
    pytest.param(
        lambda: {"x": np.frombuffer(_RAW12, dtype="<i4")},
        lambda: {"x": np.frombuffer(_RAW12, dtype=">i4")},
        id="byte-order-same-bytes",
    ),
    pytest.param(
        lambda: {"x": np.frombuffer(_RAW12, dtype="<i4")},
        lambda: {"x": np.frombuffer(_RAW12, dtype="<u4")},
        id="signedness-same-bytes",
    ),
    pytest.param(
        lambda: {"x": np.array([True, False, True])},
        lambda: {"x": np.array([1, 0, 1], dtype=np.uint8)},
        id="bool-vs-u1",
    ),
    pytest.param(
        lambda: {"x": np.frombuffer(_RAW12, np.uint8).reshape(3, 4)},
        lambda: {"x": np.frombuffer(_RAW12, np.uint8).reshape(4, 3)},
        id="array-shape",
    ),
    pytest.param(
        lambda: {"x": np.frombuffer(_RAW12, np.uint8).reshape(3, 4)},
        lambda: {"x": np.frombuffer(_RAW12, np.uint8).reshape(3, 4).T},
        id="array-transpose",
    ),
    pytest.param(
        lambda: {"x": np.frombuffer(_RAW12, np.uint8).reshape(4, 3)},
        lambda: {"x": np.frombuffer(_RAW12, np.uint8).reshape(3, 4).T},
        id="transpose-vs-reshape-same-shape",
    ),
    pytest.param(lambda: {"x": np.frombuffer(_RAW12, np.uint8)}, lambda: {"x": _RAW12}, id="array-vs-its-bytes"),
    pytest.param(
        lambda: {"i": Image.frombytes("L", (4, 3), _RAW12)},
        lambda: {"i": Image.frombytes("L", (3, 4), _RAW12)},
        id="image-shape",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("L", (4, 3), _RAW12)},
        lambda: {"i": Image.frombytes("L", (12, 1), _RAW12)},
        id="image-shape-flat",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("L", (4, 3), _RAW12)},
        lambda: {"i": Image.frombytes("L", (4, 3), _RAW12).transpose(Image.Transpose.TRANSPOSE)},
        id="image-transpose",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("L", (4, 3), _RAW12)}, lambda: {"i": _palette_image(_RAW36)}, id="L-vs-P"
    ),
    pytest.param(
        lambda: {"i": _palette_image(_RAW36)},
        lambda: {"i": _palette_image(_RAW36[::-1])},
        id="palette-contents",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("RGB", (4, 3), _RAW36)},
        lambda: {"i": Image.frombytes("YCbCr", (4, 3), _RAW36)},
        id="RGB-vs-YCbCr",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("HSV", (4, 3), _RAW36)},
        lambda: {"i": Image.frombytes("LAB", (4, 3), _RAW36)},
        id="HSV-vs-LAB",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("RGBA", (3, 3), _RAW36)},
        lambda: {"i": Image.frombytes("CMYK", (3, 3), _RAW36)},
        id="RGBA-vs-CMYK",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("RGBA", (3, 3), _RAW36)},
        lambda: {"i": Image.frombytes("RGBX", (3, 3), _RAW36)},
        id="RGBA-vs-RGBX",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("I;16", (3, 2), _RAW12)},
        lambda: {"i": Image.frombytes("I;16L", (3, 2), _RAW12)},
        id="I16-vs-I16L-same-dtype-and-bytes",
    ),
    pytest.param(
        lambda: {"i": Image.frombytes("RGB", (4, 3), _RAW36)},
        lambda: {"i": MediaWithBytes(Image.frombytes("RGB", (4, 3), _RAW36), _RAW36)},
        id="image-vs-media",
    ),
    pytest.param(
        lambda: {"m": MediaWithBytes(Image.new("RGB", (1, 1)), b"same")},
        lambda: {"m": MediaWithBytes(Image.new("RGB", (1, 1)), b"same", {"image_mode": "RGB"})},
        id="media-io-config",
    ),
    pytest.param(
        lambda: {"m": MediaWithBytes(Image.new("RGB", (1, 1)), b"\x00" * 48)},
        lambda: {"m": MediaWithBytes(np.zeros((1, 4, 4, 3), np.uint8), b"\x00" * 48)},
        id="image-media-vs-video-media",
    ),
]


@pytest.mark.parametrize(("left", "right"), DIFFERENT)
def test_different_inputs_hash_differently(left: Any, right: Any) -> None:
    """Framing keeps structurally different inputs apart, for every algorithm."""
    for algorithm in mmobs.ALGORITHMS:
        assert hash_kwargs(algorithm, **left()) != hash_kwargs(algorithm, **right())
    assert hash_kwargs("blake3", **left()) == ref_key("blake3", **left())
    assert hash_kwargs("blake3", **right()) == ref_key("blake3", **right())


def test_none_and_empty_values_are_pairwise_distinct() -> None:
    """None, b"", [] and {} all key differently (each has its own type tag)."""
    values = [None, b"", [], {}, 0, False]
    keys = [hash_kwargs("blake3", x=v) for v in values]
    assert len(set(keys)) == len(values)


def test_format_inherent_equalities_are_kept_for_vllm_compatibility() -> None:
    """The vLLM format does not tell these apart; changing that would change keys.

    str and bytes are both ``FR(bytes)``; a tuple is framed like a list; dict
    keys are framed as ``str(key)``; int 0 and float 0.0 are both eight zero
    bytes. Pinned so nobody "fixes" them silently.
    """
    assert hash_kwargs("blake3", x="") == hash_kwargs("blake3", x=b"")
    assert hash_kwargs("blake3", x="abc") == hash_kwargs("blake3", x=b"abc")
    assert hash_kwargs("blake3", x=(1, 2)) == hash_kwargs("blake3", x=[1, 2])
    assert hash_kwargs("blake3", x={1: "a"}) == hash_kwargs("blake3", x={"1": "a"})
    assert hash_kwargs("blake3", x=0) == hash_kwargs("blake3", x=0.0)


def test_kwargs_order_does_not_matter() -> None:
    """Only the top level is sorted: keyword order is irrelevant."""
    first = hash_kwargs("blake3", b=2, a=[1, {"z": 0, "y": 1}], c="c")
    second = hash_kwargs("blake3", c="c", a=[1, {"z": 0, "y": 1}], b=2)
    assert first == second == ref_key("blake3", a=[1, {"z": 0, "y": 1}], b=2, c="c")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: np.arange(24, dtype="<i2").reshape(4, 6).T, id="transpose"),
        pytest.param(lambda: np.arange(40, dtype="<f4").reshape(5, 8)[::2, 1::3], id="strided-slice"),
        pytest.param(lambda: np.arange(24, dtype=">u4").reshape(2, 3, 4)[:, ::-1, :], id="reversed-big-endian"),
        pytest.param(lambda: np.asfortranarray(np.arange(12, dtype=np.uint8).reshape(3, 4)), id="fortran"),
        pytest.param(lambda: np.array([True, False, True, True])[::2], id="bool-strided"),
    ],
)
def test_non_contiguous_array_equals_contiguous_copy(make: Any) -> None:
    """Equal content hashes equal whatever the memory layout."""
    array = make()
    assert not array.flags.c_contiguous
    copy = np.ascontiguousarray(array)
    assert hash_kwargs("blake3", x=array) == hash_kwargs("blake3", x=copy) == ref_key("blake3", x=copy)


@pytest.mark.parametrize(
    "array",
    [
        pytest.param(np.array(5), id="0d-int64"),
        pytest.param(np.array(5, dtype=">i4"), id="0d-big-endian"),
        pytest.param(np.array(0.25, dtype=np.float32), id="0d-float32"),
        pytest.param(np.array(True), id="0d-bool"),
        pytest.param(np.array([True, False, True]), id="bool"),
        pytest.param(np.zeros((2, 0, 3), dtype="<f8"), id="empty"),
        pytest.param(np.arange(6, dtype=">f8").reshape(2, 3), id="big-endian-2d"),
        pytest.param(np.arange(6, dtype=np.float16), id="float16"),
    ],
)
def test_array_keys_match_reference(array: np.ndarray) -> None:
    """ndarray item: dtype.str, shape, and item() for 0-d / raw C-order bytes otherwise."""
    assert hash_kwargs("blake3", x=array) == ref_key("blake3", x=array)


def test_memoryview_is_keyed_as_its_bytes() -> None:
    """A memoryview of any format or shape frames its nbytes of raw bytes, like bytes."""
    array = np.arange(12, dtype=">i4").reshape(3, 4)
    assert hash_kwargs("blake3", x=memoryview(array)) == hash_kwargs("blake3", x=array.tobytes())
    strided = memoryview(array[:, ::2])
    assert not strided.c_contiguous
    assert hash_kwargs("blake3", x=strided) == hash_kwargs("blake3", x=array[:, ::2].tobytes())


# =============================================================================
# Unsupported types and torch
# =============================================================================


@dataclasses.dataclass(frozen=True)
class _Custom:
    name: str
    size: int


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(fractions.Fraction(1, 3), id="Fraction"),
        pytest.param(_Custom("x", 3), id="dataclass"),
        pytest.param(np.float32(1.5), id="numpy-scalar"),
        pytest.param(2**70, id="int-beyond-64-bits"),
        pytest.param(bytearray(b"abc"), id="bytearray"),
        pytest.param(np.array([1, "a"], dtype=object), id="object-array"),
    ],
)
def test_unsupported_type_is_pickled_with_a_warning(value: Any) -> None:
    """No dedicated form: FR(pickle.dumps(v)), and an UnsupportedTypeWarning naming the type."""
    with pytest.warns(mmobs.UnsupportedTypeWarning, match=type(value).__qualname__):
        key = hash_kwargs("blake3", v=value)
    assert key == stream_key(FR(b"v") + b"\x03" + FR(pickle.dumps(value)))


def test_zero_d_object_array_keys_its_item_like_vllm() -> None:
    """A 0-d array of any dtype is keyed by ``.item()``, objects included (vLLM's rule)."""
    value = np.array({"a": 1, "b": [2.5, None]}, dtype=object)
    fields = {"dtype": "|O", "shape": (), "data": {"a": 1, "b": [2.5, None]}}
    expected = FR(b"v") + b"\x03" + b"".join(ref_item("ndarray", fields))
    assert hash_kwargs("blake3", v=value) == stream_key(expected)


def test_supported_types_do_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    """The common types never take the pickle path."""
    hash_kwargs(
        "blake3",
        a=1, b=1.5, c=True, d="s", e=b"b", f=memoryview(b"m"), g=None, h=[1], i={"k": (2,)},
        j=np.arange(3), k=noisy_image("RGB", (2, 2)), m=MediaWithBytes(Image.new("L", (1, 1)), b"x"),
    )  # fmt: skip
    assert [w for w in recwarn if issubclass(w.category, mmobs.UnsupportedTypeWarning)] == []


@pytest.mark.vllm  # torch is vLLM's: the vllm environment has it
def test_torch_tensors_key_like_their_arrays() -> None:
    """float32 tensors key as item "tensor" of their array; bfloat16 as raw bytes + dtype/shape."""
    torch = pytest.importorskip("torch", reason="torch is an optional dependency of mmobs")
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    expected = stream_key(FR(b"t") + b"\x03" + b"".join(ref_item("tensor", tensor.numpy())))
    assert hash_kwargs("blake3", t=tensor) == expected

    transposed = tensor.t()
    assert not transposed.is_contiguous()
    assert hash_kwargs("blake3", t=transposed) == hash_kwargs("blake3", t=transposed.contiguous())
    assert hash_kwargs("blake3", t=transposed) == stream_key(
        FR(b"t") + b"\x03" + b"".join(ref_item("tensor", np.ascontiguousarray(transposed.numpy())))
    )

    bf16 = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    raw = bf16.contiguous().view(torch.uint8).reshape(-1).numpy()
    fields = {"original_dtype": "torch.bfloat16", "original_shape": (2, 3), "data": raw}
    assert hash_kwargs("blake3", t=bf16) == stream_key(FR(b"t") + b"\x03" + b"".join(ref_item("tensor", fields)))
    assert hash_kwargs("blake3", t=bf16.t()) != hash_kwargs("blake3", t=bf16)
