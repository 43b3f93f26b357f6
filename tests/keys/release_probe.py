"""What one vLLM release's own loader and hasher make of the golden cases and of image files.

Run by ``tests/keys/test_releases.py`` in a child interpreter whose ``sys.path`` starts with that
release's Python sources (``tests/support/vllm_releases.py`` unpacks them), so that ``import vllm`` is
that release, whichever vLLM the test's own environment has::

    python tests/keys/release_probe.py REQUEST.json REPORT.json

REQUEST holds ``model_id``, the golden ``cases`` (their recipes) and ``files`` (name -> path). For each
file and image mode, REPORT says what the release's ``ImageMediaIO(mode).load_bytes`` did (refused,
with the exception's type), whether the image it made carries an ``io_config``, the key of the
media-with-bytes with the model id and alone (or the exception the hasher raised: before 0.31, a
broken EXIF block raises), the key of the same bytes and ``io_config`` around a blank image (the ImageID branch not taken: what the
upstream fix gives, in this release's format) and the key of the file as plain Pillow decodes it (the
hasher's pixel stream, apart from any loader).
"""

from __future__ import annotations

import inspect
import io
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import vllm
from PIL import Image
from vllm.multimodal.hasher import MultiModalHasher
from vllm.multimodal.media import MediaWithBytes
from vllm.multimodal.media.image import ImageMediaIO

_TAKES_ALGORITHM = "algorithm" in inspect.signature(MultiModalHasher.hash_kwargs).parameters
_HAS_IO_CONFIG = "io_config" in inspect.signature(MediaWithBytes).parameters


def hash_kwargs(algorithm: str, **kwargs: Any) -> str:
    if _TAKES_ALGORITHM:
        return MultiModalHasher.hash_kwargs(algorithm, **kwargs)
    os.environ["VLLM_MM_HASHER_ALGORITHM"] = algorithm  # read by 0.25 and 0.26 on every call
    return MultiModalHasher.hash_kwargs(**kwargs)


def outcome(call: Any) -> dict[str, str]:
    try:
        return {"key": call()}
    except Exception as error:
        return {"raised": type(error).__name__}


# -- the golden cases, built with this release's classes ----------------------------------------


def build(recipe: Any, inputs: Path) -> Any:
    if isinstance(recipe, list):
        return [build(item, inputs) for item in recipe]
    if not isinstance(recipe, dict):
        return recipe
    if len(recipe) == 1:
        ((tag, spec),) = recipe.items()
        if tag == "$bytes":
            return bytes.fromhex(spec)
        if tag == "$ndarray":
            array = np.frombuffer(bytes.fromhex(spec["hex"]), dtype=np.dtype(spec["dtype"])).reshape(spec["shape"])
            return array.copy().T if spec.get("transpose") else array.copy()
        if tag == "$image":
            return image(spec, inputs)
        if tag == "$media":
            options = {key: spec[key] for key in ("image_mode",) if key in spec}
            if "rgba_background_color" in spec:
                options["rgba_background_color"] = tuple(spec["rgba_background_color"])
            return ImageMediaIO(**options).load_bytes((inputs / spec["file"]).read_bytes())
        if tag == "$video":
            return MediaWithBytes(build(spec["frames"], inputs), b"\x00" * spec["original_bytes_len"])
    return {key: build(value, inputs) for key, value in recipe.items()}


def image(spec: dict[str, Any], inputs: Path) -> Image.Image:
    if "uuid_image" in spec:
        made = Image.new("RGB", (4, 4), (10, 20, 30))
        made.getexif()[0x800D] = uuid.UUID(spec["uuid_image"])
        return made
    if spec["load"] == "open_load":
        opened = Image.open(inputs / spec["file"])
        opened.load()
        return opened
    return ImageMediaIO().load_bytes((inputs / spec["file"]).read_bytes()).media


# -- image files -------------------------------------------------------------------------------


def file_report(data: bytes, image_mode: str | None, model_id: str) -> dict[str, Any]:
    try:
        media = ImageMediaIO(image_mode).load_bytes(data)
    except Exception as error:
        return {"refused": type(error).__name__}
    io_config = media.__dict__.get("io_config")  # 0.25's MediaWithBytes has none (and delegates the name)
    blank = Image.new("RGB", (1, 1))
    wrapped = MediaWithBytes(blank, data, io_config) if _HAS_IO_CONFIG else MediaWithBytes(blank, data)
    return {
        "io_config": io_config is not None,
        "media": outcome(lambda: hash_kwargs("blake3", model_id=model_id, image=media)),
        "without_image_id": hash_kwargs("blake3", model_id=model_id, image=wrapped),
        "image_alone": outcome(lambda: hash_kwargs("blake3", image=media)),  # as ``mmobs hash`` keys a file
        "image_alone_without_image_id": hash_kwargs("blake3", image=wrapped),
        "pixels": outcome(lambda: hash_kwargs("blake3", image=opened(data))),
    }


def opened(data: bytes) -> Image.Image:
    """The file as plain Pillow opens and loads it: the same pixels in any process, whatever the loader does."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def main(request_path: str, report_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    inputs = Path(request["golden_inputs"])
    cases = {}
    for case in request["cases"]:
        cases[case["id"]] = outcome(lambda c=case: hash_kwargs(c["algorithm"], **build(c["kwargs"], inputs)))
    files = {}
    for name, path in request["files"].items():
        data = Path(path).read_bytes()
        files[name] = {str(mode): file_report(data, mode, request["model_id"]) for mode in request["image_modes"]}
    report = {"vllm": vllm.__version__, "vllm_file": vllm.__file__, "cases": cases, "files": files}
    Path(report_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
