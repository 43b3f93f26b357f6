"""Which containers a first-seen clip may be answered from its header for: those whose frame count is exact.

An MP4's sample table lists every frame, wherever the ``moov`` box sits (OpenCV writes it last, the web's layout
first); a fragmented MP4 lists them in ``moof`` boxes after it, and OpenCV's count of such a file is an estimate.
"""

from __future__ import annotations

import struct

import pytest

from mmobs.vllm.render.header_clips import answerable
from tests.support import require_opencv
from tests.support.videos import Clip, clip_bytes, faststart


@pytest.fixture(scope="module", autouse=True)
def _opencv() -> None:
    """The clips are written by OpenCV: asked per test, so that a run which selects none of these never asks."""
    require_opencv()


def box(kind: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", 8 + len(body)) + kind + body


@pytest.fixture(scope="module")
def mp4() -> bytes:
    return clip_bytes(Clip(frames=12, seed=151, scene="pan"))


def test_an_mp4_is_answerable_with_its_sample_table_last_or_first(mp4: bytes) -> None:
    assert mp4.find(b"moov") > mp4.find(b"mdat")  # OpenCV's layout
    assert answerable(mp4) and answerable(faststart(mp4))


def test_a_cut_mp4_is_answerable_only_where_its_sample_table_survived(mp4: bytes) -> None:
    """The web's layout keeps its table through a cut (vLLM's probe of the last frame decides); OpenCV's loses it."""
    assert answerable(faststart(mp4)[: len(mp4) // 2])
    assert not answerable(mp4[: mp4.find(b"moov")])


def test_a_fragmented_mp4_and_other_containers_are_not() -> None:
    file_type = box(b"ftyp", b"isom\0\0\2\0isomiso6")
    fragmented = file_type + box(b"moov", box(b"mvex")) + box(b"moof", box(b"mfhd")) + box(b"mdat", b"\0" * 64)
    assert answerable(file_type + box(b"moov", box(b"mvex")) + box(b"mdat", b"\0" * 64))
    assert not answerable(fragmented)
    assert not answerable(clip_bytes(Clip(frames=4, container="webm", seed=152)))
    assert not answerable(file_type + struct.pack(">I", 4) + b"moov")  # a box shorter than its own header
    assert not answerable(b"")


def test_a_64_bit_box_size_is_read() -> None:
    """A box whose size field is 1 carries its size in the 8 bytes after its type (large ``mdat``s)."""
    file_type = box(b"ftyp", b"isom\0\0\2\0isomiso6")
    large = struct.pack(">I", 1) + b"mdat" + struct.pack(">Q", 16 + 64) + b"\0" * 64
    assert answerable(file_type + large + box(b"moov", box(b"mvhd")))
    assert not answerable(file_type + large + box(b"moof", box(b"mfhd")) + box(b"moov", box(b"mvhd")))
