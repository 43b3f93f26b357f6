"""mmobs: vLLM-compatible multimodal cache keys, with the observability around them.

Every swallowed EXIF exception, keyed media item and refused input is counted
in prometheus_client's global registry and logged through structlog, with no
set-up: the default :class:`Instrumentation` installs itself on the first
event. Use :func:`install` for another registry or options, or
``set_observer(None)`` to turn reporting off.

Names are loaded on first access, so ``import mmobs.hashing`` (what the vLLM
plugin loads in every vLLM process) pulls in neither prometheus_client,
structlog nor Starlette.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .drift import DriftTracker as DriftTracker
    from .errors import (
        BAD_IMAGE_REASONS as BAD_IMAGE_REASONS,
    )
    from .errors import (
        BadImageError as BadImageError,
    )
    from .errors import (
        InvalidOptionError as InvalidOptionError,
    )
    from .events import (
        HashObserver as HashObserver,
    )
    from .events import (
        get_observer as get_observer,
    )
    from .events import (
        observing as observing,
    )
    from .events import (
        set_observer as set_observer,
    )
    from .fingerprint import compute_fingerprint as compute_fingerprint
    from .guard import DecodeLimits as DecodeLimits
    from .guard import check_image_bytes as check_image_bytes
    from .hashing import (
        ALGORITHMS as ALGORITHMS,
    )
    from .hashing import (
        MultiModalHasher as MultiModalHasher,
    )
    from .hashing import (
        UnsupportedTypeWarning as UnsupportedTypeWarning,
    )
    from .image_io import (
        ImageMediaIO as ImageMediaIO,
    )
    from .image_io import (
        load_data_url as load_data_url,
    )
    from .image_io import (
        normalize_image as normalize_image,
    )
    from .image_io import (
        safe_exif_transpose as safe_exif_transpose,
    )
    from .instrument import (
        Instrumentation as Instrumentation,
    )
    from .instrument import (
        default_instrumentation as default_instrumentation,
    )
    from .instrument import (
        install as install,
    )
    from .keys import (
        ImageKey as ImageKey,
    )
    from .keys import (
        key_for_bytes as key_for_bytes,
    )
    from .keys import (
        key_image as key_image,
    )
    from .logs import add_request_context as add_request_context
    from .logs import configure_logging as configure_logging
    from .media import MediaWithBytes as MediaWithBytes
    from .middleware import MMObsMiddleware as MMObsMiddleware

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "ALGORITHMS": "hashing",
    "BAD_IMAGE_REASONS": "errors",
    "BadImageError": "errors",
    "DecodeLimits": "guard",
    "DriftTracker": "drift",
    "HashObserver": "events",
    "ImageKey": "keys",
    "ImageMediaIO": "image_io",
    "Instrumentation": "instrument",
    "InvalidOptionError": "errors",
    "MMObsMiddleware": "middleware",
    "MediaWithBytes": "media",
    "MultiModalHasher": "hashing",
    "UnsupportedTypeWarning": "hashing",
    "add_request_context": "logs",
    "check_image_bytes": "guard",
    "compute_fingerprint": "fingerprint",
    "configure_logging": "logs",
    "default_instrumentation": "instrument",
    "get_observer": "events",
    "install": "instrument",
    "key_for_bytes": "keys",
    "key_image": "keys",
    "load_data_url": "image_io",
    "normalize_image": "image_io",
    "observing": "events",
    "safe_exif_transpose": "image_io",
    "set_observer": "events",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mmobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
