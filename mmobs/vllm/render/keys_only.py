"""The processor's step, keys-only: vLLM's keys and prompt updates, from the bytes and the sizes, no HF processor.

vLLM's multimodal processor does three things for a render: it keys each item
(from the original bytes, for a loaded image), runs the HF processor on the
pixels, and expands each item's placeholder from what that output says. A
keys-only render needs the keys and the placeholders only. Here
``BaseMultiModalProcessor._cached_apply_hf_processor`` computes the keys with
vLLM's own ``_get_mm_hashes``, makes the processed kwargs the placeholders
read from the images' sizes (:mod:`mmobs.vllm.render.size_rules`) and the
clips' frame counts and sizes (:mod:`mmobs.vllm.render.video_rules`), and
hands them to vLLM's own ``_get_mm_prompt_updates``: token ids and
placeholders are vLLM's code's, on the size the image has after vLLM's loader
(EXIF orientation applied) and the frames vLLM's sampling kept.

Nothing made here reaches a cache or the engine: the processor caches are not
consulted or filled, and the answer's serializer is told (by the kwargs'
class) to send no tensors. A request with anything the rules do not cover
(audio, a video the served model's video rule does not hold for, embeddings,
an item sent by uuid alone that no keys-only render sized, processor kwargs
a rule was not found to hold under, a size the rule refuses) is processed by
vLLM, and counted with the reason: vLLM's answer, or its error, in its words.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmobs.events import observing
from mmobs.vllm.cache_drift.drift import BoundedMap
from mmobs.vllm.decode_free_hits import clip_skip
from mmobs.vllm.decode_free_hits.lazy_image import LazyImage
from mmobs.vllm.render import render_mode
from mmobs.vllm.render.render_mode import Reason
from mmobs.vllm.render.size_rules import RuleChecks, SizeRule, Verdict
from mmobs.vllm.render.video_rules import ClipSize, clip_sizes


class SizeRefused(ValueError):
    """The size rule refuses an image's size (an extreme aspect ratio): vLLM's processor answers, in its words."""


def _sized(rule: Any, processor: Any, items: list[Any], hf_kwargs: Any) -> Any:
    try:
        return rule.kwargs_items(processor, items, hf_kwargs)
    except Exception as error:  # whatever the rule raises, vLLM's processor says in its own way
        raise SizeRefused(str(error)) from error


class UnknownItem(LookupError):
    """An item sent by uuid alone whose key no keys-only render has sized: vLLM's path decides."""


class RenderedSizes:
    """The mode and size of each item keys-only renders answered, by key (bounded): for items sent by uuid alone.

    vLLM answers an item sent by its uuid alone from its processor cache, which a keys-only render
    never fills; this remembers what a prompt update needs of it instead (about 200 bytes an entry).
    """

    #: Bytes an entry is counted as: the key, the mode, the size and the map's own overhead.
    ENTRY_BYTES = 200

    def __init__(self, capacity: int, on_change: Callable[[int, int], None] | None = None) -> None:
        self._sizes: BoundedMap[str, tuple[str, tuple[int, int]]] = BoundedMap(capacity)
        self._on_change = on_change

    def remember(self, key: str, image: Any) -> None:
        if self._sizes.capacity > 0:
            self._sizes.put(key, (image.mode, image.size))
            if self._on_change is not None:
                self._on_change(len(self._sizes), len(self._sizes) * self.ENTRY_BYTES)

    def stand_in(self, key: str) -> LazyImage:
        """An image of the remembered mode and size, with no pixels; raises :class:`UnknownItem` if not remembered."""
        found = self._sizes.get(key)
        if found is None:
            raise UnknownItem(key)
        mode, size = found
        return LazyImage(mode, size, None, (), _no_pixels)


def _no_pixels() -> Any:
    raise ValueError("an item sent by uuid alone has no pixels here: only its size is remembered")


@dataclass(frozen=True, slots=True)
class PromptItems:
    """A prompt's items a keys-only render answers: its images (None: sent by uuid alone) and its clips' sizes."""

    images: list[Any]
    clips: list[ClipSize]


class KeysOnlyProcessing:
    """Decides, per prompt of a keys-only render, whether its items can be answered from their sizes, and does it."""

    def __init__(
        self,
        checks: RuleChecks,
        result_class: Any,
        image_items_class: Any,
        sizes: RenderedSizes,
        video_checks: RuleChecks | None = None,
        video_items_class: Any = None,
    ) -> None:
        self.checks = checks
        self.result_class = result_class
        self.image_items_class = image_items_class
        self.sizes = sizes
        self.video_checks = video_checks
        self.video_items_class = video_items_class
        #: Refuses chat prompts whose deferred clips are too long for the context (:mod:`mmobs.vllm.video_length`).
        self.length_check: Callable[[Any, Any], None] | None = None

    def verdict(self, processor: Any, hf_kwargs: Any) -> Verdict:
        """The rule for this processor under these kwargs (checked on probes once; nobody watching)."""
        with observing(None):
            return self.checks.verdict(processor, dict(hf_kwargs))

    def video_verdict(self, processor: Any, hf_kwargs: Any) -> Verdict:
        """The video rule for this processor under these kwargs (checked on probe clips once)."""
        if self.video_checks is None:
            return Verdict(None, "vLLM's video loader is not hooked here")
        with observing(None):
            return self.video_checks.verdict(processor, dict(hf_kwargs))

    def declined(self, processor: Any, inputs: Any) -> tuple[Reason | None, PromptItems | None]:
        """Why this prompt needs vLLM's processing, or None and the items to answer from."""
        data_items, hf_kwargs = inputs.mm_data_items, inputs.hf_processor_mm_kwargs
        if any(modality not in ("image", "video") for modality in data_items):
            return "modality", None
        found = PromptItems([], [])
        images: Any = data_items.get("image")
        if images is not None:
            if not isinstance(images, self.image_items_class) or images.get_passthrough_data():
                return "embeddings", None
            found.images.extend(images.get(index) for index in range(len(images)))
            if self.verdict(processor, hf_kwargs).rule is None:
                return ("processor_kwargs" if hf_kwargs else "model"), None
        videos: Any = data_items.get("video")
        if videos is not None:
            if self.video_items_class is None or not isinstance(videos, self.video_items_class):
                return "modality", None
            if videos.get_passthrough_data():
                return "embeddings", None
            if any(videos.get(index) is None for index in range(len(videos))):
                return "uuid_only", None
            if self.video_verdict(processor, hf_kwargs).rule is None:
                return ("processor_kwargs" if hf_kwargs else "modality"), None
            found.clips.extend(clip_sizes(videos))
        return None, found

    def answer(self, processor: Any, inputs: Any, timing_ctx: Any, items: PromptItems) -> Any:
        """vLLM's ``MultiModalProcessingResult`` for the prompt: its keys, sized kwargs, and vLLM's prompt updates.

        Raises :class:`SizeRefused` before anything is keyed where a rule refuses a size, and
        :class:`UnknownItem` where an item sent by uuid alone was never sized; what vLLM's own hashing
        raises (a refused uuid conflict) goes to the client as vLLM's path would send it.
        """
        hf_kwargs, images = inputs.hf_processor_mm_kwargs, items.images
        rule, kwargs = self._sized_kwargs(processor, hf_kwargs, items)
        with timing_ctx.record("get_mm_hashes"):
            hashes = processor._get_mm_hashes(inputs)
        data_items, keys = inputs.mm_data_items, hashes.get("image", [])
        if rule is not None and "image" not in kwargs:  # items sent by uuid alone: sized as when sent with data
            images = [
                self.sizes.stand_in(key) if image is None else image for key, image in zip(keys, images, strict=True)
            ]
            # Built as vLLM's parser would hold them, without its parse (which would EXIF-transpose each image).
            data_items = type(data_items)({**data_items, "image": self.image_items_class(images)})
            kwargs.update(self._images(rule, processor, images, hf_kwargs))
        made = self.checks.keys_only_class(kwargs)
        updates = processor._get_mm_prompt_updates(data_items, hf_kwargs, made)
        for key, image in zip(keys, images, strict=True):
            self.sizes.remember(key, image)
        return self.result_class(
            prompt_ids=processor._postprocess_prompt(inputs.prompt),
            kwargs=made,
            hashes=hashes,
            prompt_updates=updates,
        )

    def prompt_length(self, processor: Any, inputs: Any, items: PromptItems) -> int | None:
        """The length of the prompt vLLM would make, by its own prompt updates, keyed by nothing (None: an image
        sent by uuid alone leaves it unknown)."""
        hf_kwargs = inputs.hf_processor_mm_kwargs
        rule, kwargs = self._sized_kwargs(processor, hf_kwargs, items)
        if rule is not None and "image" not in kwargs:
            return None
        made = self.checks.keys_only_class(kwargs)
        updates = processor._get_mm_prompt_updates(inputs.mm_data_items, hf_kwargs, made)
        prompt_ids, _ = processor._apply_prompt_updates(processor._postprocess_prompt(inputs.prompt), updates)
        return len(prompt_ids)

    def _sized_kwargs(
        self, processor: Any, hf_kwargs: Any, items: PromptItems
    ) -> tuple[SizeRule | None, dict[str, Any]]:
        """The image rule (None: no images) and the kwargs of every item the sizes give (images sent by uuid alone
        leave the images out); raises :class:`SizeRefused` where a rule refuses a size."""
        images = items.images
        rule = self.verdict(processor, hf_kwargs).rule if images else None
        kwargs = (
            {}
            if rule is None or any(image is None for image in images)
            else self._images(rule, processor, images, hf_kwargs)
        )
        if items.clips:
            video_rule = self.video_verdict(processor, hf_kwargs).rule
            assert video_rule is not None  # declined() checked it
            kwargs.update(_sized(video_rule, processor, items.clips, hf_kwargs))
        return rule, kwargs

    @staticmethod
    def _images(rule: SizeRule, processor: Any, images: list[Any], hf_kwargs: Any) -> dict[str, Any]:
        return dict(_sized(rule, processor, images, hf_kwargs))

    def wrap(self, original: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        """``BaseMultiModalProcessor._cached_apply_hf_processor``, keys-only inside a keys-only render.

        Whatever goes to vLLM's processing instead has the clips undecoded for a keys-only render decoded
        first: the HF processor reads their frames (a cache hit's stand-in is left to the cache).
        """

        @functools.wraps(original)
        def _cached_apply_hf_processor(processor: Any, inputs: Any, timing_ctx: Any) -> Any:
            request = render_mode.current()
            if request is None and self.length_check is not None:
                self.length_check(processor, inputs)  # raises vLLM's refusal for the prompt's length
            elif request is not None and request.keys_only:
                reason, items = self.declined(processor, inputs)
                if reason is None:
                    assert items is not None
                    try:
                        answered = self.answer(processor, inputs, timing_ctx, items)
                    except UnknownItem:
                        reason = "uuid_only"
                    except SizeRefused:
                        reason = "size_rule"
                    else:
                        request.keys_only_prompts += 1
                        return answered
                request.decline(reason)
            clip_skip.decode_stand_ins(inputs.mm_data_items, unheld_only=True)
            return original(processor, inputs, timing_ctx)

        return _cached_apply_hf_processor
