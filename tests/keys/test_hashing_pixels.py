"""The pixel fast path: keys equal those of the straightforward np.asarray path, for every mode, size and palette."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import PIL
import pytest
from blake3 import blake3
from PIL import Image

import mmobs
from mmobs import MultiModalHasher
from tests.support.images import (
    encode,
    noisy_image,
)
from tests.support.reference import (
    ref_pixel_key,
    ref_serialize,
)

pytestmark = pytest.mark.usefixtures("silent_observer")
hash_kwargs = MultiModalHasher.hash_kwargs


# -- The pixel fast path equals the straightforward np.asarray path ------------------------


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
