"""Decode-free hits for video inside the real vLLM 0.33: vLLM's own video loader, parser, hasher and sender cache.

The plugin is registered in this process for the module (and unregistered after). A clip OpenCV wrote is
loaded by ``VideoMediaIO.load_bytes`` (vLLM's, wrapped by mmobs), parsed by vLLM's ``MultiModalDataParser``
and keyed by vLLM's ``MultiModalHasher``, as the API server does; the processor cache is vLLM's
``LruKeyReplicatedSenderCache``. Once the cache holds its key, the second load of the same bytes must not be
decoded, must key to the same key with the same metadata, and must decode (late, counted) to exactly vLLM's
frames when vLLM's processor takes it for a miss.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from mmobs.events import RecordingObserver, observing
from tests.support import require_opencv, require_vllm, vllm_plugin_registered
from tests.support.videos import Clip, clip_bytes, faststart, rotated, without_last_frame

pytestmark = pytest.mark.vllm

MODEL = "tiny-model"


@pytest.fixture(scope="module")
def vllm_parts(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """The plugin registered; vLLM's video loader, parser, hasher and a sender cache made after it."""
    require_vllm()
    require_opencv()
    for name in ("MMOBS_VLLM_PLUGIN", "MMOBS_VLLM_DECODE_FREE_HITS", "MMOBS_VLLM_GUARD"):
        monkeypatch_module.delenv(name, raising=False)
    from vllm.multimodal.cache.lru import LruKeyReplicatedSenderCache
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalKwargsItem
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.media.video import VideoMediaIO
    from vllm.multimodal.parse import MultiModalDataParser
    from vllm.multimodal.processing.processor import BaseMultiModalProcessor

    from mmobs.vllm.decode_free_hits import clip_skip

    with vllm_plugin_registered() as plugin:
        config = types.SimpleNamespace(get_multimodal_config=lambda: types.SimpleNamespace(mm_processor_cache_gb=0.001))
        cache = LruKeyReplicatedSenderCache(config)
        assert clip_skip._active is not None, "the plugin planned no decode-free hits for video"
        yield types.SimpleNamespace(
            loader=lambda **kwargs: VideoMediaIO(ImageMediaIO(), **kwargs),
            parser=MultiModalDataParser(video_needs_metadata=True),
            hasher=MultiModalHasher,
            cache=cache,
            item=MultiModalKwargsItem,
            processor=BaseMultiModalProcessor,
            plugin=plugin,
        )


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def load_and_key(parts: types.SimpleNamespace, data: bytes, **loader_kwargs: Any) -> tuple[Any, Any, str]:
    """The clip loaded, parsed and keyed as vLLM's API server does it: (loaded, parsed items, key)."""
    with observing(RecordingObserver()):
        loaded = parts.loader(**loader_kwargs).load_bytes(data)
        items = parts.parser.parse_mm_data({"video": [loaded]})["video"]
        key = parts.hasher.hash_kwargs("blake3", model_id=MODEL, video=items.get_item_for_hash(0))
    return loaded, items, key


def cache_it(parts: types.SimpleNamespace, key: str) -> None:
    """What vLLM's processor does with an item: it looks for the request's misses, then its cache records the key."""
    processor = types.SimpleNamespace(info=types.SimpleNamespace(parse_mm_data=lambda data, validate: data))
    parts.processor._get_cache_missing_items(processor, cache=parts.cache, mm_data_items={}, mm_hashes={})
    parts.cache.get_and_update_item((parts.item.dummy(), []), key)


def missing_items(parts: types.SimpleNamespace, items: Any, key: str) -> Any:
    """vLLM's ``_get_cache_missing_items`` on a cache that does not hold ``key``: the items the HF processor reads."""
    info = types.SimpleNamespace(parse_mm_data=lambda data, validate: parts.parser.parse_mm_data(data))
    processor = types.SimpleNamespace(info=info)
    empty = type(parts.cache)(
        types.SimpleNamespace(get_multimodal_config=lambda: types.SimpleNamespace(mm_processor_cache_gb=0.001))
    )
    _, missing = parts.processor._get_cache_missing_items(
        processor, cache=empty, mm_data_items={"video": items}, mm_hashes={"video": [key]}
    )
    return missing["video"]


#: Each clip: what to write, the loader's settings, and whether its header turns it (a phone's display matrix).
CLIPS: dict[str, tuple[Clip, dict[str, Any]] | tuple[Clip, dict[str, Any], bool]] = {
    "mp4, every frame kept": (Clip(frames=6, seed=1), {}),
    "mp4 turned a quarter by its header": (Clip(frames=6, seed=4), {}, True),
    "mp4, four of twelve kept": (Clip(frames=12, seed=2), {"num_frames": 4}),
    "webm, at 2 fps": (Clip(frames=10, fps=5.0, container="webm", seed=3), {"num_frames": -1, "fps": 2}),
}


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_a_cached_clip_is_keyed_without_a_decode_and_decodes_late_to_vllms_frames(
    vllm_parts: types.SimpleNamespace, name: str
) -> None:
    """Same key, same metadata, no decode while keyed; a late decode gives vLLM's frames to the processor."""
    from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames

    clip, loader_kwargs, *turned = CLIPS[name]
    data = rotated(clip_bytes(clip)) if turned else clip_bytes(clip)
    first, _, key = load_and_key(vllm_parts, data, **loader_kwargs)
    frames, metadata = first.media
    assert type(frames) is np.ndarray and frames.nbytes >= len(data)
    assert frames.shape[1:3] == ((clip.width, clip.height) if turned else (clip.height, clip.width))
    cache_it(vllm_parts, key)
    skipped, late = (
        counted("mmobs_vllm_skipped_decodes_total", modality="video"),
        counted("mmobs_vllm_late_decodes_total", modality="video"),
    )

    again, items, again_key = load_and_key(vllm_parts, data, **loader_kwargs)
    undecoded, again_metadata = again.media
    assert isinstance(undecoded, UndecodedFrames)
    assert again_key == key
    assert again_metadata == metadata and again_metadata is not metadata
    assert undecoded.shape == frames.shape and undecoded.dtype == frames.dtype
    assert counted("mmobs_vllm_skipped_decodes_total", modality="video") == skipped + 1
    assert counted("mmobs_vllm_late_decodes_total", modality="video") == late

    # The item left the cache before the processor looked: vLLM's processor gets vLLM's frames.
    missing = missing_items(vllm_parts, items, key)
    processed = missing.get(0)
    processed_frames = processed[0] if isinstance(processed, tuple) else processed
    assert type(processed_frames) is np.ndarray and np.array_equal(processed_frames, frames)
    assert counted("mmobs_vllm_late_decodes_total", modality="video") == late + 1


def test_no_clip_is_stood_in_for_where_vllms_own_cached_path_has_not_run(
    vllm_parts: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A processor that replaces vLLM's cached path never looks for its misses there: its clips are decoded."""
    from mmobs.vllm.decode_free_hits import clip_skip

    data = clip_bytes(Clip(frames=5, seed=10))
    _, _, key = load_and_key(vllm_parts, data)
    cache_it(vllm_parts, key)
    assert clip_skip._active is not None
    monkeypatch.setattr(clip_skip._active, "misses_hooked", False)  # as in a process where it never ran
    again, _, again_key = load_and_key(vllm_parts, data)
    assert not isinstance(again.media[0], clip_skip.UndecodedFrames) and again_key == key


def test_a_clip_the_cache_does_not_hold_is_decoded_as_vllm_decodes_it(vllm_parts: types.SimpleNamespace) -> None:
    from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames

    data = clip_bytes(Clip(frames=5, seed=11))
    first, _, key = load_and_key(vllm_parts, data)
    again, _, again_key = load_and_key(vllm_parts, data)  # decoded before, but its key is not cached
    assert not isinstance(again.media[0], UndecodedFrames) and again_key == key
    assert np.array_equal(again.media[0], first.media[0])


def test_other_loader_settings_are_another_clip(vllm_parts: types.SimpleNamespace) -> None:
    """The same bytes sampled otherwise (``num_frames``) decode again, to their own key."""
    from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames

    data = clip_bytes(Clip(frames=12, seed=12))
    _, _, key = load_and_key(vllm_parts, data, num_frames=6)
    cache_it(vllm_parts, key)
    other, _, other_key = load_and_key(vllm_parts, data, num_frames=3)
    assert not isinstance(other.media[0], UndecodedFrames)
    assert other_key != key and len(other.media[1]["frames_indices"]) == 3


def test_a_clip_keyed_from_its_frames_is_decoded_on_every_send(vllm_parts: types.SimpleNamespace) -> None:
    """One frame kept of many noisy ones: the frames are smaller than the file, so vLLM keys them, not the bytes."""
    from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames

    data = clip_bytes(Clip(frames=40, seed=13))
    first, _, key = load_and_key(vllm_parts, data, num_frames=1)
    assert first.media[0].nbytes < len(data)
    cache_it(vllm_parts, key)
    again, _, again_key = load_and_key(vllm_parts, data, num_frames=1)
    assert not isinstance(again.media[0], UndecodedFrames) and again_key == key


def test_a_skipped_clip_is_timed_as_skipped_and_a_decoded_one_counts_its_frames(
    vllm_parts: types.SimpleNamespace,
) -> None:
    """The decode histogram's video outcomes, and the frames read (to the last kept) beside those kept."""
    data = clip_bytes(Clip(frames=12, seed=14))

    def decodes(outcome: str) -> float:
        return counted("mmobs_vllm_mm_decode_seconds_count", modality="video", format="mp4", outcome=outcome)

    def frames(count: str) -> float:
        return counted("mmobs_vllm_mm_video_frames_sum", count=count)

    decoded, skipped, read, kept = decodes("decoded"), decodes("skipped"), frames("read"), frames("kept")
    first, _, key = load_and_key(vllm_parts, data, num_frames=4)
    kept_indices = first.media[1]["frames_indices"]
    assert len(kept_indices) == 4
    assert (decodes("decoded"), frames("read"), frames("kept")) == (
        decoded + 1,
        read + max(kept_indices) + 1,
        kept + 4,
    )
    cache_it(vllm_parts, key)
    load_and_key(vllm_parts, data, num_frames=4)
    assert (decodes("decoded"), decodes("skipped"), frames("kept")) == (decoded + 1, skipped + 1, kept + 4)


class TestTheDecodeIsBoundedBeforeItStarts:
    """The budgets of ``mmobs.vllm.video_budget``, checked in vLLM's own OpenCV decoder before it reads a frame."""

    def refused(self, parts: types.SimpleNamespace, data: bytes, **loader_kwargs: Any) -> tuple[str, str]:
        """(type, message) of what loading ``data`` raised."""
        with observing(RecordingObserver()), pytest.raises(ValueError) as raised:
            parts.loader(**loader_kwargs).load_bytes(data)
        return type(raised.value).__name__, str(raised.value)

    def test_a_long_clip_is_refused_for_the_frames_it_would_read_and_decodes_with_the_budget_off(
        self, vllm_parts: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A still scene of 400 frames, 32 kept: 400 read, over a budget of 300; with the budget off, vLLM's frames."""
        data = clip_bytes(Clip(frames=400, fps=30.0, seed=21, scene="still"))
        monkeypatch.setenv("MMOBS_VLLM_VIDEO_MAX_FRAMES_READ", "300")
        before = counted("mmobs_vllm_video_refusals_total", budget="frames_read")
        refused = self.refused(vllm_parts, data)
        assert refused == (
            "VideoTooCostly",
            "too_costly: decoding this video would read 400 frames to keep 32, over the 300 "
            "MMOBS_VLLM_VIDEO_MAX_FRAMES_READ allows; send a shorter clip, or sample it at a lower fps",
        )
        assert counted("mmobs_vllm_video_refusals_total", budget="frames_read") == before + 1
        monkeypatch.setenv("MMOBS_VLLM_VIDEO_MAX_FRAMES_READ", "0")
        frames, metadata = vllm_parts.loader().load_bytes(data).media
        assert frames.shape == (32, 48, 64, 3) and metadata["frames_indices"][-1] == 399

    def test_large_frames_are_refused_for_their_decoded_bytes(
        self, vllm_parts: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        data = clip_bytes(Clip(width=320, height=240, frames=10, fps=10.0, seed=22, scene="pan"))
        monkeypatch.setenv("MMOBS_VLLM_VIDEO_MAX_DECODED_BYTES", str(320 * 240 * 3 * 10 - 1))
        before = counted("mmobs_vllm_video_refusals_total", budget="decoded_bytes")
        assert self.refused(vllm_parts, data)[1].startswith(
            f"too_costly: this video's 10 kept frames of 320x240 would decode to {320 * 240 * 3 * 10} bytes, over"
        )
        assert counted("mmobs_vllm_video_refusals_total", budget="decoded_bytes") == before + 1
        monkeypatch.setenv("MMOBS_VLLM_VIDEO_MAX_DECODED_BYTES", str(320 * 240 * 3 * 10))
        assert vllm_parts.loader().load_bytes(data).media[0].shape == (10, 240, 320, 3)

    def test_vllms_own_decode_budget_refuses_first_in_vllms_words(
        self, vllm_parts: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """vLLM 0.33 charges its request budget after the decode; the same refusal comes before it, word for word."""
        from vllm.multimodal.media.base import MediaDecodedBudget
        from vllm.multimodal.media.image import ImageMediaIO
        from vllm.multimodal.media.video import VideoMediaIO

        data = clip_bytes(Clip(width=160, height=120, frames=8, fps=8.0, seed=23, scene="pan"))
        decoded = 8 * 160 * 120 * 3
        monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(decoded - 1))
        vllms = MediaDecodedBudget()
        with pytest.raises(ValueError) as by_vllm:
            vllms.charge(decoded)  # what vLLM's own budget says of these frames
        before = counted("mmobs_vllm_video_refusals_total", budget="vllm_decode_bytes")
        with pytest.raises(ValueError) as early:
            VideoMediaIO(ImageMediaIO(decoded_budget=MediaDecodedBudget())).load_bytes(data)
        assert str(early.value) == str(by_vllm.value)
        assert counted("mmobs_vllm_video_refusals_total", budget="vllm_decode_bytes") == before + 1


def rendered(
    parts: types.SimpleNamespace, data: bytes, *, rule_holds: bool = True, **loader_kwargs: Any
) -> tuple[Any, Any, str]:
    """``load_and_key`` inside a keys-only render request.

    In a server, whether the served model's video rule holds is asked of the processor vLLM's renderer makes;
    no renderer is made here, so the answer is given.
    """
    from mmobs.vllm.decode_free_hits import clip_skip
    from mmobs.vllm.render import render_mode

    skipper = clip_skip._active
    assert skipper is not None
    token = render_mode.enter(render_mode.RenderRequest("chat"))
    skipper.sized_by_rule, was = (lambda clip: rule_holds), skipper.sized_by_rule
    try:
        return load_and_key(parts, data, **loader_kwargs)
    finally:
        skipper.sized_by_rule = was
        render_mode.leave(token)


@pytest.mark.parametrize("name", [name for name in sorted(CLIPS) if name.startswith("mp4")])
def test_a_keys_only_render_answers_a_first_seen_mp4_from_its_header_as_its_decode_would(
    vllm_parts: types.SimpleNamespace, name: str
) -> None:
    """No frame read: the key, the metadata and the frames' shape a decode gives; re-sent, from the index."""
    from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames

    clip, loader_kwargs, *turned = CLIPS[name]
    clip = dataclasses.replace(clip, seed=clip.seed + 100, frames=clip.frames * 3, scene="pan")  # not seen before
    data = rotated(clip_bytes(clip)) if turned else clip_bytes(clip)
    skipped = counted("mmobs_vllm_skipped_decodes_total", modality="video")
    answered, _, key = rendered(vllm_parts, data, **loader_kwargs)
    frames, metadata = answered.media
    assert isinstance(frames, UndecodedFrames)
    assert counted("mmobs_vllm_skipped_decodes_total", modality="video") == skipped + 1
    decoded, _, decoded_key = load_and_key(vllm_parts, data, **loader_kwargs)  # no render: vLLM decodes it
    assert type(decoded.media[0]) is np.ndarray
    assert (decoded_key, decoded.media[1], decoded.media[0].shape) == (key, metadata, frames.shape)
    again, _, again_key = rendered(vllm_parts, data, **loader_kwargs)
    assert isinstance(again.media[0], UndecodedFrames) and again_key == key and again.media[1] == metadata


def test_a_keys_only_render_decodes_a_clip_its_header_cannot_answer_for(vllm_parts: types.SimpleNamespace) -> None:
    """A WebM (its frame count is estimated from its duration), a clip vLLM keys from its frames, and an MP4
    on a model whose video rule does not hold (the render could not size it)."""
    from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames

    unsized = clip_bytes(Clip(frames=9, seed=131, scene="pan"))
    answered, _, key = rendered(vllm_parts, unsized, rule_holds=False)
    assert type(answered.media[0]) is np.ndarray
    assert key == load_and_key(vllm_parts, unsized)[2]

    webm = clip_bytes(Clip(frames=10, fps=5.0, container="webm", seed=103))
    answered, _, _ = rendered(vllm_parts, webm, num_frames=-1, fps=2)
    assert type(answered.media[0]) is np.ndarray
    noisy = clip_bytes(Clip(frames=40, seed=113))
    answered, _, _ = rendered(vllm_parts, noisy, num_frames=1)
    assert type(answered.media[0]) is np.ndarray and answered.media[0].nbytes < len(noisy)
    assert not isinstance(answered.media[0], UndecodedFrames)


#: Where the file is cut: a share of it kept, all but 10 bytes (the last frame still decodes), or all but its last
#: frame (within vLLM's one-frame tolerance at the stream's end: the header counts that frame, a decode does not).
CUTS: dict[str, Callable[[bytes], bytes]] = {
    "40%": lambda data: data[: len(data) * 4 // 10],
    "60%": lambda data: data[: len(data) * 6 // 10],
    "90%": lambda data: data[: len(data) * 9 // 10],
    "all but 10 bytes": lambda data: data[:-10],
    "all but the last frame": without_last_frame,
}


@pytest.mark.parametrize("cut_at", CUTS)
def test_a_truncated_faststart_mp4_is_answered_as_vllms_decode_answers_it(
    vllm_parts: types.SimpleNamespace, cut_at: str
) -> None:
    """Its ``moov`` first, so it opens after the cut and its sample table promises every frame; the frames after the
    cut are gone. vLLM's header read finds the stream's end (and samples what is there) or its decode finds fewer
    frames; a keys-only render and a chat whose clip is too long for the context answer it with vLLM's key and
    metadata, and the frames' shape its decode gives."""
    from mmobs.vllm.decode_free_hits import clip_skip

    whole = faststart(clip_bytes(Clip(frames=40, seed=141, scene="pan")))
    cut = CUTS[cut_at](whole)
    skipper = clip_skip._active
    assert skipper is not None
    rendered_cut, _, rendered_key = rendered(vllm_parts, cut)  # first seen: the index does not hold it
    skipper.over_context, was = (lambda clip: True), skipper.over_context
    try:
        chat_cut, _, chat_key = load_and_key(vllm_parts, cut)  # not in the cache: not answered from the index
    finally:
        skipper.over_context = was
    decoded, _, key = load_and_key(vllm_parts, cut)  # no render, no length check: vLLM's decode
    assert len(decoded.media[0]) < 40, decoded.media[1]  # what the cut left
    for answered, answered_key in ((rendered_cut, rendered_key), (chat_cut, chat_key)):
        frames, metadata = answered.media
        assert (answered_key, metadata, frames.shape) == (key, decoded.media[1], decoded.media[0].shape)
        if cut_at == "all but the last frame":  # the probe of the last frame kept fails: decoded
            assert type(frames) is np.ndarray and np.array_equal(frames, decoded.media[0])


def test_a_header_answer_that_reaches_vllms_processing_is_decoded_first(vllm_parts: types.SimpleNamespace) -> None:
    """A keys-only render declined after its load: its parsed items get vLLM's frames before the HF processor;
    a chat's stand-in for a cached clip is left to the cache (nothing reads it)."""
    from mmobs.vllm.decode_free_hits import clip_skip

    cached = clip_bytes(Clip(frames=9, seed=121, scene="pan"))
    _, _, key = load_and_key(vllm_parts, cached)
    cache_it(vllm_parts, key)
    _, held, _ = load_and_key(vllm_parts, cached)
    clip_skip.decode_stand_ins({"video": held}, unheld_only=True)
    assert isinstance(clip_skip.frames_of(held.get(0)), clip_skip.UndecodedFrames)

    data = clip_bytes(Clip(frames=9, seed=120, scene="pan"))
    answered, items, _ = rendered(vllm_parts, data)
    assert isinstance(answered.media[0], clip_skip.UndecodedFrames)
    late = counted("mmobs_vllm_late_decodes_total", modality="video")
    clip_skip.decode_stand_ins({"video": items}, unheld_only=True)
    frames = items.get(0)[0] if isinstance(items.get(0), tuple) else items.get(0)
    assert type(frames) is np.ndarray and np.array_equal(frames, vllm_parts.loader().load_bytes(data).media[0])
    assert counted("mmobs_vllm_late_decodes_total", modality="video") == late + 1
