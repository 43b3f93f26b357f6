"""The plugin's loader hooks: vLLM's image loader, its refusals counted, its decodes skipped where nobody reads them.

=============================================  =====================================
vLLM attribute                                 reports
=============================================  =====================================
``image.normalize_image`` (and every module    ``exif_transpose_failed``
that imported it by name, Molmo2's included)
``ImageMediaIO.load_bytes``                    ``bad_image`` (reason from the cause)
``MediaConnector._load_data_url``              ``bad_image`` (``bad_data_url``,
                                               ``bad_base64``)
``VideoMediaIO.load_bytes``                    the clip's load timed, its frames counted
=============================================  =====================================

With the guard (``MMOBS_VLLM_GUARD=1``) mmobs's structural checks run before
vLLM decodes, and a decode error vLLM would answer 500 is a 400. A render
request (a router's, which must never be answered 500) always gets the second,
and of the first the pixel-bomb refusal; with decode-free hits (:mod:`mmobs.vllm.decode_free_hits.decode_skip`, on by
default) bytes this process already decoded, whose key the processor cache
holds, are not decoded again. Each load and each data URL's base64 is timed
(:mod:`mmobs.vllm.front_end.stages`).
"""

from __future__ import annotations

import binascii
import functools
import io
import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any

from PIL import Image, ImageOps

from mmobs.errors import BadImageError, BadImageReason, is_reported, mark_reported
from mmobs.events import TransposeFailure, get_observer
from mmobs.keys.guard import check_image_bytes
from mmobs.keys.refusals import bad_image_from_pillow, empty_image_error, report_bad_image
from mmobs.observability import tracing
from mmobs.vllm import video_budget
from mmobs.vllm.decode_free_hits import clip_skip, decode_skip
from mmobs.vllm.front_end import stages as front_end
from mmobs.vllm.render import render_mode
from mmobs.vllm.shape import vllm_max_pixels


def normalize_image(image: Image.Image) -> Image.Image:
    """vLLM's ``normalize_image`` (EXIF orientation, any failure tolerated), reporting failures."""
    decode_skip.note_open(image)
    try:
        return ImageOps.exif_transpose(image)
    except Exception as error:  # noqa: BLE001 - tolerated by vLLM; reported here
        failure = TransposeFailure(error, image)
        get_observer().exif_transpose_failed(failure)
        decode_skip.note_transpose_failure(failure)
        return image


def load_bytes(
    original: Callable[[Any, bytes], Any], *, guard: bool, skipper: decode_skip.DecodeSkipper | None = None
) -> Callable[[Any, bytes], Any]:
    """vLLM's loader, its refusals counted; with the guard, mmobs's structural checks first.

    The guard refuses, before Pillow sees them, the inputs whose structure
    would cost far more to decode than a plain image of their size (see
    :mod:`mmobs.keys.guard`), as a :class:`~mmobs.errors.BadImageError`: a
    ``ValueError``, which vLLM already answers with a 400. With the guard on,
    a decode error vLLM would let escape as something else (``struct.error``,
    Pillow's ``DecompressionBombError``) becomes that ``ValueError`` too, so a
    bad image is a 400 and never a 500. Accepted images load, and key, as before.
    """
    decode = original if skipper is None else functools.partial(skipper.load, original)

    @functools.wraps(original)
    def load_bytes(self: Any, data: bytes) -> Any:
        if not front_end.watched():
            return checked_load(self, data)
        started = perf_counter()
        front_end.loader_entered(started, data)
        result = None
        with tracing.span("mmobs.image.load") as live:  # a refusal's bad_image event goes on it
            if live is not None:
                live.set_attribute("mmobs.image.format", front_end.format_label(data))
                live.set_attribute("mmobs.media.bytes", len(data))
            try:
                result = checked_load(self, data)
                return result
            finally:
                outcome = front_end.decoded(data, result, perf_counter() - started)
                if live is not None:
                    live.set_attribute("mmobs.outcome", outcome)

    def checked_load(self: Any, data: bytes) -> Any:
        rendering = render_mode.rendering()
        if guard or rendering:
            try:
                check_image_bytes(data, max_pixels=vllm_max_pixels())
            except BadImageError as error:
                # A render request without the guard is refused only where the decode would allocate what
                # the declared size says (a pixel bomb, which vLLM lets escape as a 500); a merely costly
                # image decodes as vLLM decodes it, so that the render answers as vLLM alone's.
                if guard or error.reason == "too_many_pixels":
                    raise _named(report_bad_image(error), vllm_message(error, data)) from None
        try:
            return decode(self, data)
        except MemoryError:
            raise
        except Exception as error:
            refusal = report_bad_image(_refusal(error) if data else empty_image_error())
            if (guard or rendering) and not isinstance(error, ValueError):
                raise _named(refusal) from error
            mark_reported(error, refusal.reason)  # for _load_data_url, which this call is inside of, and the trace
            raise

    return load_bytes


def load_video_bytes(
    original: Callable[[Any, bytes], Any], *, skipper: clip_skip.ClipSkipper | None = None
) -> Callable[[Any, bytes], Any]:
    """vLLM's video loader, timed with the frames it read and kept; with decode-free hits, re-sent clips undecoded.

    vLLM's own loader refuses what it refuses, in its words: nothing here changes a status or a message.
    """
    decode = original if skipper is None else functools.partial(skipper.load, original)

    @functools.wraps(original)
    def load_bytes(self: Any, data: bytes) -> Any:
        # The request's decoded-bytes budget (vLLM 0.33), for the decoder's check (mmobs.vllm.video_budget).
        token = video_budget.current_decode_budget.set(getattr(getattr(self, "image_io", None), "decoded_budget", None))
        try:
            return timed_load(self, data)
        finally:
            video_budget.current_decode_budget.reset(token)

    def timed_load(self: Any, data: bytes) -> Any:
        if not front_end.watched():  # not traffic: nothing to time, nothing to remember
            return original(self, data)
        started = perf_counter()
        front_end.loader_entered(started, data)  # a data URL's base64 stage ends here
        result = None
        with tracing.span("mmobs.video.load") as live:
            if live is not None:
                live.set_attribute("mmobs.video.format", front_end.video_format_label(data))
                live.set_attribute("mmobs.media.bytes", len(data))
            try:
                result = decode(self, data)
                return result
            finally:
                skipped = isinstance(clip_skip.frames_of(getattr(result, "media", None)), clip_skip.UndecodedFrames)
                outcome = front_end.video_decoded(data, result, perf_counter() - started, skipped)
                if live is not None:
                    live.set_attribute("mmobs.outcome", outcome)

    return load_bytes


def load_data_url(original: Callable[..., Any], loader_class: type, *, guard: bool) -> Callable[..., Any]:
    """vLLM's data-URL reader, counting the image URLs it refuses before any image loader sees them.

    A URL without its ``,``, one not base64-encoded, or a payload that is not
    base64 never reaches ``load_bytes``: this counts them as ``bad_data_url`` or
    ``bad_base64`` (refusals of the loader inside were counted there already).
    vLLM answers a URL that is not base64 with ``501 Not Implemented``, which a
    client takes for the server's fault and retries; with the guard on it is the
    ``ValueError`` vLLM answers with a 400, as the others are.
    """

    @functools.wraps(original)
    def load_data_url(self: Any, url: str, media_io: Any) -> Any:
        if not isinstance(media_io, loader_class):
            return original(self, url, media_io)
        front_end.open_data_url()
        try:
            return original(self, url, media_io)
        except MemoryError:
            raise
        except Exception as error:
            if is_reported(error):
                raise
            reason: BadImageReason = "bad_base64" if isinstance(error, binascii.Error) else "bad_data_url"
            refusal = report_bad_image(BadImageError(reason, f"{type(error).__name__}: {error}"[:300]))
            if (guard or render_mode.rendering()) and not isinstance(error, ValueError):
                raise _named(refusal) from error
            raise
        finally:
            front_end.close_data_url()

    return load_data_url


def _named(refusal: BadImageError, vllm_text: str | None = None) -> BadImageError:
    """The refusal as vLLM's 400 shows it: its message after its reason (``too_costly: the JPEG has...``).

    Where the guard refuses what vLLM itself refuses, vLLM's own message follows
    mmobs's, so that clients (and vLLM's tests) that match vLLM's wording still do.
    """
    message = f"{refusal.reason}: {refusal.message}"
    if vllm_text is not None:
        message = f"{message} ({vllm_text})"
    named = BadImageError(refusal.reason, message)  # type: ignore[arg-type]
    mark_reported(named)
    return named


def vllm_message(refusal: BadImageError, data: bytes) -> str | None:
    """vLLM's own words for a guard refusal that vLLM would make too (its pixel limit), else None.

    Only on that refusal's path: the header is opened again, as vLLM opens it (its formats),
    to read the size vLLM reads.
    """
    limit = vllm_max_pixels()
    if refusal.reason != "too_many_pixels" or limit is None:
        return None
    formats = getattr(sys.modules.get("vllm.multimodal.image"), "ALLOWED_IMAGE_FORMATS", None)
    try:
        with Image.open(io.BytesIO(data), formats=formats) as image:
            width, height = image.size
    except Exception:  # noqa: BLE001 - vLLM cannot open it either: it would not reach its pixel check
        return None
    if width * height <= limit:
        return None
    return (
        f"Image dimensions {width}x{height} ({width * height} pixels) exceed the maximum of {limit} pixels. "
        "Set VLLM_MAX_IMAGE_PIXELS to increase this limit."
    )


def _refusal(error: Exception) -> BadImageError:
    """What vLLM's loader refused, with mmobs's reason.

    The loader does nothing but decode the bytes it was given, so whatever it
    raises (but a MemoryError) is about them: vLLM wraps Pillow's error as the
    ``__cause__`` of a ``ValueError``, or raises its own limit messages.
    """
    if isinstance(error, BadImageError):
        return error
    text = str(error)
    if ("pixels" in text and "exceed" in text) or "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES" in text:
        return BadImageError("too_many_pixels", text[:300])
    cause = error.__cause__ if isinstance(error, ValueError) and error.__cause__ is not None else error
    return bad_image_from_pillow(cause, "image")
