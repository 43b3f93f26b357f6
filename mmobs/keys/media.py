"""A decoded media object kept together with the bytes it was decoded from."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

_T = TypeVar("_T")


@dataclass(eq=False)
class MediaWithBytes(Generic[_T]):
    """A decoded image or video together with its original encoded bytes.

    Keying by the original bytes is both faster than keying by pixels and
    immune to decoder differences between Pillow versions, which is why vLLM
    keys loaded media this way. ``io_config`` records a decode option that
    changed the pixels (a mode conversion), so it becomes part of the key.

    Attribute access falls through to ``media`` so the wrapper can stand in for
    the PIL image it holds; ``np.asarray(wrapper)`` gives the media's array.
    """

    media: _T
    original_bytes: bytes
    io_config: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        # Only called for names the dataclass does not have. Guard the fields
        # themselves so a half-built instance (copy, pickle) cannot recurse.
        if name in ("media", "original_bytes", "io_config"):
            raise AttributeError(name)
        return getattr(self.media, name)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        return np.asarray(self.media, dtype=dtype)


def is_media_with_bytes(obj: object) -> bool:
    """Whether ``obj`` is mmobs's :class:`MediaWithBytes` or vLLM's own class of that name.

    Inside vLLM (the plugin, a router keying what vLLM's loader produced) the
    objects to key are vLLM's; both carry the same three fields and key alike.
    vLLM is never imported for this: only an already-loaded vLLM is recognised.
    """
    if isinstance(obj, MediaWithBytes):
        return True
    vllm_media = sys.modules.get("vllm.multimodal.media.base")
    return vllm_media is not None and isinstance(obj, vllm_media.MediaWithBytes)
