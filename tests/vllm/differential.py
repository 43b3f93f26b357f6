"""What the differential test modules (``test_vllm_differential_*.py``) share.

The marks every one of them carries, the hash algorithms and loader options they
compare, the inputs one loader accepts and the other refuses (listed with their
reason), and :func:`outcome`. The ``oracle`` fixture (the installed vLLM) is in
``tests/vllm/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest

#: The differential modules' ``pytestmark``.
MARKS = [
    pytest.mark.usefixtures("silent_observer"),
    # Pillow warns about every corrupt EXIF block and near-bomb in the corpus; mmobs warns
    # (UnsupportedTypeWarning) for every value it pickles, as vLLM logs.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
    pytest.mark.filterwarnings("ignore:IM image format is deprecated:DeprecationWarning"),
]

Side = Literal["mmobs", "vllm"]
#: vLLM's MMHasherAlgorithm values, spelled out: mmobs's own list must not narrow the comparison.
ALGORITHMS: tuple[str, ...] = ("blake3", "sha256", "sha512")

#: Loader options compared: vLLM's ImageMediaIO(**options) against mmobs's.
LOADERS: dict[str, dict[str, Any]] = {
    "rgb": {"image_mode": "RGB"},
    "rgb-bg": {"image_mode": "RGB", "rgba_background_color": (0, 128, 255)},
    "keep": {"image_mode": None},
}


@dataclass(frozen=True)
class LoaderDifference:
    """An input one loader accepts and the other refuses, on purpose or awaiting a decision."""

    accepted_by: Side
    mmobs_reason: str  # the BadImageError reason when mmobs is the one refusing
    why: str


# vLLM's normalize_image: Pillow 13's ImageOps.exif_transpose starts with image.load(), so
# contextlib.suppress(Exception) around it also swallows a *decoding* error, and the loader's
# own image.load() that follows is a no-op (Pillow already consumed the tile list). vLLM then
# serves whatever the failed decode left. (mmobs follows vLLM for an error raised only once
# the pixels are decoded, in a plugin's load_end: TIFF's malformed XMP, say.)
KNOWN_LOADER_DIFFERENCES: dict[str, LoaderDifference] = {
    "corpus:png-garbage-idat.png": LoaderDifference(
        "vllm",
        "corrupt",
        "deliberate: the IDAT is not a zlib stream; vLLM swallows the decode error and serves an "
        "all-black image (keyed by its bytes); mmobs refuses corrupt pixel data",
    ),
}
# Known divergence (d): vLLM opens every format of its ALLOWED_IMAGE_FORMATS; mmobs's default
# allow-list (DEFAULT_FORMATS) is smaller and refuses the others as unsupported_format. Each entry
# goes once mmobs's default follows vLLM for that format (the test then says so).
for _fmt in ("DIB", "ICO", "IM", "MSP", "PCX", "PPM", "QOI", "SGI", "SPIDER", "TGA", "XBM", "DDS", "ICNS", "JPEG2000"):
    KNOWN_LOADER_DIFFERENCES[f"extra:fmt-{_fmt.lower()}"] = LoaderDifference(
        "vllm", "unsupported_format", f"(d): vLLM's allow-list opens {_fmt}, mmobs's default does not"
    )

#: "<input>:<path>" -> why vLLM has no deterministic key for it. Empty today: vLLM keys every


def outcome(load: Callable[[], Any]) -> Any:
    """What a loader returned, or the exception it raised (a refusal)."""
    try:
        return load()
    except Exception as error:
        return error
