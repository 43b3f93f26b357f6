"""The key format written plainly from docs/key-format.md: the one in-repo reference.

It shares no code with mmobs (no sinks, no streaming, ``np.asarray`` for
pixels) and is itself checked against the golden vectors computed by vLLM
(``tests/keys/test_hashing.py``). The real vLLM is the oracle in CI
(``tests/vllm/test_vllm_differential_*.py``); this reference is what the unit tests,
the fuzzer and the benchmark's straightforward baseline compare against on a
machine without vLLM.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
from blake3 import blake3
from PIL import Image

from mmobs.keys.media import MediaWithBytes

IMAGE_ID_TAG = 0x800D


def LEN(n: int) -> bytes:
    return struct.pack("<Q", n)


def FR(data: bytes | memoryview) -> bytes:
    data = bytes(data)  # for a memoryview: its nbytes raw bytes, C order
    return LEN(len(data)) + data


def ref_item(key: str, value: Any) -> Iterator[bytes]:
    yield FR(key.encode("utf-8"))
    yield from ref_value(value)


def ref_value(value: Any) -> Iterator[bytes]:
    if value is None:
        yield b"\x00"
    elif isinstance(value, (list, tuple)):
        yield b"\x01" + LEN(len(value))
        for element in value:
            yield from ref_value(element)
    elif isinstance(value, dict):
        yield b"\x02" + LEN(len(value))
        for key, element in value.items():
            yield FR(str(key).encode("utf-8"))
            yield from ref_value(element)
    else:
        yield b"\x03"
        yield from ref_serialize(value)


def _ref_image_id(image: Image.Image) -> uuid.UUID | None:
    try:
        image_id = image.getexif().get(IMAGE_ID_TAG)
    except Exception:  # the reference tolerates it too; the tests count it elsewhere
        return None
    return image_id if isinstance(image_id, uuid.UUID) else None


def ref_pixels(image: Image.Image) -> Iterator[bytes]:
    """The pixel form: item "image" of {mode, data: np.asarray(image)[, palette...]}."""
    data = np.asarray(image)  # evaluated first, exactly like vLLM's dict literal
    fields: dict[str, Any] = {"mode": image.mode, "data": data}
    palette = image.palette
    if palette is not None:
        if palette.palette is not None:
            fields["palette"] = palette.palette
        if palette.rawmode is not None:
            fields["palette_rawmode"] = palette.rawmode
    yield from ref_item("image", fields)


def ref_serialize(value: Any) -> Iterator[bytes]:
    if isinstance(value, (bytes, memoryview)):
        yield FR(value)
    elif isinstance(value, str):
        yield FR(value.encode("utf-8"))
    elif isinstance(value, (int, float)):
        yield FR(np.array(value).tobytes())
    elif isinstance(value, Image.Image):
        image_id = _ref_image_id(value)
        if image_id is not None:
            yield FR(image_id.bytes)
        else:
            yield from ref_pixels(value)
    elif isinstance(value, MediaWithBytes):
        media = value.media
        if isinstance(media, Image.Image):
            image_id = _ref_image_id(media)
            if image_id is not None:
                yield FR(image_id.bytes)
            elif value.io_config:
                yield from ref_item("image", {"io_config": value.io_config, "data": value.original_bytes})
            else:
                yield from ref_item("image", value.original_bytes)
        elif media.nbytes < len(value.original_bytes):
            yield from ref_item("video", media)
        else:
            yield from ref_item("video", value.original_bytes)
    elif isinstance(value, np.ndarray):
        data = value.item() if value.ndim == 0 else value.tobytes(order="C")
        yield from ref_item("ndarray", {"dtype": value.dtype.str, "shape": value.shape, "data": data})
    else:
        yield FR(pickle.dumps(value))


def _digest(algorithm: str) -> Any:
    return blake3() if algorithm == "blake3" else hashlib.new(algorithm)


def ref_stream(**kwargs: Any) -> bytes:
    return b"".join(chunk for name in sorted(kwargs) for chunk in ref_item(name, kwargs[name]))


def ref_key(algorithm: str, /, **kwargs: Any) -> str:
    digest = _digest(algorithm)
    for name in sorted(kwargs):
        for chunk in ref_item(name, kwargs[name]):
            digest.update(chunk)
    return digest.hexdigest()


def ref_pixel_key(name: str, image: Image.Image, algorithm: str = "blake3") -> str:
    """The key of ``hash_kwargs(algorithm, name=image)`` keyed by pixels (no EXIF read)."""
    digest = _digest(algorithm)
    digest.update(FR(name.encode()) + b"\x03")
    for chunk in ref_pixels(image):
        digest.update(chunk)
    return digest.hexdigest()


def stream_key(stream: bytes, algorithm: str = "blake3") -> str:
    digest = _digest(algorithm)
    digest.update(stream)
    return digest.hexdigest()
