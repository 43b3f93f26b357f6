"""Cache-key drift (``mmobs.observability.drift``): counted once when a key's source or decode config changes."""

from __future__ import annotations

import uuid

import pytest
from blake3 import blake3
from PIL import Image
from structlog.testing import capture_logs

import mmobs
from mmobs import ImageMediaIO, MediaWithBytes, MultiModalHasher
from mmobs.events import observing
from mmobs.observability.drift import DriftTracker
from mmobs.observability.instrument import Instrumentation
from tests.observability.golden_inputs import PHOTO_JPEG
from tests.support import golden, value


def _uuid_media(data: bytes, image_id: uuid.UUID) -> MediaWithBytes:
    media = ImageMediaIO().load_bytes(data)
    media.media.getexif()[0x800D] = image_id
    return media


def test_drift_counted_once_when_key_source_changes(registry):
    tracked = Instrumentation(registry, drift=DriftTracker(sample_rate=1.0), hasher_info=False)
    with observing(tracked), capture_logs() as logs:
        MultiModalHasher.hash_kwargs("blake3", image=_uuid_media(PHOTO_JPEG, uuid.UUID(int=7)))
        MultiModalHasher.hash_kwargs("blake3", image=_uuid_media(PHOTO_JPEG, uuid.UUID(int=7)))
        assert value(registry, "mmobs_cache_key_drift_total", kind="media_with_bytes") == 0
        MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(PHOTO_JPEG))
        MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(PHOTO_JPEG))
    assert value(registry, "mmobs_cache_key_drift_total", kind="media_with_bytes") == 1
    assert value(registry, "mmobs_cache_key_drift_samples_total", kind="media_with_bytes") == 4
    (event,) = [e for e in logs if e["event"] == "cache_key_drift"]
    assert event["previous_key_source"] == "image_id" and event["key_source"] == "original_bytes"
    assert event["content_digest"] == mmobs.observability.instrument.content_digest(PHOTO_JPEG)


def test_drift_when_decode_config_changes(registry):
    tracked = Instrumentation(registry, drift=DriftTracker(sample_rate=1.0), hasher_info=False)
    rgba = golden.input_bytes("rgba.png")
    with observing(tracked):
        MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(rgba))
        MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO(rgba_background_color=(0, 0, 0)).load_bytes(rgba))
    assert value(registry, "mmobs_cache_key_drift_total", kind="media_with_bytes") == 1


def test_unchanged_keys_never_drift(registry):
    tracked = Instrumentation(registry, drift=DriftTracker(sample_rate=1.0), hasher_info=False)
    with observing(tracked):
        for _ in range(5):
            for name in ("photo.jpg", "rgb.png", "bad-exif-header.jpg"):
                MultiModalHasher.hash_kwargs(
                    "blake3", image=ImageMediaIO().load_bytes(golden.input_bytes(name)), model_id="a"
                )
            # A different model id is a different request, not drift.
            MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(PHOTO_JPEG), model_id="b")
    assert value(registry, "mmobs_cache_key_drift_total", kind="media_with_bytes") == 0
    assert value(registry, "mmobs_cache_key_drift_samples_total", kind="media_with_bytes") == 20


def test_drift_content_identity_is_the_original_bytes_item_digest():
    """The tracker's shortcut (reuse the key's digest) names content as a full pass would."""
    from mmobs.observability.drift import original_bytes_item_digest

    with observing(None):
        item = b"".join(MultiModalHasher.serialize_item(ImageMediaIO().load_bytes(PHOTO_JPEG)))
    assert blake3(item).digest(16) == original_bytes_item_digest("media_with_bytes", PHOTO_JPEG)


def test_drift_tracker_is_bounded():
    tracker = DriftTracker(capacity=16, sample_rate=1.0)
    for i in range(500):
        media = MediaWithBytes(None, i.to_bytes(4, "little") * 10)
        tracker.observe("media_with_bytes", media, blake3(media.original_bytes).hexdigest(), "original_bytes")
    assert len(tracker) == 16


def test_drift_sampling_is_deterministic_per_content():
    tracker = DriftTracker(sample_rate=0.25)
    items = [MediaWithBytes(None, i.to_bytes(4, "little") * 100) for i in range(2000)]
    first = [tracker.samples(m) for m in items]
    assert first == [tracker.samples(MediaWithBytes(None, m.original_bytes)) for m in items]
    assert 0.2 < sum(first) / len(first) < 0.3
    assert not tracker.samples(Image.new("L", (1, 1)))


def test_drift_tracker_validates_options():
    with pytest.raises(ValueError, match="capacity"):
        DriftTracker(capacity=0)
    with pytest.raises(ValueError, match="sample_rate"):
        DriftTracker(sample_rate=1.5)
