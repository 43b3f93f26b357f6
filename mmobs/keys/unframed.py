"""The unframed byte stream of vLLM 0.25 to 0.30: each key, then its value, simply concatenated.

Before vLLM 0.31 framed the stream (:mod:`mmobs.keys.framing`), a container's items were keyed by
dotted names (``image.mode``, ``ndarray.shape.0``) and a leaf's bytes went in bare: no lengths, no
tags. :class:`UnframedWriter` is :class:`~mmobs.keys.writer.Writer` with that stream, in the same
one walk, with the same reports (the tolerant ImageID read, where each media key came from), and
pixels streamed from Pillow's memory just the same. What else a format changes (``io_config``, the
frames keyed as video) comes from its :class:`~mmobs.releases.KeyFormat`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmobs.events import HashObserver, KeySource, MediaKind
from mmobs.keys.framing import Sink
from mmobs.keys.pixels import pixel_chunks
from mmobs.keys.writer import Writer, is_torch_tensor, pixel_layout
from mmobs.releases import KeyFormat


class UnframedWriter(Writer):
    """Walks a value and pushes the unframed stream of ``fmt`` into a sink."""

    __slots__ = ("fmt",)

    def __init__(self, sink: Sink, observer: HashObserver, fmt: KeyFormat) -> None:
        super().__init__(sink, observer)
        self.fmt = fmt

    def item(self, key: str, obj: object) -> None:
        """The key, then the value; a container's items under ``key.index`` or ``key.name``."""
        if isinstance(obj, (list, tuple)):
            for index, element in enumerate(obj):
                self.item(f"{key}.{index}", element)
        elif isinstance(obj, dict):
            for name, element in obj.items():
                self.item(f"{key}.{name}", element)
        else:
            self.sink.small(key.encode("utf-8"))
            if obj is not None:
                self.leaf(obj)

    def value(self, obj: object) -> None:
        raise TypeError("the unframed stream has no value without a key: write it with item()")

    def raw(self, data: Any) -> None:
        self.sink.large(data)

    def media_with_bytes(self, media: Any) -> None:
        inner = media.media
        if not isinstance(inner, np.ndarray) and not is_torch_tensor(inner):
            super().media_with_bytes(media)  # an image (or anything else, pickled)
        elif ("tensor" if is_torch_tensor(inner) else "ndarray") in self.fmt.video_frames:
            super().media_with_bytes(media)
        else:
            self.pickled(media)

    def keyed_value(self, obj: Any, kind: MediaKind, source: KeySource, image_id: bytes | None) -> None:
        if image_id is not None:
            self.raw(image_id)
        elif source == "pixels":
            self.pixels(obj)
        elif kind == "video":
            self.item("video", obj.media if source == "frames" else obj.original_bytes)
        else:
            original = obj.original_bytes
            io_config = obj.io_config if self.fmt.io_config else None
            self.item("image", {"io_config": io_config, "data": original} if io_config else original)

    def pixels(self, image: Any) -> None:
        """``{"mode", "data": np.asarray(image)[, palette, palette_rawmode]}`` under ``image``, data streamed."""
        mode = image.mode  # read before the load, the palette after it (as vLLM's dict literal does)
        image.load()
        dtype, shape, rawmode = pixel_layout(image)
        nbytes = np.dtype(dtype).itemsize * int(np.prod(shape))
        head = [b"image.mode", mode.encode("utf-8"), b"image.data", b"ndarray.dtype", dtype.encode("utf-8")]
        for index, size in enumerate(shape):
            head += [f"ndarray.shape.{index}".encode(), np.array(size).tobytes()]
        head.append(b"ndarray.data")
        self.sink.small(b"".join(head))
        self.sink.stream(pixel_chunks(image, rawmode, nbytes))
        palette = image.palette
        if palette is not None:
            self.item("image.palette", palette.palette)
            if palette.rawmode is not None:
                self.item("image.palette_rawmode", palette.rawmode)
