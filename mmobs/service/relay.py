"""Hashing events that happen in a decode worker, counted and logged once, in the service.

A decode worker has no metrics and no log configuration of its own. Its
:class:`RelayObserver` turns every event the loader and the hasher report
(EXIF fallback, transpose failure, media keyed, hash timed, key path, image
refused, Python warning) into plain data and sends it to the service *as it happens*,
so an event is not lost when the worker is stopped for breaching a budget
later in the same task. The service's :class:`Replayer` hands each one to its
own observer, in the request's context: the counters move in the service's
registry (summed across ``--workers`` by the multiprocess collector like any
other count), the log line carries the request id, the per-request statistics
the middleware reads are updated, and the drift tracker stays one per
service process.

Why not ``PROMETHEUS_MULTIPROC_DIR`` in the workers: the counters would sum,
but the log lines would lose the request context, the middleware's
per-request counts would not see the events, the drift tracker would be split
per worker, and a custom observer installed in the service would never hear
of them. Replaying keeps one observer, whatever it is.

What is replayed is what observers read: images become :class:`ImageFacts`
(format, mode, size), exceptions become instances of a stand-in subclass of
the nearest built-in class the worker's exception derived from (so
``exception_label`` gives the same label) carrying the original message, and
a keyed item becomes a real :class:`~mmobs.keys.media.MediaWithBytes` holding the
original bytes the service sent, so the drift tracker and content digests work
unchanged. The one question a hasher asks its observer mid-hash
(``wants_item_digest``) is asked of the service's observer over the socket.
"""

from __future__ import annotations

import builtins
import functools
import socket
import struct
import warnings
from dataclasses import dataclass
from typing import Any

from mmobs.errors import BadImageError, mark_reported
from mmobs.events import ExifFallback, Hashed, HashObserver, KeyPathChosen, MediaKeyed, MediaKind, TransposeFailure
from mmobs.keys.media import MediaWithBytes, is_media_with_bytes
from mmobs.service.wire import recv_message, send_message

_MAX_TEXT = 800
_CODEC_MEMORY = "decoder error -9"


@dataclass(frozen=True, slots=True)
class ImageFacts:
    """What observers read from an image, standing in for a PIL image decoded in another process."""

    format: str | None
    mode: str | None
    size: tuple[int, int] | None

    @property
    def width(self) -> int | None:
        return None if self.size is None else self.size[0]

    @property
    def height(self) -> int | None:
        return None if self.size is None else self.size[1]

    @classmethod
    def of(cls, image: Any) -> ImageFacts:
        try:
            return cls(image.format, image.mode, tuple(image.size))
        except Exception:  # noqa: BLE001 - a broken image object must not break reporting
            return cls(None, None, None)


def describe_error(error: BaseException) -> tuple[list[tuple[str, str]], str]:
    """An exception as plain data: its classes (``__mro__`` as module, qualname) and its message."""
    classes = [(cls.__module__, cls.__qualname__) for cls in type(error).__mro__]
    try:
        text = str(error)[:_MAX_TEXT]
    except Exception:  # noqa: BLE001 - a broken __str__ must not break reporting
        text = f"<{type(error).__qualname__} with an unprintable message>"
    return classes, text


class _RelayedOther(Exception):
    """Stands in for an exception class that has no built-in ancestor but ``Exception``."""


@functools.lru_cache(maxsize=64)
def _stand_in_class(base: type) -> type[BaseException]:
    def __init__(self: BaseException, text: str) -> None:
        BaseException.__init__(self, text)
        self._text = text  # type: ignore[attr-defined]

    def __str__(self: BaseException) -> str:
        return self._text  # type: ignore[attr-defined,no-any-return]

    return type(base.__name__, (base,), {"__init__": __init__, "__str__": __str__, "__module__": __name__})


def _resolve(module: str, qualname: str) -> type[BaseException] | None:
    if module == "builtins":
        candidate = getattr(builtins, qualname, None)
    elif (module, qualname) == ("struct", "error"):
        candidate = struct.error
    else:
        return None
    return candidate if isinstance(candidate, type) and issubclass(candidate, BaseException) else None


def relayed_error(classes: list[tuple[str, str]], text: str) -> BaseException:
    """An exception whose nearest built-in ancestor is the original's, with its message."""
    base: type = _RelayedOther  # a plain type: mypy reads a BaseException class as unhashable
    for module, qualname in classes:
        found = _resolve(module, qualname)
        if found is not None and found not in (BaseException, Exception, object):
            base = found
            break
    return _stand_in_class(base)(text)


def is_memory_failure(error: BaseException) -> bool:
    """Whether ``error`` is, or was caused by, running out of memory.

    Pillow reports a decoder's failed allocation as ``OSError("out of memory
    error when reading image file")``, or as the bare code (``"decoder error
    -9"``, its ``IMAGING_CODEC_MEMORY``, from the TIFF decoder), which the
    loader turns into a ``BadImageError``; under the worker's address-space
    limit that is the memory budget speaking, not a damaged file.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return True
        if isinstance(current, OSError) and ("out of memory" in str(current) or _CODEC_MEMORY in str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


# -- in the decode worker -------------------------------------------------------------


class RelayObserver(HashObserver):
    """Sends every event to the service over ``sock`` the moment it happens."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        #: A refusal that was really the memory budget: the service reports it, as ``too_costly``.
        self.memory_failure = False

    def _send(self, name: str, payload: Any) -> None:
        send_message(self.sock, ("event", name, payload))

    def exif_fallback(self, event: ExifFallback) -> None:
        self._send(
            "exif_fallback",
            (event.kind, describe_error(event.error), event.key_source, ImageFacts.of(event.image),
             event.original_bytes is not None),
        )  # fmt: skip

    def exif_transpose_failed(self, event: TransposeFailure) -> None:
        self._send("exif_transpose_failed", (describe_error(event.error), ImageFacts.of(event.image)))

    def wants_item_digest(self, kind: MediaKind, media: Any) -> bool:
        send_message(self.sock, ("ask", kind, *_media_facts(media)))
        header, _ = recv_message(self.sock)
        return bool(header[1])

    def media_keyed(self, event: MediaKeyed) -> None:
        self._send("media_keyed", (event.kind, event.key_source, event.item_digest, *_media_facts(event.media)))

    def hashed(self, event: Hashed) -> None:
        self._send("hashed", (event.algorithm, event.seconds, event.nbytes))

    def key_path(self, event: KeyPathChosen) -> None:
        self._send("key_path", event.key_path)

    def bad_image(self, error: BadImageError) -> None:
        if is_memory_failure(error):
            self.memory_failure = True
            return
        self._send("bad_image", (error.reason, error.message))

    def warning(self, message: Warning | str, category: type[Warning], filename: str, lineno: int) -> None:
        self._send(
            "warning",
            (
                describe_error(message)[1] if isinstance(message, Warning) else str(message)[:_MAX_TEXT],
                [(c.__module__, c.__qualname__) for c in category.__mro__],
                filename,
                lineno,
            ),
        )


def _media_facts(media: Any) -> tuple[ImageFacts, dict[str, Any] | None, bool]:
    if is_media_with_bytes(media):
        return ImageFacts.of(media.media), media.io_config, True
    return ImageFacts.of(media), None, False


# -- in the service ---------------------------------------------------------------------


_WARNING_REGISTRIES: dict[str, dict[Any, Any]] = {}


def _warning_class(classes: list[tuple[str, str]]) -> type[Warning]:
    for module, qualname in classes:
        if module == "builtins":
            candidate = getattr(builtins, qualname, None)
        elif module == "PIL.Image" and qualname == "DecompressionBombWarning":
            from PIL import Image

            candidate = Image.DecompressionBombWarning
        else:
            continue
        if isinstance(candidate, type) and issubclass(candidate, Warning):
            return candidate
    return UserWarning


class Replayer:
    """Replays one task's events into ``observer``; ``original_bytes`` are the bytes the task keyed."""

    def __init__(self, observer: HashObserver, original_bytes: bytes | None = None) -> None:
        self.observer = observer
        self.original_bytes = original_bytes
        self.bad_images = 0

    def _media(self, facts: ImageFacts, io_config: dict[str, Any] | None, with_bytes: bool) -> Any:
        if with_bytes and self.original_bytes is not None:
            return MediaWithBytes(facts, self.original_bytes, io_config)
        return facts

    def ask(self, kind: MediaKind, facts: ImageFacts, io_config: dict[str, Any] | None, with_bytes: bool) -> bool:
        return bool(self.observer.wants_item_digest(kind, self._media(facts, io_config, with_bytes)))

    def event(self, name: str, payload: Any) -> None:
        observer = self.observer
        if name == "exif_fallback":
            kind, (classes, text), key_source, facts, has_bytes = payload
            original = self.original_bytes if has_bytes else None
            error = relayed_error(classes, text)
            observer.exif_fallback(ExifFallback(kind, error, key_source, facts, original))
        elif name == "exif_transpose_failed":
            (classes, text), facts = payload
            error = relayed_error(classes, text)
            observer.exif_transpose_failed(TransposeFailure(error, facts))
        elif name == "media_keyed":
            kind, key_source, item_digest, facts, io_config, with_bytes = payload
            observer.media_keyed(MediaKeyed(kind, key_source, self._media(facts, io_config, with_bytes), item_digest))
        elif name == "hashed":
            observer.hashed(Hashed(*payload))
        elif name == "key_path":
            observer.key_path(KeyPathChosen(payload))
        elif name == "bad_image":
            reason, message = payload
            error = BadImageError(reason, message)
            mark_reported(error)
            self.bad_images += 1
            observer.bad_image(error)
        elif name == "warning":
            text, classes, filename, lineno = payload
            category = _warning_class(classes)
            registry = _WARNING_REGISTRIES.setdefault(filename, {})
            if len(registry) > 1024:  # one key per distinct message: keep it bounded
                registry.clear()
            warnings.warn_explicit(text, category, filename, lineno, registry=registry)
