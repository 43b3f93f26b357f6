"""The fleet fingerprint: one short digest of the keys of fixed reference inputs.

Two replicas that would key the same image differently (a Pillow upgrade that
decodes a JPEG differently, a NumPy that changes a dtype string, a change in
how a malformed EXIF block is handled) compute different keys for at least
one reference input, hence a different fingerprint. Exported as the
``fingerprint`` label of ``mmobs_hasher_info``, a mismatch is one PromQL
expression away: ``count(count by (fingerprint) (mmobs_hasher_info)) > 1``.

The reference inputs are committed bytes (``mmobs/reference/``), never
encoded at run time, so encoder differences do not count as disagreement.
Hashing them runs with reporting switched off for this context, so the
traffic counters only ever count real inputs.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from importlib import resources
from io import BytesIO
from typing import Any

import numpy as np
from blake3 import blake3
from PIL import Image

from mmobs.events import observing
from mmobs.keys.hashing import IMAGE_ID_TAG, MultiModalHasher
from mmobs.keys.loader import ImageMediaIO

__all__ = ["FINGERPRINT_HEX_CHARS", "Fingerprint", "compute_fingerprint", "process_fingerprint"]

FINGERPRINT_HEX_CHARS = 16


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The fingerprint and the key of every reference input behind it."""

    digest: str
    keys: dict[str, str]


def _reference_bytes(name: str) -> bytes:
    return resources.files("mmobs").joinpath("reference", name).read_bytes()


def _opened(name: str) -> Image.Image:
    image = Image.open(BytesIO(_reference_bytes(name)))
    image.load()
    return image


def _uuid_image() -> Image.Image:
    image = Image.new("RGB", (3, 2), (1, 2, 3))
    image.getexif()[IMAGE_ID_TAG] = uuid.UUID("6d6d6f62-732d-4669-6e67-657270726e74")
    return image


def _opened_input(name: str) -> dict[str, Any]:
    return {"image": _opened(name)}


def _loaded_input(name: str) -> dict[str, Any]:
    return {"image": ImageMediaIO().load_bytes(_reference_bytes(name))}


def _pixels_input(name: str) -> dict[str, Any]:
    return {"image": ImageMediaIO(image_mode=None).load_bytes(_reference_bytes(name)).media}


def _reference_inputs() -> dict[str, Callable[[], dict[str, Any]]]:
    """Name -> a builder of fresh ``hash_kwargs`` arguments (images are stateful)."""
    files = (
        "bad-exif-header.jpg",
        "short-ifd.jpg",
        "bad-exif-chunk.png",
        "orientation-6.jpg",
        "palette.png",
        "gray16.png",
        "rgba.png",
        "cmyk.jpg",
    )
    inputs: dict[str, Callable[[], dict[str, Any]]] = {}
    for name in files:
        inputs[f"open:{name}"] = partial(_opened_input, name)
        inputs[f"media:{name}"] = partial(_loaded_input, name)
        inputs[f"pixels:{name}"] = partial(_pixels_input, name)
    array = np.arange(24, dtype=">i4").reshape(4, 6)
    inputs["ndarray:noncontiguous"] = lambda: {"data": array.T}
    inputs["ndarray:0d"] = lambda: {"data": np.array(0.1, dtype=np.float32)}
    inputs["image:uuid"] = lambda: {"image": _uuid_image()}
    inputs["kwargs:request"] = lambda: {
        "model_id": "mmobs/reference",
        "mm_processor_kwargs": {"size": {"shortest_edge": 224}, "fps": [2.0, 4.5], "flag": True},
        "none": None,
    }
    return inputs


def compute_fingerprint() -> Fingerprint:
    """Hash every reference input (reporting nothing) and digest the keys."""
    keys: dict[str, str] = {}
    # Reference inputs are malformed on purpose; Pillow's "Corrupt EXIF data"
    # warnings about them are expected noise, not news.
    with observing(None), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name, build in _reference_inputs().items():
            try:
                keys[name] = MultiModalHasher.hash_kwargs("blake3", **build())
            except Exception as error:  # noqa: BLE001 - a failure is itself a difference
                keys[name] = f"error:{type(error).__name__}"
    summary = blake3()
    for name in sorted(keys):
        summary.update(f"{name}={keys[name]}\n".encode())
    return Fingerprint(summary.hexdigest()[:FINGERPRINT_HEX_CHARS], keys)


@cache
def process_fingerprint() -> Fingerprint:
    """The fingerprint of this process, computed once."""
    return compute_fingerprint()
