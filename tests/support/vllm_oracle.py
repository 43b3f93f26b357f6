"""The real vLLM as the compatibility oracle of the differential tests.

Golden vectors pin down what vLLM's keys *were* when someone computed them;
the installed vLLM says what they *are*. ``require_vllm()`` hands the tests
vLLM's own hasher, loader and ``MediaWithBytes`` class, or skips with a reason
when vLLM cannot be imported. In tox's vllm environment (``MMOBS_REQUIRE_VLLM=1``, set
where ``.ci/install-vllm`` installed it) the skip becomes a failure, as with
``MMOBS_REQUIRE_PROMETHEUS``: a compatibility claim must not pass because its
oracle was missing.

Nothing here re-implements vLLM: every key comes from vLLM's code.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from . import golden

REQUIRE_VLLM = os.environ.get("MMOBS_REQUIRE_VLLM") == "1"
#: The vLLM the tests are pinned to: what ``.ci/install-vllm`` installs (same variable).
EXPECTED_VLLM_VERSION = os.environ.get("VLLM_VERSION", "0.33.0")


@dataclass(frozen=True)
class Oracle:
    """vLLM's own classes, imported once."""

    version: str
    hasher: Any  # vllm.multimodal.hasher.MultiModalHasher
    image_media_io: Any  # vllm.multimodal.media.image.ImageMediaIO
    media_with_bytes: Any  # vllm.multimodal.media.base.MediaWithBytes
    allowed_formats: tuple[str, ...]  # vllm.multimodal.image.ALLOWED_IMAGE_FORMATS
    envs: Any  # vllm.envs (read lazily by the loader: VLLM_MAX_IMAGE_PIXELS)

    def key(self, algorithm: str, /, **kwargs: object) -> str:
        """vLLM's ``MultiModalHasher.hash_kwargs``."""
        return self.hasher.hash_kwargs(algorithm, **kwargs)

    def load(self, data: bytes, **options: Any) -> Any:
        """vLLM's ``ImageMediaIO(**options).load_bytes(data)``: a vLLM ``MediaWithBytes``."""
        return self.image_media_io(**options).load_bytes(data)


@cache
def _import_oracle() -> Oracle | str:
    """The oracle, or why it cannot be had (vLLM pulls torch and more: any error counts)."""
    try:
        import vllm
        import vllm.envs
        from vllm.multimodal.hasher import MultiModalHasher
        from vllm.multimodal.image import ALLOWED_IMAGE_FORMATS
        from vllm.multimodal.media.base import MediaWithBytes
        from vllm.multimodal.media.image import ImageMediaIO
    except Exception as error:
        return f"vLLM is not importable ({type(error).__name__}: {error}); run .ci/install-vllm"
    if vllm.__version__ != EXPECTED_VLLM_VERSION:
        return (
            f"the differential tests are pinned to vLLM {EXPECTED_VLLM_VERSION} (set VLLM_VERSION to "
            f"change it); vLLM {vllm.__version__} is installed"
        )
    return Oracle(
        version=vllm.__version__,
        hasher=MultiModalHasher,
        image_media_io=ImageMediaIO,
        media_with_bytes=MediaWithBytes,
        allowed_formats=tuple(ALLOWED_IMAGE_FORMATS),
        envs=vllm.envs,
    )


def require_vllm() -> Oracle:
    """The oracle; skip when vLLM is absent, fail instead under ``MMOBS_REQUIRE_VLLM=1``."""
    oracle = _import_oracle()
    if isinstance(oracle, str):
        if REQUIRE_VLLM:
            pytest.fail(f"{oracle}, and MMOBS_REQUIRE_VLLM=1 forbids skipping")
        pytest.skip(oracle)
    return oracle


@contextlib.contextmanager
def quiet_vllm_hasher() -> Iterator[None]:
    """Mute vLLM's "Falling back to pickle" warning, logged once per pickled value.

    The property run pickles thousands of values on purpose; the log would
    drown a real failure's report.
    """
    logger = logging.getLogger("vllm.multimodal.hasher")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


# =============================================================================
# "No deterministic key"
# =============================================================================


@dataclass(frozen=True)
class NoKey:
    """vLLM gave no usable key: it raised, or two fresh copies of one input got two keys."""

    reason: str

    def __repr__(self) -> str:
        return f"NoKey({self.reason})"


def deterministic_key(oracle: Oracle, algorithm: str, make_kwargs: Callable[[], dict[str, Any]]) -> str | NoKey:
    """vLLM's key for ``make_kwargs()``, computed on two fresh copies, or :class:`NoKey`.

    Fresh copies because Pillow's EXIF state is mutable (an image may raise only
    on its first EXIF read); two of them because a key taken from a memory
    address (vLLM's ``np.array(big_int).tobytes()``) differs between copies.
    """
    keys, alive = [], []
    for _ in range(2):
        kwargs = make_kwargs()
        alive.append(kwargs)  # both copies alive at once, or the second may reuse the first's address
        try:
            keys.append(oracle.key(algorithm, **kwargs))
        except Exception as error:
            return NoKey(f"vLLM raised {type(error).__name__}: {str(error)[:200]}")
    if keys[0] != keys[1]:
        return NoKey(f"vLLM gave two keys for two fresh copies: {keys[0][:16]}... != {keys[1][:16]}...")
    return keys[0]


# =============================================================================
# Golden recipes built with vLLM's own loader and MediaWithBytes
# =============================================================================


def build_golden_for_vllm(oracle: Oracle, recipe: Any) -> Any:
    """``tests.support.golden.build``, except that loaded media come from vLLM's loader and class.

    Keying these with vLLM and comparing to ``vectors.json`` shows that the
    golden vectors are vLLM's keys, not only mmobs's.
    """
    if isinstance(recipe, list):
        return [build_golden_for_vllm(oracle, item) for item in recipe]
    if not isinstance(recipe, dict):
        return recipe
    if len(recipe) == 1:
        ((tag, spec),) = recipe.items()
        if tag == "$media":
            options: dict[str, Any] = {}
            if "image_mode" in spec:
                options["image_mode"] = spec["image_mode"]
            if "rgba_background_color" in spec:
                options["rgba_background_color"] = tuple(spec["rgba_background_color"])
            return oracle.load(golden.input_bytes(spec["file"]), **options)
        if tag == "$image" and spec.get("load") == "load_bytes_media":
            return oracle.load(golden.input_bytes(spec["file"])).media
        if tag == "$video":
            frames = golden.build(spec["frames"])
            return oracle.media_with_bytes(frames, b"\x00" * spec["original_bytes_len"])
        if tag.startswith("$"):
            return golden.build(recipe)  # bytes, arrays, plain PIL images: no vLLM class involved
    return {key: build_golden_for_vllm(oracle, value) for key, value in recipe.items()}
