"""First-seen clips of a keys-only render, from their header: vLLM's own header read and sampling, no frame read.

vLLM's OpenCV decoder opens the container, reads its frame count, fps and
frame size, lets the model's sampling rule pick the frames to keep, and then
reads every frame up to the last one kept. The metadata vLLM keys the clip
with (frame count, fps, duration, backend and the indices of the frames read)
and the frames' shape, which the placeholders read, are all known before that
read starts, provided every frame picked is read. In a keys-only render,
:func:`frames_from_header` runs where the read would start (after mmobs's
budgets, :mod:`mmobs.vllm.video_budget`) and answers with frames that hold no
pixels and the indices picked; vLLM builds the metadata from them as it would
from a decode.

A decode reads fewer frames than picked from a truncated file or a container
whose frame count is an estimate, so a clip is answered from its header only
where

* its container is MP4 or QuickTime (ISO base media: its frame count is the
  sample table's, not one estimated from the duration);
* the last frame picked is there: one seek to it and one read (which decodes
  from the key frame before it) succeed, with the frame size the header gives;
* vLLM keys it from its bytes (its frames are larger than the file), as any
  real clip is.

Anything else is decoded by vLLM as before. What a complete file can still
hide is a damaged frame in its middle that the decoder drops: vLLM's decode
then lists one index fewer than this answer. Nothing reads the stand-in's
pixels in a keys-only answer; a request that gets vLLM's full render after
all decodes it first (:func:`mmobs.vllm.decode_free_hits.clip_skip.decode_stand_ins`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: The box type at offset 4 of an ISO base media file (MP4, QuickTime, 3GP): ``ftyp``.
_ISO_MEDIA = b"ftyp"


@dataclass(slots=True)
class ClipHeader:
    """One clip being loaded for a keys-only render: its size, and how to make its undecoded frames."""

    size: int
    #: Frames of a shape that hold no pixels (decoded on demand), from ``(frames, height, width, channels)``.
    undecoded: Callable[[tuple[int, int, int, int]], Any]
    #: Whether to answer for the clip's ``(frames kept, height, width)`` at all (None: always, where it can).
    wanted: Callable[[tuple[int, int, int]], bool] | None = None
    #: Whether the decoder was answered from the header (else it read the frames).
    answered: bool = False


_current: contextvars.ContextVar[ClipHeader | None] = contextvars.ContextVar("mmobs_vllm_clip_header", default=None)


def answerable(data: bytes) -> bool:
    """Whether the container is one whose frame count is exact (ISO base media)."""
    return data[4:8] == _ISO_MEDIA


@contextlib.contextmanager
def from_header(
    size: int,
    undecoded: Callable[[tuple[int, int, int, int]], Any],
    wanted: Callable[[tuple[int, int, int]], bool] | None = None,
) -> Iterator[ClipHeader]:
    """The decoder's read of this clip, inside, answered from the header where it can be (see the module)."""
    header = ClipHeader(size, undecoded, wanted)
    token = _current.set(header)
    try:
        yield header
    finally:
        _current.reset(token)


def frames_from_header(
    cap: Any, cv2: Any, frame_idx: list[int], width: int, height: int
) -> tuple[Any, list[int]] | None:
    """What vLLM's ``read_frames`` would return for a complete clip, without reading it; None: read it."""
    header = _current.get()
    if header is None or not frame_idx or width <= 0 or height <= 0:
        return None
    kept = sorted(set(frame_idx))  # the order and the set vLLM's read keeps them in
    shape = (len(kept), height, width, 3)
    if math.prod(shape) < header.size:  # vLLM keys it from its frames: they are needed
        return None
    if header.wanted is not None and not header.wanted(shape[:3]):
        return None
    if not cap.set(cv2.CAP_PROP_POS_FRAMES, kept[-1]) or not cap.grab():
        return None
    ok, frame = cap.retrieve()
    if not ok or frame is None or frame.shape != (height, width, 3):
        return None
    header.answered = True
    return header.undecoded(shape), kept
