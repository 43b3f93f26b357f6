"""The processor's step, keys-only: vLLM's keys and prompt updates, from the bytes and the sizes, no HF processor.

vLLM's multimodal processor does three things for a render: it keys each item
(from the original bytes, for a loaded image), runs the HF processor on the
pixels, and expands each item's placeholder from what that output says. A
keys-only render needs the keys and the placeholders only. Here
``BaseMultiModalProcessor._cached_apply_hf_processor`` computes the keys with
vLLM's own ``_get_mm_hashes``, makes the processed kwargs the placeholders
read from the images' sizes (:mod:`mmobs.vllm.render.size_rules`), and
hands them to vLLM's own ``_get_mm_prompt_updates``: token ids and
placeholders are vLLM's code's, on the size the image has after vLLM's loader
(EXIF orientation applied).

Nothing made here reaches a cache or the engine: the processor caches are not
consulted or filled, and the answer's serializer is told (by the kwargs'
class) to send no tensors. A request with anything the rules do not cover
(a video, embeddings, an item sent by uuid alone that no keys-only render
sized, processor kwargs the rule was not found to hold under, a size the rule
refuses) is processed by vLLM, and
counted with the reason: vLLM's answer, or its error, in its words.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mmobs.events import observing
from mmobs.vllm.cache_drift.drift import BoundedMap
from mmobs.vllm.decode_free_hits.lazy_image import LazyImage
from mmobs.vllm.render import render_mode
from mmobs.vllm.render.render_mode import Reason
from mmobs.vllm.render.size_rules import RuleChecks, SizeRule, Verdict


class SizeRefused(ValueError):
    """The size rule refuses an image's size (an extreme aspect ratio): vLLM's processor answers, in its words."""


def _sized(rule: SizeRule, processor: Any, images: list[Any], hf_kwargs: Any) -> Any:
    try:
        return rule.kwargs_items(processor, images, hf_kwargs)
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


class KeysOnlyProcessing:
    """Decides, per prompt of a keys-only render, whether its items can be answered from their sizes, and does it."""

    def __init__(self, checks: RuleChecks, result_class: Any, image_items_class: Any, sizes: RenderedSizes) -> None:
        self.checks = checks
        self.result_class = result_class
        self.image_items_class = image_items_class
        self.sizes = sizes

    def verdict(self, processor: Any, hf_kwargs: Any) -> Verdict:
        """The rule for this processor under these kwargs (checked on probes once; nobody watching)."""
        with observing(None):
            return self.checks.verdict(processor, dict(hf_kwargs))

    def declined(self, processor: Any, inputs: Any) -> tuple[Reason | None, Any]:
        """Why this prompt needs vLLM's processing, or None and the image items to answer from."""
        data_items = inputs.mm_data_items
        if any(modality != "image" for modality in data_items):
            return "modality", None
        images: Any = data_items.get("image")
        if images is None:
            return None, []
        if not isinstance(images, self.image_items_class) or images.get_passthrough_data():
            return "embeddings", None
        items = [images.get(index) for index in range(len(images))]
        if self.verdict(processor, inputs.hf_processor_mm_kwargs).rule is None:
            return ("processor_kwargs" if inputs.hf_processor_mm_kwargs else "model"), None
        return None, items

    def answer(self, processor: Any, inputs: Any, timing_ctx: Any, images: list[Any]) -> Any:
        """vLLM's ``MultiModalProcessingResult`` for the prompt: its keys, sized kwargs, and vLLM's prompt updates.

        Raises :class:`SizeRefused` before anything is keyed where the rule refuses a size, and
        :class:`UnknownItem` where an item sent by uuid alone was never sized; what vLLM's own hashing
        raises (a refused uuid conflict) goes to the client as vLLM's path would send it.
        """
        hf_kwargs = inputs.hf_processor_mm_kwargs
        rule = self.verdict(processor, hf_kwargs).rule
        assert rule is not None  # declined() checked it
        kwargs = None if any(image is None for image in images) else _sized(rule, processor, images, hf_kwargs)
        with timing_ctx.record("get_mm_hashes"):
            hashes = processor._get_mm_hashes(inputs)
        data_items, keys = inputs.mm_data_items, hashes.get("image", [])
        if kwargs is None:  # items sent by uuid alone: sized as when they came with their data
            images = [
                self.sizes.stand_in(key) if image is None else image for key, image in zip(keys, images, strict=True)
            ]
            # Built as vLLM's parser would hold them, without its parse (which would EXIF-transpose each image).
            data_items = type(data_items)({"image": self.image_items_class(images)})
            kwargs = _sized(rule, processor, images, hf_kwargs)
        updates = processor._get_mm_prompt_updates(data_items, hf_kwargs, kwargs)
        for key, image in zip(keys, images, strict=True):
            self.sizes.remember(key, image)
        return self.result_class(
            prompt_ids=processor._postprocess_prompt(inputs.prompt),
            kwargs=kwargs,
            hashes=hashes,
            prompt_updates=updates,
        )

    def wrap(self, original: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        """``BaseMultiModalProcessor._cached_apply_hf_processor``, keys-only inside a keys-only render."""

        @functools.wraps(original)
        def _cached_apply_hf_processor(processor: Any, inputs: Any, timing_ctx: Any) -> Any:
            request = render_mode.current()
            if request is None or not request.keys_only:
                return original(processor, inputs, timing_ctx)
            reason, images = self.declined(processor, inputs)
            if reason is None:
                try:
                    answered = self.answer(processor, inputs, timing_ctx, images)
                except UnknownItem:
                    reason = "uuid_only"
                except SizeRefused:
                    reason = "size_rule"
                else:
                    request.keys_only_prompts += 1
                    return answered
            request.decline(reason)
            return original(processor, inputs, timing_ctx)

        return _cached_apply_hf_processor
