"""mmobs: vLLM-compatible multimodal cache keys, with the observability around them.

Every swallowed EXIF exception, keyed media item and refused input is counted
in prometheus_client's global registry and logged through structlog, with no
set-up: the default :class:`Instrumentation` installs itself on the first
event. Use :func:`install` for another registry or options, or
``set_observer(None)`` to turn reporting off.

Names are loaded on first access, so ``import mmobs.keys.hashing`` (what the vLLM
plugin loads in every vLLM process) pulls in neither prometheus_client,
structlog nor Starlette.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mmobs import events as _events
from mmobs._version import __version__

if TYPE_CHECKING:
    from mmobs.asgi.middleware import MMObsMiddleware as MMObsMiddleware
    from mmobs.errors import (
        BAD_IMAGE_REASONS as BAD_IMAGE_REASONS,
    )
    from mmobs.errors import (
        BadImageError as BadImageError,
    )
    from mmobs.errors import (
        InvalidOptionError as InvalidOptionError,
    )
    from mmobs.events import (
        HashObserver as HashObserver,
    )
    from mmobs.events import (
        get_observer as get_observer,
    )
    from mmobs.events import (
        observing as observing,
    )
    from mmobs.events import (
        set_observer as set_observer,
    )
    from mmobs.keys.from_bytes import (
        ImageKey as ImageKey,
    )
    from mmobs.keys.from_bytes import (
        key_for_bytes as key_for_bytes,
    )
    from mmobs.keys.from_bytes import (
        key_image as key_image,
    )
    from mmobs.keys.guard import DecodeLimits as DecodeLimits
    from mmobs.keys.guard import check_image_bytes as check_image_bytes
    from mmobs.keys.hashing import (
        ALGORITHMS as ALGORITHMS,
    )
    from mmobs.keys.hashing import (
        MultiModalHasher as MultiModalHasher,
    )
    from mmobs.keys.loader import (
        ImageMediaIO as ImageMediaIO,
    )
    from mmobs.keys.loader import (
        load_data_url as load_data_url,
    )
    from mmobs.keys.loader import (
        normalize_image as normalize_image,
    )
    from mmobs.keys.loader import (
        safe_exif_transpose as safe_exif_transpose,
    )
    from mmobs.keys.media import MediaWithBytes as MediaWithBytes
    from mmobs.observability.drift import DriftTracker as DriftTracker
    from mmobs.observability.fingerprint import compute_fingerprint as compute_fingerprint
    from mmobs.observability.instrument import (
        Instrumentation as Instrumentation,
    )
    from mmobs.observability.instrument import (
        default_instrumentation as default_instrumentation,
    )
    from mmobs.observability.instrument import (
        install as install,
    )
    from mmobs.observability.logs import add_request_context as add_request_context
    from mmobs.observability.logs import configure_logging as configure_logging


def _default_observer() -> _events.HashObserver:
    """mmobs's instrumentation, made on the first event: prometheus_client and structlog load here."""
    from mmobs.observability.instrument import default_instrumentation

    return default_instrumentation()


# The seam never imports the layer above it: the default observer is registered from here.
_events.set_default_observer_factory(_default_observer)

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "ALGORITHMS": "keys.hashing",
    "BAD_IMAGE_REASONS": "errors",
    "BadImageError": "errors",
    "DecodeLimits": "keys.guard",
    "DriftTracker": "observability.drift",
    "HashObserver": "events",
    "ImageKey": "keys.from_bytes",
    "ImageMediaIO": "keys.loader",
    "Instrumentation": "observability.instrument",
    "InvalidOptionError": "errors",
    "MMObsMiddleware": "asgi.middleware",
    "MediaWithBytes": "keys.media",
    "MultiModalHasher": "keys.hashing",
    "UnsupportedTypeWarning": "keys.writer",
    "add_request_context": "observability.logs",
    "check_image_bytes": "keys.guard",
    "compute_fingerprint": "observability.fingerprint",
    "configure_logging": "observability.logs",
    "default_instrumentation": "observability.instrument",
    "get_observer": "events",
    "install": "observability.instrument",
    "key_for_bytes": "keys.from_bytes",
    "key_image": "keys.from_bytes",
    "load_data_url": "keys.loader",
    "normalize_image": "keys.loader",
    "observing": "events",
    "safe_exif_transpose": "keys.loader",
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
