"""The fleet fingerprint: one short digest of the keys of fixed reference inputs.

Two replicas that would key the same image differently (a Pillow upgrade that
decodes a JPEG differently, a NumPy that changes a dtype string, a change in
how a malformed EXIF block is handled) compute different keys for at least
one reference input, hence a different fingerprint. Exported as the
``fingerprint`` label of ``mmobs_hasher_info``, a mismatch is one PromQL
expression away: ``count(count by (fingerprint) (mmobs_hasher_info)) > 1``.

A process keys in one vLLM release's format (:mod:`mmobs.releases`): the newest, unless
``mmobs serve --vllm-version`` names another or the vLLM plugin runs inside an older vLLM, which says
so with :func:`key_with_release`. The fingerprint digests the reference keys in that format, and the
``key_format`` label of ``mmobs_hasher_info`` names it, so that a fleet halfway through a vLLM
upgrade shows as two fingerprints, each naming its format.

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
from mmobs.keys.hashing import MultiModalHasher, ReleaseHasher
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.raw_bytes import FrontEnd, check_front_end, raw_bytes_key
from mmobs.keys.writer import IMAGE_ID_TAG
from mmobs.releases import key_format

#: Public: :func:`compute_fingerprint` (also ``mmobs.compute_fingerprint``) and :func:`key_with_release`;
#: the rest is mmobs's own.
__all__ = ["Fingerprint", "compute_fingerprint", "key_with_release"]

FINGERPRINT_HEX_CHARS = 16


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The fingerprint and the key of every reference input behind it."""

    digest: str
    keys: dict[str, str]
    #: The name of the key format the keys are in (``mmobs.releases``), e.g. ``"0.33"``.
    key_format: str


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


def _loaded_input(name: str, vllm_version: str | None) -> dict[str, Any]:
    return {"image": ImageMediaIO(vllm_version=vllm_version).load_bytes(_reference_bytes(name))}


def _pixels_input(name: str, vllm_version: str | None) -> dict[str, Any]:
    loaded = ImageMediaIO(image_mode=None, vllm_version=vllm_version).load_bytes(_reference_bytes(name))
    return {"image": getattr(loaded, "media", loaded)}


_REFERENCE_FILES = (
    "bad-exif-header.jpg",
    "short-ifd.jpg",
    "bad-exif-chunk.png",
    "orientation-6.jpg",
    "palette.png",
    "gray16.png",
    "rgba.png",
    "cmyk.jpg",
)


def _reference_inputs(vllm_version: str | None) -> dict[str, Callable[[], dict[str, Any]]]:
    """Name -> a builder of fresh ``hash_kwargs`` arguments (images are stateful)."""
    inputs: dict[str, Callable[[], dict[str, Any]]] = {}
    for name in _REFERENCE_FILES:
        inputs[f"open:{name}"] = partial(_opened_input, name)
        inputs[f"media:{name}"] = partial(_loaded_input, name, vllm_version)
        inputs[f"pixels:{name}"] = partial(_pixels_input, name, vllm_version)
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


def _hasher(vllm_version: str | None) -> Callable[..., str]:
    """``hash_kwargs`` with blake3, in release ``vllm_version``'s format (the newest for ``None``)."""
    if vllm_version is None:
        return partial(MultiModalHasher.hash_kwargs, "blake3")
    hasher = MultiModalHasher.for_vllm(vllm_version)
    if isinstance(hasher, ReleaseHasher):
        return partial(hasher.hash_kwargs, "blake3")
    return hasher.hash_kwargs  # 0.25 and 0.26 read the algorithm from the environment (blake3 by default)


def compute_fingerprint(vllm_version: str | None = None, front_end: FrontEnd = "python") -> Fingerprint:
    """Hash every reference input (reporting nothing) in release ``vllm_version``'s format; digest the keys.

    ``front_end="rust"``: the reference files keyed as vLLM's Rust front end keys them
    (:mod:`mmobs.keys.raw_bytes`), in the key format named ``rust``, so that a fleet mixing front ends
    shows two fingerprints. Raises :class:`~mmobs.errors.InvalidOptionError` for a release mmobs does
    not know, or a front end vLLM does not have.
    """
    fmt = key_format(vllm_version)
    if check_front_end(front_end, "blake3", {}) == "rust":
        raw = {f"bytes:{name}": raw_bytes_key(_reference_bytes(name)) for name in _REFERENCE_FILES}
        return Fingerprint(_summary("rust", raw), raw, "rust")
    hash_kwargs = _hasher(vllm_version)
    keys: dict[str, str] = {}
    # Reference inputs are malformed on purpose; Pillow's "Corrupt EXIF data"
    # warnings about them are expected noise, not news.
    with observing(None), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name, build in _reference_inputs(vllm_version).items():
            try:
                keys[name] = hash_kwargs(**build())
            except Exception as error:  # noqa: BLE001 - a failure is itself a difference
                keys[name] = f"error:{type(error).__name__}"
    return Fingerprint(_summary(fmt.name, keys), keys, fmt.name)


def _summary(format_name: str, keys: dict[str, str]) -> str:
    # The format's name is digested too: releases whose formats key the reference images alike (0.27 and
    # 0.30 differ on video tensors, 0.31 and 0.33 on transparent RGB images) still key other media apart.
    summary = blake3(f"key_format={format_name}\n".encode())
    for name in sorted(keys):
        summary.update(f"{name}={keys[name]}\n".encode())
    return summary.hexdigest()[:FINGERPRINT_HEX_CHARS]


_keying_release: str | None = None
_keying_front_end: FrontEnd = "python"


def key_with_release(vllm_version: str | None, front_end: FrontEnd = "python") -> None:
    """Say that this process keys in release ``vllm_version``'s format (``None``: the newest), as ``front_end`` does.

    Called once, at start-up, before the first hash: by ``mmobs serve --vllm-version`` and by the vLLM
    plugin inside a vLLM whose format is not the newest, or whose front end is the Rust one. The
    process's fingerprint follows it. Raises :class:`~mmobs.errors.InvalidOptionError` for a release
    mmobs does not know, or a front end vLLM does not have.
    """
    global _keying_release, _keying_front_end
    key_format(vllm_version)
    _keying_front_end = check_front_end(front_end, "blake3", {})
    _keying_release = vllm_version


def keying_release() -> str | None:
    """The release whose key format this process keys in (``None``: the newest)."""
    return _keying_release


def process_fingerprint() -> Fingerprint:
    """The fingerprint of this process, in the format it keys in; computed once per format."""
    return _fingerprint_of(_keying_release, _keying_front_end)


@cache
def _fingerprint_of(vllm_version: str | None, front_end: FrontEnd) -> Fingerprint:
    return compute_fingerprint(vllm_version, front_end)
