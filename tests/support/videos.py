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


def rotated(data: bytes) -> bytes:
    """An MP4 whose video track's header (``tkhd``, version 0) says to show its frames turned a quarter clockwise."""
    track_header = data.find(b"tkhd")
    if track_header < 0 or data[track_header + 4] != 0:
        raise ValueError("no version-0 tkhd box to rotate")
    patched = bytearray(data)
    struct.pack_into(">9i", patched, track_header + 4 + 40, *_QUARTER_TURN)  # after the fields before the matrix
    return bytes(patched)
