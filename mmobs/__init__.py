"""mmobs: vLLM-compatible multimodal cache keys, with the observability around them."""

from ._version import __version__
from .errors import BAD_IMAGE_REASONS, BadImageError
from .events import HashObserver, get_observer, observing, set_observer
from .hashing import ALGORITHMS, MultiModalHasher, UnsupportedTypeWarning
from .image_io import ImageMediaIO, load_data_url, normalize_image, safe_exif_transpose
from .media import MediaWithBytes

__all__ = [
    "ALGORITHMS",
    "BAD_IMAGE_REASONS",
    "BadImageError",
    "HashObserver",
    "ImageMediaIO",
    "MediaWithBytes",
    "MultiModalHasher",
    "UnsupportedTypeWarning",
    "__version__",
    "get_observer",
    "load_data_url",
    "normalize_image",
    "observing",
    "safe_exif_transpose",
    "set_observer",
]
