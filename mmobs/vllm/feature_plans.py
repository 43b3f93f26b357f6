"""How each of the plugin's features finds, in the running vLLM, what it replaces: one plan per feature.

Each plan looks every target up (:mod:`mmobs.vllm.shape`) and checks on probes that a replacement
returns what vLLM's own returns (:mod:`mmobs.vllm.probes`) before it returns a single :class:`Hook`;
anything off raises, and :func:`mmobs.vllm.planning.plan_features` declines that feature alone (or,
for the hasher's hooks, the whole plugin). The cache drift's and the front end's plans are made in
their subpackages (:mod:`mmobs.vllm.cache_drift.cache_hooks`, :mod:`mmobs.vllm.front_end.front_end_plan`).
Where each target lives in vLLM is :data:`mmobs.releases.VLLM_MODULES`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

from mmobs.releases import VLLM_MODULES as VLLM
from mmobs.vllm import loader_hooks, video_budget
from mmobs.vllm.context_hooks import context_make_async, context_submit, not_traffic
from mmobs.vllm.decode_free_hits import clip_skip
from mmobs.vllm.decode_free_hits.decode_skip import DecodeSkipper
from mmobs.vllm.front_end import stages as front_end_stages
from mmobs.vllm.front_ends import running_front_end
from mmobs.vllm.keys import key_hooks
from mmobs.vllm.planning import Hook, Planning
from mmobs.vllm.probes import pixels, probe_decodes, probe_images, same_results
from mmobs.vllm.shape import ShapeMismatch, attribute, function, module, registering, vllm_version
from mmobs.vllm.startup_log import say, whole_number_env
from mmobs.vllm.switches import EXIF_FIX_ENV, FAST_KEYS_ENV, GUARD_ENV, enabled


def key_plan(planning: Planning) -> list[Hook]:
    """The hasher: the tolerant ImageID read reported, each item's key source, each key's cost.

    From vLLM 0.31 on the tolerant read is vLLM's ``_get_image_id_bytes``, replaced; before, the ImageID
    is read bare inside ``serialize_item``, which gets the fix of vLLM issue #56527
    (:func:`~mmobs.vllm.keys.key_hooks.tolerant_image_id`).
    """
    hasher = module(VLLM.hasher)
    hasher_class = attribute(hasher, "MultiModalHasher")
    original_factory = function(hasher, "_get_hasher_factory", parameters=1)
    original_serialize = _classmethod(hasher_class, "serialize_item")
    original_hash_kwargs = _classmethod(hasher_class, "hash_kwargs")
    hooks: list[Hook] = []
    if hasattr(hasher, "_get_image_id_bytes"):
        original_id_bytes = function(hasher, "_get_image_id_bytes", parameters=1)
        same_results(original_id_bytes, key_hooks.image_id_bytes, probe_images(), "_get_image_id_bytes")
        hooks.append(Hook(hasher, "_get_image_id_bytes", key_hooks.image_id_bytes))
        serialize_item = original_serialize
    else:
        serialize_item = key_hooks.tolerant_image_id(original_serialize, fix=enabled(EXIF_FIX_ENV, default="1"))
        same_results(
            _serialized(hasher_class, original_serialize),
            _serialized(hasher_class, serialize_item),
            probe_images(),
            "serialize_item",
        )
    serialize_item = key_hooks.serialize_item(serialize_item)
    if enabled(FAST_KEYS_ENV):
        serialize_item = _fast_keys(hasher_class, original_serialize, serialize_item)
    if "algorithm" in inspect.signature(original_hash_kwargs).parameters:
        hash_kwargs = key_hooks.hash_kwargs(original_hash_kwargs)
    else:  # vLLM 0.25 and 0.26
        hash_kwargs = key_hooks.hash_kwargs_reading_the_environment(original_hash_kwargs)
    return [
        *hooks,
        Hook(hasher, "_get_hasher_factory", key_hooks.counting_factory(original_factory)),
        Hook(hasher_class, "serialize_item", classmethod(serialize_item)),
        Hook(hasher_class, "hash_kwargs", classmethod(hash_kwargs)),
    ]


def _classmethod(owner: type, name: str) -> Callable[..., Any]:
    raw = inspect.getattr_static(owner, name, None)
    if not isinstance(raw, classmethod) or inspect.isgeneratorfunction(raw.__func__):
        raise ShapeMismatch(f"{owner.__name__}.{name} is not a classmethod returning chunks eagerly")
    return raw.__func__


def _serialized(owner: type, serialize_item: Callable[..., Any]) -> Callable[[Any], bytes]:
    """What ``serialize_item`` streams for a value, joined (to compare two of them on probes)."""
    return lambda obj: b"".join(bytes(chunk) for chunk in serialize_item(owner, obj))


def _fast_keys(owner: type, original: Callable[..., Any], serialize_item: Callable[..., Any]) -> Callable[..., Any]:
    """``MMOBS_VLLM_FAST_KEYS=1``, where vLLM streams a plain image as mmobs's framed writer does; else one warning."""
    from mmobs.keys.hashing import MultiModalHasher
    from mmobs.vllm.keys.fast_keys import fast_serialize_item

    try:
        same_results(
            _serialized(owner, original),
            lambda image: b"".join(bytes(chunk) for chunk in MultiModalHasher.serialize_item(image)),
            probe_images(),
            "serialize_item",
        )
    except ShapeMismatch as error:
        say(logging.WARNING, "mmobs: fast keys are off: vLLM %s keys images otherwise (%s)", vllm_version(), error)
        return serialize_item
    return fast_serialize_item(serialize_item)


def loader_plan(planning: Planning) -> list[Hook]:
    """The loader: its refusals, the guard, decode-free hits and ``normalize_image``'s transpose failures."""
    image = module(VLLM.image)
    loader_class = attribute(module(VLLM.media_image), "ImageMediaIO")
    connector_class = attribute(module(VLLM.connector), "MediaConnector")
    original_normalize = function(image, "normalize_image", parameters=1)
    original_load_bytes = function(loader_class, "load_bytes", parameters=2)
    original_data_url = function(connector_class, "_load_data_url", parameters=3)
    same_results(original_normalize, loader_hooks.normalize_image, probe_images(), "normalize_image", compare=pixels)
    guard = enabled(GUARD_ENV)
    load_bytes = loader_hooks.load_bytes(original_load_bytes, guard=guard, skipper=planning.skipper)
    load_data_url = loader_hooks.load_data_url(original_data_url, loader_class, guard=guard)
    hooks = [Hook(loader_class, "load_bytes", load_bytes), Hook(connector_class, "_load_data_url", load_data_url)]
    # normalize_image is imported by name (media.image, parse, Molmo2...): rebind every
    # loaded vLLM module that holds vLLM's function; later importers read the patched source.
    for loaded in [m for name, m in list(sys.modules.items()) if name.startswith("vllm") and m is not None]:
        if getattr(loaded, "normalize_image", None) is original_normalize:
            hooks.append(Hook(loaded, "normalize_image", loader_hooks.normalize_image))
    return hooks


def context_plan(planning: Planning) -> list[Hook]:
    """The request's context into vLLM's executor threads; vLLM's own dummy inputs kept out of the counts."""
    renderers = module(VLLM.renderers)
    processor_class = attribute(module(VLLM.processor), "BaseMultiModalProcessor")
    original_make_async = function(renderers, "make_async")
    original_dummy_inputs = function(processor_class, "get_dummy_mm_inputs")
    pool = attribute(module(VLLM.connector), "global_thread_pool")
    if not callable(getattr(pool, "submit", None)):
        raise ShapeMismatch(f"{VLLM.connector}.global_thread_pool has no submit()")
    return [
        Hook(renderers, "make_async", context_make_async(original_make_async)),
        Hook(pool, "submit", context_submit(pool.submit), on_instance=True),
        Hook(processor_class, "get_dummy_mm_inputs", not_traffic(original_dummy_inputs)),
    ]


def decode_free_plan(planning: Planning) -> list[Hook]:
    """Decode-free cache hits (:mod:`mmobs.vllm.decode_free_hits.decode_skip`): the skipper, for the loader's hook.

    The processor caches are found as vLLM makes them (their ``__init__`` registers them with the
    skipper); vLLM's shared-memory cache declines. A vLLM whose loader already defers decoding, or whose
    images a stand-in does not reproduce exactly, keeps vLLM's path.
    """
    media_image = module(VLLM.media_image)
    media_with_bytes = attribute(media_image, "MediaWithBytes")
    loader_class = attribute(media_image, "ImageMediaIO")
    caches = [
        attribute(module(VLLM.cache_lru), "LruKeyReplicatedSenderCache"),
        attribute(module(VLLM.cache_base), "MultiModalProcessorOnlyCache"),
    ]
    shm = attribute(module(VLLM.cache_shm), "ShmObjectStoreSenderCache")
    for cache in caches:
        function(cache, "is_cached_item", parameters=2)
    probe_decodes(function(loader_class, "load_bytes", parameters=2), loader_class, media_with_bytes)
    skipper = DecodeSkipper(media_with_bytes, loader_class)
    hooks = [Hook(cache, "__init__", registering(vars(cache)["__init__"], skipper.add_cache)) for cache in caches]
    hooks.append(Hook(shm, "__init__", registering(vars(shm)["__init__"], functools.partial(_decline_shm, skipper))))
    planning.skipper = skipper
    return hooks


def _decline_shm(skipper: DecodeSkipper, cache: object) -> None:
    skipper.decline("its processor cache is vLLM's shared-memory one (--mm-processor-cache-type shm)")


def video_plan(planning: Planning) -> list[Hook]:
    """Video clips: each load timed with its frames, its decode bounded; with decode-free hits, re-sent clips not
    decoded again.

    The budgets (:mod:`mmobs.vllm.video_budget`) are checked in vLLM's OpenCV decoder, once vLLM's own header
    read and sampling rule have chosen the frames and before it reads one.

    The decode-free part (:mod:`mmobs.vllm.decode_free_hits.clip_skip`) rides on the images' skipper (its
    processor caches, its switch) and decodes, before the HF processor reads them, any undecoded clip among a
    request's misses.
    """
    media_video = module(VLLM.media_video)
    loader_class = attribute(media_video, "VideoMediaIO")
    original_load_bytes = function(loader_class, "load_bytes", parameters=2)
    opencv = module(VLLM.video_opencv)
    mixin = attribute(opencv, "OpenCVVideoBackendMixin")
    read_frames = video_budget.read_frames(_classmethod(mixin, "read_frames"), attribute(opencv, "cv2"))
    video_budget.video_budget_metrics()  # its series at zero, before the first refusal
    load_base64 = front_end_stages.timed_base64(function(loader_class, "load_base64", parameters=3), "video")
    hooks = [Hook(mixin, "read_frames", classmethod(read_frames)), Hook(loader_class, "load_base64", load_base64)]
    skipper = None
    if planning.skipper is not None:
        processor_class = attribute(module(VLLM.processor), "BaseMultiModalProcessor")
        original_missing = function(processor_class, "_get_cache_missing_items", parameters=4)
        skipper = clip_skip.ClipSkipper(planning.skipper, attribute(media_video, "MediaWithBytes"), loader_class)
        hooks.append(
            Hook(processor_class, "_get_cache_missing_items", clip_skip.decode_missing(original_missing, skipper))
        )
    planning.clip_skipper = skipper
    if skipper is not None and planning.keys_only is not None:
        hooks.extend(_length_gate(planning, skipper))
    return [
        *hooks,
        Hook(loader_class, "load_bytes", loader_hooks.load_video_bytes(original_load_bytes, skipper=skipper)),
    ]


def _length_gate(planning: Planning, skipper: clip_skip.ClipSkipper) -> list[Hook]:
    """Clips too long for the context deferred, and their prompts refused in vLLM's words (:mod:`.video_length`)."""
    from mmobs.vllm.video_length import LengthGate, renderer_init, truncation_noted

    processing = planning.keys_only
    assert processing is not None
    get_max_tokens = function(module(VLLM.api_utils), "get_max_tokens")
    renderer_class = attribute(module(VLLM.renderers), "BaseRenderer")
    processor_class = attribute(module(VLLM.processor), "BaseMultiModalProcessor")
    function(processor_class, "_apply_prompt_updates", parameters=3)
    gate = LengthGate(processing, get_max_tokens)
    processing.length_check = gate.check
    skipper.over_context, skipper.sized_by_rule = gate.over_context, gate.sized_by_rule
    hooks = [Hook(renderer_class, "__init__", renderer_init(vars(renderer_class)["__init__"], gate))]
    for name in ("_process_singleton", "_process_singleton_async"):
        hooks.append(Hook(renderer_class, name, truncation_noted(function(renderer_class, name, parameters=4))))
    if not planning.keys_only_wraps_processor:
        cached_apply = function(processor_class, "_cached_apply_hf_processor", parameters=3)
        hooks.append(Hook(processor_class, "_cached_apply_hf_processor", processing.wrap(cached_apply)))
    return hooks


def cache_drift_plan(planning: Planning) -> list[Hook]:
    """The multimodal processor cache drift, counted and healed (:mod:`mmobs.vllm.cache_drift.cache_hooks`)."""
    from mmobs.vllm.cache_drift import cache_hooks

    return Hook.from_plan(cache_hooks.cache_plan())


def uuid_plan(planning: Planning) -> list[Hook]:
    """Client media uuids checked against their content (:mod:`mmobs.vllm.uuid_checks.uuid_check`)."""
    from mmobs.vllm.uuid_checks import uuid_check

    inputs_class = attribute(module(VLLM.inputs), "ProcessorInputs")
    fields = {field.name for field in dataclasses.fields(inputs_class)}
    if not {"mm_data_items", "mm_uuid_items"} <= fields:
        raise ShapeMismatch(f"ProcessorInputs has no mm_data_items/mm_uuid_items (fields: {sorted(fields)})")
    original = function(inputs_class, "get_mm_hashes", parameters=3)
    checker = uuid_check.checker_from_environment()
    return [Hook(inputs_class, "get_mm_hashes", uuid_check.get_mm_hashes(original, checker))]


def front_end_plan(planning: Planning) -> list[Hook]:
    """The front end's stages timed (:mod:`mmobs.vllm.front_end.front_end_plan`, which declines its parts alone)."""
    from mmobs.vllm.front_end import front_end_plan as plan_apart

    return Hook.from_plan(plan_apart.front_end_plan())


def render_plan(planning: Planning) -> list[Hook]:
    """The render endpoints counted and guarded, and keys-only on request (:mod:`mmobs.vllm.render`)."""
    from mmobs.vllm.render import render_plan as plan_apart

    return Hook.from_plan(plan_apart.render_plan(planning.skipper, planning))


def engine_items_plan(planning: Planning) -> list[Hook]:
    """Each request's multimodal items counted where the engine core first sees them (:mod:`mmobs.vllm.engine_items`).

    Planned in the engine core only, for either front end: ``EngineCore.preprocess_add_request`` is where
    the Python API server's requests and the Rust front end's alike arrive.
    """
    from mmobs.vllm.engine_items import item_counter, uuid_rekey

    core = attribute(module(VLLM.engine_core), "EngineCore")
    original = function(core, "preprocess_add_request", parameters=2)
    spec = attribute(module(VLLM.mm_inputs), "MultiModalFeatureSpec")
    fields = {field.name for field in dataclasses.fields(spec)}
    if not {"data", "modality", "identifier", "mm_position"} <= fields:
        raise ShapeMismatch(f"MultiModalFeatureSpec has no data/modality/identifier/mm_position ({sorted(fields)})")
    capacity = whole_number_env(item_counter.INDEX_ENTRIES_ENV, item_counter.DEFAULT_INDEX_ENTRIES)
    front_end = running_front_end()
    counter = item_counter.ItemCounter(front_end, capacity)
    item_counter.current = counter
    # Under the Rust front end no API server checks client uuids: the engine core does (uuid_rekey's docstring).
    uuid_check = uuid_rekey.check_from_environment() if front_end == "rust" else None
    wrapped = item_counter.preprocess_add_request(original, counter, uuid_check)
    return [Hook(core, "preprocess_add_request", wrapped)]
