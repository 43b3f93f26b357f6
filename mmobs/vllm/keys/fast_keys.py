"""``MMOBS_VLLM_FAST_KEYS=1``: key plain PIL images inside vLLM through mmobs's pixel path.

vLLM keys a plain PIL image by ``np.asarray(image)``: a full copy of the
pixels (12 MB for a 4 MP RGB image) before hashing. mmobs's writer feeds the
same bytes to the digest from Pillow's memory or in 256 KiB chunks
(:mod:`mmobs.keys.pixels`). The keys are identical; the differential tests against
vLLM prove it for every mode, size and palette. Off by default: it replaces
how vLLM serializes an item, where the rest of the plugin only observes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from PIL import Image

from mmobs.keys.hashing import MultiModalHasher


def fast_serialize_item(serialize_item: Callable[..., Iterable[Any]]) -> Callable[..., Iterable[Any]]:
    """Wrap the plugin's ``serialize_item``: plain PIL images go through mmobs's writer.

    mmobs's writer reports the item's events itself (fallback, key source),
    so the wrapped function, which would report them again, is not called.
    """

    @functools.wraps(serialize_item)
    def fast(cls: type, obj: object) -> Iterable[Any]:
        if isinstance(obj, Image.Image):
            return MultiModalHasher.serialize_item(obj)
        return serialize_item(cls, obj)

    return fast
