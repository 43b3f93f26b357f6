"""The plan of the front end's stage timers (:mod:`mmobs.vllm.front_end.stages`), made apart from the plugin's.

The loader's own stages (base64, decode) are timed by the loader hooks; this
plans the rest: the downloads, an audio data URL's base64, the HF processor (hooked on each processor as
it is built, so a model's own ``_apply_hf_processor_main`` is the one timed)
and the hand-off to the engine. A vLLM shaped otherwise gets one warning and
keeps the rest of the plugin; the hand-off declines on its own where vLLM's
engine dependencies are missing.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from mmobs.releases import VLLM_MODULES
from mmobs.vllm.front_end import stages as front_end
from mmobs.vllm.shape import Plan, attribute, function, module, registering, vllm_version
from mmobs.vllm.startup_log import say

_CONNECTOR = VLLM_MODULES.connector
_MEDIA_IMAGE = VLLM_MODULES.media_image
_MEDIA_AUDIO = VLLM_MODULES.media_audio
_CONNECTIONS = VLLM_MODULES.connections
_PROCESSOR = VLLM_MODULES.processor
_INPUT_PROCESSOR = VLLM_MODULES.input_processor


def front_end_plan() -> Plan:
    """The stage timers' plan (the feature's, planned in the API server only), empty (after one warning) where vLLM is
    shaped otherwise."""
    try:
        connector_class = attribute(module(_CONNECTOR), "MediaConnector")
        loader_class = attribute(module(_MEDIA_IMAGE), "ImageMediaIO")
        connection_class = attribute(module(_CONNECTIONS), "HTTPConnection")
        processor_class = attribute(module(_PROCESSOR), "BaseMultiModalProcessor")
        wrapped = (
            (connector_class, "load_from_url", front_end.media_fetch),
            (connector_class, "load_from_url_async", front_end.media_fetch),
            (connection_class, "get_bytes", front_end.download),
            (connection_class, "async_get_bytes", front_end.download),
        )
        plan: Plan = [(owner, name, wrap(function(owner, name)), False) for owner, name, wrap in wrapped]
        file_url = front_end.file_url(function(connector_class, "_load_file_url", parameters=3), loader_class)
        plan.append((connector_class, "_load_file_url", file_url, False))
        processor_init = registering(vars(processor_class)["__init__"], _time_processor)
        plan.append((processor_class, "__init__", processor_init, False))
        function(processor_class, "_apply_hf_processor_main", parameters=3)
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or anything a foreign vLLM raises on import
        _declined("multimodal front end", "its stages are not timed", error)
        return []
    plan.extend(_audio_base64())
    try:  # the engine's side: needs vLLM's engine dependencies (msgspec), which a bare vLLM may lack
        input_processor_class = attribute(module(_INPUT_PROCESSOR), "InputProcessor")
        handoff = front_end.process_inputs(function(input_processor_class, "process_inputs"))
        made = registering(vars(input_processor_class)["__init__"], front_end.input_processor_made)
    except Exception as error:  # noqa: BLE001 - as above
        _declined("InputProcessor", "the whole front end (from arrival to the engine) is not timed", error)
        return plan
    return [
        *plan,
        (input_processor_class, "process_inputs", handoff, False),
        (input_processor_class, "__init__", made, False),
    ]


def _audio_base64() -> Plan:
    """An audio data URL's base64 stage: from ``AudioMediaIO.load_base64`` to its ``load_bytes`` (untimed itself)."""
    try:
        audio_class = attribute(module(_MEDIA_AUDIO), "AudioMediaIO")
        load_base64 = function(audio_class, "load_base64", parameters=3)
        load_bytes = function(audio_class, "load_bytes", parameters=2)
    except Exception as error:  # noqa: BLE001 - as above
        _declined("audio loader", "audio data URLs' base64 is not timed", error)
        return []
    return [
        (audio_class, "load_base64", front_end.timed_base64(load_base64, "audio"), False),
        (audio_class, "load_bytes", front_end.entering_loader(load_bytes), False),
    ]


def _declined(what: str, consequence: str, error: Exception) -> None:
    say(
        logging.WARNING,
        "mmobs: vLLM %s's %s is not shaped as mmobs expects (%s: %s); %s, the rest of the plugin is loaded.",
        vllm_version(),
        what,
        type(error).__name__,
        error,
        consequence,
    )


def _time_processor(processor: Any) -> None:
    """A new processor's ``_apply_hf_processor_main`` (its model's own, if it overrides vLLM's), timed."""
    method = getattr(processor, "_apply_hf_processor_main", None)
    if callable(method) and not getattr(method, "__mmobs_timed__", False):
        with contextlib.suppress(AttributeError):  # a processor with __slots__: untimed, never broken
            processor._apply_hf_processor_main = front_end.timed_processor(method)
