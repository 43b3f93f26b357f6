"""Video clips for the tests, written by OpenCV as vLLM's own environment has it (mp4v MP4, VP8 WebM).

The clips are written by a Python that has ``cv2`` (vLLM's environment, or the server's), in a subprocess,
so a test process without OpenCV can still make them for a server. The scenes, each from a seed:

* ``noise``: every frame pseudo-random (a file about as large as its frames: the worst to decode);
* ``still``: one smooth picture held, a corner changing (a screen recording's shape: a small file of many frames);
* ``pan``: a photo-like picture (a gradient and fine noise) panning a pixel a frame (a phone's clip).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_WRITER = r"""
import sys
import cv2
import numpy as np

path, fourcc, width, height, frames, fps, seed, scene = sys.argv[1:9]
width, height, frames, seed = int(width), int(height), int(frames), int(seed)
writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), float(fps), (width, height))
if not writer.isOpened():
    sys.exit(f"OpenCV cannot write {fourcc} to {path}")
rng = np.random.default_rng(seed)
span = width + frames if scene == "pan" else width
y, x = np.mgrid[0:height, 0:span].astype(np.float32)
gradient = np.stack([x / span * 255, y / height * 255, (x + y) / (span + height) * 255], axis=-1)
noise = rng.normal(0, 6 if scene == "pan" else 2, gradient.shape)
picture = np.clip(gradient + noise, 0, 255).astype(np.uint8)
for index in range(frames):
    if scene == "noise":
        frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    elif scene == "pan":
        frame = np.ascontiguousarray(picture[:, index : index + width])
    else:
        frame = picture.copy()
        frame[:8, :8] = index % 256  # a corner that changes: every frame is a frame
    writer.write(frame)
writer.release()
"""

#: Container suffix and the OpenCV FourCC that writes it.
CODECS: dict[str, tuple[str, str]] = {"mp4": (".mp4", "mp4v"), "webm": (".webm", "VP80")}


@dataclass(frozen=True)
class Clip:
    """What to write: size, frames, fps, container and scene (``noise``, ``still`` or ``pan``)."""

    width: int = 64
    height: int = 48
    frames: int = 8
    fps: float = 4.0
    container: str = "mp4"
    seed: int = 0
    scene: str = "noise"


def clip_bytes(clip: Clip, python: str | Path | None = None) -> bytes:
    """The clip's file, written by ``python`` (default: this interpreter), which must have ``cv2``."""
    suffix, fourcc = CODECS[clip.container]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"clip{suffix}"
        args = [str(python or sys.executable), "-c", _WRITER, str(path), fourcc, str(clip.width), str(clip.height)]
        args += [str(clip.frames), str(clip.fps), str(clip.seed), clip.scene]
        subprocess.run(args, check=True, timeout=600, capture_output=True)
        return path.read_bytes()


#: The display matrix of a clip turned a quarter clockwise, as a phone held upright writes it (16.16 and 2.30 fixed).
_QUARTER_TURN = (0, 0x10000, 0, -0x10000, 0, 0, 0, 0, 0x40000000)


def _boxes(data: bytes | bytearray, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(kind, start, end) of each box from ``start`` to ``end`` (32-bit sizes: what OpenCV writes)."""
    while start + 8 <= end:
        size = int.from_bytes(data[start : start + 4], "big")
        if size < 8:
            raise ValueError(f"a box of {size} bytes at {start}")
        yield bytes(data[start + 4 : start + 8]), start, start + size
        start += size


#: The boxes on the way from ``moov`` to a track's chunk offsets.
_ON_THE_WAY = {b"trak", b"mdia", b"minf", b"stbl"}


def faststart(data: bytes) -> bytes:
    """The MP4 with its ``moov`` moved before its ``mdat``, as ``ffmpeg -movflags +faststart`` writes it for the web.

    Truncated, such a file still opens: its header promises every frame, the frames that follow it are missing.
    """
    boxes = {kind: (start, end) for kind, start, end in _boxes(data, 0, len(data))}
    (movie_start, movie_end), media_start = boxes[b"moov"], boxes[b"mdat"][0]
    if movie_start < media_start:
        return data
    movie = bytearray(data[movie_start:movie_end])
    shift = len(movie)

    def shift_offsets(start: int, end: int) -> None:
        for kind, box_start, box_end in _boxes(movie, start, end):
            if kind in _ON_THE_WAY:
                shift_offsets(box_start + 8, box_end)
            elif kind == b"stco":
                count = int.from_bytes(movie[box_start + 12 : box_start + 16], "big")
                for at in range(box_start + 16, box_start + 16 + 4 * count, 4):
                    struct.pack_into(">I", movie, at, struct.unpack_from(">I", movie, at)[0] + shift)
            elif kind == b"co64":
                raise ValueError("64-bit chunk offsets: not written by OpenCV")

    shift_offsets(8, len(movie))
    return data[:media_start] + bytes(movie) + data[media_start:movie_start] + data[movie_end:]


def without_last_frame(data: bytes) -> bytes:
    """A faststart MP4 of one chunk (as OpenCV writes it) cut where its last frame's sample starts.

    Its sample table still promises that frame, which vLLM's end-of-stream check lets pass (one frame's tolerance).
    """
    chunks, sizes = data.find(b"stco"), data.find(b"stsz")
    if data.find(b"moov") > data.find(b"mdat") or int.from_bytes(data[chunks + 8 : chunks + 12], "big") != 1:
        raise ValueError("not a faststart MP4 of one chunk")
    count = int.from_bytes(data[sizes + 12 : sizes + 16], "big")
    samples = struct.unpack_from(f">{count}I", data, sizes + 16)
    return data[: int.from_bytes(data[chunks + 12 : chunks + 16], "big") + sum(samples[:-1])]


def rotated(data: bytes) -> bytes:
    """An MP4 whose video track's header (``tkhd``, version 0) says to show its frames turned a quarter clockwise."""
    track_header = data.find(b"tkhd")
    if track_header < 0 or data[track_header + 4] != 0:
        raise ValueError("no version-0 tkhd box to rotate")
    patched = bytearray(data)
    struct.pack_into(">9i", patched, track_header + 4 + 40, *_QUARTER_TURN)  # after the fields before the matrix
    return bytes(patched)
