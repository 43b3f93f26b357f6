"""Placeholders from an image's size: the rules vLLM's own processors follow, checked against them on probes.

vLLM expands each image's placeholder from what its model's
``_get_prompt_updates`` reads: for a LLaVA, only the item's size (a fixed
count, or tiles); for a Qwen2-VL, the ``image_grid_thw`` the HF processor
computed, which its resize rule (vLLM's ``_get_vision_info``) derives from
the size. A :class:`SizeRule` produces the processed kwargs those reads need,
and nothing else (no pixel tensor): the prompt updates, and so the token ids
and placeholders, are then vLLM's own code's.

A rule is trusted for a processor, under one set of processor kwargs, only
after :class:`RuleChecks` found that on probe images of several sizes its
kwargs give exactly the prompt updates the real HF processor's output gives.
A model no rule holds for is declined by name, and keeps vLLM's full render.
"""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from PIL import Image

#: Probe sizes: small, wide, tall, 720p, square; below, inside and above the usual resize bounds.
PROBE_SIZES: tuple[tuple[int, int], ...] = ((64, 48), (448, 224), (30, 700), (1280, 720), (1000, 1000))
#: Processor-kwargs sets whose check is remembered (a client may send any; each costs one check).
MAX_CHECKED = 64


class SizeRule(Protocol):
    """The processed kwargs a model's prompt updates read, from the images' sizes alone."""

    @property
    def name(self) -> str:
        """What the rule is, for the start-up line."""

    def kwargs_items(self, processor: Any, images: Sequence[Any], hf_kwargs: Mapping[str, object]) -> Any:
        """A ``MultiModalKwargsItems`` of ``{"image": [one item per image]}``."""


@dataclass(frozen=True, slots=True)
class ItemSizes:
    """Placeholders read from the items' sizes only (LLaVA's fixed count, LLaVA-NeXT's tiles): empty kwargs."""

    items_class: Any
    item_class: Any
    name: str = "the image's size"

    def kwargs_items(self, processor: Any, images: Sequence[Any], hf_kwargs: Mapping[str, object]) -> Any:
        return self.items_class({"image": [self.item_class() for _ in images]})


@dataclass(frozen=True, slots=True)
class QwenVlResize:
    """Qwen2-VL's ``image_grid_thw``: its resize rule (vLLM's ``_get_vision_info``) over the image's size."""

    items_class: Any
    batch_feature: Any
    name: str = "the Qwen-VL resize rule"

    def kwargs_items(self, processor: Any, images: Sequence[Any], hf_kwargs: Mapping[str, object]) -> Any:
        torch = importlib.import_module("torch")  # vLLM's dependency: the rule only runs inside vLLM
        info = processor.info
        patch_size = info.get_hf_config().vision_config.patch_size
        image_processor = info.get_image_processor(**hf_kwargs)
        grids = []
        for image in images:
            width, height = image.size
            resized, _ = info._get_vision_info(
                image_width=width, image_height=height, image_processor=image_processor, mm_kwargs=hf_kwargs
            )
            grids.append([1, resized.height // patch_size, resized.width // patch_size])
        batch = self.batch_feature({"image_grid_thw": torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)})
        fields = processor._get_mm_fields_config(batch, hf_kwargs)
        made = self.items_class.from_hf_inputs(batch, fields)
        return self.items_class({"image": list(made.get("image", ()))})


def candidate_rules(processor: Any, items_class: Any, item_class: Any) -> list[SizeRule]:
    """The rules worth checking for ``processor``, most specific first."""
    batch_feature = importlib.import_module("transformers.feature_extraction_utils").BatchFeature
    rules: list[SizeRule] = []
    if callable(getattr(processor.info, "_get_vision_info", None)):
        rules.append(QwenVlResize(items_class, batch_feature))
    rules.append(ItemSizes(items_class, item_class))
    return rules


def updates_signature(updates: Mapping[str, Sequence[Sequence[Any]]]) -> list[Any]:
    """What a prompt update does to the prompt, comparable: per item, its target, mode, tokens and embed mask."""
    signature = []
    for modality, per_item in sorted(updates.items()):
        for item_updates in per_item:
            for update in item_updates:
                content = update.content
                mask = None if content.is_embed is None else content.is_embed(content.full).tolist()
                target = update.target if isinstance(update.target, list) else repr(update.target)
                signature.append((modality, update.item_idx, str(update.mode), target, list(content.full), mask))
    return signature


def rule_holds(rule: SizeRule, processor: Any, hf_kwargs: Mapping[str, object], items_class: Any) -> bool:
    """Whether ``rule``'s kwargs give the real processor's prompt updates for every probe size (raises what fails).

    ``items_class`` is vLLM's ``MultiModalKwargsItems``, to split the real output per item.
    """
    probes = [Image.new("RGB", size, (128, 96, 64)) for size in PROBE_SIZES]
    items = processor.info.parse_mm_data({"image": probes})
    processed = processor._apply_hf_processor_main(mm_items=items, hf_kwargs=hf_kwargs)
    real = items_class.from_hf_inputs(processed, processor._get_mm_fields_config(processed, hf_kwargs))
    sized = rule.kwargs_items(processor, probes, hf_kwargs)
    expected = updates_signature(processor._get_mm_prompt_updates(items, hf_kwargs, real))
    found = updates_signature(processor._get_mm_prompt_updates(items, hf_kwargs, sized))
    return bool(expected) and expected == found


@dataclass(frozen=True, slots=True)
class Verdict:
    """The rule found for a processor under some processor kwargs, or why none was."""

    rule: SizeRule | None
    why_not: str | None = None


class Candidates(Protocol):
    def __call__(self, processor: Any, items_class: Any, item_class: Any) -> list[Any]: ...


class Holds(Protocol):
    def __call__(self, rule: Any, processor: Any, hf_kwargs: Mapping[str, object], items_class: Any) -> bool: ...


class RuleChecks:
    """The rule that holds for each (processor class, processor kwargs), checked once and remembered (bounded).

    For images by default; the video rules (:mod:`mmobs.vllm.render.video_rules`) give their own candidates
    and probes.
    """

    def __init__(
        self,
        items_class: Any,
        keys_only_class: Any,
        item_class: Any,
        max_checked: int = MAX_CHECKED,
        *,
        candidates: Candidates = candidate_rules,
        holds: Holds = rule_holds,
        probes: str = "probe images",
    ):
        #: vLLM's ``MultiModalKwargsItems``; the subclass that marks kwargs made keys-only; one item's class.
        self.items_class = items_class
        self.keys_only_class = keys_only_class
        self.item_class = item_class
        self.max_checked = max_checked
        self.candidates, self.holds, self.probes = candidates, holds, probes
        self._verdicts: OrderedDict[tuple[type, str], Verdict] = OrderedDict()
        self._lock = threading.Lock()

    def verdict(self, processor: Any, hf_kwargs: Mapping[str, object]) -> Verdict:
        key = (type(processor), repr(sorted(hf_kwargs.items())))
        with self._lock:
            found = self._verdicts.get(key)
            if found is not None:
                self._verdicts.move_to_end(key)
                return found
            found = self._check(processor, hf_kwargs)
            self._verdicts[key] = found
            while len(self._verdicts) > self.max_checked:
                self._verdicts.popitem(last=False)
            return found

    def _check(self, processor: Any, hf_kwargs: Mapping[str, object]) -> Verdict:
        failures = []
        for rule in self.candidates(processor, self.keys_only_class, self.item_class):
            try:
                if self.holds(rule, processor, hf_kwargs, self.items_class):
                    return Verdict(rule)
                failures.append(f"{rule.name}: other placeholders on {self.probes}")
            except Exception as error:  # noqa: BLE001 - a rule that cannot even run does not hold
                failures.append(f"{rule.name}: {type(error).__name__}: {str(error)[:120]}")
        if not failures:
            return Verdict(None, f"no rule is known for its processor ({type(processor).__name__})")
        return Verdict(None, "its placeholders need the processor's output (" + "; ".join(failures) + ")")
