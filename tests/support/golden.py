"""Build the inputs of ``shared/golden/vectors.json`` from their recipes.

The vectors are read where they live (``../shared/golden`` next to the
project) and never copied into the repository.
"""

from __future__ import annotations

import json
import os
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from mmobs import ImageMediaIO, MediaWithBytes

GOLDEN_DIR = Path(os.environ.get("MMOBS_GOLDEN_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "golden"))


def missing_message() -> str | None:
    """Why the golden vectors cannot be read, for a person; ``None`` when they can."""
    if (GOLDEN_DIR / "vectors.json").is_file():
        return None
    return (
        f"the golden vectors are missing: no vectors.json in {GOLDEN_DIR}. They are read from "
        "../shared/golden next to this checkout (never copied into the repository); put them there, "
        "or set MMOBS_GOLDEN_DIR to the folder that holds vectors.json and inputs/."
    )


@cache
def cases() -> list[dict[str, Any]]:
    return json.loads((GOLDEN_DIR / "vectors.json").read_text())["cases"]


def case(case_id: str) -> dict[str, Any]:
    return next(c for c in cases() if c["id"] == case_id)


def input_bytes(name: str) -> bytes:
    return (GOLDEN_DIR / "inputs" / name).read_bytes()


def build(recipe: Any, vllm_version: str | None = None) -> Any:
    """Turn a recipe into the value it describes (fresh objects on every call).

    Images are loaded by mmobs's loader as release ``vllm_version``'s loads them (the newest for ``None``).
    """
    if isinstance(recipe, list):
        return [build(item, vllm_version) for item in recipe]
    if not isinstance(recipe, dict):
        return recipe
    if len(recipe) == 1:
        ((tag, spec),) = recipe.items()
        if tag.startswith("$"):
            return _BUILDERS[tag](spec, vllm_version)
    return {key: build(value, vllm_version) for key, value in recipe.items()}


def _bytes(spec: str, vllm_version: str | None) -> bytes:
    return bytes.fromhex(spec)


def _ndarray(spec: dict[str, Any], vllm_version: str | None) -> np.ndarray:
    array = np.frombuffer(bytes.fromhex(spec["hex"]), dtype=np.dtype(spec["dtype"]))
    array = array.reshape(spec["shape"]).copy()
    return array.T if spec.get("transpose") else array


def _image(spec: dict[str, Any], vllm_version: str | None) -> Image.Image:
    if "uuid_image" in spec:
        image = Image.new("RGB", (4, 4), (10, 20, 30))
        image.getexif()[0x800D] = uuid.UUID(spec["uuid_image"])
        return image
    if spec["load"] == "open_load":
        image = Image.open(GOLDEN_DIR / "inputs" / spec["file"])
        image.load()
        return image
    if spec["load"] == "load_bytes_media":
        return ImageMediaIO(vllm_version=vllm_version).load_bytes(input_bytes(spec["file"])).media
    raise ValueError(f"unknown image load {spec['load']!r}")


def _media(spec: dict[str, Any], vllm_version: str | None) -> MediaWithBytes:
    options: dict[str, Any] = {"vllm_version": vllm_version}
    if "image_mode" in spec:
        options["image_mode"] = spec["image_mode"]
    if "rgba_background_color" in spec:
        options["rgba_background_color"] = tuple(spec["rgba_background_color"])
    return ImageMediaIO(**options).load_bytes(input_bytes(spec["file"]))


def _video(spec: dict[str, Any], vllm_version: str | None) -> MediaWithBytes:
    return MediaWithBytes(build(spec["frames"], vllm_version), b"\x00" * spec["original_bytes_len"])


_BUILDERS = {"$bytes": _bytes, "$ndarray": _ndarray, "$image": _image, "$media": _media, "$video": _video}
