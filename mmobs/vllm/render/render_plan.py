"""The render feature's hooks, every target looked up first: ``ServingRender``'s calls, and the processor's step.

Planned in the API server of the Python front end. The serving hooks are
always planned (render requests are counted, and guarded, in both modes); the
processor's keys-only step only with ``MMOBS_VLLM_RENDER=keys``.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from mmobs.releases import VLLM_MODULES as VLLM
from mmobs.vllm.render import render_hooks
from mmobs.vllm.render.header_images import HeaderImages, probe_header_records
from mmobs.vllm.render.keys_only import KeysOnlyProcessing, RenderedSizes
from mmobs.vllm.render.render_hooks import RenderPlan
from mmobs.vllm.render.render_metrics import render_metrics
from mmobs.vllm.render.render_mode import configured_mode
from mmobs.vllm.render.size_rules import RuleChecks
from mmobs.vllm.render.video_rules import video_candidates, video_rule_holds
from mmobs.vllm.shape import Plan, ShapeMismatch, attribute, function, module
from mmobs.vllm.startup_log import say, whole_number_env

if TYPE_CHECKING:
    from mmobs.vllm.decode_free_hits.decode_skip import DecodeSkipper
    from mmobs.vllm.planning import Planning

#: Items whose size keys-only renders remember, for items sent by uuid alone (about 200 bytes each).
INDEX_ENTRIES_ENV = "MMOBS_VLLM_RENDER_INDEX_ENTRIES"
DEFAULT_INDEX_ENTRIES = 65_536

#: The processor's methods the keys-only step calls, as vLLM names them.
PROCESSOR_METHODS = (
    "_get_mm_hashes", "_get_mm_prompt_updates", "_postprocess_prompt", "_apply_hf_processor_main",
    "_get_mm_fields_config",
)  # fmt: skip


def render_plan(skipper: DecodeSkipper | None, planning: Planning | None = None) -> Plan:
    """The hooks; with the switch on, the decode-free ``skipper`` (if planned) also sizes first-seen JPEGs.

    The keys-only processing is handed on in ``planning`` (the video length gate sizes prompts with it).
    """
    try:
        serving_module = importlib.import_module(VLLM.render_serving)
    except ImportError as error:  # a vLLM installed without its serving dependencies cannot serve a render either
        say(logging.INFO, "mmobs: vLLM's render endpoints cannot be imported here (%s); none to count", error)
        return []
    serving_class = attribute(serving_module, "ServingRender")
    calls = {
        "render_chat_request": ("chat", 3),
        "render_completion_request": ("completions", 3),
        "render_responses_request": ("responses", 2),
    }
    originals = {name: function(serving_class, name, parameters=count) for name, (_, count) in calls.items()}
    extract = function(serving_class, "_extract_mm_features")
    init = vars(serving_class)["__init__"]
    error_class = attribute(module(VLLM.serve_protocol), "ErrorResponse")
    processor_module = module(VLLM.processor)
    processor_class = attribute(processor_module, "BaseMultiModalProcessor")
    cached_apply = function(processor_class, "_cached_apply_hf_processor", parameters=3)
    for name in PROCESSOR_METHODS:
        function(processor_class, name)
    items_class = attribute(module(VLLM.mm_inputs), "MultiModalKwargsItems")
    keys_only_class = type("KeysOnlyKwargsItems", (items_class,), {"__doc__": "Kwargs made from sizes: no tensors."})
    metrics = render_metrics()
    item_class = attribute(module(VLLM.mm_inputs), "MultiModalKwargsItem")
    parse = module(VLLM.parse)
    processing = KeysOnlyProcessing(
        RuleChecks(items_class, keys_only_class, item_class),
        attribute(processor_module, "MultiModalProcessingResult"),
        attribute(parse, "ImageProcessorItems"),
        RenderedSizes(whole_number_env(INDEX_ENTRIES_ENV, DEFAULT_INDEX_ENTRIES), on_change=metrics.index_size),
        RuleChecks(
            items_class, keys_only_class, item_class,
            candidates=video_candidates, holds=video_rule_holds, probes="probe clips",
        ),
        getattr(parse, "VideoProcessorItems", None),
    )  # fmt: skip
    plan = RenderPlan(configured_mode(), processing, keys_only_class, error_class, metrics, skipper=skipper)
    if plan.mode == "keys":
        plan.images = _first_seen(skipper, plan)
    hooks: list[tuple[Any, str, Any, bool]] = [
        (serving_class, name, render_hooks.render_call(original, calls[name][0], plan), False)  # type: ignore[arg-type]
        for name, original in originals.items()
    ]
    hooks.append((serving_class, "__init__", render_hooks.serving_init(init, plan), False))
    if plan.mode == "keys":
        hooks.append((serving_class, "_extract_mm_features", render_hooks.extract_mm_features(extract, plan), False))
        hooks.append((processor_class, "_cached_apply_hf_processor", processing.wrap(cached_apply), False))
    if planning is not None:
        planning.keys_only, planning.keys_only_wraps_processor = processing, plan.mode == "keys"
    return hooks


def _first_seen(skipper: DecodeSkipper | None, plan: RenderPlan) -> str:
    """How a keys-only render sizes its images: re-sent ones from the decoded index, first-seen JPEGs from their header.

    Both live in the decode-free hits' skipper; without it every image is decoded. Header records are
    trusted only once they matched vLLM's loader on the probe files. Returns what the start-up line says.
    """
    if skipper is None:
        return "every image decoded (decode-free hits are off, so nothing is remembered)"
    skipper.render_images = plan.metrics.image
    skipper.render_videos = plan.metrics.video
    media_image = module(VLLM.media_image)
    header_images = HeaderImages(attribute(media_image, "open_image"))
    loader_class = attribute(media_image, "ImageMediaIO")
    try:
        function(loader_class, "_convert_image_mode", parameters=2)
        probe_header_records(header_images, function(loader_class, "load_bytes", parameters=2), loader_class)
    except ShapeMismatch as error:
        return f"re-sent images from the decoded index, first-seen ones decoded ({error})"
    skipper.header_records = header_images.record
    return "re-sent images from the decoded index, first-seen JPEGs from their header"
