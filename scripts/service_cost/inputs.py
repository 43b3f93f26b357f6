"""The inputs of ``scripts/service_cost_run.py``: the costly images (or a few built here) and the request classes."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

MiB = 1024 * 1024
Request = tuple[str, bytes, str]  # (content type, body, what it is)


def photo_like(size: tuple[int, int]) -> Any:
    import numpy as np
    from PIL import Image

    w, h = size
    x = np.linspace(0, 255, w, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, h, dtype=np.float32)[:, None]
    noise = np.random.default_rng(0).integers(0, 6, (h, w), dtype=np.uint8)
    r = (x * 0.7 + y * 0.3).astype(np.uint8) + noise
    return Image.fromarray(np.stack([r, (x * 0.2 + y * 0.8).astype(np.uint8), 255 - r], -1))


def encode(image: Any, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _fallback_images() -> list[tuple[str, Callable[[], bytes]]]:
    """A few classes built here, for trees without ``scripts/corpus/costly``."""
    from PIL import Image

    small_jpeg = encode(Image.new("RGB", (16, 12), (1, 2, 3)), "JPEG")
    small_png = encode(Image.new("RGB", (16, 12), (1, 2, 3)), "PNG")

    def app1_flood(total: int) -> bytes:
        one = struct.pack(">HH", 0xFFE1, 9) + b"Exif\0\0\0"
        return small_jpeg[:2] + one * (total // len(one)) + small_jpeg[2:]

    def ztxt_flood(total: int) -> bytes:
        chunk = _png_chunk(b"zTXt", b"k\0\0" + zlib.compress(b"\0" * (MiB - 1024), 9))
        return small_png[:33] + chunk * (total // len(chunk)) + small_png[33:]

    def webp_canvas(width: int, height: int) -> bytes:
        frame = encode(Image.new("RGB", (1, 1)), "WEBP", lossless=True)[12:]  # the VP8L chunk
        vp8x = struct.pack("<I", 0x02) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        anim = struct.pack("<IH", 0, 0)
        anmf = b"\0" * 6 + b"\0\0\0" + b"\0\0\0" + b"\x64\0\0" + b"\0" + frame
        body = b"WEBP" + b"VP8X" + struct.pack("<I", len(vp8x)) + vp8x
        body += b"ANIM" + struct.pack("<I", len(anim)) + anim + b"ANMF" + struct.pack("<I", len(anmf)) + anmf
        return b"RIFF" + struct.pack("<I", len(body)) + body

    return [
        ("JPEG APP1 Exif flood, 4 MiB", lambda: app1_flood(4 * MiB)),
        ("PNG zTXt flood, 30 MiB", lambda: ztxt_flood(30 * MiB)),
        ("WebP animated, 7000x7000 canvas, 1x1 frame", lambda: webp_canvas(7000, 7000)),
    ]


def image_inputs() -> list[tuple[str, Callable[[], bytes]]]:
    try:
        from scripts.corpus.costly import full_size_inputs
    except ImportError:
        plain: list[tuple[str, Callable[[], bytes]]] = [
            ("plain 49 MP JPEG (q90)", lambda: encode(photo_like((7000, 7000)), "JPEG", quality=90))
        ]
        return plain + _fallback_images()
    return list(full_size_inputs())


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def request_inputs(photo: bytes) -> list[tuple[str, Callable[[], Request]]]:
    url = "data:image/jpeg;base64," + base64.b64encode(photo).decode()
    return [
        (
            "JSON: 60 MiB of empty lists",
            lambda: ("application/json", b'{"images":[' + b"[]," * (20 * MiB) + b'"x"]}', ""),
        ),
        (
            "JSON: mm_processor_kwargs of 30M zeros",
            lambda: (
                "application/json",
                b'{"images":["' + url.encode() + b'"],"mm_processor_kwargs":{"z":[' + b"0," * (30 * MiB) + b"0]}}",
                "",
            ),
        ),
        (
            "JSON: 60 MiB of escaped surrogates",
            lambda: (
                "application/json",
                b'{"images":["' + url.encode() + b'"],"model_id":"' + b"\\ud83d\\ude00" * (5 * MiB) + b'"}',
                "",
            ),
        ),
        (
            "JSON: 16,000 integers of 4,000 digits",
            lambda: ("application/json", b'{"images":["x"],"n":[' + b",".join([b"9" * 4000] * 16000) + b"]}", ""),
        ),
        (
            "JSON: lone surrogate in model_id",
            lambda: ("application/json", _json({"images": [url], "model_id": "\ud800"}), ""),
        ),
        (
            "JSON: lone surrogate in a processor kwarg",
            lambda: ("application/json", _json({"images": [url], "mm_processor_kwargs": {"\ud800": "\udfff"}}), ""),
        ),
    ]


def image_request(data: bytes) -> Request:
    return "application/json", _json({"images": ["data:image/png;base64," + base64.b64encode(data).decode()]}), ""
