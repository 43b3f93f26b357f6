"""``hash_kwargs`` of one ``MediaWithBytes``: the direct path equals the writer, key and reports alike.

The common server call (one loaded image keyed by its bytes) skips the
writer's walk and feeds the digest directly, split where blake3 keeps its
SIMD width. Everything observable must be what the general writer gives: the
key, the bytes counted, the reports in order (the fallback, the key source,
the drift tracker's item digest).
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from blake3 import blake3
from PIL import Image

from mmobs import ImageMediaIO, MediaWithBytes, MultiModalHasher
from mmobs.events import RecordingObserver, observing
from mmobs.keys.framing import DigestSink
from mmobs.keys.hashing import new_digest
from mmobs.keys.writer import IMAGE_ID_TAG, Writer
from tests.support import golden


class WantsDigests(RecordingObserver):
    def wants_item_digest(self, kind: str, media: Any) -> bool:
        return True


def writer_key(algorithm: str, media: MediaWithBytes) -> tuple[str, int, WantsDigests]:
    """The general writer's key, bytes fed and reports (what hash_kwargs did before the direct path)."""
    recorder = WantsDigests()
    digest = new_digest(algorithm)
    sink = DigestSink(digest)
    Writer(sink, recorder).item("image", media)
    sink.flush()
    return digest.hexdigest(), sink.nbytes, recorder


def direct_key(algorithm: str, media: MediaWithBytes) -> tuple[str, int, WantsDigests]:
    recorder = WantsDigests()
    with observing(recorder):
        key = MultiModalHasher.hash_kwargs(algorithm, image=media)
    return key, recorder.hashed_calls[0].nbytes, recorder


def _jpeg(size: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buffer, "JPEG")
    return buffer.getvalue() + b"\0" * max(0, size - len(buffer.getvalue()))  # trailing bytes: still a JPEG


def _with_uuid() -> MediaWithBytes:
    media = ImageMediaIO().load_bytes(_jpeg(100))
    media.media.getexif()[IMAGE_ID_TAG] = uuid.UUID(int=7)
    return media


SIZES = [200, 4095, 4096, 4097, 16347, 16348, 16349, 16384, 100_000, 600_000]


@pytest.mark.parametrize("algorithm", ["blake3", "sha256"])
@pytest.mark.parametrize("size", SIZES)
def test_direct_path_equals_the_writer(algorithm: str, size: int) -> None:
    media = ImageMediaIO().load_bytes(_jpeg(size))
    key, nbytes, recorder = direct_key(algorithm, media)
    want_key, want_nbytes, want = writer_key(algorithm, media)

    assert (key, nbytes) == (want_key, want_nbytes)
    assert [(e.kind, e.key_source, e.item_digest) for e in recorder.keyed] == [
        (e.kind, e.key_source, e.item_digest) for e in want.keyed
    ]
    (event,) = recorder.keyed
    assert event.key_source == "original_bytes" and event.item_digest is not None


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg")), id="fallback"),
        pytest.param(_with_uuid, id="image-id"),
        pytest.param(lambda: ImageMediaIO(image_mode="L").load_bytes(_jpeg(300)), id="io-config"),
        pytest.param(lambda: MediaWithBytes(Image.new("L", (2, 2)), memoryview(b"abc" * 10)), id="memoryview"),
    ],
)
def test_every_other_shape_keys_alike(make: Any) -> None:
    key, nbytes, recorder = direct_key("blake3", make())
    want_key, want_nbytes, want = writer_key("blake3", make())

    assert (key, nbytes) == (want_key, want_nbytes)
    assert [(e.kind, e.key_source, e.item_digest) for e in recorder.keyed] == [
        (e.kind, e.key_source, e.item_digest) for e in want.keyed
    ]
    assert [(f.kind, type(f.error), f.key_source) for f in recorder.fallbacks] == [
        (f.kind, type(f.error), f.key_source) for f in want.fallbacks
    ]


def test_the_fallback_input_reports_one_fallback_and_keys_as_golden() -> None:
    media = ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg"))
    key, _, recorder = direct_key("blake3", media)
    assert key == golden.case("media-bad-exif-header.jpg")["expected"]
    (fallback,) = recorder.fallbacks
    assert type(fallback.error) is SyntaxError and fallback.key_source == "original_bytes"


def test_an_image_id_keys_by_its_uuid() -> None:
    key, _, recorder = direct_key("blake3", _with_uuid())
    stream = b"".join(MultiModalHasher.iter_item_to_bytes("image", _with_uuid()))
    assert key == blake3(stream).hexdigest()
    assert recorder.keyed[0].key_source == "image_id"
    assert uuid.UUID(int=7).bytes in stream
