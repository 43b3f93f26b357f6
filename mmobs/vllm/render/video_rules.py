"""Placeholders from a clip's frame count and frame size: the video rule vLLM's processor follows, checked on probes.

A Qwen2-VL video's placeholder is as long as its ``video_grid_thw`` says:
the frames kept (padded to the temporal patch) by the frames' resized size,
which vLLM's ``_get_vision_info`` computes for a video from its frame count
and frame size, under the request's processor kwargs. :class:`QwenVlVideoResize`
makes that grid from vLLM's own count, with no pixel read; the prompt
updates, token ids and placeholders are then vLLM's code's.

As for images (:mod:`mmobs.vllm.render.size_rules`), the rule is trusted for
a processor, under one set of processor kwargs, only once its kwargs give the
prompt updates the real HF processor's output gives on probe clips: frame
counts odd and even, sizes below, inside and above the resize bounds, with
and without every frame kept.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mmobs.vllm.render.size_rules import updates_signature

#: Probe clips: (frames kept, height, width, every frame of the clip kept).
PROBE_CLIPS: tuple[tuple[int, int, int, bool], ...] = (
    (4, 48, 64, False),
    (7, 224, 448, True),
    (3, 700, 30, False),
    (6, 720, 1280, False),
    (9, 1000, 1000, True),
)

#: A clip as the rule reads it: (frames kept, height, width).
ClipSize = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class QwenVlVideoResize:
    """Qwen2-VL's ``video_grid_thw``: vLLM's ``_get_vision_info`` for a video, over its frame count and size."""

    items_class: Any
    batch_feature: Any
    name: str = "the Qwen-VL video rule"

    def tokens(self, processor: Any, clip: ClipSize, hf_kwargs: Mapping[str, object]) -> int:
        """The placeholder tokens of one clip, as vLLM counts them."""
        return int(self._vision_info(processor, clip, hf_kwargs)[1])

    def _vision_info(self, processor: Any, clip: ClipSize, hf_kwargs: Mapping[str, object]) -> Any:
        frames, height, width = clip
        return processor.info._get_vision_info(
            image_width=width, image_height=height, num_frames=frames,
            image_processor=processor.info.get_image_processor(**hf_kwargs), mm_kwargs=hf_kwargs, modality="video",
        )  # fmt: skip

    def kwargs_items(self, processor: Any, clips: Sequence[ClipSize], hf_kwargs: Mapping[str, object]) -> Any:
        torch = importlib.import_module("torch")  # vLLM's dependency: the rule only runs inside vLLM
        vision = processor.info.get_hf_config().vision_config
        grids = []
        for clip in clips:
            resized, tokens = self._vision_info(processor, clip, hf_kwargs)
            rows, columns = resized.height // vision.patch_size, resized.width // vision.patch_size
            # vLLM's token count is the grid's cells over the merge window: the grid's time side follows from it.
            grids.append([tokens * vision.spatial_merge_size**2 // (rows * columns), rows, columns])
        batch = self.batch_feature({"video_grid_thw": torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)})
        made = self.items_class.from_hf_inputs(batch, processor._get_mm_fields_config(batch, hf_kwargs))
        return self.items_class({"video": list(made.get("video", ()))})


def video_candidates(processor: Any, items_class: Any, item_class: Any) -> list[Any]:
    """The video rules worth checking for ``processor`` (none: its videos get vLLM's full render)."""
    if not callable(getattr(processor.info, "_get_vision_info", None)):
        return []
    batch_feature = importlib.import_module("transformers.feature_extraction_utils").BatchFeature
    return [QwenVlVideoResize(items_class, batch_feature)]


def _probe_metadata(kept: int, every_frame: bool) -> dict[str, Any]:
    """Metadata as vLLM's loader writes it for a 30 fps clip it kept ``kept`` frames of."""
    total = kept if every_frame else kept * 15
    return {
        "total_num_frames": total,
        "fps": 30.0,
        "duration": total / 30.0,
        "video_backend": "opencv",
        "frames_indices": list(range(0, total, total // kept))[:kept],
        "do_sample_frames": every_frame,
    }


def video_rule_holds(rule: Any, processor: Any, hf_kwargs: Mapping[str, object], items_class: Any) -> bool:
    """Whether ``rule``'s kwargs give the real processor's prompt updates for every probe clip."""
    clips = [
        (np.zeros((kept, height, width, 3), np.uint8), _probe_metadata(kept, every_frame))
        for kept, height, width, every_frame in PROBE_CLIPS
    ]
    items = processor.info.parse_mm_data({"video": clips})
    processed = processor._apply_hf_processor_main(mm_items=items, hf_kwargs=hf_kwargs)
    real = items_class.from_hf_inputs(processed, processor._get_mm_fields_config(processed, hf_kwargs))
    sized = rule.kwargs_items(processor, [clip[:3] for clip in PROBE_CLIPS], hf_kwargs)
    expected = updates_signature(processor._get_mm_prompt_updates(items, hf_kwargs, real))
    found = updates_signature(processor._get_mm_prompt_updates(items, hf_kwargs, sized))
    return bool(expected) and expected == found


def clip_sizes(videos: Any) -> list[ClipSize]:
    """Each clip's (frames kept, height, width), as vLLM's parsed items report them."""
    sizes = []
    for index in range(len(videos)):
        size = videos.get_frame_size(index)
        sizes.append((videos.get_num_frames(index), size.height, size.width))
    return sizes
