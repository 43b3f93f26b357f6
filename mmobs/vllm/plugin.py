"""The vLLM general plugin: mmobs's counters and events inside an unmodified vLLM.

vLLM swallows exactly what mmobs exists to count: ``_get_image_id_bytes``
tolerates a malformed EXIF block silently, ``normalize_image`` suppresses every
transpose failure, and its loader's refusals are only a 400 somewhere. The
plugin replaces a few of vLLM's module attributes with versions that return
exactly what vLLM's return (checked on probe images before anything is
replaced) and report to mmobs's observer on the way. This module holds the
registration and the plan; the replacements live beside it:

=============================================  =====================================
module                                         wraps
=============================================  =====================================
:mod:`mmobs.vllm.keys.key_hooks`                    the hasher: ImageID read,
                                               ``serialize_item``, ``hash_kwargs``
:mod:`mmobs.vllm.loader_hooks`                 ``normalize_image``, ``load_bytes``,
                                               ``_load_data_url`` (refusals, guard)
:mod:`mmobs.vllm.decode_free_hits.decode_skip`                  (inside ``load_bytes``) decode-free
                                               processor-cache hits, API server only
:mod:`mmobs.vllm.cache_drift.cache_hooks`                  the processor cache drift, API server
                                               only
:mod:`mmobs.vllm.uuid_checks.uuid_check`                   ``ProcessorInputs.get_mm_hashes``:
                                               client media uuids checked against
                                               their content, API server only
:mod:`mmobs.vllm.front_end.stages`                    the downloads, the HF processor and
                                               ``InputProcessor.process_inputs``: the
                                               front end's stages timed, API server
                                               only
:mod:`mmobs.vllm.context_hooks`                ``make_async``, the media thread pool
                                               (the request's context carried into
                                               vLLM's executor threads), and
                                               ``get_dummy_mm_inputs`` (vLLM's own
                                               dummy inputs are not traffic)
=============================================  =====================================

What each replacement must reproduce is checked first on probes
(:mod:`mmobs.vllm.probes`); the parts planned apart (decode-free hits, cache
drift, uuids, the front end, :mod:`mmobs.vllm.front_end.front_end_plan`) decline alone.

mmobs's log events go through stdlib logging under vLLM's logger tree
(``vllm.mmobs``), so vLLM's handler writes them in vLLM's format, or in the
one a ``VLLM_LOGGING_CONFIG_PATH`` config chooses (:mod:`mmobs.observability.stdlib_events`).

:func:`register` is idempotent, never raises into vLLM, and when vLLM's shape
is not what it expects logs one warning naming the vLLM version and changes
nothing. Every replacement is recorded, so :func:`unregister` restores vLLM.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmobs.errors import InvalidOptionError
from mmobs.observability.fingerprint import key_with_release
from mmobs.observability.stdlib_events import log_events_to_stdlib
from mmobs.vllm import loader_hooks
from mmobs.vllm.context_hooks import context_make_async, context_submit, not_traffic
from mmobs.vllm.decode_free_hits import decode_skip
from mmobs.vllm.decode_free_hits.decode_skip import DECODE_SKIP_ENV, DecodeSkipper
from mmobs.vllm.front_end.front_end_plan import front_end_plan
from mmobs.vllm.keys import key_hooks
from mmobs.vllm.probes import pixels, probe_decodes, probe_images, same_results
from mmobs.vllm.releases import unproven
from mmobs.vllm.shape import Plan, ShapeMismatch, registering, vllm_version
from mmobs.vllm.shape import attribute as _attribute
from mmobs.vllm.shape import function as _function
from mmobs.vllm.shape import module as _module
from mmobs.vllm.startup_log import LOGGER, say

__all__ = [
    "DECODE_SKIP_ENV",
    "EXIF_FIX_ENV",
    "FAST_KEYS_ENV",
    "GUARD_ENV",
    "PLUGIN_ENV",
    "ShapeMismatch",
    "register",
    "registered",
    "unregister",
]

#: ``MMOBS_VLLM_PLUGIN=0`` turns the plugin off.
PLUGIN_ENV = "MMOBS_VLLM_PLUGIN"
#: ``MMOBS_VLLM_FAST_KEYS=1`` keys plain PIL images through mmobs's pixel path.
FAST_KEYS_ENV = "MMOBS_VLLM_FAST_KEYS"
#: ``MMOBS_VLLM_GUARD=1`` runs mmobs's structural checks before vLLM decodes an image.
GUARD_ENV = "MMOBS_VLLM_GUARD"
#: ``MMOBS_VLLM_EXIF_FIX=0`` keeps the bare ImageID read of vLLM 0.25 to 0.30 (a broken EXIF block is a 500),
#: still counting each fallback the fix would have taken.
EXIF_FIX_ENV = "MMOBS_VLLM_EXIF_FIX"

_lock = threading.Lock()
_HASHER = "vllm.multimodal.hasher"
_IMAGE = "vllm.multimodal.image"
_MEDIA_IMAGE = "vllm.multimodal.media.image"
_CONNECTOR = "vllm.multimodal.media.connector"
_CACHE_LRU = "vllm.multimodal.cache.lru"
_CACHE_BASE = "vllm.multimodal.cache.base"
_CACHE_SHM = "vllm.multimodal.cache.shm"
_RENDERERS = "vllm.renderers.base"
_PROCESSOR = "vllm.multimodal.processing.processor"
_INPUTS = "vllm.multimodal.processing.inputs"


@dataclass
class _Replacement:
    target: Any
    name: str
    original: Any
    instance_attribute: bool = False

    def restore(self) -> None:
        if self.instance_attribute:
            vars(self.target).pop(self.name, None)
        else:
            setattr(self.target, self.name, self.original)


_applied: list[_Replacement] = []
_declined = False


def registered() -> bool:
    """Whether the plugin's replacements are in place in this process."""
    return bool(_applied)


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Idempotent; never raises."""
    global _declined
    if os.environ.get(PLUGIN_ENV, "1").strip() == "0":
        return
    with _lock:
        if _applied or _declined:
            return
        try:
            skipper, skip_plan = _decode_skip_plan()
            plan = _plan(skipper)
            if any(name == "load_bytes" for _, name, _, _ in plan):
                plan += skip_plan
            else:  # the loader's hooks declined: decode-free hits, which live in them, too
                skipper = None
            plan += _cache_plan()
            plan += _uuid_plan()
            if _carried("front_end", "the front end's stage timings"):
                plan += front_end_plan()
        except ShapeMismatch as error:
            _declined = True
            say(
                logging.WARNING,
                "mmobs: vLLM %s is not shaped as this plugin expects (%s); its multimodal path is left "
                "untouched and no image is counted. Set %s=0 to silence this.",
                vllm_version(),
                error,
                PLUGIN_ENV,
            )
            return
        except Exception as error:  # noqa: BLE001 - never raise into vLLM
            _declined = True
            say(
                logging.WARNING,
                "mmobs: the vLLM plugin could not load (%s: %s); no image is counted",
                type(error).__name__,
                error,
            )
            return
        for target, name, replacement, instance_attribute in plan:
            _applied.append(_Replacement(target, name, inspect.getattr_static(target, name), instance_attribute))
            setattr(target, name, replacement)
        decode_skip.activate(skipper)
        _fingerprint_in_the_running_release()
        # One log stream: mmobs's events become records of vLLM's logger tree (while structlog is unconfigured).
        log_events_to_stdlib(LOGGER.name)
        say(logging.INFO, "%s", _startup_line(plan, skipper))


def _fingerprint_in_the_running_release() -> None:
    """The process keys as the running vLLM keys: its fingerprint is in that release's key format.

    A release mmobs does not know yet is held to the newest format, as its keys are.
    """
    try:
        key_with_release(vllm_version())
    except InvalidOptionError:
        key_with_release(None)


def _startup_line(plan: Plan, skipper: DecodeSkipper | None) -> str:
    """What the plugin hooked in this process and which switches are on: one line for the operator."""
    from mmobs.vllm.cache_drift import cache_hooks

    hooked = sorted({f"{_short_name(target)}.{name}" for target, name, _, _ in plan})
    api_server = cache_hooks.api_server_process()
    drift = (
        "off"
        if not any(name == "get_and_update_item" for _, name, _, _ in plan)
        else ("healed" if cache_hooks.healing_enabled() else "counted only")
    )
    switches = [
        f"guard {'on' if _enabled(GUARD_ENV) else 'off'}",
        f"fast keys {'on' if _enabled(FAST_KEYS_ENV) else 'off'}",
    ]
    if api_server:
        checkers = [hook.checker for _, name, hook, _ in plan if name == "get_mm_hashes"]
        uuids = "off" if not checkers else ("refused" if checkers[0].refuse else "counted")
        switches += [
            f"decode-free hits {'on' if skipper is not None else 'off'}",
            f"cache drift {drift}",
            f"uuid conflicts {uuids}",
            f"front-end stages {'timed' if any(name == 'process_inputs' for _, name, _, _ in plan) else 'off'}",
        ]
    where = "API server" if api_server else "engine process"
    return (
        f"mmobs ({where}): counting vLLM {vllm_version()}'s multimodal fallbacks; {len(hooked)} attributes wrapped "
        f"({', '.join(hooked)}); {', '.join(switches)}"
    )


def _short_name(target: Any) -> str:
    name = getattr(target, "__name__", None) or type(target).__name__
    return str(name).rpartition(".")[2]


def unregister() -> None:
    """Put vLLM's own attributes back (tests; a process that wants vLLM untouched again)."""
    global _declined
    with _lock:
        while _applied:
            _applied.pop().restore()
        decode_skip.activate(None)
        _declined = False
        log_events_to_stdlib(None)


# -- the plan: check everything, replace nothing until all is known good -------------


def _plan(skipper: DecodeSkipper | None = None) -> Plan:
    """The hasher's hooks, and the loader's and the request context's, each declining alone."""
    plan = _key_plan()
    if _carried("loader", LOADER_FEATURE):
        plan += _apart(LOADER_FEATURE, lambda: _loader_plan(skipper))
    if _carried("context", CONTEXT_FEATURE):
        plan += _apart(CONTEXT_FEATURE, _context_plan)
    return plan


LOADER_FEATURE = "the loader's refusals, guard and transpose failures"
CONTEXT_FEATURE = "request ids in vLLM's threads and its dummy inputs"


def _carried(feature: str, what: str) -> bool:
    """Whether this vLLM release is one ``feature`` is proven on (:mod:`mmobs.vllm.releases`); else one warning."""
    why = unproven(feature, vllm_version())
    if why is not None:
        say(logging.WARNING, "mmobs: %s are off: %s (docs/vllm.md, Versions).", what, why)
    return why is None


def _apart(feature: str, plan: Callable[[], Plan]) -> Plan:
    """``plan()``, or nothing and one warning naming the feature, the vLLM release and what is off."""
    try:
        return plan()
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or anything a foreign vLLM raises on import
        say(
            logging.WARNING,
            "mmobs: %s are off: vLLM %s is not shaped as they need (%s: %s); the rest of the plugin is loaded.",
            feature,
            vllm_version(),
            type(error).__name__,
            error,
        )
        return []


def _key_plan() -> Plan:
    """The hasher: the tolerant ImageID read reported, each item's key source, each key's cost.

    Without it nothing is counted, so a hasher of another shape declines the whole plugin. From vLLM
    0.31 on the tolerant read is vLLM's ``_get_image_id_bytes``, replaced; before, the ImageID is read
    bare inside ``serialize_item``, which gets PR #56576's fix (:func:`~mmobs.vllm.keys.key_hooks.tolerant_image_id`).
    """
    why = unproven("keys", vllm_version())
    if why is not None:
        raise ShapeMismatch(f"its hasher is {why}")
    hasher = _module(_HASHER)
    hasher_class = _attribute(hasher, "MultiModalHasher")
    original_factory = _function(hasher, "_get_hasher_factory", parameters=1)
    original_serialize = _classmethod(hasher_class, "serialize_item")
    original_hash_kwargs = _classmethod(hasher_class, "hash_kwargs")
    plan: Plan = []
    if hasattr(hasher, "_get_image_id_bytes"):
        original_id_bytes = _function(hasher, "_get_image_id_bytes", parameters=1)
        same_results(original_id_bytes, key_hooks.image_id_bytes, probe_images(), "_get_image_id_bytes")
        plan.append((hasher, "_get_image_id_bytes", key_hooks.image_id_bytes, False))
        serialize_item = original_serialize
    else:
        serialize_item = key_hooks.tolerant_image_id(original_serialize, fix=_enabled(EXIF_FIX_ENV, default="1"))
        same_results(
            _serialized(hasher_class, original_serialize),
            _serialized(hasher_class, serialize_item),
            probe_images(),
            "serialize_item",
        )
    serialize_item = key_hooks.serialize_item(serialize_item)
    if _enabled(FAST_KEYS_ENV):
        serialize_item = _fast_keys(hasher_class, original_serialize, serialize_item)
    if "algorithm" in inspect.signature(original_hash_kwargs).parameters:
        hash_kwargs = key_hooks.hash_kwargs(original_hash_kwargs)
    else:  # vLLM 0.25 and 0.26
        hash_kwargs = key_hooks.hash_kwargs_reading_the_environment(original_hash_kwargs)
    return [
        *plan,
        (hasher, "_get_hasher_factory", key_hooks.counting_factory(original_factory), False),
        (hasher_class, "serialize_item", classmethod(serialize_item), False),
        (hasher_class, "hash_kwargs", classmethod(hash_kwargs), False),
    ]


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


def _loader_plan(skipper: DecodeSkipper | None) -> Plan:
    """The loader: its refusals, the guard, decode-free hits and ``normalize_image``'s transpose failures."""
    image = _module(_IMAGE)
    media_image = _module(_MEDIA_IMAGE)
    connector = _module(_CONNECTOR)
    original_normalize = _function(image, "normalize_image", parameters=1)
    loader_class = _attribute(media_image, "ImageMediaIO")
    original_load_bytes = _function(loader_class, "load_bytes", parameters=2)
    connector_class = _attribute(connector, "MediaConnector")
    original_data_url = _function(connector_class, "_load_data_url", parameters=3)
    same_results(original_normalize, loader_hooks.normalize_image, probe_images(), "normalize_image", compare=pixels)
    guard = _enabled(GUARD_ENV)
    plan: Plan = [
        (loader_class, "load_bytes", loader_hooks.load_bytes(original_load_bytes, guard=guard, skipper=skipper), False),
        (
            connector_class,
            "_load_data_url",
            loader_hooks.load_data_url(original_data_url, loader_class, guard=guard),
            False,
        ),
    ]
    # normalize_image is imported by name (media.image, parse, Molmo2...): rebind every
    # loaded vLLM module that holds vLLM's function; later importers read the patched source.
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("vllm") and m is not None]:
        if getattr(module, "normalize_image", None) is original_normalize:
            plan.append((module, "normalize_image", loader_hooks.normalize_image, False))
    return plan


def _context_plan() -> Plan:
    """The request's context into vLLM's executor threads; vLLM's own dummy inputs kept out of the counts."""
    renderers = _module(_RENDERERS)
    connector = _module(_CONNECTOR)
    processor_class = _attribute(_module(_PROCESSOR), "BaseMultiModalProcessor")
    original_make_async = _function(renderers, "make_async")
    original_dummy_inputs = _function(processor_class, "get_dummy_mm_inputs")
    pool = _attribute(connector, "global_thread_pool")
    if not callable(getattr(pool, "submit", None)):
        raise ShapeMismatch(f"{_CONNECTOR}.global_thread_pool has no submit()")
    return [
        (renderers, "make_async", context_make_async(original_make_async), False),
        (pool, "submit", context_submit(pool.submit), True),
        (processor_class, "get_dummy_mm_inputs", not_traffic(original_dummy_inputs), False),
    ]


def _decode_skip_plan() -> tuple[DecodeSkipper | None, Plan]:
    """Decode-free cache hits (:mod:`mmobs.vllm.decode_free_hits.decode_skip`), in the API server only, planned apart.

    The processor caches are found as vLLM makes them (their ``__init__``
    registers them with the skipper); vLLM's shared-memory cache declines.
    A vLLM whose loader already defers decoding, or whose images a stand-in
    does not reproduce exactly, gets one line and vLLM's path.
    """
    from mmobs.vllm.cache_drift.cache_hooks import api_server_process

    if not api_server_process() or os.environ.get(DECODE_SKIP_ENV, "1").strip() == "0":
        return None, []
    if not _carried("decode_free_hits", "decode-free cache hits"):
        return None, []
    try:
        media_image = _module(_MEDIA_IMAGE)
        media_with_bytes = _attribute(media_image, "MediaWithBytes")
        loader_class = _attribute(media_image, "ImageMediaIO")
        caches = [
            _attribute(_module(_CACHE_LRU), "LruKeyReplicatedSenderCache"),
            _attribute(_module(_CACHE_BASE), "MultiModalProcessorOnlyCache"),
        ]
        shm = _attribute(_module(_CACHE_SHM), "ShmObjectStoreSenderCache")
        for cache in caches:
            _function(cache, "is_cached_item", parameters=2)
        probe_decodes(_function(loader_class, "load_bytes", parameters=2), loader_class, media_with_bytes)
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or whatever a foreign vLLM raises: vLLM's path
        say(
            logging.WARNING,
            "mmobs: decode-free cache hits are off: vLLM %s is not shaped as they need (%s: %s)",
            vllm_version(),
            type(error).__name__,
            error,
        )
        return None, []
    skipper = DecodeSkipper(media_with_bytes, loader_class)
    plan: Plan = [
        (cache, "__init__", registering(vars(cache)["__init__"], skipper.add_cache), False) for cache in caches
    ]
    decline = functools.partial(_decline_shm, skipper)
    plan.append((shm, "__init__", registering(vars(shm)["__init__"], decline), False))
    return skipper, plan


def _decline_shm(skipper: DecodeSkipper, cache: object) -> None:
    skipper.decline("its processor cache is vLLM's shared-memory one (--mm-processor-cache-type shm)")


def _cache_plan() -> Plan:
    """The multimodal cache drift hooks (:mod:`mmobs.vllm.cache_drift.cache_hooks`), in the API server only.

    They are planned apart: a vLLM whose cache path is shaped otherwise gets
    one warning and no drift counting, and keeps the rest of the plugin.
    """
    from mmobs.vllm.cache_drift import cache_hooks

    if not cache_hooks.api_server_process() or not _carried("cache_drift", "cache drift counting and healing"):
        return []
    try:
        return cache_hooks.cache_plan()
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or anything a foreign vLLM raises on import
        say(
            logging.WARNING,
            "mmobs: vLLM %s's multimodal processor cache is not shaped as mmobs expects (%s: %s); its cache drift "
            "is neither counted nor healed, the rest of the plugin is loaded.",
            vllm_version(),
            type(error).__name__,
            error,
        )
        return []


def _uuid_plan() -> Plan:
    """Client media uuids checked against their content (:mod:`mmobs.vllm.uuid_checks.uuid_check`), in the API server only.

    Planned apart, as the cache hooks are: a vLLM whose ``ProcessorInputs`` is shaped otherwise gets one
    warning and no uuid checks, and keeps the rest of the plugin.
    """
    from mmobs.vllm.cache_drift import cache_hooks
    from mmobs.vllm.uuid_checks import uuid_check

    if not cache_hooks.api_server_process() or not _carried("uuid_checks", "client media uuid checks"):
        return []
    try:
        inputs_class = _attribute(_module(_INPUTS), "ProcessorInputs")
        fields = {field.name for field in dataclasses.fields(inputs_class)}
        if not {"mm_data_items", "mm_uuid_items"} <= fields:
            raise ShapeMismatch(f"ProcessorInputs has no mm_data_items/mm_uuid_items (fields: {sorted(fields)})")
        original = _function(inputs_class, "get_mm_hashes", parameters=3)
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or anything a foreign vLLM raises on import
        say(
            logging.WARNING,
            "mmobs: vLLM %s's ProcessorInputs is not shaped as mmobs expects (%s: %s); client media uuids are not "
            "checked, the rest of the plugin is loaded.",
            vllm_version(),
            type(error).__name__,
            error,
        )
        return []
    checker = uuid_check.checker_from_environment()
    return [(inputs_class, "get_mm_hashes", uuid_check.get_mm_hashes(original, checker), False)]


def _enabled(variable: str, default: str = "0") -> bool:
    return os.environ.get(variable, default).strip() == "1"


def _classmethod(owner: type, name: str) -> Callable[..., Any]:
    raw = inspect.getattr_static(owner, name, None)
    if not isinstance(raw, classmethod) or inspect.isgeneratorfunction(raw.__func__):
        raise ShapeMismatch(f"{owner.__name__}.{name} is not a classmethod returning chunks eagerly")
    return raw.__func__
