"""The observability layer's exact counts: EXIF fallbacks and their events, keys, hashing, refusals; bounded series."""

from __future__ import annotations

import uuid
from io import BytesIO

import pytest
from PIL import Image
from prometheus_client import generate_latest
from structlog.testing import capture_logs

import mmobs
from mmobs import ImageMediaIO, MultiModalHasher
from mmobs.events import ExifFallback
from mmobs.observability.metrics import EXCEPTION_LABELS, exception_label
from tests.observability.golden_inputs import BAD_CHUNK_PNG, BAD_HEADER_JPEG, PHOTO_JPEG, fresh_bad_png
from tests.support import value


@pytest.mark.parametrize("n", [1, 7])
def test_plain_image_fallback_counts_exactly_n(registry, instr, n):
    with capture_logs() as logs:
        for _ in range(n):
            MultiModalHasher.hash_kwargs("blake3", image=fresh_bad_png())
    assert value(registry, "mmobs_exif_fallback_total", kind="image", exception="SyntaxError") == n
    assert value(registry, "mmobs_media_keys_total", kind="image", key_source="pixels") == n
    events = [e for e in logs if e["event"] == "exif_fallback"]
    assert len(events) == n
    for event in events:
        assert event["kind"] == "image"
        assert event["exception"] == "SyntaxError"
        assert event["key_source"] == "pixels"
        assert event["format"] == "PNG"
        assert event["mode"] == "RGB"
        assert event["size"] == [16, 12]
        assert event["content_digest"] is None  # a plain image has no original bytes
        assert event["pillow"] == __import__("PIL").__version__
        assert "not a TIFF file" in event["error"]
        assert event["log_level"] == "warning"


@pytest.mark.parametrize("n", [1, 5])
def test_media_with_bytes_fallback_counts_exactly_n(registry, instr, n):
    with capture_logs() as logs:
        for _ in range(n):
            media = ImageMediaIO().load_bytes(BAD_HEADER_JPEG)
            MultiModalHasher.hash_kwargs("blake3", image=media)
    assert value(registry, "mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError") == n
    assert value(registry, "mmobs_exif_fallback_total", kind="image", exception="SyntaxError") == 0
    assert value(registry, "mmobs_media_keys_total", kind="media_with_bytes", key_source="original_bytes") == n
    events = [e for e in logs if e["event"] == "exif_fallback"]
    assert len(events) == n
    expected_digest = mmobs.observability.instrument.content_digest(BAD_HEADER_JPEG)
    assert {e["content_digest"] for e in events} == {expected_digest}
    assert {e["key_source"] for e in events} == {"original_bytes"}
    assert {e["format"] for e in events} == {"JPEG"}


def test_clean_images_move_no_fallback_counter(registry, instr):
    with capture_logs() as logs:
        for _ in range(3):
            MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(PHOTO_JPEG))
    assert (
        sum(
            value(registry, "mmobs_exif_fallback_total", kind=k, exception=e)
            for k in ("image", "media_with_bytes")
            for e in EXCEPTION_LABELS
        )
        == 0
    )
    assert not [e for e in logs if e["event"] == "exif_fallback"]
    assert value(registry, "mmobs_media_keys_total", kind="media_with_bytes", key_source="original_bytes") == 3


def test_transpose_failure_counted_and_logged(registry, instr):
    with capture_logs() as logs:
        for _ in range(3):
            image = Image.open(BytesIO(BAD_CHUNK_PNG))
            assert mmobs.safe_exif_transpose(image) is image
    assert value(registry, "mmobs_exif_transpose_failures_total", exception="SyntaxError") == 3
    events = [e for e in logs if e["event"] == "exif_transpose_failed"]
    assert len(events) == 3 and events[0]["exception"] == "SyntaxError" and events[0]["format"] == "PNG"


def test_image_id_key_source_counted(registry, instr):
    image = Image.new("RGB", (2, 2))
    image.getexif()[0x800D] = uuid.uuid4()
    MultiModalHasher.hash_kwargs("blake3", image=image)
    assert value(registry, "mmobs_media_keys_total", kind="image", key_source="image_id") == 1


def test_hash_duration_and_bytes(registry, instr):
    kwargs = {"image": ImageMediaIO().load_bytes(PHOTO_JPEG), "model_id": "m"}
    stream = b"".join(
        chunk for name in sorted(kwargs) for chunk in MultiModalHasher.iter_item_to_bytes(name, kwargs[name])
    )
    before = value(registry, "mmobs_hashed_bytes_total", algorithm="sha256")
    MultiModalHasher.hash_kwargs("sha256", **kwargs)
    MultiModalHasher.hash_kwargs("sha256", **kwargs)
    assert value(registry, "mmobs_hashed_bytes_total", algorithm="sha256") - before == 2 * len(stream)
    assert value(registry, "mmobs_hash_duration_seconds_count", algorithm="sha256") == 2
    assert value(registry, "mmobs_hash_duration_seconds_count", algorithm="blake3") == 0


def test_bad_images_counted_by_reason_once(registry, instr):
    with capture_logs() as logs:
        for data in (b"", b"not an image", b"not an image"):
            with pytest.raises(mmobs.BadImageError):
                ImageMediaIO().load_bytes(data)
    assert value(registry, "mmobs_bad_images_total", reason="empty") == 1
    assert value(registry, "mmobs_bad_images_total", reason="unidentified") == 2
    assert [e["reason"] for e in logs if e["event"] == "bad_image"] == ["empty", "unidentified", "unidentified"]


# -- bounded series ----------------------------------------------------------------------


def test_exception_labels_are_a_closed_set():
    assert exception_label(SyntaxError) == "SyntaxError"
    assert exception_label(UnicodeDecodeError) == "UnicodeDecodeError"
    assert exception_label(__import__("struct").error) == "struct.error"
    assert exception_label(Image.UnidentifiedImageError) == "OSError"
    assert exception_label(type("Weird", (Exception,), {})) == "other"
    assert exception_label(KeyboardInterrupt) == "other"


def test_flood_of_exception_types_adds_no_series(registry, instr):
    def series_count() -> int:
        return sum(
            1
            for line in generate_latest(registry).decode().splitlines()
            if line.startswith("mmobs_exif_fallback_total{")
        )

    before = series_count()
    image = Image.new("RGB", (1, 1))
    for i in range(300):
        error_type = type(f"Exotic{i}Error", (ValueError if i % 2 else Exception,), {})
        instr.exif_fallback(ExifFallback("image", error_type(f"message {i}\n" * 50), "pixels", image))
    assert series_count() == before == 2 * len(EXCEPTION_LABELS)
    assert value(registry, "mmobs_exif_fallback_total", kind="image", exception="other") == 150
    assert value(registry, "mmobs_exif_fallback_total", kind="image", exception="ValueError") == 150
