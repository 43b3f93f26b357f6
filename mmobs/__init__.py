"""mmobs: vLLM-compatible multimodal cache keys, with the observability around them.

Importing the package installs the default :class:`Instrumentation`: every
swallowed EXIF exception, keyed media item and refused input is counted in
prometheus_client's global registry and logged through structlog. Use
:func:`install` for another registry or options, or ``set_observer(None)``
to turn reporting off.
"""

from ._version import __version__
from .drift import DriftTracker
from .errors import BAD_IMAGE_REASONS, BadImageError
from .events import HashObserver, get_observer, observing, set_observer
from .fingerprint import compute_fingerprint
from .guard import DecodeLimits, check_image_bytes
from .hashing import ALGORITHMS, MultiModalHasher, UnsupportedTypeWarning
from .image_io import ImageMediaIO, load_data_url, normalize_image, safe_exif_transpose
from .instrument import Instrumentation, default_instrumentation, install
from .logs import configure_logging
from .media import MediaWithBytes
from .middleware import MMObsMiddleware

set_observer(default_instrumentation())

__all__ = [
    "ALGORITHMS",
    "BAD_IMAGE_REASONS",
    "BadImageError",
    "DecodeLimits",
    "DriftTracker",
    "HashObserver",
    "ImageMediaIO",
    "Instrumentation",
    "MMObsMiddleware",
    "MediaWithBytes",
    "MultiModalHasher",
    "UnsupportedTypeWarning",
    "__version__",
    "check_image_bytes",
    "compute_fingerprint",
    "configure_logging",
    "default_instrumentation",
    "get_observer",
    "install",
    "load_data_url",
    "normalize_image",
    "observing",
    "safe_exif_transpose",
    "set_observer",
]
