"""MultiModalHasher: the framed key format, its fast paths, and the tolerant EXIF read.

Expected keys come from the plain reference implementation of the format
(``tests/support/reference.py``), which shares no code with ``mmobs.keys.hashing``. It is
itself checked against the golden vectors here, so agreeing with it means
agreeing with vLLM (the differential tests check the real vLLM directly).
"""

from __future__ import annotations

import dataclasses
import fractions
import io
import pickle
import struct
import subprocess
import sys
import textwrap
import uuid
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import PIL
import pytest
from blake3 import blake3
from PIL import Image

import mmobs
from mmobs import ImageMediaIO, MediaWithBytes, MultiModalHasher
from tests.support import golden
from tests.support.images import (
    BAD_TIFF_HEADER,
    IMAGE_ID_TAG,
    SHORT_TIFF_HEADER,
    encode,
    jpeg_bytes,
    jpeg_with_exif,
    noisy_image,
)
from tests.support.reference import (
    FR,
    LEN,
    ref_item,
    ref_key,
    ref_pixel_key,
    ref_serialize,
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
# The pixel fast path equals the straightforward np.asarray path
# =============================================================================

PIL_MODES = (
    "1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX",
    "CMYK", "YCbCr", "LAB", "HSV", "I", "I;16", "I;16B", "I;16L", "F",
)  # fmt: skip
SIZES = [(1, 1), (3, 5), (7, 1), (1, 7), (1021, 3), (3, 1021), (513, 257)]


def _creatable(mode: str) -> bool:
    try:
        Image.new(mode, (1, 1))
    except (ValueError, OSError, KeyError):
        return False
    return True


def test_fast_path_covers_at_least_15_modes() -> None:
    """The parametrized comparison below is not mostly skipped."""
    assert sum(_creatable(mode) for mode in PIL_MODES) >= 15


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", PIL_MODES)
def test_pixel_fast_path_matches_reference(mode: str, size: tuple[int, int], record: Any) -> None:
    """Streaming pixels through the raw encoder gives exactly the np.asarray bytes."""
    if not _creatable(mode):
        pytest.skip(f"Pillow {PIL.__version__} cannot create mode {mode}")
    image = noisy_image(mode, size, seed=zlib.crc32(f"{mode}/{size}".encode()))
    with record() as rec:
        key = hash_kwargs("blake3", image=image)
    assert key == ref_pixel_key("image", image)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "pixels")]
    assert rec.fallbacks == []


@pytest.mark.parametrize(
    ("mode", "size"),
    [("RGBA", (70001, 2)), ("I", (70001, 2)), ("1", (70001, 3)), ("RGB", (0, 0)), ("L", (0, 5)), ("F", (5, 0))],
)
def test_pixel_fast_path_extreme_shapes(mode: str, size: tuple[int, int]) -> None:
    """A line wider than one pixel chunk, and empty images, still match the reference."""
    image = noisy_image(mode, size) if 0 not in size else Image.new(mode, size)
    assert hash_kwargs("blake3", image=image) == ref_pixel_key("image", image)


@pytest.mark.parametrize(("mode", "size"), [("RGB", (4000, 3000)), ("RGBA", (3000, 3000))])
def test_pixel_fast_path_large_multi_block_image(mode: str, size: tuple[int, int]) -> None:
    """An image spread over several of Pillow's memory blocks streams in the right order."""
    image = noisy_image(mode, size, seed=7)
    block_size = Image.core.get_block_size()
    assert size[0] * size[1] * 4 > block_size, "not big enough to need several blocks"
    assert hash_kwargs("blake3", image=image) == ref_pixel_key("image", image)


_CHUNKS_OUTLIVE_IMAGE = textwrap.dedent(
    """
    import gc
    from PIL import Image
    from mmobs import MultiModalHasher
    from mmobs.events import observing

    raw = bytes(range(256)) * 1024  # 512x512 "L": one block, pixels stored as NumPy sees them
    with observing(None):
        expected = b"".join(bytes(c) for c in MultiModalHasher.iter_item_to_bytes(
            "image", Image.frombytes("L", (512, 512), raw)))
        chunks = list(MultiModalHasher.iter_item_to_bytes("image", Image.frombytes("L", (512, 512), raw)))
        gc.collect()
        others = [Image.frombytes("L", (512, 512), b"\\xaa" * len(raw)) for _ in range(8)]
        print("equal" if b"".join(chunks) == expected else "changed")
    """
)


def test_pixel_chunks_stay_valid_after_the_image_is_gone() -> None:
    """A chunk handed out by iter_item_to_bytes must not point into freed pixel memory.

    Run in a subprocess: reading freed memory may crash the interpreter.
    """
    result = subprocess.run(
        [sys.executable, "-c", _CHUNKS_OUTLIVE_IMAGE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "equal", (
        "chunks collected from iter_item_to_bytes changed once the image was freed: they alias freed pixel memory"
    )


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "PCX", "BMP", "TGA", "TIFF"])
def test_lazily_loaded_palette_image_keys_like_loaded_one(fmt: str) -> None:
    """The same palette image gets one key whether or not something called load() first.

    Some plugins (BMP, TGA, TIFF) keep the raw file palette (``rawmode``
    BGRX/BGR/RGB;L) until ``load()``. vLLM evaluates ``np.asarray(image)``
    (which loads) before reading the palette, so the key is that of the
    loaded image.
    """
    source = Image.frombytes("P", (6, 4), bytes(range(24)))
    source.putpalette(bytes(range(72)))
    data = encode(source, fmt)

    loaded = Image.open(io.BytesIO(data))
    loaded.load()
    expected = hash_kwargs("blake3", image=loaded)
    assert expected == ref_pixel_key("image", Image.open(io.BytesIO(data)))

    assert hash_kwargs("blake3", image=Image.open(io.BytesIO(data))) == expected


def test_palette_rawmode_is_keyed_when_set() -> None:
    """A palette whose rawmode is set adds the "palette_rawmode" field (4 fields, not 3)."""
    image = noisy_image("P", (5, 3))
    image.load()  # realise the palette; from here on load() leaves it alone
    without = hash_kwargs("blake3", image=image)
    image.palette.rawmode = "RGB"
    with_rawmode = hash_kwargs("blake3", image=image)
    assert with_rawmode == ref_pixel_key("image", image)
    assert with_rawmode != without


def test_default_new_palette_image_matches_reference() -> None:
    """Image.new("P") has an empty bytearray palette; it is keyed per the format (pickle)."""
    image = Image.new("P", (3, 2))
    assert type(image.palette.palette) is bytearray
    with pytest.warns(mmobs.UnsupportedTypeWarning, match="bytearray"):
        key = hash_kwargs("blake3", image=image)
    assert key == ref_pixel_key("image", image)


def test_item_digest_is_the_items_own_framed_bytes(record: Any) -> None:
    """When the observer asks, media_keyed carries blake3 of the item's own bytes."""
    image = noisy_image("RGB", (9, 4))
    with record(item_digests=True) as rec:
        hash_kwargs("blake3", image=image)
    (event,) = rec.keyed
    assert event.media is image
    assert event.item_digest == blake3(b"".join(ref_serialize(image))).hexdigest()

    with record() as rec:
        hash_kwargs("blake3", image=image)
    assert rec.keyed[0].item_digest is None


# =============================================================================
# EXIF ImageID
# =============================================================================


def _golden_uuid() -> uuid.UUID:
    return uuid.UUID(golden.case("pil-uuid-imageid")["kwargs"]["image"]["$image"]["uuid_image"])


def _with_image_id(image: Image.Image, image_id: object) -> Image.Image:
    image.getexif()[IMAGE_ID_TAG] = image_id
    return image


def test_uuid_image_id_keys_by_uuid_only(record: Any) -> None:
    """A UUID ImageID pins the key: FR(uuid.bytes), whatever the pixels (golden case)."""
    image_id = _golden_uuid()
    image = _with_image_id(noisy_image("L", (5, 3)), image_id)  # not the golden case's pixels
    with record() as rec:
        key = hash_kwargs("blake3", image=image)
    assert key == golden.case("pil-uuid-imageid")["expected"]
    assert key == stream_key(FR(b"image") + b"\x03" + FR(image_id.bytes))
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "image_id")]
    assert rec.fallbacks == []


def test_uuid_image_id_inside_media_with_bytes(record: Any) -> None:
    """The ImageID wins over the original bytes too."""
    image_id = uuid.UUID(int=0x0123456789ABCDEF)
    media = MediaWithBytes(_with_image_id(Image.new("RGB", (2, 2)), image_id), b"encoded", {"image_mode": "RGB"})
    with record() as rec:
        key = hash_kwargs("blake3", m=media)
    assert key == stream_key(FR(b"m") + b"\x03" + FR(image_id.bytes))
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "image_id")]


def test_string_image_id_keys_by_pixels(record: Any) -> None:
    """Only a uuid.UUID counts; a string ImageID (golden input) falls to the pixels."""
    image = Image.open(golden.GOLDEN_DIR / "inputs" / "imageid-string.jpg")
    image.load()
    assert image.getexif()[IMAGE_ID_TAG] == "abc"
    fresh = Image.open(golden.GOLDEN_DIR / "inputs" / "imageid-string.jpg")
    with record() as rec:
        key = hash_kwargs("blake3", image=fresh)
    assert key == ref_pixel_key("image", image)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "pixels")]
    assert rec.fallbacks == []

    plain = noisy_image("RGB", (4, 4))
    tagged = _with_image_id(noisy_image("RGB", (4, 4)), str(_golden_uuid()))
    assert hash_kwargs("blake3", image=tagged) == hash_kwargs("blake3", image=plain)


# =============================================================================
# MediaWithBytes
# =============================================================================


def test_media_without_io_config_keys_by_original_bytes(record: Any) -> None:
    """No io_config: item "image" of the original bytes; the pixels do not matter."""
    original = b"\x89PNG...pretend encoded bytes"
    media = MediaWithBytes(noisy_image("RGB", (3, 3), seed=1), original)
    other_pixels = MediaWithBytes(noisy_image("RGB", (3, 3), seed=2), original)
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    expected = stream_key(FR(b"image") + b"\x03" + FR(b"image") + b"\x03" + FR(original))
    assert key == expected == hash_kwargs("blake3", image=other_pixels)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "original_bytes")]
    assert hash_kwargs("blake3", image=MediaWithBytes(media.media, original, {})) == expected


def test_media_with_io_config_keys_by_config_and_bytes(record: Any) -> None:
    """With io_config: item "image" of {"io_config", "data": original_bytes}."""
    original = b"encoded"
    io_config = {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}
    media = MediaWithBytes(Image.new("RGB", (1, 1)), original, io_config)
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    config = (
        b"\x02" + LEN(2)
        + FR(b"image_mode") + b"\x03" + FR(b"RGB")
        + FR(b"rgba_background_color") + b"\x01" + LEN(3) + (b"\x03" + FR(np.array(255).tobytes())) * 3
    )  # fmt: skip
    value = b"\x02" + LEN(2) + FR(b"io_config") + config + FR(b"data") + b"\x03" + FR(original)
    assert key == stream_key(FR(b"image") + b"\x03" + FR(b"image") + value)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "original_bytes")]


@pytest.mark.parametrize(
    ("original_len", "key_source"),
    [(1000, "frames"), (97, "frames"), (96, "original_bytes"), (10, "original_bytes")],
)
def test_video_keys_by_the_smaller_of_frames_and_bytes(original_len: int, key_source: str, record: Any) -> None:
    """Frames (96 bytes here) are keyed only when strictly smaller than the original bytes."""
    frames = np.arange(96, dtype=np.uint8).reshape(2, 4, 4, 3)
    media = MediaWithBytes(frames, b"\x07" * original_len)
    with record() as rec:
        key = hash_kwargs("blake3", video=media)
    source = frames if key_source == "frames" else media.original_bytes
    assert key == stream_key(FR(b"video") + b"\x03" + b"".join(ref_item("video", source)))
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("video", key_source)]


def test_media_holding_something_else_is_pickled_whole(record: Any) -> None:
    """Other media have no key format: the whole object is pickled, as vLLM does, with a warning."""
    media = MediaWithBytes("not media", b"bytes")
    with record() as rec, pytest.warns(mmobs.UnsupportedTypeWarning, match="MediaWithBytes"):
        key = hash_kwargs("blake3", m=media)
    assert key == stream_key(FR(b"m") + b"\x03" + FR(pickle.dumps(media)))
    assert rec.keyed == []


def test_video_frames_as_a_tensor_key_like_vllm(record: Any) -> None:
    """vLLM's video decoders may hand back frames as a tensor: keyed as the tensor item."""
    torch = pytest.importorskip("torch", reason="torch is an optional dependency of mmobs")
    frames = torch.arange(96, dtype=torch.uint8).reshape(2, 4, 4, 3)
    with record() as rec:
        small = hash_kwargs("blake3", video=MediaWithBytes(frames, b"\x07" * 97))
        large = hash_kwargs("blake3", video=MediaWithBytes(frames, b"\x07" * 96))
    tensor_item = b"".join(ref_item("tensor", frames.numpy()))
    assert small == stream_key(FR(b"video") + b"\x03" + FR(b"video") + b"\x03" + tensor_item)
    assert large == stream_key(FR(b"video") + b"\x03" + b"".join(ref_item("video", b"\x07" * 96)))

    assert [(e.kind, e.key_source) for e in rec.keyed] == [("video", "frames"), ("video", "original_bytes")]


# =============================================================================
# The vLLM regression: a malformed EXIF block must never escape from hashing
# =============================================================================

REGRESSION_SOURCES = {
    "golden-bad-exif-header.jpg": lambda: golden.input_bytes("bad-exif-header.jpg"),
    "built-from-plain-jpeg": lambda: jpeg_with_exif(BAD_TIFF_HEADER, jpeg_bytes(seed=3)),
}


@pytest.fixture(params=sorted(REGRESSION_SOURCES))
def regression_jpeg(request: pytest.FixtureRequest) -> bytes:
    return REGRESSION_SOURCES[request.param]()


def test_regression_image_falls_back_to_pixels(regression_jpeg: bytes, record: Any) -> None:
    """The decoded image of the vLLM regression JPEG hashes by pixels, and says so once."""
    media = ImageMediaIO().load_bytes(regression_jpeg).media
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    (event,) = rec.fallbacks
    assert type(event.error) is SyntaxError
    assert (event.kind, event.key_source) == ("image", "pixels")
    assert event.image is media
    assert event.original_bytes is None
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "pixels")]

    fresh = ImageMediaIO().load_bytes(regression_jpeg).media
    assert key == ref_pixel_key("image", fresh)


def test_regression_media_falls_back_to_original_bytes(regression_jpeg: bytes, record: Any) -> None:
    """The MediaWithBytes of the regression JPEG hashes by its bytes, and says so once."""
    media = ImageMediaIO().load_bytes(regression_jpeg)
    assert media.io_config is None  # a JPEG is RGB already: no conversion
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    (event,) = rec.fallbacks
    assert type(event.error) is SyntaxError
    assert (event.kind, event.key_source) == ("media_with_bytes", "original_bytes")
    assert event.image is media.media
    assert event.original_bytes == regression_jpeg
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "original_bytes")]

    clean = MediaWithBytes(Image.new("RGB", (1, 1)), regression_jpeg, None)
    with record() as clean_rec:
        assert key == hash_kwargs("blake3", image=clean)
    assert clean_rec.fallbacks == []
    assert key == stream_key(FR(b"image") + b"\x03" + FR(b"image") + b"\x03" + FR(regression_jpeg))


def test_converted_regression_image_still_falls_back(record: Any) -> None:
    """``convert()`` carries the poisoned EXIF along; the fallback still runs once."""
    data = golden.input_bytes("bad-exif-header.jpg")
    media = ImageMediaIO(image_mode="L").load_bytes(data)
    assert media.io_config == {"image_mode": "L", "rgba_background_color": (255, 255, 255)}
    with record() as rec:
        hash_kwargs("blake3", image=media.media)
    assert [type(e.error) for e in rec.fallbacks] == [SyntaxError]


def test_short_tiff_header_falls_back_with_struct_error(record: Any) -> None:
    """A valid TIFF prefix with a cut-off IFD offset raises struct.error; tolerated too."""
    data = jpeg_with_exif(SHORT_TIFF_HEADER)
    with record() as rec:
        image_key = hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data).media)
        media_key = hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))
    assert [(type(e.error), e.kind, e.key_source) for e in rec.fallbacks] == [
        (struct.error, "image", "pixels"),
        (struct.error, "media_with_bytes", "original_bytes"),
    ]
    assert image_key == ref_pixel_key("image", ImageMediaIO().load_bytes(data).media)
    assert media_key == stream_key(FR(b"image") + b"\x03" + FR(b"image") + b"\x03" + FR(data))


# -- canaries: fail loudly if Pillow stops raising, so the tests above stay honest --


def _exif_read_error(image: Image.Image) -> BaseException | None:
    try:
        image.getexif().get(IMAGE_ID_TAG)
    except Exception as error:
        return error
    return None


def test_canary_pillow_raises_on_regression_jpeg() -> None:
    """bad-exif-header.jpg, once loaded like vLLM does, must still make getexif() raise."""
    error = _exif_read_error(ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg")).media)
    assert type(error) is SyntaxError, (
        f"Pillow {PIL.__version__} no longer raises SyntaxError from getexif() on "
        f"bad-exif-header.jpg (got {error!r}); the fallback tests would pass vacuously. "
        "Find a new input that raises and update the tests."
    )


def test_canary_pillow_raises_on_bad_exif_png_chunk() -> None:
    """bad-exif-chunk.png after open + load must still make getexif() raise."""
    image = Image.open(golden.GOLDEN_DIR / "inputs" / "bad-exif-chunk.png")
    image.load()
    error = _exif_read_error(image)
    assert type(error) is SyntaxError, (
        f"Pillow {PIL.__version__} no longer raises from getexif() on bad-exif-chunk.png "
        f"after open+load (got {error!r}); the golden exif_fallbacks counts are now vacuous."
    )


def test_canary_pillow_raises_struct_error_on_short_tiff_header() -> None:
    """The struct.error input must still raise struct.error."""
    error = _exif_read_error(ImageMediaIO().load_bytes(jpeg_with_exif(SHORT_TIFF_HEADER)).media)
    assert type(error) is struct.error, (
        f"Pillow {PIL.__version__} no longer raises struct.error from getexif() on a JPEG "
        f"whose TIFF header is {SHORT_TIFF_HEADER!r} (got {error!r})."
    )


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
