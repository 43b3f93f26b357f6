"""Decode-free processor-cache hits inside the real vLLM 0.33: vLLM's own loader, hasher and sender cache.

The plugin is registered in this process for the module (and unregistered
after): ``ImageMediaIO.load_bytes`` and ``MultiModalHasher.hash_kwargs`` are
vLLM's, wrapped by mmobs, and the processor cache is vLLM's
``LruKeyReplicatedSenderCache``, made as vLLM makes it (its ``__init__``
registers it with the plugin). For every kind of image, the second load of
the same bytes, once the cache holds their key, must be a stand-in that was
not decoded, key to the same key with the same events, and decode (late,
counted) to exactly the pixels vLLM's loader gives.
"""

from __future__ import annotations

import io
import pickle
import threading
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image
from prometheus_client import REGISTRY

from mmobs.events import RecordingObserver, observing
from mmobs.keys.writer import IMAGE_ID_TAG
from mmobs.vllm.decode_free_hits.decode_skip import DecodedIndex, Record
from mmobs.vllm.decode_free_hits.lazy_image import LazyImage
from tests.support import golden, require_vllm, vllm_plugin_registered
from tests.support.images import encode, jpeg_bytes, noisy_image, png_bytes, png_with_orientation

MODEL = "tiny-model"


@pytest.fixture(scope="module")
def vllm_parts(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """The plugin registered, and vLLM's loader, hasher and a sender cache made after it (as in vLLM's API server)."""
    require_vllm()
    for name in ("MMOBS_VLLM_PLUGIN", "MMOBS_VLLM_DECODE_FREE_HITS", "MMOBS_VLLM_GUARD"):
        monkeypatch_module.delenv(name, raising=False)
    from vllm.multimodal.cache.lru import LruKeyReplicatedSenderCache
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalKwargsItem
    from vllm.multimodal.media.image import ImageMediaIO

    from mmobs.vllm.decode_free_hits import decode_skip

    with vllm_plugin_registered() as plugin:
        skipper = decode_skip.active()
        assert skipper is not None, "the plugin planned no decode skipping"
        config = types.SimpleNamespace(get_multimodal_config=lambda: types.SimpleNamespace(mm_processor_cache_gb=0.001))
        cache = LruKeyReplicatedSenderCache(config)
        assert cache in skipper.caches
        yield types.SimpleNamespace(
            loader=ImageMediaIO,
            hasher=MultiModalHasher,
            cache=cache,
            item=MultiModalKwargsItem,
            skipper=skipper,
            plugin=plugin,
        )


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def load_and_key(parts: types.SimpleNamespace, data: bytes, **loader_kwargs: Any) -> tuple[Any, str, RecordingObserver]:
    recorder = RecordingObserver()
    with observing(recorder):
        media = parts.loader(**loader_kwargs).load_bytes(data)
        key = parts.hasher.hash_kwargs("blake3", model_id=MODEL, image=media)
    return media, key, recorder


def cache_it(parts: types.SimpleNamespace, key: str) -> None:
    """What vLLM's processor does with a processed item: the sender cache records its key."""
    parts.cache.get_and_update_item((parts.item.dummy(), []), key)


def events(recorder: RecordingObserver) -> list[tuple[str, str, str, Any]]:
    """Every event, with what its log line shows (kind, exception type and message, the image's fields)."""
    found = [
        ("fallback", type(e.error).__name__, str(e.error), (e.kind, e.key_source, e.image.format, e.image.mode))
        for e in recorder.fallbacks
    ]
    found += [
        ("transpose", type(f.error).__name__, str(f.error), (f.image.format, f.image.mode, f.image.size))
        for f in recorder.transpose_failures
    ]
    found += [("keyed", k.kind, k.key_source, None) for k in recorder.keyed]
    return found


def _uuid_jpeg() -> bytes:
    image = noisy_image("RGB", (32, 24), seed=5)
    exif = Image.Exif()
    exif[IMAGE_ID_TAG] = str(uuid.UUID(int=0x6D6D6F6273))
    return encode(image, "JPEG", exif=exif)


IMAGES: dict[str, bytes] = {
    "jpeg": jpeg_bytes((96, 64), seed=1),
    "rgba-png": png_bytes("RGBA", (40, 30), seed=2),
    "l-png": png_bytes("L", (40, 30), seed=3),
    "palette-png": golden.input_bytes("palette.png"),
    "exif-rotated-jpeg": encode(
        noisy_image("RGB", (30, 20), seed=4), "JPEG", exif=png_with_orientation(6)[1].getexif()
    ),
    "gif": encode(noisy_image("P", (24, 16), seed=6), "GIF"),
    "webp": encode(noisy_image("RGB", (24, 16), seed=7), "WEBP", lossless=True),
    "malformed-exif-jpeg": golden.input_bytes("bad-exif-header.jpg"),
    "bad-exif-chunk-png": golden.input_bytes("bad-exif-chunk.png"),
    "imageid-jpeg": golden.input_bytes("imageid-string.jpg"),
}


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_a_cached_image_is_keyed_without_a_decode_and_decodes_late_to_vllms_pixels(
    vllm_parts: types.SimpleNamespace, name: str
) -> None:
    """Same key, same events, no decode while keyed; its pixels, read later, are those vLLM's loader gives."""
    data = IMAGES[name]
    first, key, first_events = load_and_key(vllm_parts, data)
    assert not isinstance(first.media, LazyImage)
    cache_it(vllm_parts, key)
    skipped, late = (
        counted("mmobs_vllm_skipped_decodes_total", modality="image"),
        counted("mmobs_vllm_late_decodes_total", modality="image"),
    )

    again, again_key, again_events = load_and_key(vllm_parts, data)
    assert isinstance(again.media, LazyImage) and not again.media.decoded
    assert again_key == key
    assert events(again_events) == events(first_events)
    assert isinstance(again.media, type(first.media))
    facts = ("mode", "size", "format", "format_description")
    assert [getattr(again.media, fact) for fact in facts] == [getattr(first.media, fact) for fact in facts]
    assert again.io_config == first.io_config and again.original_bytes == data
    assert counted("mmobs_vllm_skipped_decodes_total", modality="image") == skipped + 1
    assert counted("mmobs_vllm_late_decodes_total", modality="image") == late

    # The processor reads the pixels (the item was evicted meanwhile): decoded now, once, and exactly vLLM's.
    assert again.media.tobytes() == first.media.tobytes()
    assert again.media.decoded and again.media.info == first.media.info and again.media.palette == first.media.palette
    assert counted("mmobs_vllm_late_decodes_total", modality="image") == late + 1


def test_bytes_the_cache_does_not_hold_are_decoded_as_vllm_decodes_them(vllm_parts: types.SimpleNamespace) -> None:
    data = jpeg_bytes((50, 40), seed=11)
    _, key, _ = load_and_key(vllm_parts, data)
    again, again_key, _ = load_and_key(vllm_parts, data)  # decoded before, but its key is not cached
    assert not isinstance(again.media, LazyImage) and again_key == key
    cache_it(vllm_parts, key)
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x55  # one byte changed in the entropy-coded data
    other, other_key, _ = load_and_key(vllm_parts, bytes(changed))
    assert not isinstance(other.media, LazyImage) and other_key != key


def test_another_image_mode_is_another_decode(vllm_parts: types.SimpleNamespace) -> None:
    """The loader's settings (media_io_kwargs) change what bytes decode to: each setting is its own entry."""
    data = png_bytes("RGBA", (20, 10), seed=12)
    _, key, _ = load_and_key(vllm_parts, data)
    cache_it(vllm_parts, key)
    as_rgba, rgba_key, _ = load_and_key(vllm_parts, data, image_mode="RGBA")
    assert not isinstance(as_rgba.media, LazyImage) and rgba_key != key
    skipped, _, _ = load_and_key(vllm_parts, data)
    assert isinstance(skipped.media, LazyImage)


def test_a_bad_image_is_refused_in_vllms_words_every_time(vllm_parts: types.SimpleNamespace) -> None:
    data = jpeg_bytes((40, 30), seed=13)[:200]
    messages = []
    for _ in range(2):
        with pytest.raises(ValueError, match="Failed to load image") as refused:
            vllm_parts.loader().load_bytes(data)
        messages.append(str(refused.value))
    assert messages[0] == messages[1]


def test_the_requests_decoded_bytes_budget_is_charged_for_a_skipped_decode(
    vllm_parts: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM 0.33 charges every image to the request's budget; a stand-in is charged alike, and refused alike."""
    from vllm.multimodal.media.base import MediaDecodedBudget

    data = jpeg_bytes((64, 64), seed=14)
    _, key, _ = load_and_key(vllm_parts, data)
    cache_it(vllm_parts, key)
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(64 * 64 * 4 + 1))
    budget = MediaDecodedBudget()
    media = vllm_parts.loader(decoded_budget=budget).load_bytes(data)
    assert isinstance(media.media, LazyImage) and budget.used == 64 * 64 * 4
    with pytest.raises(ValueError, match="VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES"):
        vllm_parts.loader(decoded_budget=budget).load_bytes(data)


def test_a_stand_in_pickles_and_copies_as_the_decoded_image(vllm_parts: types.SimpleNamespace) -> None:
    data = png_bytes("RGB", (16, 8), seed=15)
    first, key, _ = load_and_key(vllm_parts, data)
    cache_it(vllm_parts, key)
    again, _, _ = load_and_key(vllm_parts, data)
    assert isinstance(again.media, LazyImage)
    restored = pickle.loads(pickle.dumps(again))
    assert type(restored.media) is type(first.media) and restored.media.tobytes() == first.media.tobytes()
    assert repr(again.media).startswith("<mmobs.vllm.decode_free_hits.lazy_image.LazyImage image mode=RGB size=16x8")


def test_concurrent_readers_decode_a_stand_in_once(vllm_parts: types.SimpleNamespace) -> None:
    data = jpeg_bytes((128, 96), seed=16)
    first, key, _ = load_and_key(vllm_parts, data)
    cache_it(vllm_parts, key)
    again, _, _ = load_and_key(vllm_parts, data)
    late = counted("mmobs_vllm_late_decodes_total", modality="image")
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(again.media.tobytes())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [first.media.tobytes()] * 8
    assert counted("mmobs_vllm_late_decodes_total", modality="image") == late + 1


def test_the_index_is_bounded_in_entries_and_bytes() -> None:
    sizes: list[tuple[int, int]] = []
    record = Record(LazyImage, "RGB", (1, 1), (1, 1), "PNG", None, 0.001, ())
    index = DecodedIndex(3, 10 * record.nbytes(), on_change=lambda entries, nbytes: sizes.append((entries, nbytes)))
    for n in range(5):
        index.put((bytes([n]), None), Record(LazyImage, "RGB", (1, 1), (1, 1), "PNG", None, 0.001, ()))
    assert len(index) == 3 and index.get((b"\x00", None)) is None and index.get((b"\x04", None)) is not None
    assert sizes[-1] == (3, 3 * record.nbytes())
    index.get((b"\x02", None))  # used: the least recently used is now 3
    index.put((b"\x05", None), record)
    assert index.get((b"\x03", None)) is None and index.get((b"\x02", None)) is not None
    by_bytes = DecodedIndex(100, 2 * record.nbytes())
    for n in range(4):
        by_bytes.put((bytes([n]), None), Record(LazyImage, "RGB", (1, 1), (1, 1), "PNG", None, 0.0, ()))
    assert len(by_bytes) == 2 and by_bytes.nbytes == 2 * record.nbytes()


def test_the_index_size_is_on_metrics(vllm_parts: types.SimpleNamespace) -> None:
    load_and_key(vllm_parts, png_bytes("RGB", (9, 9), seed=17))
    assert counted("mmobs_vllm_decoded_index_entries", modality="image") == len(vllm_parts.skipper.index) > 0
    assert counted("mmobs_vllm_decoded_index_bytes", modality="image") == vllm_parts.skipper.index.nbytes > 0


def test_the_lazy_image_answers_mode_and_size_without_decoding() -> None:
    calls: list[int] = []

    def decode() -> Image.Image:
        calls.append(1)
        return Image.new("RGB", (3, 2), (4, 5, 6))

    lazy = LazyImage("RGB", (3, 2), None, (), decode)
    assert (lazy.mode, lazy.size, lazy.width, lazy.height, lazy.format) == ("RGB", (3, 2), 3, 2, None)
    assert isinstance(lazy, Image.Image) and calls == []
    lazy.close()
    assert calls == []
    buffer = io.BytesIO()
    lazy.save(buffer, "PNG")
    assert calls == [1] and Image.open(buffer).getpixel((0, 0)) == (4, 5, 6)


def test_the_guard_keeps_vllms_own_message_where_vllm_refuses_too(
    vllm_parts: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above vLLM's pixel limit the guard refuses first, and its message ends with vLLM's own words."""
    from mmobs.errors import BadImageError
    from mmobs.vllm import loader_hooks, plugin

    (original,) = [r.original for r in plugin._applied if r.name == "load_bytes" and r.owner is vllm_parts.loader]
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "100")
    data = png_bytes("RGB", (20, 10), seed=18)
    with pytest.raises(ValueError) as by_vllm:
        original(vllm_parts.loader(), data)
    guarded = loader_hooks.load_bytes(original, guard=True)
    with pytest.raises(BadImageError) as by_guard:
        guarded(vllm_parts.loader(), data)
    assert str(by_guard.value).startswith("too_many_pixels: the image is 20x10 = 200 pixels")
    assert str(by_guard.value).endswith(f"({by_vllm.value})")
    # Below vLLM's limit, a refusal that is mmobs's alone keeps mmobs's words only.
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "0")
    assert loader_hooks.vllm_message(BadImageError("too_many_pixels", "wide"), data) is None


def test_a_vllm_whose_loader_defers_decoding_is_left_alone(vllm_parts: types.SimpleNamespace) -> None:
    """A loader that hands on an image not yet decoded (upstream's lazy media, after 0.33) declines the plan."""
    from vllm.multimodal.media.base import MediaWithBytes

    from mmobs.vllm.probes import probe_decodes
    from mmobs.vllm.shape import ShapeMismatch

    def deferring(loader: object, data: bytes) -> Any:
        return MediaWithBytes(Image.open(io.BytesIO(data)), data)  # opened, not decoded

    with pytest.raises(ShapeMismatch, match="no longer decodes eagerly"):
        probe_decodes(deferring, vllm_parts.loader, MediaWithBytes)
    (original,) = [
        r.original for r in vllm_parts.plugin._applied if r.name == "load_bytes" and r.owner is vllm_parts.loader
    ]
    probe_decodes(original, vllm_parts.loader, MediaWithBytes)  # vLLM 0.33's own loader passes


def test_a_stand_in_decoded_before_it_is_keyed_is_keyed_as_the_decoded_image(vllm_parts: types.SimpleNamespace) -> None:
    """Something read the pixels first (a copy, say): the hasher then reads the image itself, same key and events."""
    data = IMAGES["malformed-exif-jpeg"]
    _, key, first_events = load_and_key(vllm_parts, data)
    cache_it(vllm_parts, key)
    recorder = RecordingObserver()
    with observing(recorder):
        media = vllm_parts.loader().load_bytes(data)
        assert isinstance(media.media, LazyImage)
        media.media.load()
        assert media.media.decoded
        again = vllm_parts.hasher.hash_kwargs("blake3", model_id=MODEL, image=media)
    assert again == key
    assert events(recorder) == events(first_events)
