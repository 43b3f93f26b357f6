"""The observability layer: exact counts, the log events, drift, the fingerprint."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from io import BytesIO
from pathlib import Path

import pytest
import structlog
from blake3 import blake3
from PIL import Image
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import LogCapture, capture_logs

import mmobs
from mmobs import ImageMediaIO, MediaWithBytes, MultiModalHasher
from mmobs.errors import InvalidOptionError
from mmobs.events import ExifFallback, observing
from mmobs.keys.releases import NEWEST, RELEASES, key_format
from mmobs.observability.drift import DriftTracker
from mmobs.observability.fingerprint import compute_fingerprint, key_with_release, keying_release, process_fingerprint
from mmobs.observability.instrument import Instrumentation
from mmobs.observability.logs import MAX_FIELD_CHARS, safe_text
from mmobs.observability.metrics import EXCEPTION_LABELS, exception_label
from tests.support import golden, value

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
BAD_CHUNK_PNG = golden.input_bytes("bad-exif-chunk.png")
PHOTO_JPEG = golden.input_bytes("photo.jpg")


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def instr(registry: CollectorRegistry):
    """An Instrumentation on a private registry, in force for this test's context."""
    instrumentation = Instrumentation(registry, hasher_info=False)
    with observing(instrumentation):
        yield instrumentation


def fresh_bad_png() -> Image.Image:
    image = Image.open(BytesIO(BAD_CHUNK_PNG))
    image.load()
    return image


# -- the fallback counter and its event ----------------------------------------------


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


# -- log fields ------------------------------------------------------------------------------


def test_safe_text_escapes_and_truncates():
    assert safe_text("line1\nline2\r\x00") == "line1\\nline2\\r\\x00"
    long = safe_text("x" * 10_000)
    assert len(long) == MAX_FIELD_CHARS and long.endswith("\u2026")
    assert safe_text(b"\xff\xfe") == "b'\\xff\\xfe'"


def test_request_context_reaches_hashing_events(registry, instr):
    capture = LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        structlog.contextvars.bind_contextvars(request_id="req-42", route="/v1/hash")
        MultiModalHasher.hash_kwargs("blake3", image=fresh_bad_png())
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
    (event,) = [e for e in capture.entries if e["event"] == "exif_fallback"]
    assert event["request_id"] == "req-42" and event["route"] == "/v1/hash"


def test_log_rate_limit_limits_logs_not_counts(registry):
    limited = Instrumentation(registry, log_interval_seconds=3600, hasher_info=False)
    with observing(limited), capture_logs() as logs:
        for _ in range(4):
            MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(BAD_HEADER_JPEG))
    assert value(registry, "mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError") == 4
    assert len([e for e in logs if e["event"] == "exif_fallback"]) == 1


def test_importing_mmobs_does_not_configure_structlog():
    code = "import structlog, mmobs; print(structlog.is_configured())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_default_set_up_counts_into_global_registry():
    code = textwrap.dedent(
        f"""
        import prometheus_client, mmobs
        media = mmobs.ImageMediaIO().load_bytes(open({str(golden.GOLDEN_DIR / "inputs" / "bad-exif-header.jpg")!r}, 'rb').read())
        mmobs.MultiModalHasher.hash_kwargs("blake3", image=media)
        print(prometheus_client.REGISTRY.get_sample_value(
            "mmobs_exif_fallback_total", {{"kind": "media_with_bytes", "exception": "SyntaxError"}}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "1.0"
    assert "exif_fallback" in result.stdout


def test_observer_can_be_turned_off(registry, instr):
    with observing(None):
        MultiModalHasher.hash_kwargs("blake3", image=fresh_bad_png())
    assert value(registry, "mmobs_exif_fallback_total", kind="image", exception="SyntaxError") == 0


# -- drift --------------------------------------------------------------------------------------


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


# -- the fleet fingerprint ----------------------------------------------------------------------


def test_fingerprint_is_stable_across_processes():
    here = compute_fingerprint()
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "mmobs.cli", "fingerprint", "--json"], capture_output=True, text=True, check=True
        )
        other = json.loads(result.stdout)
        assert other["fingerprint"] == here.digest
        assert other["keys"] == here.keys
    assert len(here.digest) == 16
    assert not any(key.startswith("error:") for key in here.keys.values())


def test_each_key_format_has_its_own_fingerprint_and_releases_of_one_format_share_it():
    by_release = {release: compute_fingerprint(release) for release in RELEASES}
    for release, fingerprint in by_release.items():
        assert fingerprint.key_format == key_format(release).name
        assert not any(key.startswith("error:") for key in fingerprint.keys.values()), release
    digests = {fingerprint.key_format: fingerprint.digest for fingerprint in by_release.values()}
    assert len(set(digests.values())) == len(digests) == 5  # one per format, and only one
    assert compute_fingerprint() == by_release[NEWEST]
    # 0.27 and 0.30 key every reference image alike (they differ on video tensors): the format's name tells them apart.
    assert by_release["0.27.1"].keys == by_release["0.30.0"].keys and digests["0.27"] != digests["0.30"]
    assert by_release["0.30.0"].keys != by_release["0.31.0"].keys  # framing: every key differs


def test_the_process_fingerprint_follows_the_release_it_keys_as(registry):
    try:
        key_with_release("0.30.0")
        with pytest.raises(InvalidOptionError, match="known releases"):
            key_with_release("0.24.0")
        assert keying_release() == "0.30.0"  # a refused release changes nothing
        with observing(Instrumentation(registry)):
            MultiModalHasher.hash_kwargs("blake3", x=1)
        labels = {
            "fingerprint": compute_fingerprint("0.30.0").digest,
            "key_format": "0.30",
            "mmobs": mmobs.__version__,
            "pillow": __import__("PIL").__version__,
            "numpy": __import__("numpy").__version__,
        }
        assert registry.get_sample_value("mmobs_hasher_info", labels) == 1.0
    finally:
        key_with_release(None)
    assert process_fingerprint() == compute_fingerprint()


def test_the_fingerprint_command_prints_a_releases_fingerprint():
    result = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "fingerprint", "--json", "--vllm-version", "0.27.1"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    printed = json.loads(result.stdout)
    expected = compute_fingerprint("0.27.1")
    assert (printed["fingerprint"], printed["key_format"], printed["keys"]) == (expected.digest, "0.27", expected.keys)


def test_fingerprint_changes_when_a_reference_key_changes(monkeypatch):
    baseline = compute_fingerprint()
    original = mmobs.observability.fingerprint._reference_bytes

    def altered(name: str) -> bytes:
        data = original(name)
        return data + b"\x00" if name == "rgba.png" else data

    monkeypatch.setattr(mmobs.observability.fingerprint, "_reference_bytes", altered)
    changed = compute_fingerprint()
    assert changed.digest != baseline.digest
    differing = {name for name in baseline.keys if baseline.keys[name] != changed.keys[name]}
    assert differing == {"media:rgba.png"}


def test_fingerprint_moves_no_traffic_counter(registry, instr):
    compute_fingerprint()
    text = generate_latest(registry).decode()
    for line in text.splitlines():
        if line.startswith(("mmobs_exif_fallback_total", "mmobs_media_keys_total", "mmobs_hashed_bytes_total")):
            assert line.endswith(" 0.0"), line


def test_fingerprint_covers_malformed_exif_paths():
    keys = compute_fingerprint().keys
    assert {"media:bad-exif-header.jpg", "open:bad-exif-chunk.png", "media:palette.png", "media:gray16.png"} <= set(
        keys
    )


def test_hasher_info_set_on_first_hash(registry):
    instrumentation = Instrumentation(registry)
    assert registry.get_sample_value("mmobs_hasher_info", None) is None
    with observing(instrumentation):
        MultiModalHasher.hash_kwargs("blake3", x=1)
    digest = compute_fingerprint().digest
    labels = {
        "fingerprint": digest,
        "key_format": "0.33",
        "mmobs": mmobs.__version__,
        "pillow": __import__("PIL").__version__,
        "numpy": __import__("numpy").__version__,
    }
    assert registry.get_sample_value("mmobs_hasher_info", labels) == 1.0


# -- multiprocess -------------------------------------------------------------------------------


_WORKER = textwrap.dedent(
    """
    import sys, mmobs
    data = open(sys.argv[1], "rb").read()
    for _ in range(int(sys.argv[2])):
        mmobs.MultiModalHasher.hash_kwargs("blake3", image=mmobs.ImageMediaIO().load_bytes(data))
    """
)


def test_two_processes_sum_exactly_in_multiprocess_dir(tmp_path: Path):
    metrics_dir = tmp_path / "multiproc"
    metrics_dir.mkdir()
    env = {**__import__("os").environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    image = golden.GOLDEN_DIR / "inputs" / "bad-exif-header.jpg"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(image), str(count)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for count in (13, 29)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    code = textwrap.dedent(
        """
        from mmobs.asgi.exposition import scrape_registry
        registry = scrape_registry()
        print(registry.get_sample_value("mmobs_exif_fallback_total",
              {"kind": "media_with_bytes", "exception": "SyntaxError"}))
        print(registry.get_sample_value("mmobs_media_keys_total",
              {"kind": "media_with_bytes", "key_source": "original_bytes"}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["42.0", "42.0"]


_UNCONFIGURED_PROBE = """
from mmobs import ImageMediaIO, MultiModalHasher
from tests.support import golden
media = ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg"))
MultiModalHasher.hash_kwargs("blake3", image=media)
"""


def test_events_keep_one_line_where_nobody_configured_structlog():
    """In an application that never configures structlog (vLLM), a fallback is one console line.

    structlog's default renderer would print the ``exception`` field as a
    traceback below the line; mmobs keeps its label inline instead.
    """
    result = subprocess.run(
        [sys.executable, "-c", _UNCONFIGURED_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    (line,) = result.stdout.splitlines()
    assert "exif_fallback" in line and "exception_type=SyntaxError" in line and "kind=media_with_bytes" in line


def test_made_once_makes_its_object_once_however_many_threads_ask_first() -> None:
    """The process's series are registered exactly once: a second registration would raise."""
    import threading
    import time

    from mmobs.observability.metrics import made_once

    made: list[object] = []

    def slow_factory() -> object:
        time.sleep(0.05)  # long enough for every thread to arrive before the first is done
        made.append(object())
        return made[-1]

    once = made_once(slow_factory)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(once())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and got == made * 8 and once() is made[0]
    assert once.__name__ == "slow_factory"
