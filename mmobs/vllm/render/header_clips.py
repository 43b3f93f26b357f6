"""First-seen clips answered from their header: vLLM's own header read and sampling, no frame read.

vLLM's OpenCV decoder opens the container, reads its frame count, fps and
frame size, lets the model's sampling rule pick the frames to keep, and then
reads every frame up to the last one kept. The metadata vLLM keys the clip
with (frame count, fps, duration, backend and the indices of the frames read)
and the frames' shape, which the placeholders read, are all known before that
read starts, provided every frame picked is read. Where the loader asks for it
(a keys-only render, :mod:`mmobs.vllm.render.keys_only`; a chat's clip too
long for the context, :mod:`mmobs.vllm.video_length`),
:func:`frames_from_header` runs where the read would start (after mmobs's
budgets, :mod:`mmobs.vllm.video_budget`) and answers with frames that hold no
pixels and the indices picked; vLLM builds the metadata from them as it would
from a decode.

A decode reads fewer frames than picked from a truncated file or a container
whose frame count is an estimate, so a clip is answered from its header only
where

* its container is MP4 or QuickTime (ISO base media, not fragmented: its frame
  count is the sample table's, not one estimated from the duration);
* the last frame picked is there: one seek to it (OpenCV decodes from the key
  frame before it) and one grab succeed, with the frame size the header gives;
  where they do not, the capture is put back at its first frame and vLLM's
  decoder reads it as always;
* vLLM keys it from its bytes (its frames are larger than the file), as any
  real clip is.

What a complete file can still hide is a damaged frame in its middle that the
decoder drops: vLLM's decode then lists one index fewer than this answer.
Nothing reads the stand-in's pixels in a keys-only answer; a request that gets
vLLM's processing after all decodes it first
(:func:`mmobs.vllm.decode_free_hits.clip_skip.decode_stand_ins`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: Top-level boxes looked at before a file is given up on (an MP4 has a handful).
_MAX_BOXES = 1024


@dataclass(slots=True)
class ClipHeader:
    """One clip being loaded: its size, how to make its undecoded frames, and what answered for it."""

    size: int
    #: Frames of a shape that hold no pixels (decoded on demand), from ``(frames, height, width, channels)``.
    undecoded: Callable[[tuple[int, int, int, int]], Any]
    #: Whether to answer for the clip's ``(frames kept, height, width)`` at all (None: always, where it can).
    wanted: Callable[[tuple[int, int, int]], bool] | None = None
    #: The frames the decoder was answered with (None: it read the frames).
    frames: Any = None


_current: contextvars.ContextVar[ClipHeader | None] = contextvars.ContextVar("mmobs_vllm_clip_header", default=None)


def answerable(data: bytes) -> bool:
    """Whether the container is one whose frame count is exact: ISO base media, a ``moov`` and no ``moof``."""
    if data[4:8] != b"ftyp":
        return False
    offset, seen, movie = 0, 0, False
    while offset + 8 <= len(data) and seen < _MAX_BOXES:
        size, kind = int.from_bytes(data[offset : offset + 4], "big"), data[offset + 4 : offset + 8]
        if size == 1 and offset + 16 <= len(data):
            size = int.from_bytes(data[offset + 8 : offset + 16], "big")
        elif size == 0:
            size = len(data) - offset
        if kind == b"moof" or size < 8:
            return False
        movie = movie or kind == b"moov"
        offset, seen = offset + size, seen + 1
    return movie


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
    last = None
    if cap.set(cv2.CAP_PROP_POS_FRAMES, kept[-1]) and cap.grab():
        ok, frame = cap.retrieve()
        last = frame if ok else None
    if last is None or last.shape != (height, width, 3):
        cap.set(cv2.CAP_PROP_POS_FRAMES, 0)  # vLLM's decoder reads from the first frame, as without the probe
        return None
    header.frames = header.undecoded(shape)
    return header.frames, kept
