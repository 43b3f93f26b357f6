"""The straightforward key, written from design.md alone: the baseline to beat.

This is how vLLM's ``MultiModalHasher`` keys a plain PIL image: build
``{"mode": image.mode, "data": np.asarray(image)}`` (plus the palette), which
copies every pixel into a new array, then feed the framed stream to the
digest. It shares no code with mmobs, so the benchmark also checks that both
produce the same key for every input it times.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
from blake3 import blake3
from PIL import Image

_LEN = struct.Struct("<Q").pack
_IMAGE_ID = 0x800D


def _fr(data: bytes | memoryview) -> Iterator[bytes | memoryview]:
    yield _LEN(data.nbytes if isinstance(data, memoryview) else len(data))
    yield data


def _item(key: str, value: Any) -> Iterator[bytes | memoryview]:
    yield from _fr(key.encode("utf-8"))
    yield from _value(value)


def _value(value: Any) -> Iterator[bytes | memoryview]:
    if value is None:
        yield b"\x00"
    elif isinstance(value, (list, tuple)):
        yield b"\x01" + _LEN(len(value))
        for element in value:
            yield from _value(element)
    elif isinstance(value, dict):
        yield b"\x02" + _LEN(len(value))
        for key, element in value.items():
            yield from _fr(str(key).encode("utf-8"))
            yield from _value(element)
    else:
        yield b"\x03"
        yield from _leaf(value)


def _leaf(value: Any) -> Iterator[bytes | memoryview]:
    if isinstance(value, bytes):
        yield from _fr(value)
    elif isinstance(value, str):
        yield from _fr(value.encode("utf-8"))
    elif isinstance(value, (int, float)):
        yield from _fr(np.array(value).tobytes())
    elif isinstance(value, np.ndarray):
        array = value if value.flags.c_contiguous else np.ascontiguousarray(value)
        data = array.reshape(-1).view(np.uint8).data
        yield from _item("ndarray", {"dtype": value.dtype.str, "shape": value.shape, "data": data})
    elif isinstance(value, memoryview):
        yield from _fr(value)
    elif isinstance(value, Image.Image):
        try:
            image_id = value.getexif().get(_IMAGE_ID)
        except Exception:  # noqa: BLE001 - vLLM's tolerant read
            image_id = None
        if isinstance(image_id, uuid.UUID):
            yield from _fr(image_id.bytes)
            return
        fields: dict[str, Any] = {"mode": value.mode, "data": np.asarray(value)}  # the full copy
        palette = value.palette
        if palette is not None:
            if palette.palette is not None:
                fields["palette"] = palette.palette
            if palette.rawmode is not None:
                fields["palette_rawmode"] = palette.rawmode
        yield from _item("image", fields)
    else:
        raise TypeError(f"the naive baseline does not key {type(value).__name__}")


def naive_key(**kwargs: Any) -> str:
    """``hash_kwargs("blake3", **kwargs)`` the straightforward way."""
    digest = blake3()
    for name in sorted(kwargs):
        for chunk in _item(name, kwargs[name]):
            digest.update(chunk)
    return digest.hexdigest()
