"""A PIL image whose pixels are decoded on first access only: what a decode-free hit hands vLLM.

vLLM's API server needs an image's pixels only when its processor cache does
not hold the image's key: on a hit, the key (from the original bytes), the
mode and the size are all that anything reads. :class:`LazyImage` knows
those without decoding, from what the same bytes decoded to before in this
process, and decodes the moment anything else is asked of it: the pixels,
the palette, ``info``, the EXIF block, a copy, a pickle. After that it *is*
the decoded image (its state is the decoded image's state), so a reader that
comes late, such as the processor after the item was evicted, gets exactly
what vLLM's loader would have returned.

The one attribute answered without decoding that a decoded image would answer
by reading its state is the EXIF ImageID, which vLLM's hasher reads through
:func:`mmobs.vllm.keys.key_hooks.image_id_bytes`: it replays the reads the decoded
image answered, failures included, so the key and its events are the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PIL import Image

#: One read of the EXIF ImageID as the decoded image answered it: (the UUID's bytes or None, what it raised).
ImageIdRead = tuple[bytes | None, BaseException | None]
#: What is known without decoding; everything else is the decoded image's.
_KNOWN = frozenset({"_mode", "_size", "format"})


class LazyImage(Image.Image):
    """An image of known mode, size and format whose pixels ``decode`` produces when first needed.

    Never built by ``Image.Image.__init__``: the attributes it would set
    (``_im``, ``palette``, ``info``, ``readonly``, ``_exif``) are left unset,
    so reading any of them finds :meth:`__getattr__`, which decodes and adopts
    the decoded image's state.
    """

    _mmobs_decode: Callable[[], Image.Image] | None
    _mmobs_lock: threading.Lock
    _mmobs_reads: tuple[ImageIdRead, ...]
    _mmobs_next_read: int
    _mmobs_owner: object

    def __init__(
        self,
        mode: str,
        size: tuple[int, int],
        format: str | None,
        image_id_reads: tuple[ImageIdRead, ...],
        decode: Callable[[], Image.Image],
        owner: object = None,
    ) -> None:
        state = self.__dict__
        state["_mode"] = mode
        state["_size"] = size
        state["format"] = format
        state["_mmobs_reads"] = image_id_reads
        state["_mmobs_next_read"] = 0
        state["_mmobs_decode"] = decode
        state["_mmobs_lock"] = threading.Lock()
        state["_mmobs_owner"] = owner

    @property
    def owner(self) -> object:
        """Whoever made it (the decoded-bytes record it stands for), for the key hooks."""
        return self.__dict__["_mmobs_owner"]

    @property
    def decoded(self) -> bool:
        """Whether the pixels were decoded (by anyone reading more than the mode, size and format)."""
        return self.__dict__["_mmobs_decode"] is None

    def next_image_id_read(self) -> ImageIdRead:
        """The decoded image's answer to the next EXIF ImageID read (its last answer, repeated, after those).

        For a stand-in not decoded yet; once decoded, it is read as any image is.
        """
        state = self.__dict__
        reads = state["_mmobs_reads"]
        index = state["_mmobs_next_read"]
        state["_mmobs_next_read"] = index + 1
        return reads[min(index, len(reads) - 1)] if reads else (None, None)

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the instance does not hold: the decoded image's state.
        if name.startswith(("_mmobs_", "__")):
            raise AttributeError(name)
        self._decode()
        return object.__getattribute__(self, name)

    def _decode(self) -> None:
        state = self.__dict__
        with state["_mmobs_lock"]:
            decode = state["_mmobs_decode"]
            if decode is None:
                return
            decoded = decode()
            state.update((key, value) for key, value in vars(decoded).items() if key not in _KNOWN)
            state["_mmobs_decode"] = None

    def close(self) -> None:
        """Pillow's ``close``; an image never decoded has nothing to release."""
        if not self.decoded:
            return
        super().close()

    #: The Pillow class of the decoded image this class stands for.
    stands_for: type[Image.Image] = Image.Image

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # Pickled (or copied) as the image it stands for.
        return plain_image, (self.stands_for, self.__getstate__())


def plain_image(cls: type[Image.Image], state: list[Any]) -> Image.Image:
    """A ``cls`` image from Pillow's pickled state (how a :class:`LazyImage` unpickles)."""
    image = cls.__new__(cls)
    image.__setstate__(state)
    return image


_classes: dict[type[Image.Image], type[LazyImage]] = {Image.Image: LazyImage}
_classes_lock = threading.Lock()


def lazy_class(cls: type[Image.Image]) -> type[LazyImage] | None:
    """The stand-in class for Pillow's image class ``cls`` (``PngImageFile`` when a PNG kept its file object).

    A subclass of both, so ``isinstance`` and the class's own attributes (a
    format's description, ``PngImageFile.text``) answer as the decoded image's
    would. Only Pillow's own classes: None for any other.
    """
    found = _classes.get(cls)
    if found is not None or not (cls.__module__.startswith("PIL.") and issubclass(cls, Image.Image)):
        return found
    with _classes_lock:
        return _classes.setdefault(cls, type(f"Lazy{cls.__name__}", (LazyImage, cls), {"stands_for": cls}))
