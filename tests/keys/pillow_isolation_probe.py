"""Run as a script (``python tests/keys/pillow_isolation_probe.py GOLDEN_INPUTS REPORT``): what Pillow and
vLLM's loader do before mmobs is loaded, what mmobs's loader does, and what they do after, as JSON in REPORT
(stdout is left to mmobs's log events).

It is a separate process because the suite itself has long loaded mmobs: only a fresh interpreter
can see Pillow as it is without mmobs. ``tests/keys/test_pillow_isolation.py`` reads its report.
It imports nothing of mmobs (nor of the tests) before the first observation.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import struct
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

from PIL import Image


def _png_declaring(width: int, height: int) -> bytes:
    """A few dozen bytes of PNG whose header declares ``width`` x ``height``: Image.open checks that size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b"")


def _outcome(action: Any) -> dict[str, Any]:
    """What ``action()`` returned or raised, and the warnings it gave, as JSON-able values."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: dict[str, Any] = {"returned": action()}
        except Exception as error:
            # Without the object's address ("cannot identify image file <_io.BytesIO object at 0x...>").
            result = {"raised": type(error).__name__, "message": re.sub(r" at 0x[0-9a-f]+", "", str(error))}
    result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result


def _decoded(data: bytes) -> list[Any]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return [image.format, image.mode, list(image.size), image.tobytes().hex()[:64]]


def _opened(data: bytes) -> list[Any]:
    with Image.open(io.BytesIO(data)) as image:
        return [image.format, image.mode, list(image.size)]


def _exif(data: bytes) -> dict[str, str]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return {str(tag): repr(value)[:80] for tag, value in image.getexif().items()}


def _vllm_loaded(data: bytes) -> list[Any]:
    from vllm.multimodal.media.image import ImageMediaIO

    image = ImageMediaIO().load_bytes(data)
    image = getattr(image, "media", image)  # a MediaWithBytes from 0.31 on, the image before
    return [image.mode, list(image.size)]


def observe(inputs: dict[str, bytes]) -> dict[str, Any]:
    """Everything this process's Pillow (and vLLM's loader, where vLLM imports) does with ``inputs``."""
    seen: dict[str, Any] = {
        "check_signature": str(inspect.signature(Image._decompression_bomb_check)),
        "max_image_pixels": Image.MAX_IMAGE_PIXELS,
        "check_90mp": _outcome(lambda: Image._decompression_bomb_check((10_000, 9_000))),
        "check_400mp": _outcome(lambda: Image._decompression_bomb_check((20_000, 20_000))),
    }
    for name, data in inputs.items():
        seen[f"open {name}"] = _outcome(lambda data=data: _opened(data))
        seen[f"decode {name}"] = _outcome(lambda data=data: _decoded(data))
        seen[f"exif {name}"] = _outcome(lambda data=data: _exif(data))
        seen[f"vllm {name}"] = _outcome(lambda data=data: _vllm_loaded(data))
    return seen


def use_mmobs(photo: bytes) -> dict[str, Any]:
    """mmobs's loader at work: a plain load, and a refusal by its own pixel limit (the wrapped check)."""
    from mmobs import ImageMediaIO

    return {
        "load": _outcome(lambda: list(ImageMediaIO().load_bytes(photo).media.size)),
        "refused": _outcome(lambda: list(ImageMediaIO(max_pixels=100).load_bytes(photo).media.size)),
        "loads_above_pillows_limit": _outcome(lambda: _mmobs_opened_within(10**9, _png_declaring(10_000, 9_000))),
    }


def _mmobs_opened_within(limit: int, data: bytes) -> list[Any]:
    from mmobs.keys.pixel_limit import pixel_limit

    with pixel_limit(limit):
        return _opened(data)


def main() -> None:
    golden = Path(sys.argv[1])
    inputs = {path.name: path.read_bytes() for path in sorted(golden.glob("*")) if path.is_file()}
    inputs["declares-90mp.png"] = _png_declaring(10_000, 9_000)
    inputs["declares-400mp.png"] = _png_declaring(20_000, 20_000)
    before = observe(inputs)
    assert "mmobs" not in sys.modules, "the first observation must be of Pillow without mmobs"
    mmobs = use_mmobs(inputs["photo.jpg"])
    after = observe(inputs)
    report = {"pillow": Image.__version__, "before": before, "mmobs": mmobs, "after": after}
    Path(sys.argv[2]).write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main()
