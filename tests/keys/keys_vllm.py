"""What the no-decode key modules (``test_keys_vllm_*.py``) share: vLLM's answers, the comparison, the ledger.

:func:`vllm_key` and :func:`vllm_state` ask vLLM's loader (the ``vllm`` fixture of
``tests/keys/conftest.py``); :func:`compare` checks one input against it and
counts the outcome in ``LEDGER``; each module's last test checks with :func:`ledger_since`
what the module's own tests added (``ledger_at_module_start``, ``tests/keys/conftest.py``)
compared enough to mean something, whatever else the process ran before it. Also the images several modules build (pixels of a
mode, GIFs, a PNG with a late tRNS) and ``scripts/make_corpus.py``, loaded once.
"""

from __future__ import annotations

import importlib.util
import io
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mmobs.errors import BadImageError
from mmobs.events import observing
from mmobs.keys.from_bytes import ImageKey, key_for_bytes, key_image
from mmobs.keys.loader import ImageMediaIO, has_transparency
from tests.support.images import PNG_SIGNATURE, png_chunk

ROOT = Path(__file__).resolve().parents[2]
#: The modules' ``pytestmark``.
MARKS = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
]

# -- vLLM's answers ------------------------------------------------------------------------


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


def ledger_since(start: Counter[str]) -> Counter[str]:
    """``LEDGER`` less ``start``: what was compared since ``start`` was taken."""
    return Counter({key: LEDGER[key] - start.get(key, 0) for key in LEDGER if LEDGER[key] != start.get(key, 0)})


def vllm_formats(vllm: Any) -> tuple[str, ...]:
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
    """Check one input; return the outcome, for the ledger and Hypothesis' statistics.

    A refusal is never a wrong key, so vLLM's loader runs only for what mmobs keys: the corpus's costly
    inputs, which the guard refuses from their headers, would otherwise cost vLLM's full decode per mode.
    """
    try:
        with observing(None):
            if io is None:
                found: ImageKey | None = None
                key = key_for_bytes(data, algorithm, image_mode, color)
            else:
                found = key_image(io, data, algorithm)
                key = found.key
    except BadImageError:
        outcome = "mmobs_refuses"
    else:
        expected = vllm_key(vllm, data, algorithm, image_mode, color)
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
    for target in TARGET_MODES:
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


TARGET_MODES = ("RGB", None, "L", "RGBA", "P", "CMYK", "LA", "1", "I;16", "F", "I", "YCbCr", "PA")


# -- inputs ----------------------------------------------------------------------------------


def load_make_corpus() -> Any:
    """``scripts/make_corpus.py``, loaded once (``make_corpus`` in ``sys.modules``)."""
    if "make_corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "scripts" / "make_corpus.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["make_corpus"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["make_corpus"]


def pixels(mode: str, size: tuple[int, int], seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    image = Image.frombytes(mode, size, rng.bytes(size[0] * size[1] * 8))
    if mode in ("P", "PA"):
        image.putpalette(rng.bytes(768))
    return image


def png_late_trns(data: bytes, payload: bytes) -> bytes:
    """``data`` with a tRNS chunk inserted just before IEND (after the image data)."""
    end = data.rfind(b"IEND")
    if not data.startswith(PNG_SIGNATURE) or end < 4:
        return data
    return data[: end - 4] + png_chunk(b"tRNS", payload) + data[end - 4 :]


def encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def gifs() -> dict[str, bytes]:
    indexed = Image.frombytes("P", (9, 7), bytes(range(63)))
    indexed.putpalette(np.random.default_rng(6).bytes(768))
    clear = indexed.copy()
    clear.info["transparency"] = 5
    gray = pixels("L", (9, 7), 7)
    return {
        "p": encode(indexed, "GIF"),
        "p-transparency": encode(clear, "GIF", transparency=5),
        "l": encode(gray, "GIF"),
        "animated-transparency": encode(
            clear, "GIF", transparency=5, save_all=True, append_images=[indexed], disposal=2
        ),
        "animated-later-transparency": encode(indexed, "GIF", save_all=True, append_images=[clear]),
        "local-palettes": encode(indexed, "GIF", save_all=True, append_images=[pixels("P", (9, 7), 8)], optimize=False),
    }
